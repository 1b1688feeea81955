package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestClaimGivesALease(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 10 * time.Second})
	submitted := submit(t, e, jobs.SubmitRequest{Kind: "k"})
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "worker-7"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != submitted.ID || j.State != jobtype.Running || j.Attempt != 1 || j.WorkerID != "worker-7" || j.Version != 2 {
		t.Errorf("claimed %+v; want the job running, attempt 1, worker-7, version 2", j)
	}
	if j.LeaseID == "" || !j.LeaseExpiresAt.Equal(clock.Now().Add(10*time.Second)) || !j.StartedAt.Equal(clock.Now()) {
		t.Errorf("lease %q until %v, started %v; want a lease for 10s from now", j.LeaseID, j.LeaseExpiresAt, j.StartedAt)
	}
	if _, err := e.Claim(context.Background(), jobs.ClaimRequest{}, soon()); !isInvalid(err, "worker_id") {
		t.Errorf("claim without worker id: %v", err)
	}
}

func TestHeartbeatRecordsProgress(t *testing.T) {
	steps := []struct {
		name        string
		percent     int32
		step        string
		wantPercent int32
		wantStep    string
	}{
		{"a first report is kept", 40, "batch 5 of 11", 40, "batch 5 of 11"},
		{"a lower percent keeps the higher one", 10, "", 40, "batch 5 of 11"},
		{"an empty step keeps the last", 45, "", 45, "batch 5 of 11"},
		{"over 100 is clamped", 250, "almost", 100, "almost"},
		{"below 0 is clamped and kept at the highest", -5, "", 100, "almost"},
	}
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 10 * time.Second})
	j := running(t, e, jobs.SubmitRequest{})
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			clock.Advance(time.Second)
			got, err := e.Heartbeat(context.Background(), j.ID, j.LeaseID, s.percent, s.step)
			if err != nil {
				t.Fatal(err)
			}
			if got.Percent != s.wantPercent || got.Step != s.wantStep {
				t.Errorf("percent %d step %q; want %d %q", got.Percent, got.Step, s.wantPercent, s.wantStep)
			}
			if !got.LeaseExpiresAt.Equal(clock.Now().Add(10 * time.Second)) {
				t.Errorf("lease until %v; want extended to 10s from now", got.LeaseExpiresAt)
			}
			if stored := get(t, e, j.ID); stored.Percent != s.wantPercent || stored.Version != got.Version {
				t.Errorf("stored %d at v%d; returned %d at v%d", stored.Percent, stored.Version, got.Percent, got.Version)
			}
		})
	}
}

func TestHeartbeatWithoutVisibleChangeExtendsTheLeaseAndKeepsTheVersion(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 10 * time.Second})
	j := running(t, e, jobs.SubmitRequest{})
	clock.Advance(5 * time.Second)
	a, err := e.Heartbeat(context.Background(), j.ID, j.LeaseID, 0, "")
	if err != nil || a.Version != j.Version {
		t.Fatalf("heartbeat: v%d, %v; want the version unchanged at %d", a.Version, err, j.Version)
	}
	stored := get(t, e, j.ID)
	if want := clock.Now().Add(10 * time.Second); !stored.LeaseExpiresAt.Equal(want) || !stored.UpdatedAt.Equal(j.UpdatedAt) {
		t.Errorf("stored lease until %v, updated %v; want the lease until %v and updated_at unchanged", stored.LeaseExpiresAt, stored.UpdatedAt, want)
	}
}

func TestCompleteEndsTheJob(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 30, "working"); err != nil {
		t.Fatal(err)
	}
	done, err := e.Complete(ctx, j.ID, j.LeaseID, mustJSON(map[string]string{"report": "ok"}))
	if err != nil {
		t.Fatal(err)
	}
	if done.State != jobtype.Succeeded || done.Percent != 100 || string(done.Result) != `{"report":"ok"}` || !done.LeaseExpiresAt.IsZero() || done.FinishedAt.IsZero() {
		t.Errorf("completed %+v; want succeeded at 100%% with the result and the lease ended", done)
	}
	// The same report again (its answer lost on the way back) is
	// answered as made, and changes nothing.
	again, err := e.Complete(ctx, j.ID, j.LeaseID, mustJSON(map[string]string{"report": "ok"}))
	if err != nil || again.Version != done.Version || again.State != jobtype.Succeeded {
		t.Errorf("second complete: %+v, %v; want the job as the first left it", again, err)
	}
	// Sent again encoded otherwise, it is still the same report; another
	// result is not: it would be answered OK and never stored.
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, []byte(`{ "report" : "ok" }`)); err != nil {
		t.Errorf("the same result spaced otherwise: %v, want it answered as made", err)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, mustJSON(map[string]string{"report": "corrected"})); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("a complete with another result: %v, want ErrStaleLease", err)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("a complete without the result: %v, want ErrStaleLease", err)
	}
	if got := get(t, e, j.ID); string(got.Result) != `{"report":"ok"}` {
		t.Errorf("result %s after the refused reports, want the first", got.Result)
	}
	// Another report of that lease is refused, as is a heartbeat or a
	// log line: the lease is gone.
	if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Late"}, false); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("a fail after the complete: %v, want ErrStaleLease", err)
	}
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 100, ""); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("a heartbeat after the complete: %v, want ErrStaleLease", err)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, []byte("{")); !isInvalid(err, "result") {
		t.Errorf("complete with a result that is not JSON: %v", err)
	}
}

func TestAStaleLeaseChangesNothing(t *testing.T) {
	ctx := context.Background()
	calls := map[string]func(e *jobs.Engine, id, lease string) error{
		"heartbeat": func(e *jobs.Engine, id, lease string) error {
			_, err := e.Heartbeat(ctx, id, lease, 90, "x")
			return err
		},
		"complete": func(e *jobs.Engine, id, lease string) error { _, err := e.Complete(ctx, id, lease, nil); return err },
		"fail": func(e *jobs.Engine, id, lease string) error {
			_, err := e.Fail(ctx, id, lease, jobtype.JobError{Type: "X"}, true)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name+" with a lease id that never held the job", func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			j := running(t, e, jobs.SubmitRequest{})
			if err := call(e, j.ID, "l_someoneelse"); !errors.Is(err, jobs.ErrStaleLease) {
				t.Fatalf("got %v, want ErrStaleLease", err)
			}
			if after := get(t, e, j.ID); after.Version != j.Version || after.State != jobtype.Running {
				t.Errorf("job changed to %s v%d", after.State, after.Version)
			}
		})
		t.Run(name+" from the previous holder after a re-claim", func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			j := running(t, e, jobs.SubmitRequest{MaxAttempts: 2})
			requeued, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Flaky"}, true)
			if err != nil || requeued.State != jobtype.Queued {
				t.Fatalf("fail: %+v, %v", requeued, err)
			}
			again, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w2"}, soon())
			if err != nil {
				t.Fatal(err)
			}
			if err := call(e, j.ID, j.LeaseID); !errors.Is(err, jobs.ErrStaleLease) {
				t.Fatalf("got %v, want ErrStaleLease", err)
			}
			if after := get(t, e, j.ID); after.Version != again.Version || after.LeaseID != again.LeaseID {
				t.Errorf("the new holder's job changed: v%d → v%d", again.Version, after.Version)
			}
		})
	}
}

func TestCancelWhileAWorkerHoldsTheLease(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	cancelled, err := e.Cancel(ctx, j.ID)
	if err != nil || cancelled.State != jobtype.Cancelled {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	hb, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 50, "still going")
	if err != nil || hb.State != jobtype.Cancelled {
		t.Fatalf("heartbeat: %s, %v; want the job cancelled and no error", hb.State, err)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("complete after cancel: %v, want ErrStaleLease", err)
	}
	if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "X"}, true); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("fail after cancel: %v, want ErrStaleLease", err)
	}
	if after := get(t, e, j.ID); after.State != jobtype.Cancelled || after.Version != cancelled.Version || after.Percent != j.Percent {
		t.Errorf("after the worker's calls: %s v%d %d%%; want cancelled, unchanged", after.State, after.Version, after.Percent)
	}
	if _, err := e.Heartbeat(ctx, j.ID, "l_other", 50, ""); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("heartbeat of a cancelled job with another lease: %v, want ErrStaleLease", err)
	}
}

func TestFail(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int32
		retryable   bool
		want        jobtype.State
	}{
		{"a retryable failure with attempts left is queued again", 3, true, jobtype.Queued},
		{"a retryable failure on the last attempt fails the job", 1, true, jobtype.Failed},
		{"a permanent failure fails the job at once", 3, false, jobtype.Failed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			e, _ := newEngine(t, jobs.Config{Now: clock.Now, RetryInitialBackoff: 2 * time.Second, RetryMaxBackoff: time.Minute})
			ctx := context.Background()
			j := running(t, e, jobs.SubmitRequest{MaxAttempts: tt.maxAttempts})
			if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 60, "half"); err != nil {
				t.Fatal(err)
			}
			failed, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Timeout", Message: "upstream slow"}, tt.retryable)
			if err != nil {
				t.Fatal(err)
			}
			if failed.State != tt.want || failed.Error == nil || *failed.Error != (jobtype.JobError{Type: "Timeout", Message: "upstream slow"}) || failed.Attempt != 1 || !failed.LeaseExpiresAt.IsZero() {
				t.Fatalf("failed %+v; want %s with the error, attempt 1, the lease ended", failed, tt.want)
			}
			// The same report again is answered as made; another is not.
			if again, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Timeout", Message: "upstream slow"}, tt.retryable); err != nil || again.Version != failed.Version {
				t.Fatalf("the same fail again: %+v, %v; want the job as the first left it", again, err)
			}
			if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Other"}, tt.retryable); !errors.Is(err, jobs.ErrStaleLease) {
				t.Fatalf("another fail of that lease: %v, want ErrStaleLease", err)
			}
			if tt.want == jobtype.Failed {
				if failed.FinishedAt.IsZero() {
					t.Error("a failed job has no finished_at")
				}
				return
			}
			// Full jitter: up to the first step.
			delay := failed.RunAt.Sub(clock.Now())
			if delay < 0 || delay > 2*time.Second {
				t.Errorf("retry after %v, want 0..2s", delay)
			}
			if failed.Percent != 0 || failed.Step != "" {
				t.Errorf("progress %d%% %q carried into the next attempt", failed.Percent, failed.Step)
			}
			if _, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now()); !errors.Is(err, jobtype.ErrNoJob) {
				t.Fatalf("claim during the backoff: %v, want ErrNoJob", err)
			}
			clock.Advance(2 * time.Second)
			again, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now())
			if err != nil || again.Attempt != 2 || again.Error == nil {
				t.Fatalf("claim after the backoff: %+v, %v; want attempt 2 showing the last error", again, err)
			}
		})
	}
}

func TestRetryBackoffGrowsAndIsCapped(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, RetryInitialBackoff: time.Second, RetryMaxBackoff: 4 * time.Second})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{MaxAttempts: 10})
	wantMax := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for attempt, max := range wantMax {
		failed, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "X"}, true)
		if err != nil {
			t.Fatal(err)
		}
		if d := failed.RunAt.Sub(clock.Now()); d < 0 || d > max {
			t.Errorf("after attempt %d: retry in %v, want 0..%v", attempt+1, d, max)
		}
		clock.Advance(time.Minute)
		if j, err = e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// Full jitter: retries of jobs that failed together spread over the whole
// step, below its half too, not only over its upper half.
func TestRetriesSpreadOverTheWholeBackoffStep(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, RetryInitialBackoff: time.Minute, RetryMaxBackoff: time.Minute})
	ctx := context.Background()
	var low, high int
	for range 64 {
		j := running(t, e, jobs.SubmitRequest{MaxAttempts: 2})
		failed, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "X"}, true)
		if err != nil {
			t.Fatal(err)
		}
		switch d := failed.RunAt.Sub(clock.Now()); {
		case d < 0 || d > time.Minute:
			t.Fatalf("retry in %v, want 0..1m", d)
		case d < 30*time.Second:
			low++
		default:
			high++
		}
	}
	// Each count is 0 with probability 2^-64 under full jitter.
	if low == 0 || high == 0 {
		t.Errorf("of 64 retries %d waited under 30s and %d over: want both halves of the 1m step used", low, high)
	}
}
