package server_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// lockHolderEnv names the database file the child process locks.
const lockHolderEnv = "JOBWATCH_TEST_LOCK_HOLDER"

// TestLockHolderChild is not a test on its own: it is the other process
// of TestASubmitWhileAnotherProcessHoldsTheLock. It takes the file's write
// lock (BEGIN IMMEDIATE), says "locked", and holds it until its stdin
// closes.
func TestLockHolderChild(t *testing.T) {
	path := os.Getenv(lockHolderEnv)
	if path == "" {
		t.Skip("runs only as the child of TestASubmitWhileAnotherProcessHoldsTheLock")
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate")
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	tx, err := db.Begin()
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes it
	tx.Rollback()
	os.Exit(0)
}

// holdLockInAnotherProcess starts the child that holds path's write lock
// and returns its release.
func holdLockInAnotherProcess(t *testing.T, path string) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolderChild$")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+path)
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
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		cmd.Process.Kill()
		t.Fatalf("the lock holder said %q", line)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("lock holder: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// callAnswered runs call and fails the test if it has not returned after
// a bound far beyond any the server promises: the old code waited for
// the lock's holder, however long.
func callAnswered(t *testing.T, call func() error) (time.Duration, error) {
	t.Helper()
	type answer struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		err := call()
		done <- answer{err, time.Since(start)}
	}()
	select {
	case a := <-done:
		return a.elapsed, a.err
	case <-time.After(20 * time.Second):
		t.Fatal("no answer 20s into a held lock")
		return 0, nil
	}
}

func TestASubmitWhileAnotherProcessHoldsTheLock(t *testing.T) {
	const (
		lockTimeout    = 2 * time.Second
		callerDeadline = 500 * time.Millisecond
		slack          = 2 * time.Second // a loaded machine's lateness; the bug was unbounded
	)
	ts := startServer(t, serverOptions{storeConfig: sqlite.Config{LockTimeout: lockTimeout}})
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "before"})
	release := holdLockInAnotherProcess(t, ts.dbPath)

	// All at once: they also queue behind each other on the one writer
	// connection, which counts against the same bound.
	tests := []struct {
		name  string
		bound time.Duration
		want  connect.Code
		call  func() error
	}{
		{"a Go client with no deadline gets unavailable after the lock timeout", lockTimeout, connect.CodeUnavailable, func() error {
			_, err := c.jobs.SubmitJob(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "no-deadline"})
			return err
		}},
		// Its own deadline is no store failure (docs/SECURITY.md): it hears
		// deadline_exceeded, a little before that deadline.
		{"a Go client with a shorter deadline gets deadline_exceeded by it", callerDeadline, connect.CodeDeadlineExceeded, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
			defer cancel()
			_, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "deadline"})
			return err
		}},
		{"curl with a deadline gets 504 deadline_exceeded by it, in words that say what stands", callerDeadline, connect.CodeDeadlineExceeded, func() error {
			status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"kind":"curl-deadline"}`),
				"Connect-Timeout-Ms", strconv.FormatInt(callerDeadline.Milliseconds(), 10))
			if status != http.StatusGatewayTimeout || !strings.Contains(body, `"code":"deadline_exceeded"`) ||
				!strings.Contains(body, "the call's deadline passed before its answer was ready") {
				return fmt.Errorf("curl got %d %s", status, body)
			}
			return connect.NewError(connect.CodeDeadlineExceeded, nil)
		}},
		{"curl with no deadline gets 503 unavailable after the lock timeout", lockTimeout, connect.CodeUnavailable, func() error {
			status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"kind":"curl"}`))
			if status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) ||
				!strings.Contains(body, "the database is busy or unavailable: retry with backoff") {
				return fmt.Errorf("curl got %d %s", status, body)
			}
			return connect.NewError(connect.CodeUnavailable, nil)
		}},
	}
	var wg sync.WaitGroup
	for _, tt := range tests {
		wg.Go(func() {
			elapsed, err := callAnswered(t, tt.call)
			if code := connect.CodeOf(err); code != tt.want {
				t.Errorf("%s: %v (code %v), want %v", tt.name, err, code, tt.want)
			}
			if elapsed > tt.bound+slack {
				t.Errorf("%s: answered after %v, want about %v", tt.name, elapsed, tt.bound)
			}
			t.Logf("%s: answered after %v", tt.name, elapsed.Round(time.Millisecond))
		})
	}
	wg.Wait()

	if got := ts.requests("/jobwatch.v1.JobService/SubmitJob", "unavailable"); got != 2 {
		t.Errorf("requests_total{SubmitJob, unavailable} = %v, want 2", got)
	}
	logs := ts.logs.String()
	if n := strings.Count(logs, "level=WARN"); n != 1 || !strings.Contains(logs, "no write lock after") {
		t.Errorf("want one warning for the episode, with its cause:\n%s", logs)
	}

	release()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "after"})
	if job.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Errorf("submit after the lock: %v", job)
	}
	if !strings.Contains(ts.logs.String(), "the database accepts writes again") {
		t.Errorf("the recovery is not logged:\n%s", ts.logs.String())
	}
	for _, kind := range []string{"no-deadline", "deadline", "curl", "curl-deadline"} {
		resp, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Kind: kind})
		if err != nil || len(resp.GetJobs()) != 0 {
			t.Errorf("jobs of kind %s after a refused submit: %v, %v; want none", kind, resp.GetJobs(), err)
		}
	}
}

// hangsUpInTransaction lets the client of a CancelJob hang up while the
// store's transaction holds the change, before the commit: it waits,
// inside the transaction, until the server has seen the request end.
type hangsUpInTransaction struct {
	store.Store
	inTx   chan struct{}
	hungUp atomic.Bool
}

func (s *hangsUpInTransaction) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	return s.Store.UpdateJob(ctx, id, func(j *jobtype.Job) error {
		err := update(j)
		if j.State == jobtype.Cancelled && !s.hungUp.Swap(true) {
			close(s.inTx)
			<-ctx.Done()
		}
		return err
	})
}

func TestACallerThatHangsUpBeforeItsWriteCommitsIsCanceledNotAnError(t *testing.T) {
	for _, proto := range []string{"h2c", "http1"} {
		t.Run("over "+proto, func(t *testing.T) {
			st := &hangsUpInTransaction{inTx: make(chan struct{})}
			ts := startServer(t, serverOptions{wrapStore: func(inner store.Store) store.Store {
				st.Store = inner
				return st
			}})
			c := ts.h2c()
			if proto == "http1" {
				c = ts.clients(ts.http1Client())
			}
			job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})

			ctx, hangUp := context.WithCancel(context.Background())
			answered := make(chan error, 1)
			go func() {
				_, err := c.jobs.CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: job.GetId()})
				answered <- err
			}()
			<-st.inTx
			hangUp()
			<-answered

			const cancelJob = "/jobwatch.v1.JobService/CancelJob"
			deadline := time.Now().Add(10 * time.Second)
			for ts.requests(cancelJob, "canceled") != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("requests_total{CancelJob, canceled} = %v, want 1 (internal: %v)",
						ts.requests(cancelJob, "canceled"), ts.requests(cancelJob, "internal"))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got := ts.requests(cancelJob, "internal"); got != 0 {
				t.Errorf("requests_total{CancelJob, internal} = %v, want 0", got)
			}
			if logs := ts.logs.String(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "level=WARN") {
				t.Errorf("a caller that left was logged above debug:\n%s", logs)
			}
			// Nothing half-done: the cancel the caller did not wait for was
			// not made, and the job can still be cancelled.
			got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
			if err != nil || got.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || got.GetJob().GetVersion() != 1 {
				t.Fatalf("job after the hang-up = %v, %v; want it queued at version 1", got.GetJob(), err)
			}
			resp, err := c.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: job.GetId()})
			if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
				t.Errorf("cancel after the hang-up = %v, %v", resp.GetJob(), err)
			}
		})
	}
}

// TestClientsHangingUpDuringSubmitsLoseNothingAcknowledged hangs up
// submits at random moments, some of them while the commit or the
// unique-key conflict lookup runs. Whatever the moment, the server logs
// no error, counts no internal call, every submit a client heard OK for
// is stored, and every conflict names the job holding the key.
func TestClientsHangingUpDuringSubmitsLoseNothingAcknowledged(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	// Hang-ups spread over twice the time a submit takes on this machine,
	// so some come before, some during and some after the commit.
	var took time.Duration
	for range 10 {
		start := time.Now()
		submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "warm-up"})
		took += time.Since(start)
	}
	spread := 2 * took / 10
	const clients, submitsEach = 4, 50
	const submits = clients * submitsEach
	var (
		mu        sync.Mutex
		acked     []string
		conflicts []error
		wg        sync.WaitGroup
	)
	for i := range clients {
		wg.Go(func() {
			for k := range submitsEach {
				ctx, hangUp := context.WithCancel(context.Background())
				time.AfterFunc(rand.N(spread), hangUp)
				// Two submits per key: the second meets the first's
				// conflict, when the first was committed.
				resp, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", UniqueKey: fmt.Sprint("key-", i, "-", k/2)})
				mu.Lock()
				switch connect.CodeOf(err) {
				case connect.CodeUnknown: // no error
					acked = append(acked, resp.GetJob().GetId())
				case connect.CodeAlreadyExists:
					conflicts = append(conflicts, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	for _, id := range acked {
		if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id}); err != nil {
			t.Errorf("acknowledged job %s: %v", id, err)
		}
	}
	// A conflict always names the job holding the key.
	for _, err := range conflicts {
		var active *jobwatchv1.JobAlreadyActive
		for _, d := range err.(*connect.Error).Details() {
			if v, derr := d.Value(); derr == nil {
				active, _ = v.(*jobwatchv1.JobAlreadyActive)
			}
		}
		if active == nil || !slices.Contains(acked, active.GetJobId()) && !stored(t, c, active.GetJobId()) {
			t.Errorf("conflict %v does not name a stored job", err)
		}
	}
	// The server may still be finishing calls whose clients left; its
	// shutdown waits for them.
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	const submitJob = "/jobwatch.v1.JobService/SubmitJob"
	if got := ts.requests(submitJob, "internal"); got != 0 {
		t.Errorf("requests_total{SubmitJob, internal} = %v, want 0", got)
	}
	if logs := ts.logs.String(); strings.Contains(logs, "level=ERROR") {
		t.Errorf("a client hanging up was logged as an error:\n%s", logs)
	}
	t.Logf("hang-ups within %v: %d of %d submits acknowledged, %d conflicts, %v counted canceled",
		spread, len(acked), submits, len(conflicts), ts.requests(submitJob, "canceled"))
}

func stored(t *testing.T, c clients, id string) bool {
	_, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id})
	return err == nil
}
