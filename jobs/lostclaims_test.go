package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// answerLost is a store whose next ClaimJobs, once armed, loses its
// answer as a connection cut after the statement was sent does: the
// claim commits (or not, by commit) and the caller hears only
// ErrUnavailable.
type answerLost struct {
	store.Store
	armed  atomic.Bool
	commit bool
}

func (s *answerLost) ClaimJobs(ctx context.Context, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.ClaimJobs(ctx, f, c)
	}
	if s.commit {
		if _, err := s.Store.ClaimJobs(ctx, f, c); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: read tcp: connection reset by peer", jobtype.ErrUnavailable)
}

// TestAJobWhoseClaimAnswerWasLostIsQueuedAgain: a claim that committed
// but whose answer was lost took jobs no worker runs; the next sweep
// puts them back as if never claimed, instead of leaving them to the
// lease's expiry, where a job without attempts left ends LOST.
func TestAJobWhoseClaimAnswerWasLostIsQueuedAgain(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("claim committed %v", committed), func(t *testing.T) {
			st := &answerLost{Store: openStore(t), commit: committed}
			e := newEngineOver(t, st, jobs.Config{LeaseTimeout: time.Hour})
			var submitted []jobtype.Job
			for range 3 {
				submitted = append(submitted, submit(t, e, jobs.SubmitRequest{Kind: "sync", MaxAttempts: 1}))
			}
			st.armed.Store(true)
			_, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"sync"}}, 3, time.Now())
			if !errors.Is(err, jobtype.ErrUnavailable) {
				t.Fatalf("claim whose answer was lost: %v; want unavailable", err)
			}
			if err := e.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, s := range submitted {
				j := get(t, e, s.ID)
				if j.State != jobtype.Queued || j.Attempt != 0 || j.LeaseID != "" || j.WorkerID != "" {
					t.Errorf("after the sweep %s is %v, attempt %d, lease %q, worker %q; want QUEUED as if never claimed",
						j.ID, j.State, j.Attempt, j.LeaseID, j.WorkerID)
				}
			}
			claimed, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{"sync"}}, 3, time.Now())
			if err != nil || len(claimed) != 3 {
				t.Fatalf("claim after the sweep: %d jobs, %v; want all 3", len(claimed), err)
			}
			for _, j := range claimed {
				if j.Attempt != 1 {
					t.Errorf("%s claimed again at attempt %d, want 1", j.ID, j.Attempt)
				}
			}
		})
	}
}
