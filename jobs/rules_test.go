package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestStrictRulesRefuseAnUndeclaredQueue(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{
		Source: "config jobwatch.yaml", Strict: true,
		Queues: map[string]jobtype.QueueRules{"index": {}},
	}})
	ctx := context.Background()
	if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Queue: "index"}); err != nil {
		t.Fatalf("submit to a declared queue: %v", err)
	}
	_, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Queue: "other"})
	if !isInvalid(err, "queue") || !strings.Contains(err.Error(), `"other"`) || !strings.Contains(err.Error(), "jobwatch.yaml") {
		t.Fatalf("submit to an undeclared queue: %v; want invalid queue naming the queue and the file", err)
	}
	_, err = e.Submit(ctx, jobs.SubmitRequest{Kind: "k"})
	if !isInvalid(err, "queue") || !strings.Contains(err.Error(), `"default"`) {
		t.Fatalf("submit without a queue under strict rules: %v; want the default queue refused too", err)
	}

	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "k", Queue: "other"}); err != nil {
		t.Fatalf("after reloading rules that are not strict: %v; want any queue accepted", err)
	}
}

func TestAQueuesMaxAttemptsIsTheDefaultOfItsSubmissions(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{DefaultMaxAttempts: 2, Rules: jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{"index": {MaxAttempts: 10}},
	}})
	tests := []struct {
		name  string
		req   jobs.SubmitRequest
		wantN int32
	}{
		{"a submission to the queue that gives none takes the queue's", jobs.SubmitRequest{Queue: "index"}, 10},
		{"a submission that gives its own keeps it", jobs.SubmitRequest{Queue: "index", MaxAttempts: 3}, 3},
		{"a queue not in the rules takes the server's default", jobs.SubmitRequest{Queue: "other"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if j := submit(t, e, tt.req); j.MaxAttempts != tt.wantN {
				t.Fatalf("max_attempts %d, want %d", j.MaxAttempts, tt.wantN)
			}
		})
	}
}

func TestAQueuesBackoffBoundsItsRetries(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{
		Now: clock.Now, RetryInitialBackoff: time.Millisecond, RetryMaxBackoff: time.Millisecond,
		Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
			"index": {InitialBackoff: 10 * time.Second, MaxBackoff: 40 * time.Second},
		}},
	})
	ctx := context.Background()
	j := submit(t, e, jobs.SubmitRequest{Kind: "idx", Queue: "index", MaxAttempts: 6})
	// The exponential step before the attempt after attempt n, capped at
	// max_backoff; full jitter draws the delay from zero up to it.
	steps := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second, 40 * time.Second}
	for n, step := range steps {
		clock.Advance(time.Minute)
		c, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"idx"}}, soon())
		if err != nil || c.ID != j.ID {
			t.Fatalf("claim of attempt %d: %+v, %v", n+1, c, err)
		}
		failed, err := e.Fail(ctx, j.ID, c.LeaseID, jobtype.JobError{Type: "Busy"}, true)
		if err != nil || failed.State != jobtype.Queued {
			t.Fatalf("fail attempt %d: %+v, %v; want queued again", n+1, failed, err)
		}
		if wait := failed.RunAt.Sub(clock.Now()); wait < 0 || wait > step {
			t.Errorf("after attempt %d the retry waits %v, want between 0 and %v", n+1, wait, step)
		}
	}

	other := running(t, e, jobs.SubmitRequest{MaxAttempts: 2})
	failed, err := e.Fail(ctx, other.ID, other.LeaseID, jobtype.JobError{Type: "Busy"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if wait := failed.RunAt.Sub(clock.Now()); wait > time.Millisecond {
		t.Errorf("a queue not in the rules waits %v before its retry, want the server's bound of 1ms", wait)
	}
}

func TestAQueuesLeaseTimeoutDecidesWhenItsJobsAreLost(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 30 * time.Second, Rules: jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{"slow": {LeaseTimeout: 5 * time.Minute}},
	}})
	ctx := context.Background()
	slow := running(t, e, jobs.SubmitRequest{Queue: "slow"})
	fast := running(t, e, jobs.SubmitRequest{})
	if got := slow.LeaseExpiresAt.Sub(clock.Now()); got != 5*time.Minute {
		t.Errorf("the slow queue's lease runs %v, want 5m", got)
	}
	clock.Advance(time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, fast.ID); got.State != jobtype.Lost {
		t.Errorf("a default-queue job a minute without heartbeat: %s, want lost", got.State)
	}
	if got := get(t, e, slow.ID); got.State != jobtype.Running {
		t.Errorf("a slow-queue job a minute without heartbeat: %s, want still running", got.State)
	}
	hb, err := e.Heartbeat(ctx, slow.ID, slow.LeaseID, 10, "")
	if err != nil || hb.LeaseExpiresAt.Sub(clock.Now()) != 5*time.Minute {
		t.Fatalf("heartbeat: %+v, %v; want the lease extended by the queue's 5m", hb, err)
	}
	clock.Advance(6 * time.Minute)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := get(t, e, slow.ID)
	if got.State != jobtype.Lost || got.Error == nil || !strings.Contains(got.Error.Message, "5m0s") {
		t.Fatalf("after 6 minutes: %s, %+v; want lost, saying no heartbeat for 5m0s", got.State, got.Error)
	}
}

func TestRulesRetentionReplacesTheServersAndReloads(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Retention: 24 * time.Hour, Rules: jobtype.Rules{Retention: time.Hour}})
	ctx := context.Background()
	old := submit(t, e, jobs.SubmitRequest{})
	e.Cancel(ctx, old.ID)
	active := submit(t, e, jobs.SubmitRequest{Hold: true})
	clock.Advance(2 * time.Hour)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, old.ID); err == nil {
		t.Errorf("a job ended 2h ago under a 1h retention is still there")
	}
	if _, err := e.Get(ctx, active.ID); err != nil {
		t.Errorf("an active job 2h old: %v, want it kept", err)
	}

	if err := e.SetRules(jobtype.Rules{}); err != nil {
		t.Fatal(err)
	}
	recent := submit(t, e, jobs.SubmitRequest{})
	e.Cancel(ctx, recent.ID)
	clock.Advance(2 * time.Hour)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, recent.ID); err != nil {
		t.Errorf("after reloading rules without retention, a job ended 2h ago: %v; want it kept for the server's 24h", err)
	}
}

func TestSetRulesRefusesWhatItCannotApplyAndKeepsTheOld(t *testing.T) {
	old := jobtype.Rules{Source: "config a.yaml", Strict: true, Queues: map[string]jobtype.QueueRules{"index": {MaxAttempts: 4}}}
	e, _ := newEngine(t, jobs.Config{Rules: old})
	for name, bad := range map[string]jobtype.Rules{
		"max_backoff below initial_backoff": {Queues: map[string]jobtype.QueueRules{"q": {InitialBackoff: time.Minute, MaxBackoff: time.Second}}},
		"a queue name with a space":         {Queues: map[string]jobtype.QueueRules{"a b": {}}},
		"negative max_attempts":             {Queues: map[string]jobtype.QueueRules{"q": {MaxAttempts: -1}}},
	} {
		if err := e.SetRules(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := e.Rules(); !got.Strict || got.Queues["index"].MaxAttempts != 4 {
		t.Fatalf("rules after refused replacements: %+v, want the old ones", got)
	}
}
