package jobs_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A job cancelled while it runs and retried at once is not handed out
// before the cancelled attempt's lease would have expired: its worker
// hears of the cancel at its next heartbeat, due within that lease, and
// until then a second attempt would run beside the first (an outside
// probe saw two handlers of one job for 5 s). A job cancelled before it
// ran is ready at once.
func TestARetryRightAfterACancelIsNotHandedOutBeforeTheCancelledAttemptsLeaseEnds(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, openStore(t), jobs.Config{Now: clock.Now, LeaseTimeout: 30 * time.Second})
	ctx := context.Background()

	j := submit(t, e, jobs.SubmitRequest{Kind: "sync"})
	first, err := e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: "w1", Kinds: []string{"sync"}}, 1, time.Now())
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(first), err)
	}
	clock.Advance(10 * time.Second)
	if _, err := e.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	retried, err := e.Retry(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if expires := first[0].LeaseExpiresAt; retried.State != jobtype.Queued || retried.RunAt.Sub(expires).Abs() > time.Millisecond {
		t.Fatalf("retried at once after a cancel: %v, ready at %v; want QUEUED, ready when the cancelled lease expires, %v",
			retried.State, retried.RunAt, expires)
	}
	if got := claimIfReady(t, e, "sync"); len(got) != 0 {
		t.Fatalf("a claim 10s into the cancelled attempt's 30s lease took %s at attempt %d; want nothing before the lease ends", got[0].ID, got[0].Attempt)
	}
	clock.Advance(20*time.Second + time.Millisecond)
	if got := claimIfReady(t, e, "sync"); len(got) != 1 || got[0].ID != j.ID || got[0].Attempt != 2 {
		t.Fatalf("a claim once the lease has ended took %v; want the job, attempt 2", got)
	}

	// Cancelled while QUEUED: no attempt runs, so the retry is ready now.
	waiting := submit(t, e, jobs.SubmitRequest{Kind: "sync"})
	if _, err := e.Cancel(ctx, waiting.ID); err != nil {
		t.Fatal(err)
	}
	if retried, err := e.Retry(ctx, waiting.ID); err != nil || !retried.RunAt.Equal(clock.Now()) {
		t.Fatalf("retry of a job cancelled before it ran: ready at %v, %v; want now, %v", retried.RunAt, err, clock.Now())
	}
	if got := claimIfReady(t, e, "sync"); len(got) != 1 || got[0].ID != waiting.ID {
		t.Fatalf("a claim after retrying a job cancelled before it ran took %v; want it", got)
	}
}

// claimIfReady claims one job of kind if one is ready now, as worker w2:
// none is no error.
func claimIfReady(t *testing.T, e *jobs.Engine, kind string) []jobtype.Job {
	t.Helper()
	got, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{kind}}, 1, time.Now())
	if err != nil && !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatal(err)
	}
	return got
}

// A queue may allow as many attempts as an int32 holds (the config's
// bound): a retry after an attempt then keeps the allowance at that
// bound rather than wrapping it below zero, which would have made the
// retried job's next failure its last.
func TestARetryOfAJobWithTheLargestAllowanceKeepsIt(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{DefaultMaxAttempts: math.MaxInt32})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	retried, err := e.Retry(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if retried.MaxAttempts != math.MaxInt32 {
		t.Fatalf("max_attempts after a retry of attempt %d: %d; want %d", retried.Attempt, retried.MaxAttempts, math.MaxInt32)
	}
}
