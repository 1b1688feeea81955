package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/jobtype"
)

// storeUndecodable makes a held job one its worker cannot decode, as a row
// written before the engine checked what it stores, then starts it:
// nested 5,000 levels deep, which protobuf's binary decoder gives up on
// (the server still reads it, so a remote worker is handed it), or not
// JSON at all, which an in-process worker cannot convert.
func storeUndecodable(t *testing.T, s *testServer, id string, payload string) {
	t.Helper()
	st, err := testdb.Open(s.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.UpdateJob(context.Background(), id, func(j *jobtype.Job) error {
		j.Payload = []byte(payload)
		j.Version++
		return nil
	}); err != nil {
		t.Fatalf("write the payload through the store: %v", err)
	}
	if _, err := s.Engine.Start(context.Background(), id); err != nil {
		t.Fatalf("start: %v", err)
	}
}

func TestAWorkerFailsAJobItCannotDecodeAndClaimsTheNext(t *testing.T) {
	undecodable := map[string]string{
		"remote":     strings.Repeat("[", 5000) + strings.Repeat("]", 5000),
		"in-process": `{"not json`,
	}

	ran := make(chan string, 10)
	forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("k", func(_ context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
			ran <- j.GetId()
			return "ok", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		backend := strings.TrimPrefix(t.Name()[strings.LastIndex(t.Name(), "/")+1:], "")
		if backend == "in-process" && testdb.Backend() == "postgres" {
			// What an in-process worker cannot convert is text that is not
			// JSON, which PostgreSQL's json column refuses to hold.
			t.Skip("PostgreSQL cannot hold a payload an in-process worker cannot decode")
		}
		bad := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true})
		storeUndecodable(t, env.s, bad, undecodable[backend])

		// An upper bound only: a payload 5,000 levels deep takes the
		// server and the worker seconds to convert, send and fail to
		// decode under the race detector on a loaded machine (over 10 s
		// once beside two other suites).
		const bound = 2 * time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		j, err := env.s.Engine.Wait(ctx, bad, time.Now().Add(bound))
		if err != nil || j.State != jobtype.Failed || j.Error == nil || j.Error.Type != "UndecodableJob" {
			t.Fatalf("the undecodable job is %s with error %+v (%v), want FAILED with UndecodableJob", j.State, j.Error, err)
		}
		if !strings.Contains(j.Error.Message, "could not decode") {
			t.Errorf("error message %q, want it to say the worker could not decode the job", j.Error.Message)
		}

		// The worker is still running, and runs the next job.
		select {
		case err := <-env.run:
			t.Fatalf("the worker stopped: %v", err)
		default:
		}
		good := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "k"})
		if got := env.wait(t, good); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("the next job is %v, want SUCCEEDED", got.GetState())
		}
		if id := <-ran; id != good {
			t.Errorf("the handler ran job %s, want only %s", id, good)
		}

		if backend == "remote" {
			// Reading it is an error that names the job, not a crash.
			_, err := env.c.Get(context.Background(), bad)
			var u *client.UndecodableJobError
			if !errors.As(err, &u) || u.JobID != bad {
				t.Errorf("Get of the undecodable job: %v, want an UndecodableJobError naming it", err)
			}
		}
	})
}

// typedError is an error whose type its author left empty, as the CLI's
// worker reports a script's "error  message" line.
type typedError struct{ typ string }

func (e typedError) Error() string         { return "failed" }
func (e typedError) ErrorType() string     { return e.typ }
func (e typedError) PublicMessage() string { return "failed" }

// pickyBackend refuses the first report of a failure of type "Picky", as
// a server with a rule this worker does not know would.
type pickyBackend struct{ client.WorkerBackend }

func (b pickyBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	if jerr.GetType() == "Picky" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("error.type: Picky is not allowed here"))
	}
	return b.WorkerBackend.Fail(ctx, l, jerr, retryable)
}

func TestAWorkerAlwaysEndsAFailedJob(t *testing.T) {
	wrap := func(b client.WorkerBackend) client.WorkerBackend { return pickyBackend{b} }
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("untyped", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return nil, typedError{""}
		})
		w.Handle("picky", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return nil, typedError{"Picky"}
		})
	}, func(t *testing.T, env *workerEnv) {
		t.Run("a failure without a type fails the job with the default type", func(t *testing.T) {
			j := env.wait(t, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "untyped"}))
			if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != jobtype.DefaultErrorType ||
				j.GetError().GetMessage() != "failed" {
				t.Fatalf("job %v with error %v, want FAILED with type %q", j.GetState(), j.GetError(), jobtype.DefaultErrorType)
			}
		})
		t.Run("a failure the backend refuses fails the job with the refusal", func(t *testing.T) {
			j := env.wait(t, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "picky"}))
			if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "ErrorRejected" ||
				!strings.Contains(j.GetError().GetMessage(), "Picky is not allowed") {
				t.Fatalf("job %v with error %v, want FAILED with ErrorRejected and the reason", j.GetState(), j.GetError())
			}
		})
	})
}

func TestARawFailureWithoutATypeFailsTheJob(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	id := submit(t, c, "raw").GetId()
	claimed, err := c.WorkerService().ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"raw"}})
	if err != nil || claimed.GetJob().GetId() != id {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	resp, err := c.WorkerService().FailJob(context.Background(), &jobwatchv1.FailJobRequest{
		JobId: id, LeaseId: claimed.GetLeaseId(), Error: &jobwatchv1.JobError{Message: "message"},
	})
	if err != nil {
		t.Fatalf("FailJob with an empty error type: %v, want OK", err)
	}
	if j := resp.GetJob(); j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != jobtype.DefaultErrorType {
		t.Fatalf("job %v with error %v, want FAILED with type %q", j.GetState(), j.GetError(), jobtype.DefaultErrorType)
	}
}

// An in-process worker is held to the engine's limits as a remote one is
// to the server's: the same rules, in one place.
func TestAWorkerMeetsTheSameLimitsInProcessAndRemotely(t *testing.T) {
	forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("big-result", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return strings.Repeat("x", jobtype.DefaultMaxPayloadBytes), nil
		})
		w.Handle("deep-result", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			var v any = []any{}
			for range jobtype.MaxJSONDepth {
				v = []any{v}
			}
			return v, nil
		})
		w.Handle("long-step", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p(50, strings.Repeat("é", 1000)+"\xff")
			return nil, nil
		})
	}, func(t *testing.T, env *workerEnv) {
		for _, tt := range []struct{ kind, want string }{
			{"big-result", "over the limit"},
			{"deep-result", "levels deep"},
		} {
			j := env.wait(t, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: tt.kind}))
			if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "ResultRejected" ||
				!strings.Contains(j.GetError().GetMessage(), "result: ") || !strings.Contains(j.GetError().GetMessage(), tt.want) {
				t.Errorf("%s: job %v with error %v, want FAILED with ResultRejected saying %q", tt.kind, j.GetState(), j.GetError(), tt.want)
			}
		}
		j := env.wait(t, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "long-step"}))
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetStep()) == 0 || len(j.GetStep()) > jobtype.MaxStepBytes {
			t.Errorf("long-step: job %v with a step of %d bytes, want SUCCEEDED with the step cut to %d", j.GetState(), len(j.GetStep()), jobtype.MaxStepBytes)
		}
	})
}

// The in-process backend's claim cap is on the monotonic clock, like the
// server's, whatever the engine's clock says.
func TestAnInProcessClaimAnswersAtItsCapWhateverTheEngineClockSays(t *testing.T) {
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			const capAfter = 200 * time.Millisecond
			s := startServer(t, serverOptions{engine: jobs.Config{Now: func() time.Time { return time.Now().Add(skew) }}})
			b := inproc.WorkerBackend(s.Engine, capAfter)
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				lease, err := b.Claim(context.Background(), "w", []string{"nothing"}, nil)
				if lease != nil {
					err = errors.New("claimed a job")
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the claim with a %v cap was still parked after 10s", capAfter)
			}
			if took := time.Since(start); took < capAfter {
				t.Errorf("the claim answered after %v, before its cap of %v", took, capAfter)
			}
		})
	}
}

func TestErrorTypeNamesWhatTheJobWillSay(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"a plain error is Error", errors.New("boom"), "Error"},
		{"an error that chooses its type keeps it", typedError{typ: "Upstream503"}, "Upstream503"},
		{"an error that chooses an empty type is Error, as the engine stores it", typedError{typ: ""}, jobtype.DefaultErrorType},
		{"a wrapped typed error", fmt.Errorf("call: %w", typedError{typ: "Timeout"}), "Timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := client.ErrorType(tt.err); got != tt.want {
				t.Errorf("ErrorType = %q, want %q", got, tt.want)
			}
		})
	}
}
