package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// TestRollingUpgradeKeepsThePreviousReleaseWorking runs the previous
// release that changed the PostgreSQL schema (previousSchemaRelease,
// built from git history) and then this checkout's jobwatch on one
// schema, as a rolling upgrade does: the current release migrates the
// schema on start while the previous one serves, and both must then keep
// every promise to each other's callers and workers (expand first,
// contract a release later, docs/OPERATING.md "Upgrading").
//
// It checks, over real HTTP with the Go client: a job running on the
// previous release while the current one migrates ends normally, and one
// it queued is claimed by the current release's worker; the previous
// release serves submits, reads and lists throughout, without an error; a
// job submitted on either release is claimed by a worker of the other; a
// WaitJob parked on either wakes when the job ends through the other; a
// WatchJob on each hears each change the other made (claim, progress,
// end); a dependency ended through one release releases its dependent to
// the other's worker (the trigger's "released" notification); neither
// logs anything at warn or above. Last, it restarts the previous release
// on the migrated schema: it must either serve, and work beside the
// current one, or refuse at once with a message that says the schema is
// newer; never start half-broken.
func TestRollingUpgradeKeepsThePreviousReleaseWorking(t *testing.T) {
	if testdb.Backend() != "postgres" {
		t.Skip("a rolling upgrade is of replicas on one PostgreSQL: this test runs in the PostgreSQL pass (JOBWATCH_TEST_BACKEND=postgres)")
	}
	prev := previousSchemaRelease(t)
	buildCtx, stopBuild := context.WithTimeout(context.Background(), 150*time.Second)
	oldBin := prev.build(t, buildCtx)
	stopBuild()

	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gates := &upgradeGates{}
	workCtx, stopWork := context.WithCancel(ctx)
	var workers, oldWorker sync.WaitGroup // oldWorker: the previous release's, stopped before its restart
	// On the way out, a failed step's handlers may still be held: let
	// them go, so the workers stop at once.
	defer func() { gates.openAll(); stopWork(); workers.Wait(); oldWorker.Wait() }()

	old, exitLog, _ := startRelease(t, ctx, "old", oldBin, dbURL)
	if old == nil {
		t.Fatalf("the previous release %s did not start on a fresh schema:\n%s", prev, exitLog)
	}
	before := schemaVersion(t, ctx, dbURL)
	oldWorkCtx, stopOldWorker := context.WithCancel(workCtx)
	runGatedWorker(t, oldWorkCtx, &oldWorker, old, gates)

	// In flight while the current release migrates: a job the previous
	// release's worker is running, one queued for a worker that only the
	// current release will have, and a stream of calls.
	running := submitFor(t, ctx, old, "old")
	queued := submitFor(t, ctx, old, "new")
	waitFor(t, "the previous release's worker running job "+running, func() bool {
		j, err := old.client.Get(ctx, running)
		return err == nil && j.GetState() == jobwatchv1.JobState_JOB_STATE_RUNNING
	})
	traffic := startTraffic(ctx, old)

	cur, exitLog, _ := startRelease(t, ctx, "new", "", dbURL)
	if cur == nil {
		t.Fatalf("the current release cannot start on the schema (version %d) that the previous release %s made, while that one runs:\n%s",
			before, prev, exitLog)
	}
	after := schemaVersion(t, ctx, dbURL)
	switch {
	case after < before:
		t.Fatalf("the schema went from version %d to %d", before, after)
	case after == before:
		t.Logf("schema version %d on both: the current release added no migration to %s", after, prev)
	default:
		t.Logf("schema version %d (the previous release %s) migrated to %d by the current release while the previous one ran", before, prev, after)
	}
	runGatedWorker(t, workCtx, &workers, cur, gates)
	both := []*replica{old, cur}

	t.Log("jobs in flight across the migration end normally")
	followAcrossReleases(t, ctx, running, cur, old, both, gates)
	followAcrossReleases(t, ctx, queued, old, cur, both, gates)

	t.Log("a job submitted on one release is claimed, waited for and watched across the other")
	for _, d := range []struct{ submitOn, workOn *replica }{{old, cur}, {cur, old}} {
		id := submitFor(t, ctx, d.submitOn, d.workOn.name)
		followAcrossReleases(t, ctx, id, d.submitOn, d.workOn, both, gates)
	}

	t.Log("a dependency ended through one release releases its dependent to the other's worker")
	dependentReleasedAcross(t, ctx, old, cur, gates)
	dependentReleasedAcross(t, ctx, cur, old, gates)

	traffic.stopAndCheck(t)
	for _, r := range both {
		for _, line := range logComplaints(r.logs.String()) {
			t.Errorf("replica %s logged at warn or above: %s", r.name, line)
		}
	}
	curChecked := len(cur.logs.String())

	t.Log("the previous release restarted on the migrated schema")
	stopOldWorker()
	oldWorker.Wait()
	old.shutDown(t)
	restarted, exitLog, code := startRelease(t, ctx, "old (restarted)", oldBin, dbURL)
	if restarted == nil {
		// Refused: fine, if at once and saying why (today's
		// ErrSchemaTooNew), so that an operator knows what to run.
		if code == 0 || !strings.Contains(strings.ToLower(exitLog), "newer") {
			t.Errorf("the previous release, restarted on the schema the current one migrated, exited with status %d and did not say the schema is newer:\n%s",
				code, exitLog)
		}
		t.Logf("the previous release refuses to restart on the migrated schema (status %d): %s", code, strings.TrimSpace(exitLog))
	} else {
		id := submitFor(t, ctx, restarted, "new")
		followAcrossReleases(t, ctx, id, restarted, cur, []*replica{restarted, cur}, gates)
		t.Log("the previous release restarts on the migrated schema and works beside the current one")
		for _, line := range logComplaints(restarted.logs.String()) {
			t.Errorf("replica %s logged at warn or above: %s", restarted.name, line)
		}
	}
	for _, line := range logComplaints(cur.logs.String()[curChecked:]) {
		t.Errorf("replica %s logged at warn or above after the previous release restarted: %s", cur.name, line)
	}
}

// startRelease starts jobwatch serve from bin (this checkout's when bin is
// "") on dbURL, named name, and returns it once it answers. When the
// process exits before answering, it returns nil, its log and its exit
// status instead.
func startRelease(t *testing.T, ctx context.Context, name, bin, dbURL string) (*replica, string, int) {
	t.Helper()
	addr := freeAddr(t)
	args := []string{"serve", "--addr", addr, "--db", dbURL, "--log-level", "warn"}
	r := &replica{name: name, url: "http://" + addr, logs: &lockedBuffer{}, exited: make(chan struct{}), dead: make(chan struct{})}
	if bin == "" {
		r.cmd = jobwatchCmd(ctx, args...)
	} else {
		r.cmd = exec.CommandContext(ctx, bin, args...)
		r.cmd.Env = append(os.Environ(), "JOBWATCH_SERVER=", "JOBWATCH_TOKEN=")
	}
	r.supervise(t)
	// A minute: the current release is this test binary, built with the
	// race detector, and may have migrations to apply on a loaded machine.
	for deadline := time.Now().Add(time.Minute); !r.answers(); time.Sleep(20 * time.Millisecond) {
		if r.hasExited() {
			return nil, r.logs.String(), r.cmd.ProcessState.ExitCode()
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s neither answered nor exited within a minute:\n%s", name, r.logs.String())
		}
	}
	r.connect(t)
	return r, "", 0
}

// shutDown ends r as an operator does (SIGTERM) and waits for it to exit.
func (r *replica) shutDown(t *testing.T) {
	t.Helper()
	close(r.dead)
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s still running 30 s after SIGTERM", r.name)
	}
	if code := r.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("replica %s exited with status %d after SIGTERM:\n%s", r.name, code, r.logs.String())
	}
}

// schemaVersion is the schema version recorded in the database at dbURL.
func schemaVersion(t *testing.T, ctx context.Context, dbURL string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		t.Fatalf("read the schema version: %v", err)
	}
	return v
}

// upgradeKind is the kind of job that only the worker of the replica
// named name runs.
func upgradeKind(name string) string { return "runs-on-" + name }

func upgradeWorkerID(name string) string { return "worker-of-" + name }

// submitFor submits, on r, a job that only the worker of the replica
// named runsOn runs, after the jobs of after.
func submitFor(t *testing.T, ctx context.Context, r *replica, runsOn string, after ...string) string {
	t.Helper()
	j, err := r.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: upgradeKind(runsOn), After: after})
	if err != nil {
		t.Fatalf("submit on %s: %v", r.name, err)
	}
	return j.GetId()
}

// upgradeGates holds each job's handler at two points (before its
// progress, before its end) until the test lets it on, so that every
// caller can be shown to hear each step.
type upgradeGates struct {
	mu     sync.Mutex
	gates  map[string]*upgradeGate
	opened bool // by openAll
}

type upgradeGate struct {
	progress, finish         chan struct{}
	progressOnce, finishOnce sync.Once
}

// of is job id's gate, made on first use by the handler or the test,
// whichever comes first.
func (g *upgradeGates) of(id string) *upgradeGate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*upgradeGate{}
	}
	if g.gates[id] == nil {
		g.gates[id] = &upgradeGate{progress: make(chan struct{}), finish: make(chan struct{})}
		if g.opened {
			g.gates[id].open()
		}
	}
	return g.gates[id]
}

// openAll lets every handler, now and later, run to its end.
func (g *upgradeGates) openAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = true
	for _, gate := range g.gates {
		gate.open()
	}
}

func (g *upgradeGate) letProgress() { g.progressOnce.Do(func() { close(g.progress) }) }
func (g *upgradeGate) letFinish()   { g.finishOnce.Do(func() { close(g.finish) }) }
func (g *upgradeGate) open()        { g.letProgress(); g.letFinish() }

// runGatedWorker runs a worker on r for upgradeKind(r.name) until ctx
// ends: its handler reports 50 % when its gate lets it, and returns
// {"ran_on": r.name} when its gate lets it finish.
func runGatedWorker(t *testing.T, ctx context.Context, wg *sync.WaitGroup, r *replica, gates *upgradeGates) {
	w := client.NewWorker(r.client.WorkerBackend(), client.WorkerConfig{
		ID: upgradeWorkerID(r.name), Concurrency: 4, Logger: slog.New(slog.DiscardHandler),
		Backoff: client.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	w.Handle(upgradeKind(r.name), func(ctx context.Context, j *jobwatchv1.Job, p client.Progress) (any, error) {
		g := gates.of(j.GetId())
		select {
		case <-g.progress:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p(50, "halfway on "+r.name)
		select {
		case <-g.finish:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"ran_on": r.name}, nil
	})
	wg.Go(func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("worker on %s: %v", r.name, err)
		}
	})
}

// followAcrossReleases follows job id, which only workOn's worker runs
// (it may be running already), with a WaitJob parked on waitOn and a
// WatchJob on each replica of watchOn, and lets the handler report its
// progress and then finish, each step only once every watcher has heard
// the one before: every caller must hear every change, whichever release
// made it.
func followAcrossReleases(t *testing.T, ctx context.Context, id string, waitOn, workOn *replica, watchOn []*replica, gates *upgradeGates) {
	t.Helper()
	waiter := waitOnReplica(ctx, waitOn, id)
	var watches []*upgradeWatch
	for _, r := range watchOn {
		watches = append(watches, watchOnReplica(ctx, r, id))
	}
	heard := func(what string, cond func(*jobwatchv1.Job) bool) {
		t.Helper()
		waitFor(t, "every watcher of job "+id+" hearing that it "+what, func() bool {
			for _, w := range watches {
				if !w.saw(t, cond) {
					return false
				}
			}
			return true
		})
	}
	waitFor(t, "the waiter of job "+id+" parked on "+waitOn.name, func() bool {
		return waitOn.metric(t, "jobwatch_parked_waits") >= 1
	})
	heard("runs on "+workOn.name, func(j *jobwatchv1.Job) bool {
		return j.GetState() == jobwatchv1.JobState_JOB_STATE_RUNNING && j.GetWorkerId() == upgradeWorkerID(workOn.name)
	})
	g := gates.of(id)
	g.letProgress()
	heard("is halfway", func(j *jobwatchv1.Job) bool { return j.GetPercent() == 50 })
	g.letFinish()

	j := waiter.result(t)
	ranOn := j.GetResult().GetStructValue().GetFields()["ran_on"].GetStringValue()
	if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || ranOn != workOn.name || j.GetWorkerId() != upgradeWorkerID(workOn.name) {
		t.Errorf("the waiter of job %s on %s got %v by %q, ran on %q; want SUCCEEDED, run on %s",
			id, waitOn.name, j.GetState(), j.GetWorkerId(), ranOn, workOn.name)
	}
	for _, w := range watches {
		seen := w.result(t)
		last := seen[len(seen)-1]
		if last.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || last.GetVersion() != j.GetVersion() {
			t.Errorf("the watcher of job %s on %s ended with %v at version %d; want SUCCEEDED at version %d",
				id, w.on, last.GetState(), last.GetVersion(), j.GetVersion())
		}
		var versions []int64
		for _, s := range seen {
			versions = append(versions, s.GetVersion())
		}
		if !strictlyIncreasing(versions) {
			t.Errorf("the watcher of job %s on %s saw versions %v, not in increasing order", id, w.on, versions)
		}
	}
	// Every call has returned to the test; wait until the servers let go
	// of them too, so the next step's "parked" means its own calls.
	for _, r := range append([]*replica{waitOn}, watchOn...) {
		waitFor(t, "no call left parked on "+r.name, func() bool {
			return r.metric(t, "jobwatch_parked_waits") == 0 && r.metric(t, "jobwatch_open_watches") == 0
		})
	}
}

// dependentReleasedAcross submits a job that a's worker runs and a
// dependent of it that only b's worker runs: the end of the first,
// committed by a, releases the dependent in its transaction (a trigger),
// and b must hear of it and claim it.
func dependentReleasedAcross(t *testing.T, ctx context.Context, a, b *replica, gates *upgradeGates) {
	t.Helper()
	first := submitFor(t, ctx, b, a.name)
	then := submitFor(t, ctx, a, b.name, first)
	if j, err := b.client.Get(ctx, then); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_WAITING {
		t.Fatalf("job %s, which runs after %s, is %v (%v); want WAITING", then, first, j.GetState(), err)
	}
	gates.of(then).open()
	gates.of(first).open()
	j, err := a.client.WaitForJob(ctx, then)
	switch {
	case err != nil:
		t.Errorf("wait on %s for job %s, released by the end of %s on %s: %v", a.name, then, first, a.name, err)
	case j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetWorkerId() != upgradeWorkerID(b.name):
		t.Errorf("job %s, released by the end of %s on %s, ended %v by %q; want SUCCEEDED by %s's worker",
			then, first, a.name, j.GetState(), j.GetWorkerId(), b.name)
	}
}

// upgradeWait is a WaitForJob call running on its own goroutine.
type upgradeWait struct {
	done chan struct{}
	job  *jobwatchv1.Job
	err  error
	on   string
}

func waitOnReplica(ctx context.Context, r *replica, id string) *upgradeWait {
	w := &upgradeWait{done: make(chan struct{}), on: r.name}
	go func() {
		defer close(w.done)
		w.job, w.err = r.client.WaitForJob(ctx, id)
	}()
	return w
}

func (w *upgradeWait) result(t *testing.T) *jobwatchv1.Job {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a waiter on %s got no answer within 30 s of its job's end", w.on)
	}
	if w.err != nil {
		t.Fatalf("wait on %s: %v", w.on, w.err)
	}
	return w.job
}

// upgradeWatch is one WatchJob stream on one replica, read to its
// terminal snapshot on its own goroutine; every snapshot is kept.
type upgradeWatch struct {
	on   string
	mu   sync.Mutex
	seen []*jobwatchv1.Job
	err  error
	done chan struct{}
}

func watchOnReplica(ctx context.Context, r *replica, id string) *upgradeWatch {
	w := &upgradeWatch{on: r.name, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		err := w.read(ctx, r, id)
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	return w
}

// read reads the stream until its terminal snapshot. One stream only: an
// end before it (an error, or a clean end, which only the 10 min stream
// lifetime would bring) is the watch's error, not a resume.
func (w *upgradeWatch) read(ctx context.Context, r *replica, id string) error {
	stream, err := r.client.JobService().WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id})
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		j := stream.Msg().GetJob()
		if j == nil {
			continue // keepalive
		}
		w.mu.Lock()
		w.seen = append(w.seen, j)
		w.mu.Unlock()
		if client.Terminal(j.GetState()) {
			return nil
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended before the job did")
}

// saw reports whether any snapshot so far meets cond; a watch that ended
// with an error fails t.
func (w *upgradeWatch) saw(t *testing.T, cond func(*jobwatchv1.Job) bool) bool {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("watch on %s: %v", w.on, w.err)
	}
	for _, j := range w.seen {
		if cond(j) {
			return true
		}
	}
	return false
}

func (w *upgradeWatch) result(t *testing.T) []*jobwatchv1.Job {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("a watcher on %s saw no end within 30 s of its job's", w.on)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("watch on %s: %v", w.on, w.err)
	}
	return w.seen
}

// upgradeTraffic is a caller of one replica that submits, reads and lists
// jobs in a loop, every call of which must succeed.
type upgradeTraffic struct {
	on     string
	cancel context.CancelFunc
	done   chan struct{}
	calls  int
	errs   []error
}

// startTraffic calls r until stopAndCheck, a round of calls every 20 ms.
// Its jobs have a kind no worker runs.
func startTraffic(ctx context.Context, r *replica) *upgradeTraffic {
	ctx, cancel := context.WithCancel(ctx)
	tr := &upgradeTraffic{on: r.name, cancel: cancel, done: make(chan struct{})}
	call := func(err error) {
		if ctx.Err() != nil {
			return // stopped mid-call: no answer to judge
		}
		tr.calls++
		if err != nil {
			tr.errs = append(tr.errs, err)
		}
	}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			j, err := r.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "traffic"})
			call(err)
			if err == nil {
				_, err = r.client.Get(ctx, j.GetId())
				call(err)
			}
			_, err = r.client.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{PageSize: 5})
			call(err)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return tr
}

func (tr *upgradeTraffic) stopAndCheck(t *testing.T) {
	t.Helper()
	tr.cancel()
	<-tr.done
	if tr.calls == 0 {
		t.Errorf("the calls to %s never got an answer", tr.on)
	}
	for i, err := range tr.errs {
		if i == 5 {
			t.Errorf("… and %d more", len(tr.errs)-i)
			break
		}
		t.Errorf("a call to %s during and after the upgrade failed: %v", tr.on, err)
	}
	t.Logf("%d submits, reads and lists on %s during and after the migration, %d failed", tr.calls, tr.on, len(tr.errs))
}

// logComplaints returns the lines of a serve log (slog's text format) at
// WARN or above.
func logComplaints(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}
