package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// TestMain lets the test binary be the jobwatch binary: with
// JOBWATCH_TEST_RUN_MAIN set it runs main instead of the tests, so the
// CLI tests drive real processes (exit codes, stdin/stdout, signals)
// without a separate go build. pgtest.Main stops the throwaway
// PostgreSQL cluster the replica and bench tests may have started.
func TestMain(m *testing.M) {
	if command := os.Getenv("JOBWATCH_TEST_GUARD_PARENT"); command != "" && (len(os.Args) < 2 || os.Args[1] != guardArg) {
		os.Exit(guardParent(command))
	}
	if os.Getenv("JOBWATCH_TEST_RUN_MAIN") == "1" || len(os.Args) > 1 && os.Args[1] == guardArg {
		main()
		return
	}
	os.Exit(pgtest.Main(m))
}

// runInProcess runs the command as main would, in this process: for the
// commands whose outcome does not depend on being a process of their own.
func runInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// jobwatchCmd is a jobwatch process with args.
func jobwatchCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "JOBWATCH_TEST_RUN_MAIN=1", "JOBWATCH_SERVER=", "JOBWATCH_TOKEN=")
	return cmd
}

// runJobwatch runs jobwatch to its end and returns its exit status and
// output.
func runJobwatch(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := jobwatchCmd(ctx, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run jobwatch %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// cliServer is a real server over a real SQLite file, in the test process;
// the commands under test are separate processes talking to it.
type cliServer struct {
	URL      string
	DB       string // the SQLite file
	Engine   *jobs.Engine
	Client   *client.Client
	registry *prometheus.Registry
}

func startCLIServer(t *testing.T, leaseTimeout time.Duration) *cliServer {
	t.Helper()
	db := filepath.Join(t.TempDir(), "jobwatch.db")
	st, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	return serveForCLI(t, db, st, jobs.Config{
		LeaseTimeout: leaseTimeout, SweepInterval: 20 * time.Millisecond,
		RetryInitialBackoff: 10 * time.Millisecond, RetryMaxBackoff: 10 * time.Millisecond,
	}, server.Config{})
}

// serveForCLI runs an engine over st (the database db names) with ecfg
// and a server on a loopback port with scfg (its logger, registry and
// grace set here), until the test ends.
func serveForCLI(t *testing.T, db string, st store.Store, ecfg jobs.Config, scfg server.Config) *cliServer {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	ecfg.Logger = log
	engine := jobs.New(st, ecfg)
	reg := prometheus.NewRegistry()
	scfg.Logger, scfg.ShutdownGrace, scfg.Registry = log, 100*time.Millisecond, reg
	srv := server.New(engine, scfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { _ = engine.Run(ctx) })
	bg.Go(func() { _ = srv.Serve(ctx, ln) })
	s := &cliServer{URL: "http://" + ln.Addr().String(), DB: db, Engine: engine, registry: reg}
	s.Client = client.New(s.URL)
	t.Cleanup(func() {
		s.Client.Close()
		cancel()
		bg.Wait()
		st.Close()
	})
	return s
}

// parkedWaits reads the server's jobwatch_parked_waits gauge: the
// WaitJob calls parked on a job that has not ended.
func (s *cliServer) parkedWaits() float64 {
	mfs, _ := s.registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "jobwatch_parked_waits" && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func (s *cliServer) submit(t *testing.T, req *jobwatchv1.SubmitJobRequest) string {
	t.Helper()
	j, err := s.Client.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return j.GetId()
}

func (s *cliServer) claim(t *testing.T, kind string) jobtype.Job {
	t.Helper()
	j, err := s.Engine.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "test", Kinds: []string{kind}},
		time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatalf("claim %s: %v", kind, err)
	}
	return j
}

func TestWaitExitStatusSaysHowTheJobEnded(t *testing.T) {
	s := startCLIServer(t, 100*time.Millisecond)
	ctx := context.Background()
	tests := []struct {
		name     string
		job      func(t *testing.T) string
		wantCode int
		wantOut  string
	}{
		{"a job that succeeds exits 0", func(t *testing.T) string {
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "ok"})
			j := s.claim(t, "ok")
			if _, err := s.Engine.Complete(ctx, j.ID, j.LeaseID, []byte(`{"rows":3}`)); err != nil {
				t.Fatal(err)
			}
			return id
		}, 0, `SUCCEEDED 100% result={"rows":3}`},
		{"a job that fails exits 3", func(t *testing.T) string {
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "bad"})
			j := s.claim(t, "bad")
			if _, err := s.Engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "QuotaError"}, false); err != nil {
				t.Fatal(err)
			}
			return id
		}, 3, "FAILED 0% error=QuotaError"},
		{"a cancelled job exits 4", func(t *testing.T) string {
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "dropped"})
			if _, err := s.Engine.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
			return id
		}, 4, "CANCELLED"},
		{"a job whose worker went silent exits 5 once it is lost", func(t *testing.T) string {
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "silent"})
			s.claim(t, "silent") // and never a heartbeat: LOST after 100ms
			return id
		}, 5, "LOST"},
		{"an unknown job exits 1", func(t *testing.T) string {
			return "j_00000000000000000000000000"
		}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := tt.job(t)
			code, out, errOut := runJobwatch(t, "wait", id, "--server", s.URL)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Fatalf("jobwatch wait = exit %d, stdout %q (stderr %q); want exit %d with %q",
					code, out, errOut, tt.wantCode, tt.wantOut)
			}
		})
	}

	t.Run("a job that ends while the command waits exits with its outcome", func(t *testing.T) {
		id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "later"})
		go func() {
			// Ended once the command's WaitJob is parked on it.
			for deadline := time.Now().Add(20 * time.Second); s.parkedWaits() < 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the command's wait did not park within 20s")
					break
				}
			}
			j, err := s.Engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"later"}}, time.Now().Add(5*time.Second))
			if err == nil {
				_, _ = s.Engine.Complete(ctx, j.ID, j.LeaseID, nil)
			}
		}()
		code, out, _ := runJobwatch(t, "wait", "--server", s.URL, id, "--json")
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got["state"] != "JOB_STATE_SUCCEEDED" {
			t.Fatalf("jobwatch wait --json = exit %d, %q (%v); want 0 and a SUCCEEDED job as JSON", code, out, err)
		}
	})
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"wait"},
		{"wait", "a", "--batch", "b"},
		{"submit", "k", "--payload", "{not json"},
		{"submit", "k", "--timeout", "1s"},
		{"watch", "id", "--progress", "rainbow"},
		{"worker", "--kind", "k"},
		{"get", "id", "--server", "ftp://x"},
		{"frobnicate"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, _, errOut := runInProcess(t, args...)
			if code != 2 || errOut == "" {
				t.Fatalf("exit %d, stderr %q; want 2 and a message", code, errOut)
			}
		})
	}
	// The slips a newcomer makes say what to do about them.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "j_1", "j_2"}, `it takes one job's ID, and ["j_2"] are more: run it once for each job`},
		{[]string{"cancel", "j_1", "j_2", "j_3"}, `["j_2" "j_3"] are more: run it once for each job, or select the jobs with filter flags`},
		{[]string{"submit", "resize", "cat", "photo.png"}, `["cat" "photo.png"] is more than it takes (quote a value with spaces)`},
		{[]string{"submit", "resize", "--payload", "cat.png"}, `a string is JSON in double quotes: --payload '"cat.png"'`},
		{[]string{"worker", "--kind", "resize"}, "worker needs --exec COMMAND"},
		{[]string{"worker", "--exec", "true"}, "worker needs --kind KIND"},
	} {
		if code, _, errOut := runInProcess(t, tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("jobwatch %q = exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// A server address that is not a URL is refused naming where it came
// from: the flag, or the environment when the flag was not given.
func TestABadServerAddressNamesWhereItCameFrom(t *testing.T) {
	t.Setenv("JOBWATCH_SERVER", "htp://127.0.0.1:1")
	if code, _, errOut := runInProcess(t, "get", "j_x"); code != 2 || !strings.HasPrefix(errOut, "jobwatch: JOBWATCH_SERVER: ") {
		t.Errorf("JOBWATCH_SERVER=htp://…: exit %d, %q; want 2 and the variable named", code, errOut)
	}
	if code, _, errOut := runInProcess(t, "get", "j_x", "--server", "ftp://x"); code != 2 || !strings.HasPrefix(errOut, "jobwatch: --server: ") {
		t.Errorf("--server ftp://x: exit %d, %q; want 2 and the flag named", code, errOut)
	}
}

func TestSubmitGetListCancelAndStart(t *testing.T) {
	s := startCLIServer(t, time.Second)
	code, out, errOut := runInProcess(t, "submit", "report", "--server", s.URL, "--payload", `{"month":"2026-11"}`, "--hold")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "j_") {
		t.Fatalf("submit = exit %d, %q (%q); want 0 and the job id", code, out, errOut)
	}
	if code, out, _ := runInProcess(t, "get", id, "--server", s.URL); code != 0 ||
		!strings.Contains(out, "PENDING") || !strings.Contains(out, `"month":"2026-11"`) ||
		!regexp.MustCompile(`(?m)^created: +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z+-]\w*$`).MatchString(out) {
		t.Fatalf("get = exit %d, %q; want the held job with its payload, created at a time with its zone", code, out)
	}
	if code, out, _ := runInProcess(t, "start", id, "--server", s.URL); code != 0 || !strings.Contains(out, "QUEUED") {
		t.Fatalf("start = exit %d, %q; want QUEUED", code, out)
	}
	if code, out, _ := runInProcess(t, "list", "--server", s.URL, "--state", "queued"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("list --state queued = exit %d, %q; want the job listed", code, out)
	}
	if code, out, _ := runInProcess(t, "cancel", id, "--server", s.URL, "--json"); code != 0 || !strings.Contains(out, "JOB_STATE_CANCELLED") {
		t.Fatalf("cancel --json = exit %d, %q; want the CANCELLED job", code, out)
	}
	if code, out, _ := runInProcess(t, "list", "--server", s.URL, "--state", "queued"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("list --state queued after cancel = exit %d, %q; want the job gone", code, out)
	}
}

// With several servers, a command says on stderr when it moves to the
// next, and why.
func TestACommandSaysWhichServerItMovesTo(t *testing.T) {
	s := startCLIServer(t, time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String() // nothing listens there once closed
	ln.Close()
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "moved"})
	code, out, errOut := runInProcess(t, "get", id, "--server", down+","+s.URL)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("get with the first server down = exit %d, %q (%q); want the job from the second", code, out, errOut)
	}
	if want := "calls go to " + s.URL + " now"; !strings.Contains(errOut, down+": ") || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, want) {
		t.Errorf("stderr = %q; want it to name %s, why, and %q", errOut, down, want)
	}
}

// submit --wait --timeout gives up waiting, not the job, and names the
// job so that the caller can wait for it again.
func TestSubmitWaitTimeoutNamesTheJobItStoppedWaitingFor(t *testing.T) {
	s := startCLIServer(t, time.Second)
	code, out, errOut := runInProcess(t, "submit", "nobody.runs.this", "--server", s.URL, "--wait", "--timeout", "200ms")
	id, _, _ := strings.Cut(strings.TrimPrefix(errOut, "jobwatch: wait for "), ":")
	if code != exitTimedOut || out != "" || !strings.HasPrefix(id, "j_") || !strings.Contains(errOut, "--timeout passed before the job ended") ||
		strings.Contains(errOut, "retrying") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 124, naming the job and the timeout", code, out, errOut)
	}
	if j, err := s.Client.Get(t.Context(), id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the job after the wait gave up: %v, %v; want it still QUEUED", j.GetState(), err)
	}
}

// A wait for a job that stays QUEUED, never taken, says once that
// perhaps no worker runs its kind, and where to see what holds it, and
// goes on waiting; a job a worker took is not hinted about.
func TestAWaitForAJobNoWorkerTakesAsksOnceWhetherOneRunsItsKind(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	saved := queuedHintAfter
	queuedHintAfter = 50 * time.Millisecond
	t.Cleanup(func() { queuedHintAfter = saved })

	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "nobody.runs.this", Queue: "nightly"})
	code, _, errOut := runInProcess(t, "wait", id, "--server", s.URL, "--timeout", "1s")
	want := "jobwatch: " + id + " is still QUEUED after 50ms (kind nobody.runs.this, queue nightly): does a worker run kind nobody.runs.this? " +
		"\"jobwatch get " + id + "\" shows what holds a queued job; still waiting\n"
	if code != exitTimedOut || strings.Count(errOut, want) != 1 {
		t.Fatalf("wait of a job no worker takes: exit %d, stderr %q; want 124 and the hint once: %q", code, errOut, want)
	}

	code, _, errOut = runInProcess(t, "submit", "nobody.runs.this", "--server", s.URL, "--wait", "--timeout", "1s")
	if code != exitTimedOut || strings.Count(errOut, "is still QUEUED after 50ms (kind nobody.runs.this, queue default): does a worker run kind nobody.runs.this?") != 1 {
		t.Fatalf("submit --wait of a kind no worker runs: exit %d, stderr %q; want 124 and the hint once", code, errOut)
	}

	taken := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "taken.slowly"})
	s.claim(t, "taken.slowly")
	code, _, errOut = runInProcess(t, "wait", taken, "--server", s.URL, "--timeout", "500ms")
	if code != exitTimedOut || strings.Contains(errOut, "still QUEUED") {
		t.Fatalf("wait of a running job: exit %d, stderr %q; want 124 without the hint", code, errOut)
	}

	// Several jobs, and a batch: one line for those no worker took, of
	// the first looked at, with their kinds.
	other := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "nor.this", Queue: "nightly"})
	code, _, errOut = runInProcess(t, "wait", id, taken, other, "--server", s.URL, "--timeout", "1s")
	want = "jobwatch: 2 of the 3 jobs looked at are still QUEUED after 50ms, never started (kinds nobody.runs.this, nor.this; queues nightly): " +
		"does a worker run those kinds? \"jobwatch get " + id + "\" shows what holds a queued job; still waiting\n"
	if code != exitTimedOut || strings.Count(errOut, want) != 1 {
		t.Fatalf("wait of three jobs, two no worker takes: exit %d, stderr %q; want 124 and the hint once: %q", code, errOut, want)
	}
	for range 2 {
		code, _, errOut = runInProcess(t, "submit", "nobody.runs.this", "--batch", "nightly-run", "--server", s.URL)
		if code != 0 {
			t.Fatalf("submit --batch: exit %d, %s", code, errOut)
		}
	}
	code, _, errOut = runInProcess(t, "wait", "--batch", "nightly-run", "--server", s.URL, "--timeout", "1s")
	if code != exitTimedOut || strings.Count(errOut, "2 of the 2 jobs looked at are still QUEUED after 50ms, never started (kinds nobody.runs.this; queues default)") != 1 {
		t.Fatalf("wait of a batch no worker takes: exit %d, stderr %q; want 124 and the hint once", code, errOut)
	}

	// A batch whose kind a worker runs, busy with one of its jobs: the
	// others wait their turn, and no hint asks whether a worker runs it.
	for range 3 {
		if code, _, errOut := runInProcess(t, "submit", "busy.kind", "--batch", "busy-run", "--server", s.URL); code != 0 {
			t.Fatalf("submit --batch: exit %d, %s", code, errOut)
		}
	}
	s.claim(t, "busy.kind")
	code, _, errOut = runInProcess(t, "wait", "--batch", "busy-run", "--server", s.URL, "--timeout", "1s")
	if code != exitTimedOut || strings.Contains(errOut, "still QUEUED") {
		t.Fatalf("wait of a batch a worker is busy with: exit %d, stderr %q; want 124 without the hint", code, errOut)
	}

	// Jobs behind another job of their kind, which a worker runs: no
	// hint either, for a batch or for one job.
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "behind.kind"})
	s.claim(t, "behind.kind")
	for range 2 {
		if code, _, errOut := runInProcess(t, "submit", "behind.kind", "--batch", "behind-run", "--server", s.URL); code != 0 {
			t.Fatalf("submit --batch: exit %d, %s", code, errOut)
		}
	}
	behind := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "behind.kind"})
	for _, args := range [][]string{{"--batch", "behind-run"}, {behind}} {
		code, _, errOut = runInProcess(t, append([]string{"wait", "--server", s.URL, "--timeout", "1s"}, args...)...)
		if code != exitTimedOut || strings.Contains(errOut, "still QUEUED") {
			t.Fatalf("wait %v behind a running job of the kind: exit %d, stderr %q; want 124 without the hint", args, code, errOut)
		}
	}
}

// watch --timeout on a job that does not end exits 124, never 0: the exit
// code of a watch says SUCCEEDED only for a job that succeeded, however
// the stream and the timeout race. A held job's watch says why nothing
// moves.
func TestWatchTimeoutOfAJobThatDoesNotEndIsNotSuccess(t *testing.T) {
	s := startCLIServer(t, time.Second)
	for _, held := range []bool{false, true} {
		args := []string{"submit", "nobody.runs.this", "--server", s.URL}
		if held {
			args = append(args, "--hold")
		}
		_, out, _ := runInProcess(t, args...)
		id := strings.TrimSpace(out)
		for range 5 {
			code, out, errOut := runInProcess(t, "watch", id, "--server", s.URL, "--timeout", "150ms")
			if code != exitTimedOut || !strings.Contains(errOut, "--timeout passed before the job ended") {
				t.Fatalf("watch --timeout of a job that does not end (held %v) = exit %d, stdout %q, stderr %q; want 124 and the timeout",
					held, code, out, errOut)
			}
			if held != strings.Contains(errOut, "jobwatch start "+id) {
				t.Errorf("held %v: stderr %q; want the hint to start it only for a held job", held, errOut)
			}
		}
		code, out, errOut := runInProcess(t, "logs", "-f", id, "--server", s.URL, "--timeout", "150ms")
		if code != exitTimedOut || !strings.Contains(errOut, "--timeout passed before the job ended") {
			t.Fatalf("logs -f --timeout of a job that does not end (held %v) = exit %d, stdout %q, stderr %q; want 124 and the timeout",
				held, code, out, errOut)
		}
	}
}

func TestListShowsTheStepOfARetryAndTheErrorOfAnEndedJob(t *testing.T) {
	s := startCLIServer(t, time.Second)
	ctx := context.Background()
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "sync", MaxAttempts: 2})
	// The first attempt fails, retryably; the second is running fine.
	for attempt := 1; attempt <= 2; attempt++ {
		j, err := s.Engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"sync"}}, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatalf("claim attempt %d: %v", attempt, err)
		}
		if attempt == 1 {
			if _, err := s.Engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "TimeoutError"}, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.Engine.Heartbeat(ctx, j.ID, j.LeaseID, 40, "batch 4 of 10"); err != nil {
			t.Fatal(err)
		}
	}
	code, out, _ := runInProcess(t, "list", "--server", s.URL)
	if code != 0 || !strings.Contains(out, "batch 4 of 10") || strings.Contains(out, "TimeoutError") {
		t.Fatalf("list = exit %d:\n%s\nwant the running retry's step, not the last attempt's error", code, out)
	}
	if _, err := s.Client.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	failed := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report"})
	j, err := s.Engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"report"}}, time.Now().Add(5*time.Second))
	if err != nil || j.ID != failed {
		t.Fatalf("claim = %v, %v", j.ID, err)
	}
	if _, err := s.Engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "QuotaError", Message: "over quota"}, false); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runInProcess(t, "list", "--server", s.URL, "--state", "failed"); code != 0 || !strings.Contains(out, "QuotaError over quota") {
		t.Fatalf("list --state failed = exit %d:\n%s\nwant the failed job's error", code, out)
	}
}

func TestWatchShowsEverySnapshotUntilTheEnd(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	for _, mode := range []string{"lines", "bar"} {
		t.Run(mode, func(t *testing.T) {
			kind := "watched-" + mode
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: kind})
			j := s.claim(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := jobwatchCmd(ctx, "watch", id, "--server", s.URL, "--progress", mode)
			var out lockedBuffer
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The command is another process: its output is the only
			// sign of progress, so look at it until it shows want.
			expect := func(want string) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), want); {
					if time.Now().After(deadline) {
						t.Fatalf("output has no %q: %q", want, out.String())
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			expect("RUNNING")
			for i, step := range []string{"batch 5 of 11", "batch 11 of 11"} {
				if _, err := s.Engine.Heartbeat(ctx, j.ID, j.LeaseID, int32(45+i*55), step); err != nil {
					t.Fatal(err)
				}
				expect(step)
			}
			if _, err := s.Engine.Complete(ctx, j.ID, j.LeaseID, []byte(`{"rows":11}`)); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("watch exited with %v, want 0; output %q", err, out.String())
			}
			text := out.String()
			for _, want := range []string{"45%", "batch 5 of 11", "100%", "SUCCEEDED", `{"rows":11}`} {
				if !strings.Contains(text, want) {
					t.Fatalf("output lacks %q:\n%s", want, text)
				}
			}
			if mode == "bar" && (!strings.Contains(text, "\r\x1b[K[#############") || !strings.Contains(text, "0:0")) {
				t.Fatalf("bar output lacks a redrawn bar with elapsed time: %q", text)
			}
			if mode == "lines" && strings.Count(text, "\n") < 4 {
				t.Fatalf("lines output has fewer lines than snapshots:\n%s", text)
			}
		})
	}
}

// workerScript speaks the worker --exec protocol; its payload's "mode"
// picks what it does.
const workerScript = `#!/bin/sh
payload=$(cat)
case "$payload" in
*'"ok"'*)
  echo "progress 45 batch 5 of 11"
  echo "a log line that is not protocol"
  echo "{\"attempt\": $JOBWATCH_ATTEMPT, \"input\": $payload}"
  ;;
*'"crash"'*)
  exit 3
  ;;
*'"typed"'*)
  echo "error QuotaExceeded account over its monthly limit"
  exit 1
  ;;
*'"busy"'*)
  if [ "$JOBWATCH_ATTEMPT" = 1 ]; then exit 75; fi
  echo '"second attempt"'
  ;;
*'"sleep"'*)
  echo "progress 10 sleeping"
  sleep 60
  ;;
esac
`

func TestWorkerExecRunsACommandPerJob(t *testing.T) {
	s := startCLIServer(t, 2*time.Second)
	script := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(script, []byte(workerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := jobwatchCmd(ctx, "worker", "--server", s.URL, "--kind", "shell", "--exec", "sh "+script,
		"--heartbeat", "100ms")
	var logs lockedBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	submit := func(mode string, maxAttempts int32) string {
		return s.submit(t, &jobwatchv1.SubmitJobRequest{
			Kind: "shell", MaxAttempts: maxAttempts,
			Payload: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"mode": structpb.NewStringValue(mode)}}),
		})
	}
	wait := func(id string) *jobwatchv1.Job {
		t.Helper()
		j, err := s.Client.WaitForJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	t.Run("progress lines, then the last JSON line as the result", func(t *testing.T) {
		j := wait(submit("ok", 0))
		res := j.GetResult().GetStructValue().GetFields()
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetStep() != "batch 5 of 11" ||
			res["attempt"].GetNumberValue() != 1 || res["input"].GetStructValue().GetFields()["mode"].GetStringValue() != "ok" {
			t.Fatalf("job %v step %q result %v; want SUCCEEDED, step from the progress line, the JSON line as result",
				j.GetState(), j.GetStep(), j.GetResult())
		}
	})
	t.Run("a non-zero exit fails the job with ExitError", func(t *testing.T) {
		j := wait(submit("crash", 0))
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "ExitError" ||
			j.GetError().GetMessage() != "exit status 3" {
			t.Fatalf("job %v error %v; want FAILED ExitError \"exit status 3\"", j.GetState(), j.GetError())
		}
	})
	t.Run("an error line names the failure", func(t *testing.T) {
		j := wait(submit("typed", 0))
		if j.GetError().GetType() != "QuotaExceeded" || j.GetError().GetMessage() != "account over its monthly limit" {
			t.Fatalf("error %v; want the script's QuotaExceeded and its message", j.GetError())
		}
	})
	t.Run("exit 75 asks for another attempt", func(t *testing.T) {
		j := wait(submit("busy", 2))
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempt() != 2 ||
			j.GetResult().GetStringValue() != "second attempt" {
			t.Fatalf("job %v attempt %d result %v; want SUCCEEDED on attempt 2", j.GetState(), j.GetAttempt(), j.GetResult())
		}
	})
	t.Run("cancelling a job stops its command", func(t *testing.T) {
		id := submit("sleep", 0)
		for j, err := range s.Client.Watch(ctx, id) {
			if err != nil {
				t.Fatal(err)
			}
			if j.GetStep() == "sleeping" {
				break
			}
		}
		if _, err := s.Client.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		// The worker runs one job at a time: the next job starts before
		// the 60s sleep would end only if the cancelled command was stopped.
		other := submit("sleep", 0)
		defer s.Client.Cancel(ctx, other)
		start := time.Now()
		for j, err := range s.Client.Watch(ctx, other) {
			if err != nil {
				t.Fatal(err)
			}
			if j.GetStep() == "sleeping" {
				break
			}
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("the next job started after %v: the cancelled command kept its slot", d)
		}
	})

	// SIGINT: the worker stops claiming, lets running commands end and
	// exits 0.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker exited with %v after SIGINT, want 0; logs:\n%s", err, logs.String())
	}
}

func TestDemoSuggestsACommandThatWorksAndStopsOnCtrlC(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := jobwatchCmd(ctx, "demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "demo.db"))
			var out, logs lockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var try string
			for deadline := time.Now().Add(20 * time.Second); try == ""; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("demo printed no command to try: %q", out.String())
				}
				for _, line := range strings.Split(out.String(), "\n") {
					if _, cmdline, ok := strings.Cut(line, "try: jobwatch "); ok {
						try, _, _ = strings.Cut(cmdline, "   ")
					}
				}
			}
			if code, stdout, stderr := runInProcess(t, strings.Fields(try)...); code != 0 || !strings.Contains(stdout, "enrich") {
				t.Fatalf("the suggested \"jobwatch %s\" = exit %d, %q (stderr %q); want 0 and the demo's jobs", try, code, stdout, stderr)
			}

			// Ctrl-C while the demo jobs run: a person expects it gone at once;
			// and so when the terminal it runs in closes (SIGHUP).
			stopped := time.Now()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("demo exited with %v after %v, want 0; logs:\n%s", err, sig, logs.String())
			}
			if d := time.Since(stopped); d > 5*time.Second {
				t.Fatalf("demo took %v to stop after %v", d, sig)
			}
		})
	}
}

func TestErrorMessagesReadOnce(t *testing.T) {
	s := startCLIServer(t, time.Second)
	twoJobs := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(twoJobs, []byte("{\"kind\":\"a\"}\n{\"kind\":\"b\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"get", "j_00000000000000000000000000", "--server", s.URL}, "jobwatch: get: not_found: j_00000000000000000000000000: job not found\n"},
		// A script running several commands is told which job was not found.
		{[]string{"cancel", "j_00000000000000000000000001", "--server", s.URL}, "jobwatch: cancel: not_found: j_00000000000000000000000001: job not found\n"},
		{[]string{"delete", "j_00000000000000000000000002", "--server", s.URL}, "jobwatch: delete: not_found: j_00000000000000000000000002: job not found\n"},
		{[]string{"watch", "j_00000000000000000000000003", "--server", s.URL}, "j_00000000000000000000000003"},
		{[]string{"wait", "j_00000000000000000000000004", "--server", s.URL}, "j_00000000000000000000000004"},
		{[]string{"logs", "j_00000000000000000000000005", "--server", s.URL}, "jobwatch: logs: not_found: j_00000000000000000000000005: job not found\n"},
		{[]string{"get", "j_1", "--server", strings.TrimPrefix(s.URL, "http://")}, "must start with http:// or https://"},
		{[]string{"submit", "k", "--server", "http://" + freeAddr(t)}, "connection refused\njobwatch: nothing answers at that address: is jobwatch serve (or demo) running there?"},
		// A refused connection submitted nothing, and says so.
		{[]string{"submit", "--file", twoJobs, "--server", "http://" + freeAddr(t)}, "jobwatch: submit: no job was submitted: unavailable: "},
	}
	for _, tt := range tests {
		code, _, errOut := runInProcess(t, tt.args...)
		if code == 0 || !strings.Contains(errOut, tt.want) {
			t.Errorf("jobwatch %v = exit %d, stderr %q; want %q", tt.args, code, errOut, tt.want)
		}
	}
}

// A wait whose --timeout passes while the server cannot be reached says
// what the last try met, and, as no call ever reached the server, that
// the server never answered: not that the job had not ended, which
// nothing saw.
func TestTimeoutWhileTheServerIsAwaySaysSo(t *testing.T) {
	url := "http://" + freeAddr(t) // nothing listens there
	for _, args := range [][]string{{"wait"}, {"watch"}, {"logs", "-f"}} {
		cmd := args[0]
		code, _, errOut := runInProcess(t, append(args, "j_00000000000000000000000000", "--timeout", "300ms", "--server", url)...)
		if code != exitError || !strings.Contains(errOut, "jobwatch: "+cmd+": --timeout passed before the server answered (the last try: unavailable: ") ||
			!strings.Contains(errOut, "connection refused") || strings.Contains(errOut, "before the job ended") {
			t.Errorf("jobwatch %s against no server = exit %d, stderr %q; want 1, the timeout and the refused connection", cmd, code, errOut)
		}
		// Its retries say once what to check, and the refused connection
		// once too: the retries in 300 ms say nothing new.
		if n := strings.Count(errOut, "nothing answers at that address"); n != 1 {
			t.Errorf("jobwatch %s against no server said %d times that nothing answers there, want once:\n%s", cmd, n, errOut)
		}
		if n := strings.Count(errOut, "; retrying in "); n != 1 {
			t.Errorf("jobwatch %s against no server said %d times that it retries, want once:\n%s", cmd, n, errOut)
		}
	}
}

// A retry line says a reason only once every retryRepeatEvery, then with
// how many tries went unsaid; a new reason at once, and two reasons
// that alternate (two servers down, tried in turn) each once.
func TestRetryLinesSayAReasonAgainOnlyNowAndThen(t *testing.T) {
	var out strings.Builder
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	r := &retryLines{w: &out, now: func() time.Time { return now }}
	for range 5 {
		r.say("unavailable: connection refused", "; retrying in 100ms")
		now = now.Add(time.Second)
	}
	r.say("unavailable: connection reset", "; retrying in 1s")
	r.say("unavailable: connection reset", "; retrying in 1s")
	now = now.Add(retryRepeatEvery)
	r.say("unavailable: connection reset", "; retrying in 2s")
	for range 4 {
		r.say("http://a: refused; calls go to http://b now", "")
		r.say("http://b: refused; calls go to http://a now", "")
	}
	want := "jobwatch: unavailable: connection refused; retrying in 100ms\n" +
		"jobwatch: unavailable: connection reset; retrying in 1s\n" +
		"jobwatch: unavailable: connection reset; retrying in 2s (2 more tries since the last line said so)\n" +
		"jobwatch: http://a: refused; calls go to http://b now\n" +
		"jobwatch: http://b: refused; calls go to http://a now\n"
	if out.String() != want {
		t.Fatalf("the retry lines are\n%s\nwant\n%s", out.String(), want)
	}
}

func TestExecHandlerKillsTheProcessGroupThatIgnoresSIGTERM(t *testing.T) {
	var stderr lockedBuffer
	// The shell and its child ignore SIGTERM (an ignored signal is
	// inherited); the child also holds stdout open.
	h := execHandler(`trap "" TERM; echo "progress 10 started"; sleep 30; echo late >&2`, commandEnv(os.Environ(), nil), textOutput(&stderr), 200*time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, &jobwatchv1.Job{Id: "j_1"}, func(int, string) { once.Do(func() { close(started) }) })
		done <- err
	}()
	<-started
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the command's process group outlived SIGTERM and the kill delay")
	}
}

func TestExecHandlerKeepsAnUnfinishedLastStderrLine(t *testing.T) {
	var stderr lockedBuffer
	h := execHandler(`printf 'first\nno newline at the end' >&2`, commandEnv(os.Environ(), nil), textOutput(&stderr), time.Second, nil)
	if _, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(int, string) {}); err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); got != "j_1: first\nj_1: no newline at the end\n" {
		t.Fatalf("stderr copied as %q, want both lines prefixed", got)
	}
}

func TestBarFitsOnOneTerminalLine(t *testing.T) {
	var out bytes.Buffer
	b := &bar{w: &out, width: 80, now: time.Now, job: &jobwatchv1.Job{
		State: jobwatchv1.JobState_JOB_STATE_RUNNING, Percent: 45, Step: "calling pricing API (try 1 of 3)",
	}}
	b.draw()
	line := strings.TrimPrefix(out.String(), "\r\x1b[K")
	// A line as wide as the terminal wraps, and \r then redraws only its
	// second half, leaving a stale copy above each time.
	if n := len([]rune(line)); n >= 80 || !strings.Contains(line, "45%") || !strings.Contains(line, "calling pricing") {
		t.Fatalf("bar line is %d columns on an 80-column terminal: %q", n, line)
	}
}

// A negative duration is refused, not read as "no limit" (a --timeout of
// -1s waited for ever), and a duration without a known unit says what
// one is.
func TestDurationFlagsRefuseNegativesAndSayWhatAUnitIs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "j_x", "--timeout", "-1s"}, "--timeout must not be negative, got -1s"},
		{[]string{"watch", "j_x", "--timeout", "-10m"}, "--timeout must not be negative"},
		{[]string{"submit", "k", "--wait", "--timeout", "-5s"}, "--timeout must not be negative"},
		{[]string{"logs", "-f", "j_x", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"worker", "--kind", "k", "--exec", "true", "--drain-timeout", "-1s"}, "--drain-timeout must not be negative"},
		{[]string{"wait", "j_x", "--timeout", "1d"}, `--timeout "1d" is not a duration: a number and a unit (ns, us, ms, s, m, h; a day is 24h)`},
		{[]string{"wait", "j_x", "--timeout", "5"}, `--timeout "5": a duration needs a unit`},
	} {
		code, _, errOut := runInProcess(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("jobwatch %v = exit %d: %s; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// A wait or watch ended by Ctrl-C or SIGTERM exits as shells report a
// command a signal ended, 128 plus its number, not 1 (the call failed).
func TestAnInterruptedWaitExitsWithTheSignalsStatus(t *testing.T) {
	s := startCLIServer(t, time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "nobody"})
	for _, tc := range []struct {
		command string
		sig     syscall.Signal
		want    int
	}{
		{"wait", syscall.SIGINT, 130},
		{"watch", syscall.SIGTERM, 143},
	} {
		t.Run(tc.command, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			before := s.parkedWaits()
			cmd := jobwatchCmd(ctx, tc.command, id, "--server", s.URL)
			var out, errOut lockedBuffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Parked: the wait on the server, the watch with the job's
			// first snapshot printed.
			waitFor(t, tc.command+" to follow the job", func() bool {
				return s.parkedWaits() > before || strings.Contains(out.String(), id)
			})
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != tc.want || !strings.Contains(errOut.String(), "stopped by SIG") {
				t.Errorf("%s after %v: exit %d, %q; want %d", tc.command, tc.sig, code, errOut.String(), tc.want)
			}
		})
	}
}

// submit --wait --json whose wait stops early prints the job as
// submitted, so that a script has its id on stdout, and exits 124.
func TestSubmitWaitThatTimesOutPrintsTheJobWithJSON(t *testing.T) {
	s := startCLIServer(t, time.Second)
	code, out, errOut := runInProcess(t, "submit", "nobody", "--wait", "--timeout", "200ms", "--json", "--server", s.URL)
	var j map[string]any
	if err := json.Unmarshal([]byte(out), &j); code != exitTimedOut || err != nil || j["state"] != "JOB_STATE_QUEUED" || !strings.Contains(errOut, "--timeout passed") {
		t.Errorf("submit --wait --timeout --json = exit %d, %q, %q; want 124, the queued job on stdout, the timeout on stderr", code, out, errOut)
	}
}
