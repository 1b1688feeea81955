package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestAnAttemptPastItsQueueTimeoutIsRetriedThenFailed(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {Timeout: 10 * time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{Queue: "index", MaxAttempts: 2})
	// A job of a queue without a timeout runs as long as it heartbeats.
	other := running(t, e, jobs.SubmitRequest{})
	parked := waitedRead(t, e, ctx, j.ID, time.Now().Add(time.Hour))

	clock.Advance(9 * time.Minute)
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 50, "halfway"); err != nil {
		t.Fatal(err)
	}
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Running {
		t.Fatalf("9m into a 10m timeout: %s, want running", got.State)
	}

	clock.Advance(2 * time.Minute) // 11m: heartbeats do not extend a timeout
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := get(t, e, j.ID)
	want := jobtype.JobError{Type: jobs.TimeoutErrorType, Message: "attempt ran longer than the queue's timeout of 10m0s"}
	if got.State != jobtype.Queued || got.Attempt != 1 || got.Error == nil || *got.Error != want {
		t.Fatalf("after the timeout: %+v; want queued again, attempt 1, error %+v", got, want)
	}
	// The retry waits a backoff drawn from zero up (full jitter): never
	// before now.
	if got.RunAt.Before(clock.Now()) {
		t.Errorf("retry run_at %v is before now %v", got.RunAt, clock.Now())
	}
	// The waiter is not woken as if the job had ended.
	notYet(t, parked, 20*time.Millisecond)
	// Its worker's next heartbeat hears that the attempt is over (the
	// wire's cancelled), and its completion is refused.
	if hb, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 60, ""); err != nil || hb.State == jobtype.Running {
		t.Errorf("the timed-out worker's heartbeat: %s, %v; want the job not running, no error", hb.State, err)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("the timed-out worker's complete: %v, want ErrStaleLease", err)
	}
	if got := get(t, e, other.ID); got.State != jobtype.Running {
		t.Errorf("job of a queue without timeout: %s, want running", got.State)
	}

	// The second attempt has its own 10 minutes, from its claim.
	clock.Advance(time.Hour) // past the backoff
	again, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w2", Queues: []string{"index"}}, time.Time{})
	if err != nil || again.ID != j.ID || again.Attempt != 2 {
		t.Fatalf("re-claim: %+v, %v; want attempt 2 of %s", again, err, j.ID)
	}
	// The first attempt's lease is gone for good once the job runs again.
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 60, ""); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("the first worker's heartbeat during the second attempt: %v, want ErrStaleLease", err)
	}
	clock.Advance(9 * time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Running {
		t.Fatalf("9m into the second attempt: %s, want running", got.State)
	}
	clock.Advance(2 * time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	final, err := await(t, parked)
	if err != nil || final.State != jobtype.Failed || final.Error == nil || final.Error.Type != jobs.TimeoutErrorType || final.FinishedAt.IsZero() {
		t.Fatalf("after the last attempt timed out: %+v, %v; want FAILED with type Timeout", final, err)
	}
	if hb, err := e.Heartbeat(ctx, j.ID, again.LeaseID, 70, ""); err != nil || hb.State != jobtype.Failed {
		t.Errorf("the last worker's heartbeat: %s, %v; want FAILED, no error", hb.State, err)
	}
	// Sweeping again changes nothing.
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.Version != final.Version {
		t.Errorf("a second sweep changed the job: version %d, was %d", got.Version, final.Version)
	}
}

func TestATimeoutLeavesANewerAttemptAlone(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"q": {Timeout: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{Queue: "q", MaxAttempts: 3})
	clock.Advance(2 * time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	again, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w2", Queues: []string{"q"}}, time.Time{})
	if err != nil || again.Attempt != 2 {
		t.Fatalf("re-claim: %+v, %v", again, err)
	}
	// Released and claimed again: the clock of the attempt starts over.
	clock.Advance(30 * time.Second)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Running || got.LeaseID != again.LeaseID {
		t.Fatalf("30s into the new attempt: %s lease %s, want running under %s", got.State, got.LeaseID, again.LeaseID)
	}
}

// An attempt ended by its queue's timeout keeps its lease on the row
// until the lease's end, and the job's next attempt, the engine's retry
// or an operator's, is not handed out before: its worker hears of the
// end at its next heartbeat, due before then, so a handler still running
// (a command that ignores its SIGTERM) is not joined by the next attempt.
func TestATimedOutAttemptsNextAttemptWaitsForItsLeaseToEnd(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, openStore(t), jobs.Config{Now: clock.Now, LeaseTimeout: 30 * time.Second,
		RetryInitialBackoff: time.Second, RetryMaxBackoff: time.Second})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"to": {Timeout: 2 * time.Second}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	endsAt := func(attempt int32) jobtype.Job {
		t.Helper()
		got := claimIfReady(t, e, "sync")
		if len(got) != 1 || got[0].Attempt != attempt {
			t.Fatalf("claim: %v; want attempt %d", got, attempt)
		}
		clock.Advance(3 * time.Second)
		if err := e.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		return got[0]
	}

	j := submit(t, e, jobs.SubmitRequest{Kind: "sync", Queue: "to", MaxAttempts: 2})
	first := endsAt(1)
	if got := get(t, e, j.ID); got.State != jobtype.Queued || !got.RunAt.Equal(first.LeaseExpiresAt) {
		t.Fatalf("after the timeout: %s, ready at %v; want QUEUED, ready when the attempt's lease ends, %v", got.State, got.RunAt, first.LeaseExpiresAt)
	}
	if got := claimIfReady(t, e, "sync"); len(got) != 0 {
		t.Fatalf("a claim 3s into the timed-out attempt's 30s lease took attempt %d; want nothing before the lease ends", got[0].Attempt)
	}
	clock.Advance(27*time.Second + time.Millisecond)

	// The last attempt times out: FAILED, and an operator's retry waits
	// for its lease too.
	second := endsAt(2)
	if got := get(t, e, j.ID); got.State != jobtype.Failed {
		t.Fatalf("the last attempt past the timeout: %s, want FAILED", got.State)
	}
	retried, err := e.Retry(ctx, j.ID)
	if err != nil || retried.State != jobtype.Queued || !retried.RunAt.Equal(second.LeaseExpiresAt) {
		t.Fatalf("retry of the timed-out job: %s, ready at %v, %v; want QUEUED, ready at %v", retried.State, retried.RunAt, err, second.LeaseExpiresAt)
	}
	if got := claimIfReady(t, e, "sync"); len(got) != 0 {
		t.Fatalf("a claim right after the retry took attempt %d; want nothing before the timed-out lease ends", got[0].Attempt)
	}
	clock.Advance(27*time.Second + time.Millisecond)
	if got := claimIfReady(t, e, "sync"); len(got) != 1 || got[0].Attempt != 3 {
		t.Fatalf("a claim once the lease has ended took %v; want attempt 3", got)
	}
}
