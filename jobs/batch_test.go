package jobs_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestClaimJobsTakesUpToNInClaimOrderEachUnderItsOwnLease(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	var want []string
	for range 5 {
		want = append(want, submit(t, e, jobs.SubmitRequest{Kind: "thumb"}).ID)
	}
	got, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"thumb"}}, 3, soon())
	if err != nil {
		t.Fatal(err)
	}
	var ids, leases []string
	for _, j := range got {
		ids, leases = append(ids, j.ID), append(leases, j.LeaseID)
		if j.State != jobtype.Running || j.WorkerID != "w" || j.Attempt != 1 {
			t.Errorf("claimed %s: state %s, worker %q, attempt %d; want running, w, 1", j.ID, j.State, j.WorkerID, j.Attempt)
		}
		if stored := get(t, e, j.ID); stored.LeaseID != j.LeaseID || stored.Version != j.Version {
			t.Errorf("stored %s: lease %s version %d; the claim said %s, %d", j.ID, stored.LeaseID, stored.Version, j.LeaseID, j.Version)
		}
	}
	if !slices.Equal(ids, want[:3]) {
		t.Fatalf("claimed %v, want the oldest three %v", ids, want[:3])
	}
	if slices.Sort(leases); len(slices.Compact(leases)) != 3 || leases[0] == "" {
		t.Errorf("leases %v, want three distinct ones", leases)
	}

	// Fewer ready than asked: the call takes what there is at once.
	rest, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"thumb"}}, 10, soon())
	if err != nil || len(rest) != 2 || rest[0].ID != want[3] || rest[1].ID != want[4] {
		t.Fatalf("second claim: %d jobs, %v; want the other two", len(rest), err)
	}
}

func TestClaimJobsParksUntilOneIsReadyAndDoesNotWaitForMore(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	parked := async(func() ([]jobtype.Job, error) {
		return e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"mail"}}, 10, soon())
	})
	waitUntil(t, "the claim to park", func() bool { return e.ParkedClaimers() == 1 })
	want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	got, err := await(t, parked)
	if err != nil || len(got) != 1 || got[0].ID != want.ID {
		t.Fatalf("claim: %v, %v; want just %s", got, err, want.ID)
	}
}

func TestClaimJobsRefusesABatchSizeOutOfRange(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	for _, n := range []int{-1, 0, jobtype.MaxClaimJobs + 1} {
		_, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w"}, n, soon())
		if !isInvalid(err, "max_jobs") {
			t.Errorf("ClaimJobs of %d: %v, want an InvalidError for max_jobs", n, err)
		}
	}
}

func TestClaimJobsTakesNoMoreThanASerialQueueOrItsLimitAllows(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"serial": {Serial: true},
		"three":  {MaxRunning: 3},
	}}})
	for range 5 {
		submit(t, e, jobs.SubmitRequest{Kind: "k", Queue: "serial"})
		submit(t, e, jobs.SubmitRequest{Kind: "k", Queue: "three"})
	}
	for queue, want := range map[string]int{"serial": 1, "three": 3} {
		got, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w", Queues: []string{queue}}, 10, time.Now())
		if err != nil || len(got) != want {
			t.Errorf("claim 10 of queue %s: %d jobs, %v; want %d", queue, len(got), err, want)
		}
	}
}

// gatedStore holds the first WriteLeases until release is closed, and
// records the size of every batch.
type gatedStore struct {
	store.Store
	reached, release chan struct{}
	once             sync.Once
	mu               sync.Mutex
	batches          []int
}

func (s *gatedStore) WriteLeases(ctx context.Context, ws []store.LeaseWrite, r store.LeaseRules) ([]store.LeaseResult, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(ws))
	s.mu.Unlock()
	s.once.Do(func() { close(s.reached); <-s.release })
	return s.Store.WriteLeases(ctx, ws, r)
}

func TestLeaseWritesThatArriveDuringABatchShareTheNext(t *testing.T) {
	gs := &gatedStore{Store: openStore(t), reached: make(chan struct{}), release: make(chan struct{})}
	e := newEngineOver(t, gs, jobs.Config{})
	const n = 50
	for range n + 1 {
		submit(t, e, jobs.SubmitRequest{Kind: "k"})
	}
	claimed, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w"}, n+1, soon())
	if err != nil || len(claimed) != n+1 {
		t.Fatalf("claim: %d jobs, %v", len(claimed), err)
	}
	outcomes := make(chan error, n+1)
	complete := func(j jobtype.Job) {
		_, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil)
		outcomes <- err
	}
	go complete(claimed[0])
	<-gs.reached // the first batch, of one, is being written
	for _, j := range claimed[1:] {
		go complete(j)
	}
	waitUntil(t, "every other completion to queue", func() bool { return e.QueuedLeaseWrites() == n })
	close(gs.release)
	for range n + 1 {
		if err := <-outcomes; err != nil {
			t.Fatalf("complete: %v", err)
		}
	}
	if !slices.Equal(gs.batches, []int{1, n}) {
		t.Errorf("batches written: %v, want [1 %d]", gs.batches, n)
	}
	for _, j := range claimed {
		if got := get(t, e, j.ID); got.State != jobtype.Succeeded {
			t.Errorf("job %s: %s, want succeeded", j.ID, got.State)
		}
	}
}

func TestABatchOfLeaseWritesAnswersEachCallerAsAloneItWould(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{DefaultMaxAttempts: 2})
	jobsOf := func(n int) []jobtype.Job {
		for range n {
			submit(t, e, jobs.SubmitRequest{Kind: "k"})
		}
		js, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w"}, n, soon())
		if err != nil || len(js) != n {
			t.Fatalf("claim: %d, %v", len(js), err)
		}
		return js
	}
	js := jobsOf(5)
	cancelled := js[4]
	if _, err := e.Cancel(t.Context(), cancelled.ID); err != nil {
		t.Fatal(err)
	}
	type call struct {
		name  string
		do    func() (jobtype.Job, error)
		state jobtype.State
		err   error
	}
	calls := []call{
		{"complete", func() (jobtype.Job, error) { return e.Complete(context.Background(), js[0].ID, js[0].LeaseID, nil) }, jobtype.Succeeded, nil},
		{"retryable failure", func() (jobtype.Job, error) {
			return e.Fail(context.Background(), js[1].ID, js[1].LeaseID, jobtype.JobError{Type: "Flaky"}, true)
		}, jobtype.Queued, nil},
		{"heartbeat", func() (jobtype.Job, error) {
			return e.Heartbeat(context.Background(), js[2].ID, js[2].LeaseID, 40, "half")
		}, jobtype.Running, nil},
		{"stale lease", func() (jobtype.Job, error) { return e.Complete(context.Background(), js[3].ID, "l_other", nil) }, "", jobs.ErrStaleLease},
		{"heartbeat of a cancelled job", func() (jobtype.Job, error) {
			return e.Heartbeat(context.Background(), cancelled.ID, cancelled.LeaseID, 50, "")
		}, jobtype.Cancelled, nil},
		{"unknown job", func() (jobtype.Job, error) { return e.Complete(context.Background(), "j_unknown", "l_x", nil) }, "", jobtype.ErrNotFound},
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			j, err := c.do()
			switch {
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("%s: %v, want %v", c.name, err, c.err)
			case c.err == nil && (err != nil || j.State != c.state):
				t.Errorf("%s: %s, %v; want %s", c.name, j.State, err, c.state)
			}
		})
	}
	wg.Wait()
	if j := get(t, e, js[2].ID); j.Percent != 40 || j.Step != "half" {
		t.Errorf("after the heartbeat: %d%% %q, want 40%% \"half\"", j.Percent, j.Step)
	}
	if j := get(t, e, js[1].ID); j.Error == nil || j.Error.Type != "Flaky" || j.Attempt != 1 {
		t.Errorf("after the retryable failure: %+v attempt %d, want error Flaky, attempt 1", j.Error, j.Attempt)
	}
}

// waitUntil polls cond until it holds, failing the test after 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
