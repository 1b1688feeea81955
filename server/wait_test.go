package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

func TestWaitJobRules(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{WaitCap: 300 * time.Millisecond}})
	c := ts.h2c()

	done := finishedJob(t, c, "done-kind", mustValue(t, map[string]any{"rows": 42}))
	held := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
	queued := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "never-claimed"})

	tests := []struct {
		name      string
		id        string
		timeout   time.Duration // the caller's own deadline
		wantCode  connect.Code  // 0: OK
		wantState jobwatchv1.JobState
		minWait   time.Duration
		maxWait   time.Duration
	}{
		{
			name: "wait on a job that already ended returns it at once with its result",
			id:   done.GetId(), timeout: 10 * time.Second,
			wantState: jobwatchv1.JobState_JOB_STATE_SUCCEEDED, maxWait: 2 * time.Second,
		},
		{
			name: "wait on a held job is failed_precondition",
			id:   held.GetId(), timeout: 10 * time.Second,
			wantCode: connect.CodeFailedPrecondition, maxWait: 2 * time.Second,
		},
		{
			name: "wait on an unknown job is not_found",
			id:   "j_doesnotexist", timeout: 10 * time.Second,
			wantCode: connect.CodeNotFound, maxWait: 2 * time.Second,
		},
		{
			name: "wait on a queued job returns OK with the current state at the server cap",
			id:   queued.GetId(), timeout: 10 * time.Second,
			wantState: jobwatchv1.JobState_JOB_STATE_QUEUED,
			minWait:   250 * time.Millisecond, maxWait: 5 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			start := time.Now()
			resp, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: tt.id})
			took := time.Since(start)
			if tt.wantCode != 0 {
				wantCode(t, err, tt.wantCode)
				// The answer names the job asked about, as WaitJobs' does.
				if !strings.HasPrefix(err.(*connect.Error).Message(), tt.id+": ") {
					t.Errorf("the refusal %q does not start with the job's id", err)
				}
			} else if err != nil {
				t.Fatalf("WaitJob: %v", err)
			} else if got := resp.GetJob().GetState(); got != tt.wantState {
				t.Fatalf("state = %v, want %v", got, tt.wantState)
			}
			if took < tt.minWait || took > tt.maxWait {
				t.Errorf("answered after %v, want between %v and %v", took, tt.minWait, tt.maxWait)
			}
		})
	}
	if got := done.GetResult().GetStructValue().GetFields()["rows"].GetNumberValue(); got != 42 {
		t.Errorf("result rows = %v, want 42", got)
	}
}

// A WaitJob answers OK with the current state before its caller's
// deadline, a tenth of the time left (at most DeadlineMargin) ahead of it.
// The deadline is 5 s and the margin 0.5 s, so that a machine loaded by
// other test suites, which once took the answer of a 1 s deadline's
// 0.1 s margin past the deadline, still answers in time.
func TestWaitJobHonoursTheCallersDeadlineWithOK(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{WaitCap: time.Minute, DeadlineMargin: time.Second}})
	for _, tt := range []struct {
		name   string
		client clients
	}{
		{"connect (Connect-Timeout-Ms)", ts.h2c()},
		{"grpc (grpc-timeout)", ts.clients(ts.h2cClient(), connect.WithGRPC())},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := submit(t, tt.client, &jobwatchv1.SubmitJobRequest{Kind: "never-claimed"})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			resp, err := tt.client.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			if err != nil {
				t.Fatalf("WaitJob with a 5s deadline: %v, want OK before the deadline", err)
			}
			if resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
				t.Fatalf("state = %v, want QUEUED", resp.GetJob().GetState())
			}
			if took := time.Since(start); took < 2500*time.Millisecond {
				t.Errorf("answered after %v, want close to the 5s deadline", took)
			}
		})
	}
}

func TestWaitJobWakesWhenTheJobEnds(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "report"})

	type answer struct {
		resp *jobwatchv1.WaitJobResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := c.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
		answered <- answer{resp, err}
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)
	complete(t, c, claim(t, c, "report"), mustValue(t, "ok"))

	select {
	case a := <-answered:
		if a.err != nil {
			t.Fatalf("WaitJob: %v", a.err)
		}
		if got := a.resp.GetJob(); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || got.GetResult().GetStringValue() != "ok" {
			t.Fatalf("job = %v, want SUCCEEDED with result \"ok\"", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitJob did not wake when the job ended")
	}
	ts.waitForGauge("jobwatch_parked_waits", 0)
}

func TestWaitJobOnAJobEvictedFromMemoryAnswersFromTheStore(t *testing.T) {
	dbPath := t.TempDir() + "/jobwatch.db"
	first := startServer(t, serverOptions{dbPath: dbPath})
	done := finishedJob(t, first.h2c(), "evicted", mustValue(t, []any{"a", "b"}))
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	// A new process has an empty hub: the answer can only come from SQLite.
	second := startServer(t, serverOptions{dbPath: dbPath})
	start := time.Now()
	resp, err := second.h2c().jobs.WaitJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WaitJobRequest{JobId: done.GetId()})
	if err != nil {
		t.Fatalf("WaitJob: %v", err)
	}
	if resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || resp.GetJob().GetVersion() != done.GetVersion() {
		t.Fatalf("job = %v, want SUCCEEDED at version %d", resp.GetJob(), done.GetVersion())
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %v, want at once", took)
	}
}

func TestShutdownReturnsEveryParkedCallAtOnceWithOK(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{WaitCap: time.Minute, ClaimCap: time.Minute}})
	c := ts.h2c()
	grpc := ts.clients(ts.h2cClient(), connect.WithGRPC())
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "slow"})

	const waits = 5
	errs := make(chan error, waits+3)
	for i := range waits {
		client := c
		if i%2 == 1 {
			client = grpc
		}
		go func() {
			resp, err := client.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			if err == nil && resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
				t.Errorf("wait answered %v, want the latest state QUEUED", resp.GetJob().GetState())
			}
			errs <- err
		}()
	}
	go func() {
		resp, err := c.workers.ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"other"}})
		if err == nil && resp.GetJob() != nil {
			t.Errorf("claim during shutdown got job %v, want none", resp.GetJob())
		}
		errs <- err
	}()
	go func() {
		stream, err := c.jobs.WatchJob(context.Background(), &jobwatchv1.WatchJobRequest{JobId: job.GetId()})
		if err != nil {
			errs <- err
			return
		}
		for stream.Receive() {
		}
		errs <- stream.Err()
	}()
	ts.waitForGauge("jobwatch_parked_waits", waits)
	ts.waitForGauge("jobwatch_parked_claims", 1)
	ts.waitForGauge("jobwatch_open_watches", 1)

	start := time.Now()
	if err := ts.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for range waits + 2 {
		if err := <-errs; err != nil {
			t.Errorf("parked call ended with %v, want OK", err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown took %v with parked calls, want at once", took)
	}
}

// The engine's clock (jobs.Config.Now) need not be the wall clock (a
// test's fake clock, or an embedder's); caps are on the monotonic clock.
func TestWaitJobCapHoldsWhenTheEngineClockIsNotTheWallClock(t *testing.T) {
	ts := startServer(t, serverOptions{
		now:    func() time.Time { return time.Now().Add(-time.Hour) },
		config: server.Config{WaitCap: 200 * time.Millisecond, ClaimCap: 200 * time.Millisecond},
	})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "never-claimed"})

	start := time.Now()
	resp, err := c.jobs.WaitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
	if err != nil {
		t.Fatalf("WaitJob with a 200ms cap and a 5s deadline: %v, want OK at the cap", err)
	}
	if resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("state = %v, want QUEUED", resp.GetJob().GetState())
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %v, want the 200ms cap", took)
	}

	start = time.Now()
	claimed, err := c.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"other"}})
	if err != nil || claimed.GetJob() != nil {
		t.Fatalf("ClaimJob with a 200ms cap = %v, %v; want an empty OK answer", claimed, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("claim answered after %v, want the 200ms cap", took)
	}
}
