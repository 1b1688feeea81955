package jobs_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// beatenStore makes each job's next update lose a race, as a replica
// does whose read another replica's write overtook: the update's change
// runs on what it read, then the same change is made by "the other
// replica", and the store runs the change again on the newer read.
type beatenStore struct {
	store.Store
	mu     sync.Mutex
	beaten map[string]bool // jobs whose next update loses its race
}

func (s *beatenStore) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	s.mu.Lock()
	beaten := s.beaten[id]
	delete(s.beaten, id)
	s.mu.Unlock()
	if beaten {
		if j, err := s.Store.GetJob(ctx, id); err == nil {
			_ = update(&j) // this replica's first try, on the old read
		}
		if _, err := s.Store.UpdateJob(ctx, id, update); err != nil { // the other replica's
			return jobtype.Job{}, err
		}
	}
	return s.Store.UpdateJob(ctx, id, update)
}

func (s *beatenStore) beat(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beaten[id] = true
}

// A replica whose change another replica made first says nothing of it:
// a lease expiry, a timeout and an operator's cancel are each logged once,
// by the replica that made them, not by every replica that tried.
func TestAChangeAnotherReplicaMadeFirstIsNotLoggedAgain(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	clock := newFakeClock()
	st := &beatenStore{Store: openStore(t), beaten: map[string]bool{}}
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))})
	ctx := context.Background()
	logged := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.String()
	}

	expiring := submit(t, e, jobs.SubmitRequest{Kind: "k"})
	if _, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"k"}}, clock.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	st.beat(expiring.ID)
	clock.Advance(2 * time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := e.Get(ctx, expiring.ID); j.State != jobtype.Lost {
		t.Fatalf("the expired job is %s, want LOST", j.State)
	}
	if n := strings.Count(logged(), "lease expired"); n != 0 {
		t.Errorf("the replica beaten to a lease's expiry logged it %d times, want 0:\n%s", n, logged())
	}

	cancelled := submit(t, e, jobs.SubmitRequest{Kind: "k"})
	st.beat(cancelled.ID)
	if _, err := e.Cancel(jobs.WithActor(ctx, "ops (admin)"), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logged(), "job cancelled"); n != 0 {
		t.Errorf("the replica beaten to a cancel logged it %d times, want 0:\n%s", n, logged())
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
