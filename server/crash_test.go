package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// The crash test runs this test binary again as a server process that it
// can kill -9; the variable holds the SQLite file the child serves.
const crashChildEnv = "JOBWATCH_SERVER_CRASH_CHILD"

// TestCrashChildServesUntilKilled is not a test on its own: it is the
// server process of TestEveryAcknowledgedCallSurvivesKillingTheServer. It
// serves the file named by crashChildEnv as `jobwatch serve` would, prints
// "listening <addr>" once it accepts connections, and exits when its
// stdin closes, so it never outlives a parent that died.
func TestCrashChildServesUntilKilled(t *testing.T) {
	path := os.Getenv(crashChildEnv)
	if path == "" {
		t.Skip("runs only as the child of TestEveryAcknowledgedCallSurvivesKillingTheServer")
	}
	fail := func(what string, err error) {
		fmt.Printf("error %s: %v\n", what, err)
		os.Exit(1)
	}
	st, err := sqlite.Open(path)
	if err != nil {
		fail("open store", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	metrics := server.NewMetrics()
	engine := jobs.New(st, jobs.Config{Logger: log, Metrics: metrics})
	srv := server.New(engine, server.Config{
		Logger: log, Metrics: metrics, Registry: prometheus.NewRegistry(),
		// Idle workers come back often, so some claim is always in flight.
		ClaimCap: 100 * time.Millisecond,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen", err)
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	ctx := context.Background()
	go func() { _ = engine.Run(ctx) }()
	fmt.Printf("listening %s\n", ln.Addr())
	fail("serve", srv.Serve(ctx, ln))
}

// crashChild is one server process over a SQLite file.
type crashChild struct {
	cmd   *exec.Cmd
	stdin io.Closer
	url   string
	done  chan struct{} // closed once the process has been waited for
}

func startCrashChild(t *testing.T, path string) *crashChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChildServesUntilKilled$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &crashChild{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if a, ok := strings.CutPrefix(lines.Text(), "listening "); ok {
				addr <- a
				continue
			}
			t.Logf("server process: %s", lines.Text())
		}
		close(addr)
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatal("the server process ended before it listened")
		}
		c.url = "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("the server process did not listen within 30s")
	}
	return c
}

// kill sends SIGKILL: nothing in the child runs after it, no deferred
// call, no Close, no graceful shutdown. It returns once the process is
// gone.
func (c *crashChild) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
	c.stdin.Close()
}

// clients returns the generated Connect clients over h2c on a transport
// of their own, as a Go client would use them.
func (c *crashChild) clients(t *testing.T) clients {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return clients{
		jobs:    jobwatchv1connect.NewJobServiceClient(hc, c.url),
		workers: jobwatchv1connect.NewWorkerServiceClient(hc, c.url),
		queues:  jobwatchv1connect.NewQueueServiceClient(hc, c.url),
	}
}

// acks remembers the newest acknowledged snapshot of every job: what the
// server promised the caller, which a crash must not take back.
type acks struct {
	mu        sync.Mutex
	jobs      map[string]*jobwatchv1.Job
	completed int
	changed   chan struct{} // gets a value after each record, if none waits
}

func newAcks() *acks {
	return &acks{jobs: map[string]*jobwatchv1.Job{}, changed: make(chan struct{}, 1)}
}

func (a *acks) record(j *jobwatchv1.Job) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Answers for one job can arrive out of order (the submitter may
	// record after the worker that claimed the job), so keep the newest.
	if old := a.jobs[j.GetId()]; old == nil || old.GetVersion() < j.GetVersion() {
		a.jobs[j.GetId()] = j
	}
	if j.GetState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		a.completed++
	}
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

func (a *acks) completions() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.completed
}

func (a *acks) snapshot() map[string]*jobwatchv1.Job {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]*jobwatchv1.Job, len(a.jobs))
	for id, j := range a.jobs {
		out[id] = j
	}
	return out
}

func TestEveryAcknowledgedCallSurvivesKillingTheServer(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("this is the child")
	}
	path := filepath.Join(t.TempDir(), "jobwatch.db")
	first := startCrashChild(t, path)
	c := first.clients(t)

	// Enough callers at once that the store's writer gathers their writes
	// into shared commits (group commit): what a batch acknowledged must
	// survive as a lone write's does.
	const (
		submitters            = 6
		workers               = 6
		completionsBeforeKill = 40
	)
	acked := newAcks()
	var inFlight atomic.Int64
	// call counts the calls in flight, so the kill can be timed to land
	// while some are.
	call := func(f func() error) error {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		return f()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for i := range submitters {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				var resp *jobwatchv1.SubmitJobResponse
				err := call(func() (err error) {
					resp, err = c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{
						Kind: "crash", Payload: mustValue(t, fmt.Sprintf("submitter %d job %d", i, n)),
					})
					return err
				})
				if err != nil {
					return // the server is gone
				}
				acked.record(resp.GetJob())
			}
		})
	}
	for i := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				var lease *jobwatchv1.ClaimJobResponse
				err := call(func() (err error) {
					lease, err = c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{
						WorkerId: fmt.Sprintf("worker-%d", i), Kinds: []string{"crash"},
					})
					return err
				})
				if err != nil {
					return
				}
				if lease.GetJob() == nil {
					continue
				}
				acked.record(lease.GetJob())
				var done *jobwatchv1.CompleteJobResponse
				err = call(func() (err error) {
					done, err = c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{
						JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(),
						Result: mustValue(t, "done by "+lease.GetJob().GetId()),
					})
					return err
				})
				if err != nil {
					return
				}
				acked.record(done.GetJob())
			}
		})
	}

	deadline := time.After(20 * time.Second)
	for acked.completions() < completionsBeforeKill {
		select {
		case <-acked.changed:
		case <-deadline:
			t.Fatalf("only %d completions acknowledged within 20s", acked.completions())
		}
	}
	for inFlight.Load() == 0 {
		// The loops above leave this window only between two calls.
		time.Sleep(10 * time.Microsecond)
	}
	pending := inFlight.Load()
	first.kill()
	wg.Wait() // every call in flight at the kill has failed by now
	stop()
	before := acked.snapshot()
	t.Logf("killed the server with about %d calls in flight, after %d acknowledged jobs, %d of them completed",
		pending, len(before), acked.completions())

	second := startCrashChild(t, path)
	c = second.clients(t)
	var succeeded string
	for id, want := range before {
		resp, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id})
		if err != nil {
			t.Errorf("acknowledged job %s (%s, version %d): %v", id, want.GetState(), want.GetVersion(), err)
			continue
		}
		got := resp.GetJob()
		if got.GetVersion() < want.GetVersion() {
			t.Errorf("job %s: version %d after the crash, below the acknowledged %d", id, got.GetVersion(), want.GetVersion())
		}
		if !proto.Equal(got.GetPayload(), want.GetPayload()) {
			t.Errorf("job %s: payload %v, want %v", id, got.GetPayload(), want.GetPayload())
		}
		switch want.GetState() {
		case jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
			succeeded = id
			if got.GetState() != want.GetState() || got.GetVersion() != want.GetVersion() || !proto.Equal(got.GetResult(), want.GetResult()) {
				t.Errorf("job %s: %s version %d result %v after the crash, want the acknowledged %s version %d result %v",
					id, got.GetState(), got.GetVersion(), got.GetResult(), want.GetState(), want.GetVersion(), want.GetResult())
			}
		case jobwatchv1.JobState_JOB_STATE_RUNNING:
			// Its completion may have committed without an answer.
			if s := got.GetState(); s != jobwatchv1.JobState_JOB_STATE_RUNNING && s != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Errorf("job %s: %s after the crash, want it still running (or completed)", id, s)
			}
		}
	}

	if succeeded == "" {
		t.Fatal("no acknowledged completion survived to wait on")
	}

	// The new server keeps serving: a new job is accepted, and a wait on
	// a job that ended before the crash answers at once.
	fresh, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "after.crash"})
	if err != nil {
		t.Fatalf("submit after the crash: %v", err)
	}
	if before[fresh.GetJob().GetId()] != nil || fresh.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Errorf("submit after the crash = %v, want a new queued job", fresh.GetJob())
	}
	start := time.Now()
	// The wait cap is the default 60s and this deadline 10s, so a parked
	// call would take almost 10s.
	waited, err := c.jobs.WaitJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WaitJobRequest{JobId: succeeded})
	if err != nil {
		t.Fatalf("wait for %s after the crash: %v", succeeded, err)
	}
	if took := time.Since(start); waited.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || took > 5*time.Second {
		t.Errorf("wait for the completed %s = %s after %v, want SUCCEEDED at once", succeeded, waited.GetJob().GetState(), took)
	}
}
