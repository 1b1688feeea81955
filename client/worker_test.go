package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/jobtype"
)

// workerEnv is a server, a client to it and a worker over one of the two
// backends, so every worker test runs remotely and in-process alike.
type workerEnv struct {
	s   *testServer
	c   *client.Client
	w   *client.Worker
	run chan error // Run's result once it returns
	ctx context.Context
	// stop ends Run's context: the worker stops claiming and drains.
	stop context.CancelFunc
}

// stopAndWait stops the worker and waits for Run to return, without an
// error; the cleanup's wait then finds it returned.
func (env *workerEnv) stopAndWait(t *testing.T) {
	t.Helper()
	env.stop()
	select {
	case err := <-env.run:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop")
	}
	env.run <- nil
}

var backends = map[string]func(t *testing.T, s *testServer) client.WorkerBackend{
	"remote": func(t *testing.T, s *testServer) client.WorkerBackend {
		return fastClient(t, s.URL).WorkerBackend()
	},
	"in-process": func(t *testing.T, s *testServer) client.WorkerBackend {
		return inproc.WorkerBackend(s.Engine, time.Second)
	},
}

// forEachBackend runs test against a fresh server with a remote worker and
// again with an in-process one. Its leases last a minute, so that no job
// ends for its lease on a loaded machine between its claim and its
// worker's report; a test of lease loss shortens them (shortLeases).
func forEachBackend(t *testing.T, cfg client.WorkerConfig, wrap func(client.WorkerBackend) client.WorkerBackend,
	setup func(w *client.Worker), test func(t *testing.T, env *workerEnv)) {
	for name, backend := range backends {
		t.Run(name, func(t *testing.T) {
			s := startServer(t, serverOptions{engine: jobs.Config{
				LeaseTimeout:        time.Minute,
				RetryInitialBackoff: 10 * time.Millisecond,
				RetryMaxBackoff:     10 * time.Millisecond,
			}})
			b := backend(t, s)
			if wrap != nil {
				b = wrap(b)
			}
			if cfg.HeartbeatInterval == 0 {
				cfg.HeartbeatInterval = 50 * time.Millisecond
			}
			cfg.ProgressInterval = 10 * time.Millisecond
			if cfg.Logger == nil {
				cfg.Logger = slog.New(slog.DiscardHandler)
			}
			w := client.NewWorker(b, cfg)
			setup(w)
			ctx, stop := context.WithCancel(context.Background())
			env := &workerEnv{s: s, c: fastClient(t, s.URL), w: w, run: make(chan error, 1), ctx: ctx, stop: stop}
			go func() { env.run <- w.Run(ctx) }()
			t.Cleanup(func() {
				stop()
				select {
				case <-env.run:
				case <-time.After(10 * time.Second):
					t.Error("worker did not stop")
				}
			})
			test(t, env)
		})
	}
}

// shortLeases gives the jobs of the default queue leases of one second,
// for tests of what a worker does when its lease runs out.
func (env *workerEnv) shortLeases(t *testing.T) {
	t.Helper()
	if err := env.s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		jobtype.DefaultQueue: {LeaseTimeout: time.Second},
	}}); err != nil {
		t.Fatal(err)
	}
}

func (env *workerEnv) submit(t *testing.T, req *jobwatchv1.SubmitJobRequest) string {
	t.Helper()
	j, err := env.c.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j.GetId()
}

// wait returns the job once it has ended.
func (env *workerEnv) wait(t *testing.T, id string) *jobwatchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := env.c.WaitForJob(ctx, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return j
}

// watchUntil follows the job until cond holds for a snapshot.
func (env *workerEnv) watchUntil(t *testing.T, id string, what string, cond func(*jobwatchv1.Job) bool) *jobwatchv1.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for j, err := range env.c.Watch(ctx, id) {
		if err != nil {
			t.Fatalf("watch %s until %s: %v", id, what, err)
		}
		if cond(j) {
			return j
		}
	}
	t.Fatalf("job %s ended before %s", id, what)
	return nil
}

// QuotaError is a typed error a handler returns; its message names an
// account, so it is not for callers unless marked public.
type QuotaError struct{ Account string }

func (e *QuotaError) Error() string { return "quota exceeded for account " + e.Account }

func TestWorkerReportsOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		handler     client.Handler
		maxAttempts int32
		wantState   jobwatchv1.JobState
		wantType    string
		wantMessage string
		wantAttempt int32
		wantResult  string
	}{
		{
			name: "a handler's result completes the job",
			handler: func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
				return map[string]any{"kind": j.GetKind(), "rows": 7}, nil
			},
			wantState:   jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
			wantAttempt: 1,
			wantResult:  `{"kind":"k","rows":7}`,
		},
		{
			name: "an error fails the job with its type name and no message",
			handler: func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
				return nil, fmt.Errorf("charge: %w", &QuotaError{Account: "acme-42"})
			},
			wantState:   jobwatchv1.JobState_JOB_STATE_FAILED,
			wantType:    "QuotaError",
			wantAttempt: 1,
		},
		{
			name: "an error marked public shows its message",
			handler: func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
				return nil, client.Public(&QuotaError{Account: "demo"})
			},
			wantState:   jobwatchv1.JobState_JOB_STATE_FAILED,
			wantType:    "QuotaError",
			wantMessage: "quota exceeded for account demo",
			wantAttempt: 1,
		},
		{
			name: "a retryable error runs the job again",
			handler: func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
				if j.GetAttempt() == 1 {
					return nil, client.Retryable(errors.New("upstream busy"))
				}
				return "second time lucky", nil
			},
			maxAttempts: 3,
			wantState:   jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
			wantAttempt: 2,
			wantResult:  `"second time lucky"`,
		},
		{
			name: "a panic fails the job as PanicError",
			handler: func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
				var m map[string]int
				//lint:ignore SA5000 a runtime panic is what this case is about
				m["boom"]++
				return nil, nil
			},
			wantState:   jobwatchv1.JobState_JOB_STATE_FAILED,
			wantType:    "PanicError",
			wantAttempt: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) { w.Handle("k", tt.handler) },
				func(t *testing.T, env *workerEnv) {
					id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "k", MaxAttempts: tt.maxAttempts})
					j := env.wait(t, id)
					if j.GetState() != tt.wantState || j.GetAttempt() != tt.wantAttempt {
						t.Fatalf("job %v attempt %d, want %v attempt %d (error %v)",
							j.GetState(), j.GetAttempt(), tt.wantState, tt.wantAttempt, j.GetError())
					}
					if tt.wantState == jobwatchv1.JobState_JOB_STATE_FAILED &&
						(j.GetError().GetType() != tt.wantType || j.GetError().GetMessage() != tt.wantMessage) {
						t.Fatalf("error = %q %q, want %q %q", j.GetError().GetType(), j.GetError().GetMessage(),
							tt.wantType, tt.wantMessage)
					}
					if tt.wantResult != "" {
						raw, _ := j.GetResult().MarshalJSON()
						var got bytes.Buffer
						_ = json.Compact(&got, raw) // protojson spaces at random
						if got.String() != tt.wantResult {
							t.Fatalf("result = %s, want %s", got.String(), tt.wantResult)
						}
					}
				})
		})
	}
}

func TestWorkerSendsProgressWhileTheHandlerRuns(t *testing.T) {
	release := make(chan struct{})
	forEachBackend(t, client.WorkerConfig{HeartbeatInterval: time.Hour}, nil, func(w *client.Worker) {
		w.Handle("batches", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p(45, "batch 5 of 11")
			<-release
			return nil, nil
		})
	}, func(t *testing.T, env *workerEnv) {
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "batches"})
		// The heartbeat interval is an hour: only the progress change
		// itself can bring this snapshot.
		env.watchUntil(t, id, "45% batch 5 of 11", func(j *jobwatchv1.Job) bool {
			return j.GetPercent() == 45 && j.GetStep() == "batch 5 of 11"
		})
		release <- struct{}{}
		if j := env.wait(t, id); j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetPercent() != 100 {
			t.Fatalf("job %v %d%%, want SUCCEEDED 100%%", j.GetState(), j.GetPercent())
		}
	})
}

func TestWorkerSendsTheLastProgressBeforeTheOutcome(t *testing.T) {
	// A handler that reports its last step and returns at once, as a
	// script's final "progress" line does: the job must end with that step,
	// whatever the heartbeat timing.
	forEachBackend(t, client.WorkerConfig{HeartbeatInterval: time.Hour}, nil, func(w *client.Worker) {
		w.Handle("quick", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p(10, "batch 1 of 11")
			p(91, "batch 11 of 11")
			return "done", nil
		})
		w.Handle("quick-fail", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			p(30, "batch 4 of 11")
			return nil, errors.New("warehouse timeout")
		})
	}, func(t *testing.T, env *workerEnv) {
		for kind, want := range map[string]string{"quick": "batch 11 of 11", "quick-fail": "batch 4 of 11"} {
			for range 5 {
				j := env.wait(t, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: kind}))
				if j.GetStep() != want {
					t.Fatalf("%s ended %v with step %q, want %q", kind, j.GetState(), j.GetStep(), want)
				}
			}
		}
	})
}

func TestWorkerCancelsTheHandlerWhenTheJobIsCancelled(t *testing.T) {
	causes := make(chan error, 1)
	forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("long", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return "too late", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "long"})
		env.watchUntil(t, id, "running", func(j *jobwatchv1.Job) bool {
			return j.GetState() == jobwatchv1.JobState_JOB_STATE_RUNNING
		})
		if _, err := env.c.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		select {
		case cause := <-causes:
			if !errors.Is(cause, client.ErrJobCancelled) {
				t.Fatalf("handler's ctx cause = %v, want ErrJobCancelled", cause)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled")
		}
		if j := env.wait(t, id); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED || j.GetResult() != nil {
			t.Fatalf("job %v result %v, want CANCELLED without the handler's late result", j.GetState(), j.GetResult())
		}
	})
}

// A queue's timeout ends an attempt on the server; the worker hears it at
// its next heartbeat and stops the handler, whose late result is refused.
func TestWorkerStopsTheHandlerWhenItsQueuesTimeoutEndsTheAttempt(t *testing.T) {
	stopped := make(chan error, 1)
	forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		w.Handle("slow", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			<-ctx.Done()
			stopped <- context.Cause(ctx)
			return "too late", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		if err := env.s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"slow": {Timeout: 200 * time.Millisecond}}}); err != nil {
			t.Fatal(err)
		}
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "slow", Queue: "slow"})
		select {
		case cause := <-stopped:
			if cause == nil {
				t.Fatal("the handler's context ended without a cause")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler was not stopped after its queue's timeout")
		}
		j := env.wait(t, id)
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != jobs.TimeoutErrorType || j.GetResult() != nil {
			t.Fatalf("job %v %v result %v, want FAILED with type Timeout and no late result", j.GetState(), j.GetError(), j.GetResult())
		}
	})
}

// silentBackend swallows heartbeats while silent is set, as a worker
// whose heartbeats never arrive (a frozen process, a partition) would.
type silentBackend struct {
	client.WorkerBackend
	silent atomic.Bool
}

func (b *silentBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	if b.silent.Load() {
		return false, nil
	}
	return b.WorkerBackend.Heartbeat(ctx, l, percent, step)
}

func TestWorkerCancelsTheHandlerWhenTheLeaseIsLost(t *testing.T) {
	causes := make(chan error, 1)
	var silent *silentBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		silent = &silentBackend{WorkerBackend: b}
		silent.silent.Store(true)
		return silent
	}
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("stuck", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return "too late", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		env.shortLeases(t)
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "stuck"})
		// No heartbeat reaches the server: after the lease timeout the
		// reaper marks the job LOST.
		if j := env.wait(t, id); j.GetState() != jobwatchv1.JobState_JOB_STATE_LOST {
			t.Fatalf("job %v, want LOST", j.GetState())
		}
		silent.silent.Store(false) // the next heartbeat learns the lease is gone
		select {
		case cause := <-causes:
			if !errors.Is(cause, client.ErrLeaseLost) {
				t.Fatalf("handler's ctx cause = %v, want ErrLeaseLost", cause)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled")
		}
		if j, _ := env.c.Get(context.Background(), id); j.GetState() != jobwatchv1.JobState_JOB_STATE_LOST {
			t.Fatalf("job %v after the handler returned, want still LOST", j.GetState())
		}
	})
}

func TestWorkerDrainsRunningJobsOnShutdown(t *testing.T) {
	var started chan string
	var release chan struct{}
	forEachBackend(t, client.WorkerConfig{}, nil, func(w *client.Worker) {
		started, release = make(chan string, 2), make(chan struct{})
		w.Handle("drain", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			started <- j.GetId()
			<-release
			return "finished", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		first := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "drain"})
		<-started
		env.stop()
		second := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "drain"})
		select {
		case err := <-env.run:
			t.Fatalf("Run returned (%v) while a job was still running", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		select {
		case err := <-env.run:
			if err != nil {
				t.Fatalf("Run = %v, want nil after draining", err)
			}
			env.run <- err // for the cleanup
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its last job ended")
		}
		if j := env.wait(t, first); j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("the running job ended %v, want SUCCEEDED", j.GetState())
		}
		if j, _ := env.c.Get(context.Background(), second); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("a job submitted after shutdown is %v, want still QUEUED", j.GetState())
		}
	})
}

func TestWorkerStopsHandlersThatOutliveTheDrainTimeout(t *testing.T) {
	// The handler, not the job's RUNNING state, says the job runs here: a
	// claim whose answer comes after the stop gives its job back.
	started := make(chan struct{}, 1)
	forEachBackend(t, client.WorkerConfig{DrainTimeout: 50 * time.Millisecond}, nil, func(w *client.Worker) {
		w.Handle("endless", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
	}, func(t *testing.T, env *workerEnv) {
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "endless"})
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler never started")
		}
		env.stop()
		j := env.wait(t, id)
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "WorkerStopped" {
			t.Fatalf("job %v %v, want FAILED with WorkerStopped", j.GetState(), j.GetError())
		}
	})
}

func TestWorkerRunsAtMostConcurrencyJobsAtOnce(t *testing.T) {
	var mu sync.Mutex
	running, peak := 0, 0
	forEachBackend(t, client.WorkerConfig{Concurrency: 2}, nil, func(w *client.Worker) {
		w.Handle("c", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			// Held until two have run at once, however the machine
			// schedules the worker's claims; then a little work, in
			// which a third would overlap if the limit let it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				mu.Lock()
				reached := peak >= 2
				mu.Unlock()
				if reached || time.Now().After(deadline) {
					break
				}
			}
			time.Sleep(30 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil
		})
	}, func(t *testing.T, env *workerEnv) {
		mu.Lock()
		peak = 0
		mu.Unlock()
		var ids []string
		for range 6 {
			ids = append(ids, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "c"}))
		}
		for _, id := range ids {
			env.wait(t, id)
		}
		mu.Lock()
		defer mu.Unlock()
		if peak != 2 {
			t.Fatalf("at most %d jobs ran at once, want 2", peak)
		}
	})
}

// heldReportsBackend holds every Complete until release closes, counting
// those it holds.
type heldReportsBackend struct {
	client.WorkerBackend
	held    chan string // the job of each Complete as it arrives
	release chan struct{}
	done    func() // closes release
}

func (b *heldReportsBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	b.held <- l.Job.GetId()
	<-b.release
	return b.WorkerBackend.Complete(ctx, l, result)
}

// A job whose handler returned gives its slot to the next job while its
// outcome is on its way, as River's completer does; outcomes on their way
// are bounded by Concurrency, and Run waits for every one of them.
func TestWorkerRunsTheNextJobWhileAnOutcomeIsOnItsWay(t *testing.T) {
	var held *heldReportsBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		release := make(chan struct{})
		held = &heldReportsBackend{WorkerBackend: b, held: make(chan string, 10), release: release,
			done: sync.OnceFunc(func() { close(release) })}
		return held
	}
	started := make(chan string, 10)
	forEachBackend(t, client.WorkerConfig{Concurrency: 1}, wrap, func(w *client.Worker) {
		w.Handle("quick", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			started <- j.GetId()
			return "done", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		t.Cleanup(held.done)
		next := func(ch chan string, what string) string {
			t.Helper()
			select {
			case id := <-ch:
				return id
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s", what)
				return ""
			}
		}
		var ids []string
		for range 3 {
			ids = append(ids, env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "quick"}))
		}
		// The first job's outcome is held; the second job runs meanwhile.
		first := next(started, "first job started")
		if got := next(held.held, "first outcome reported"); got != first {
			t.Fatalf("the outcome of %s came first, want %s's", got, first)
		}
		next(started, "second job started while the first's outcome was on its way")
		// One outcome is on its way and Concurrency is 1: the second
		// job keeps its slot until that one is answered, so the third
		// waits.
		select {
		case id := <-started:
			t.Fatalf("job %s started with an outcome on its way, a job done and a Concurrency of 1", id)
		case id := <-held.held:
			t.Fatalf("the outcome of %s was sent with another on its way and a Concurrency of 1", id)
		case <-time.After(100 * time.Millisecond):
		}
		env.stop()
		select {
		case err := <-env.run:
			t.Fatalf("Run returned (%v) with an outcome still on its way", err)
		case <-time.After(100 * time.Millisecond):
		}
		held.done()
		select {
		case err := <-env.run:
			env.run <- err // for the cleanup
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its outcomes were answered")
		}
		done := 0
		for _, id := range ids {
			j, err := env.c.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if j.GetState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				done++
			}
		}
		if done != 2 {
			t.Fatalf("%d jobs SUCCEEDED, want the 2 whose outcomes were held until Run returned", done)
		}
	})
}

// lateClaimBackend models a claim whose answer is still on the wire when
// the worker is told to stop: the server has handed the job out, and the
// reply reaches the worker a moment later, unless the worker has given
// up on the call by then (as a cancelled HTTP request does).
type lateClaimBackend struct {
	client.WorkerBackend
	claimed chan struct{} // closed once the server has handed a job out
	once    sync.Once
}

func (b *lateClaimBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	l, err := b.WorkerBackend.Claim(ctx, workerID, kinds, queues)
	if l == nil || err != nil {
		return l, err
	}
	b.once.Do(func() { close(b.claimed) })
	select {
	case <-ctx.Done():
		return nil, ctx.Err() // the reply is lost with the call
	case <-time.After(30 * time.Millisecond):
		return l, nil
	}
}

// A backend that cannot give jobs back (lateClaimBackend hides the
// Releaser of the backend it wraps): the job runs, as the drain does.
func TestWorkerRunsAJobClaimedJustAsItStops(t *testing.T) {
	var late *lateClaimBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		late = &lateClaimBackend{WorkerBackend: b, claimed: make(chan struct{})}
		return late
	}
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("late", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			return "ran", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "late"})
		<-late.claimed
		env.stop() // while the claim's reply is on its way
		if j := env.wait(t, id); j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %v %v, want SUCCEEDED: a job handed to a stopping worker must still run (drain), not be left to its lease",
				j.GetState(), j.GetError())
		}
	})
}

// releasingLateClaims is lateClaimBackend with the wrapped backend's
// Release.
type releasingLateClaims struct{ *lateClaimBackend }

func (b releasingLateClaims) Release(ctx context.Context, l *client.Lease) error {
	return b.WorkerBackend.(client.Releaser).Release(ctx, l)
}

// A job whose claim is answered after the worker began to stop is not
// started while the worker drains: it goes back to the queue at once,
// its attempt not counted, for another worker (or this one's next
// start) to run. The worker stops without waiting for it.
func TestWorkerGivesBackAJobClaimedAsItStops(t *testing.T) {
	var late releasingLateClaims
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		late = releasingLateClaims{&lateClaimBackend{WorkerBackend: b, claimed: make(chan struct{})}}
		return late
	}
	started := make(chan string, 1)
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("late", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			started <- j.GetId()
			return "ran", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "late"})
		<-late.claimed
		env.stopAndWait(t) // while the claim's reply is on its way
		select {
		case id := <-started:
			t.Fatalf("job %s started after the worker began to stop", id)
		default:
		}
		j, err := env.c.Get(context.Background(), id)
		if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || j.GetAttempt() != 0 || j.GetWorkerId() != "" {
			t.Fatalf("job %v attempt %d worker %q, %v; want QUEUED again, its attempt not counted", j.GetState(), j.GetAttempt(), j.GetWorkerId(), err)
		}
	})
}

// claimRecorder keeps the error of each Claim, and passes StopClaiming
// on to the backend it wraps.
type claimRecorder struct {
	client.WorkerBackend
	claiming chan struct{} // closed as the first Claim is sent
	once     sync.Once
	mu       sync.Mutex
	errs     []error
}

func (b *claimRecorder) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	b.once.Do(func() { close(b.claiming) })
	l, err := b.WorkerBackend.Claim(ctx, workerID, kinds, queues)
	b.mu.Lock()
	b.errs = append(b.errs, err)
	b.mu.Unlock()
	return l, err
}

func (b *claimRecorder) StopClaiming(ctx context.Context, workerID string) error {
	return b.WorkerBackend.(client.ClaimStopper).StopClaiming(ctx, workerID)
}

// A worker that stops with its claim parked has the server answer it
// (StopClaiming) rather than cut the call, whose answer could be a job
// on its way: the claim ends OK, with no job, and Run returns at once.
func TestAStoppingWorkerHasItsParkedClaimAnsweredNotCut(t *testing.T) {
	var rec *claimRecorder
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		rec = &claimRecorder{WorkerBackend: b, claiming: make(chan struct{})}
		return rec
	}
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("never", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return nil, nil })
	}, func(t *testing.T, env *workerEnv) {
		// Stopped as the claim is sent, parked or not yet: the server
		// answers either at once.
		<-rec.claiming
		stopped := time.Now()
		env.stopAndWait(t)
		took := time.Since(stopped)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if last := rec.errs[len(rec.errs)-1]; last != nil {
			t.Fatalf("the parked claim ended with %v after %v; want it answered, not cut", last, took)
		}
	})
}

func TestWorkerReportsWhatTheServerWouldRefuse(t *testing.T) {
	s := startServer(t, serverOptions{
		engine: jobs.Config{LeaseTimeout: 2 * time.Second, MaxPayloadBytes: 1000},
	})
	w := client.NewWorker(fastClient(t, s.URL).WorkerBackend(), client.WorkerConfig{
		HeartbeatInterval: 50 * time.Millisecond, ProgressInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	long := strings.Repeat("é", 3000) // 6,000 bytes
	w.Handle("big-result", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
		return strings.Repeat("x", 2000), nil
	})
	w.Handle("long-step", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
		p(50, long)
		// Done once a heartbeat has carried the step to the server.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if got, err := s.Engine.Get(ctx, j.GetId()); err == nil && got.Step != "" {
				return "done", nil
			}
			if time.Now().After(deadline) {
				return nil, errors.New("no heartbeat carried the step to the server within 10s")
			}
		}
	})
	w.Handle("long-error", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
		return nil, client.Public(errors.New(long))
	})
	w.Handle("chan-result", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
		return make(chan int), nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	defer func() { stop(); <-ran }()
	c := fastClient(t, s.URL)
	env := &workerEnv{c: c}

	t.Run("a result over the server's limit fails the job saying so", func(t *testing.T) {
		j := env.wait(t, submit(t, c, "big-result").GetId())
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "ResultRejected" ||
			!strings.Contains(j.GetError().GetMessage(), "over the limit") {
			t.Fatalf("job %v %v, want FAILED with ResultRejected naming the limit", j.GetState(), j.GetError())
		}
	})
	t.Run("a result that is not JSON fails the job saying so", func(t *testing.T) {
		j := env.wait(t, submit(t, c, "chan-result").GetId())
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "ResultRejected" ||
			j.GetError().GetMessage() != "the result is not JSON: json: unsupported type: chan int" {
			t.Fatalf("job %v %v, want FAILED with ResultRejected saying the result is not JSON", j.GetState(), j.GetError())
		}
	})
	t.Run("a step over the API's 1 KiB is cut, not a reason to lose the job", func(t *testing.T) {
		j := env.wait(t, submit(t, c, "long-step").GetId())
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || len(j.GetStep()) == 0 ||
			len(j.GetStep()) > 1024 || !strings.HasPrefix(long, j.GetStep()) {
			t.Fatalf("job %v %v step of %d bytes, want SUCCEEDED with the step cut to at most 1024 bytes",
				j.GetState(), j.GetError(), len(j.GetStep()))
		}
	})
	t.Run("an error message over the API's 4 KiB is cut", func(t *testing.T) {
		j := env.wait(t, submit(t, c, "long-error").GetId())
		if m := j.GetError().GetMessage(); j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED ||
			len(m) == 0 || len(m) > 4096 || !strings.HasPrefix(long, m) {
			t.Fatalf("job %v %v, want FAILED with the message cut to at most 4096 bytes", j.GetState(), j.GetError())
		}
	})
}

// hangingBackend's heartbeats never get an answer, as over a connection
// to a server that froze: each call hangs until its ctx ends.
type hangingBackend struct{ client.WorkerBackend }

func (b hangingBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	<-ctx.Done()
	return false, ctx.Err()
}

func TestWorkerCancelsTheHandlerWhenAHeartbeatHangsPastTheLease(t *testing.T) {
	causes := make(chan error, 1)
	wrap := func(b client.WorkerBackend) client.WorkerBackend { return hangingBackend{b} }
	forEachBackend(t, client.WorkerConfig{}, wrap, func(w *client.Worker) {
		w.Handle("frozen", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, nil
		})
	}, func(t *testing.T, env *workerEnv) {
		env.shortLeases(t)
		env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "frozen"})
		// The lease is 1s: once it has passed unrenewed, another worker
		// may run the job, so this one must stop.
		select {
		case cause := <-causes:
			if !errors.Is(cause, client.ErrLeaseLost) {
				t.Fatalf("handler's ctx cause = %v, want ErrLeaseLost", cause)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the handler ran on long after its lease ran out, because a heartbeat hung")
		}
	})
}

// refusedThenHangingBackend's first heartbeat is refused as by a server
// that is down, and the ones after it hang until their ctx ends, as to
// a server that came back frozen.
type refusedThenHangingBackend struct {
	client.WorkerBackend
	beats atomic.Int32
}

func (b *refusedThenHangingBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	if b.beats.Add(1) == 1 {
		return false, connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	}
	<-ctx.Done()
	return false, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
}

// When a job's heartbeats fail for the whole lease, the warning says why
// they failed, not only that the last one ran into the lease's end.
func TestWorkerSaysWhyHeartbeatsFailedForTheWholeLease(t *testing.T) {
	var logs lockedBuffer
	cfg := client.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil)), HeartbeatInterval: 100 * time.Millisecond}
	wrap := func(b client.WorkerBackend) client.WorkerBackend { return &refusedThenHangingBackend{WorkerBackend: b} }
	stopped := make(chan struct{}, 1)
	forEachBackend(t, cfg, wrap, func(w *client.Worker) {
		w.Handle("cut-off", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			<-ctx.Done()
			stopped <- struct{}{}
			return nil, nil
		})
	}, func(t *testing.T, env *workerEnv) {
		env.shortLeases(t)
		env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cut-off"})
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler ran on long after its lease ran out")
		}
		line := ""
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "heartbeats failed for the whole lease") {
				line = l
			}
		}
		if !strings.Contains(line, "connection refused") {
			t.Fatalf("warning %q, want it to name the refused connection; logs:\n%s", line, logs.String())
		}
	})
}

// clientConns counts the HTTP/2 connections this process's clients hold
// open: one read loop each.
func clientConns() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "(*http2ClientConn).readLoop")
}

// Close right after a Worker's Run returns releases the worker's
// connections, though the last claim's stream is still being torn down
// when Run returns.
func TestCloseAfterAWorkerRunLeavesNoConnection(t *testing.T) {
	s := startServer(t, serverOptions{})
	before := clientConns()
	for range 5 {
		c := client.New(s.URL)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{Concurrency: 4})
		w.Handle("nothing-ever", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return nil, nil })
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		c.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for clientConns() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d client connections open 30s after five clients were closed, %d before", clientConns(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A handler that ignores its context does not hold Run past its
// DrainTimeout: its job is failed as retryable (WorkerStopped) at the
// timeout, and the handler's late outcome is dropped.
func TestDrainTimeoutBoundsRunWhenAHandlerIgnoresItsContext(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	job, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "stubborn", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{DrainTimeout: 200 * time.Millisecond})
	w.Handle("stubborn", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
		close(started)
		<-release // ignores its context
		return "late", nil
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waits for a handler that ignores its context, 30s after its ctx ended with a 200ms DrainTimeout")
	}
	got, err := c.Get(context.Background(), job.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || got.GetError().GetType() != "WorkerStopped" {
		t.Fatalf("the job after Run returned: %s with %v; want QUEUED again after a WorkerStopped failure", got.GetState(), got.GetError())
	}
}

// A Worker whose server is away says so once at warn, not at every try:
// the tries after the first are at debug, and the first claim that works
// again says so at info, with how many failed.
func TestAWorkerWhoseServerIsAwaySaysSoOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there, for now
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := fastClient(t, "http://"+addr)
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{Logger: log,
		Backoff: client.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}})
	w.Handle("k", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return nil, nil })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	eventually(t, "five failed claims", func() bool { return strings.Count(logs.String(), "claim failed; retrying") >= 5 })
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings while the server was away, want 1:\n%s", n, logs.String())
	}

	// The server comes back on the address.
	startServer(t, serverOptions{addr: addr})
	if _, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "k"}); err != nil {
		t.Fatal(err) // a job to claim, so that the claim parked answers
	}
	eventually(t, "the worker to say its claims work again", func() bool { return strings.Contains(logs.String(), "claim works again") })
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// lockedBuffer is a bytes.Buffer that a logger and a test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Mistakes in setting a Worker up are said at once, not found out from
// jobs failed later: a nil handler or backend panics where it is given
// (as http.Handle does), and a second Run of one Worker beside the
// first returns an error instead of claiming twice over.
func TestWorkerRefusesMistakesInItsSetUp(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	mustPanic("NewWorker(nil, …)", func() { client.NewWorker(nil, client.WorkerConfig{}) })

	s := startServer(t, serverOptions{})
	w := client.NewWorker(fastClient(t, s.URL).WorkerBackend(), client.WorkerConfig{})
	mustPanic(`Handle("k", nil)`, func() { w.Handle("k", nil) })

	w.Handle("k", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return nil, nil })
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- w.Run(ctx) }()
	// The first Run is under way once the server counts its parked claim.
	eventually(t, "the first Run's claim parked", func() bool { return s.gauge("jobwatch_parked_claims") == 1 })
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run beside the first = %v, want an error saying it is already running", err)
	}
	cancel()
	if err := <-first; err != nil {
		t.Errorf("the first Run = %v, want nil after its drain", err)
	}
}

// lostAnswerBackend makes each first report of an outcome and then
// loses its answer, as a server that restarts after the commit does.
type lostAnswerBackend struct {
	client.WorkerBackend
	lost sync.Map // job id → true from its first report on, whose answer is lost
}

// report makes the report of job id; the answer to the first is lost
// if it was made. The id is marked before the report goes, so a test
// that sees the job end (the report committed) finds it marked.
func (b *lostAnswerBackend) report(id string, send func() error) error {
	_, again := b.lost.LoadOrStore(id, true)
	if err := send(); err != nil || again {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, errors.New("connection reset by peer"))
}

func (b *lostAnswerBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	return b.report(l.Job.GetId(), func() error { return b.WorkerBackend.Complete(ctx, l, result) })
}

func (b *lostAnswerBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	return b.report(l.Job.GetId(), func() error { return b.WorkerBackend.Fail(ctx, l, jerr, retryable) })
}

// An outcome whose report's answer was lost, sent again, is answered as
// made: the worker says the job succeeded or failed, not that its lease
// was lost, and the job ended as it reported, once.
func TestAnOutcomeSentAgainAfterItsAnswerWasLostIsAnsweredAsMade(t *testing.T) {
	var lossy *lostAnswerBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		lossy = &lostAnswerBackend{WorkerBackend: b}
		return lossy
	}
	var logs lockedBuffer
	forEachBackend(t, client.WorkerConfig{Backoff: client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, wrap, func(w *client.Worker) {
		w.Handle("ok", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) { return "done", nil })
		w.Handle("bad", func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return nil, errors.New("no such file")
		})
	}, func(t *testing.T, env *workerEnv) {
		// Counted before the jobs are submitted: a worker in process may
		// have run them before the next line.
		before := strings.Count(logs.String(), "job succeeded")
		ok := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "ok"})
		bad := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bad"})
		for id, want := range map[string]jobwatchv1.JobState{ok: jobwatchv1.JobState_JOB_STATE_SUCCEEDED, bad: jobwatchv1.JobState_JOB_STATE_FAILED} {
			j, err := env.c.WaitForJob(context.Background(), id)
			if err != nil || j.GetState() != want || len(j.GetAttempts()) != 1 {
				t.Fatalf("job %s = %v with %d attempts, %v; want %v, once", id, j.GetState(), len(j.GetAttempts()), err, want)
			}
		}
		eventually(t, "both outcomes logged", func() bool {
			return strings.Count(logs.String(), "job succeeded") > before && strings.Contains(logs.String(), "no such file")
		})
		for _, id := range []string{ok, bad} {
			if _, lost := lossy.lost.Load(id); !lost {
				t.Fatalf("the answer to %s's report was not lost", id)
			}
		}
		if strings.Contains(logs.String(), "lease lost") || strings.Contains(logs.String(), "outcome refused") {
			t.Fatalf("an outcome sent again was refused:\n%s", logs.String())
		}
	})
}

// outageBackend refuses every heartbeat, as a server that is down does,
// until its outage is over.
type outageBackend struct {
	client.WorkerBackend
	over atomic.Int64 // UnixNano when the outage ends; 0: not begun

	mu      sync.Mutex
	refused []time.Time // when each heartbeat was refused
}

func (b *outageBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	if err := b.down(); err != nil {
		return false, err
	}
	return b.WorkerBackend.Heartbeat(ctx, l, percent, step)
}

func (b *outageBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	if err := b.down(); err != nil {
		return err
	}
	return b.WorkerBackend.Complete(ctx, l, result)
}

// down is the refusal of a call made during the outage, which it
// counts; nil once the outage is over. Before it begins a call goes
// through.
func (b *outageBackend) down() error {
	if end := b.over.Load(); end == 0 || time.Now().UnixNano() >= end {
		return nil
	}
	b.mu.Lock()
	b.refused = append(b.refused, time.Now())
	b.mu.Unlock()
	return connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
}

// longestGap is the longest time between two calls refused.
func (b *outageBackend) longestGap() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(b.refused); i++ {
		gap = max(gap, b.refused[i].Sub(b.refused[i-1]))
	}
	return gap
}

// A job's worker keeps its lease through an outage of its server that
// takes most of the lease: its heartbeats are tried again at most a
// tenth of the lease apart, so that one reaches the server once it is
// back, before the lease ends. An outside probe's worker lost a job to a
// 15 s outage under 30 s leases (heartbeats every 10 s): its retries had
// backed off to up to 10 s apart, and the next came after the lease.
func TestWorkerKeepsItsLeaseThroughAnOutageOfMostOfIt(t *testing.T) {
	const lease = 6 * time.Second
	var outage *outageBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		outage = &outageBackend{WorkerBackend: b}
		return outage
	}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	causes := make(chan error, 1)
	cfg := client.WorkerConfig{HeartbeatInterval: lease / 3}
	forEachBackend(t, cfg, wrap, func(w *client.Worker) {
		w.Handle("long", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			started <- struct{}{}
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		})
	}, func(t *testing.T, env *workerEnv) {
		if err := env.s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
			jobtype.DefaultQueue: {LeaseTimeout: lease},
		}}); err != nil {
			t.Fatal(err)
		}
		release = make(chan struct{})
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "long"})
		<-started
		// Down from now until 4.5 s into the lease: the first beat, at
		// 2 s, and its retries fail; 1.5 s of the lease are left for one
		// to get through.
		claimed := time.Now()
		outage.over.Store(claimed.Add(lease * 3 / 4).UnixNano())
		select {
		case cause := <-causes:
			t.Fatalf("the handler was stopped (%v): the lease was lost to an outage shorter than it", cause)
		case <-time.After(lease + lease/2):
		}
		close(release)
		if got := env.wait(t, id); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job = %s, want SUCCEEDED: its worker kept the lease", got.GetState())
		}
		// A generous bound over the tenth of the lease, for a busy
		// machine's timers; retries backed off to the heartbeat
		// interval (2 s) go past it.
		if gap := outage.longestGap(); gap > lease/10+500*time.Millisecond {
			t.Errorf("heartbeats refused up to %v apart during the outage, want at most a tenth of the %v lease (and a margin)", gap, lease)
		}
	})
}

// A job whose handler ends during an outage of its server keeps its
// outcome: the Complete is tried again at most a tenth of the lease
// apart, and reaches the server once it is back, before the lease ends.
// An outside probe's jobs of one attempt ran twice: their outcomes,
// backed off to 10 s apart, missed a server back for 6 s before the
// lease ran out, and the server handed the jobs out again.
func TestWorkerReportsAnOutcomeThatMetAnOutageOnceTheServerIsBack(t *testing.T) {
	const lease = 6 * time.Second
	var outage *outageBackend
	wrap := func(b client.WorkerBackend) client.WorkerBackend {
		outage = &outageBackend{WorkerBackend: b}
		return outage
	}
	var runs atomic.Int32
	ran := make(chan struct{}, 1)
	forEachBackend(t, client.WorkerConfig{HeartbeatInterval: lease / 3}, wrap, func(w *client.Worker) {
		w.Handle("quick", func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
			runs.Add(1)
			ran <- struct{}{}
			return "done", nil
		})
	}, func(t *testing.T, env *workerEnv) {
		if err := env.s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
			jobtype.DefaultQueue: {LeaseTimeout: lease},
		}}); err != nil {
			t.Fatal(err)
		}
		runs.Store(0)
		// Down from before the claim until 4.5 s into the lease: the
		// handler's outcome meets the outage, and 1.5 s of the lease
		// are left for a try to get through.
		outage.over.Store(time.Now().Add(lease * 3 / 4).UnixNano())
		id := env.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "quick"})
		<-ran
		got := env.wait(t, id)
		if got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || got.GetAttempt() != 1 || runs.Load() != 1 {
			t.Fatalf("job = %s at attempt %d after %d runs, want SUCCEEDED by its one run", got.GetState(), got.GetAttempt(), runs.Load())
		}
		if gap := outage.longestGap(); gap > lease/10+500*time.Millisecond {
			t.Errorf("outcomes refused up to %v apart during the outage, want at most a tenth of the %v lease (and a margin)", gap, lease)
		}
		outage.over.Store(0)
	})
}
