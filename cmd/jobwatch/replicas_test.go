package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// replicasConfig is the --config of every replica: a serial queue, a
// queue bounded by a pool of two, and the queue of the jobs a killed
// replica's workers hold, whose short lease and second attempt let the
// others retry them soon after.
const replicasConfig = `queues:
  - name: serial
    mode: serial
  - name: pooled
    uses: [two]
  - name: held
    lease_timeout: 1s
    retry: {max_attempts: 2, initial_backoff: 50ms, max_backoff: 50ms}
pools:
  two: 2
`

// TestReplicasOnOnePostgreSQLKeepEveryPromise runs three jobwatch serve
// processes on one PostgreSQL schema and checks through the Go client,
// over real HTTP, what docs/OPERATING.md promises of replicas: waiters, watchers
// and tenant feeds on one replica hear jobs that workers on the others
// finish; a serial queue stays serial and a pool bounded with workers on
// every replica; no job is claimed twice; and a replica killed with
// SIGKILL while it holds parked calls, running jobs and submits in flight
// loses nothing it acknowledged, its running jobs are retried by the
// others, and its callers resume on another replica.
func TestReplicasOnOnePostgreSQLKeepEveryPromise(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	writeFile(t, cfg, replicasConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The first replica migrates the schema alone, so the other two
	// start against a migrated one, as replicas restarted later would;
	// starting together is the store's own test (concurrent migrations).
	rs := []*replica{startReplica(t, ctx, "A", dbURL, cfg)}
	rs = append(rs, startReplica(t, ctx, "B", dbURL, cfg), startReplica(t, ctx, "C", dbURL, cfg))
	runs := &runLog{}

	t.Log("every wake-up arrives; serial stays serial, the pool bounded, no job claimed twice")
	everyWakeUpArrivesAcrossReplicas(t, ctx, rs, runs)

	t.Log("a replica killed with SIGKILL loses nothing acknowledged, and its callers resume elsewhere")
	aKilledReplicaLosesNothing(t, ctx, rs, runs)

	for key, n := range runs.claims() {
		if n > 1 {
			t.Errorf("job %s attempt %d was claimed %d times", key.id, key.attempt, n)
		}
	}
}

func everyWakeUpArrivesAcrossReplicas(t *testing.T, ctx context.Context, rs []*replica, runs *runLog) {
	// The tenant feeds start before the jobs exist, so each must hear of
	// every job from its replica's listener.
	feedCtx, stopFeeds := context.WithCancel(ctx)
	defer stopFeeds()
	var feeds []*feed
	for i := range rs {
		f := &feed{}
		feeds = append(feeds, f)
		go f.follow(feedCtx, rs, i)
	}

	// Submitted round-robin, one after another, so the serial queue's
	// order is the order of this loop.
	var ids []string
	queueOf := map[string]string{}
	for i, q := range slices.Concat(repeat("serial", 6), repeat("pooled", 10), repeat("", 10)) {
		resp, err := rs[i%3].client.JobService().SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "work", Queue: q})
		if err != nil {
			t.Fatalf("submit on %s: %v", rs[i%3].name, err)
		}
		ids = append(ids, resp.GetJob().GetId())
		queueOf[resp.GetJob().GetId()] = q
	}

	// Each job's waiter and watcher are on replicas other than the one it
	// was submitted to, and parked before any worker runs.
	type outcome struct {
		who  string
		job  *jobwatchv1.Job
		err  error
		seen []int64 // a watcher's versions
	}
	outcomes := make(chan outcome, 2*len(ids))
	for i, id := range ids {
		go func() {
			j, _, err := waitAnywhere(ctx, id, rs, i+1)
			outcomes <- outcome{who: "waiter of " + id, job: j, err: err}
		}()
		go func() {
			j, seen, _, err := watchAnywhere(ctx, id, rs, i+2)
			outcomes <- outcome{who: "watcher of " + id, job: j, err: err, seen: seen}
		}()
	}
	for _, r := range rs {
		waitFor(t, "every waiter and watcher of "+r.name+" parked", func() bool {
			return r.metric(t, "jobwatch_parked_waits") >= float64(len(ids)/3) &&
				r.metric(t, "jobwatch_open_watches") >= float64(len(ids)/3+1)
		})
	}

	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer func() { stopWork(); workers.Wait() }()
	for _, r := range rs {
		runWorker(t, workCtx, &workers, r, "work", 3, runs, func(ctx context.Context) error {
			time.Sleep(30 * time.Millisecond) // the work: long enough for runs to overlap if they may
			return nil
		})
	}

	for range 2 * len(ids) {
		o := <-outcomes
		switch {
		case o.err != nil:
			t.Errorf("%s: %v", o.who, o.err)
		case o.job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
			t.Errorf("%s got %v, want SUCCEEDED", o.who, o.job.GetState())
		case o.seen != nil && !strictlyIncreasing(o.seen):
			t.Errorf("%s saw versions %v, not in increasing order", o.who, o.seen)
		}
	}
	waitFor(t, "every tenant feed shows every job SUCCEEDED", func() bool {
		for _, f := range feeds {
			if !f.ended(t, ids) {
				return false
			}
		}
		return true
	})

	var serial, pooled []handlerRun
	for _, r := range runs.all() {
		switch queueOf[r.id] {
		case "serial":
			serial = append(serial, r)
		case "pooled":
			pooled = append(pooled, r)
		}
	}
	if most := mostAtOnce(serial); most != 1 {
		t.Errorf("the serial queue ran %d jobs at once", most)
	}
	slices.SortFunc(serial, func(a, b handlerRun) int { return a.start.Compare(b.start) })
	var order []string
	for _, r := range serial {
		order = append(order, r.id)
	}
	if want := ids[:6]; !slices.Equal(order, want) {
		t.Errorf("the serial queue ran %v, want submit order %v", order, want)
	}
	if most := mostAtOnce(pooled); most > 2 {
		t.Errorf("the queue of the pool of two ran %d jobs at once", most)
	}
	byReplica := map[string]int{}
	for _, r := range runs.all() {
		byReplica[r.replica]++
	}
	t.Logf("runs by the workers of each replica: %v; most pooled at once: %d", byReplica, mostAtOnce(pooled))
	for _, id := range ids {
		j, err := rs[0].client.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.GetAttempt() != 1 || runs.count(id) != 1 {
			t.Errorf("job %s: attempt %d, ran %d times; want one run", id, j.GetAttempt(), runs.count(id))
		}
	}
}

func aKilledReplicaLosesNothing(t *testing.T, ctx context.Context, rs []*replica, runs *runLog) {
	victim := rs[2]
	// Jobs only the victim's workers can claim at first: they run until
	// the victim dies.
	victimCtx, stopVictimWorker := context.WithCancel(ctx)
	defer stopVictimWorker()
	var victimWorker sync.WaitGroup
	runWorker(t, victimCtx, &victimWorker, victim, "held", 3, runs, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	var held []string
	for range 3 {
		j, err := victim.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "held", Queue: "held"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, j.GetId())
	}
	waitFor(t, "the victim's workers running every held job", func() bool {
		for _, id := range held {
			if runs.count(id) == 0 {
				return false
			}
		}
		return true
	})
	// The survivors' workers, parked from now on, finish what they get.
	survivorCtx, stopSurvivors := context.WithCancel(ctx)
	var survivors sync.WaitGroup
	defer func() { stopSurvivors(); survivors.Wait() }()
	for _, r := range rs[:2] {
		runWorker(t, survivorCtx, &survivors, r, "held", 2, runs, func(context.Context) error { return nil })
	}

	// Callers parked on the victim: a waiter and a watcher of each held
	// job, and a tenant feed. Each moves to the next replica when the one
	// it uses dies, the watcher and the feed passing on where they were.
	type outcome struct {
		who      string
		job      *jobwatchv1.Job
		answered string
		seen     []int64
		err      error
	}
	outcomes := make(chan outcome, 2*len(held))
	ends := map[string]int{} // "SUCCEEDED at attempt 2 on A": how many callers saw that
	for _, id := range held {
		go func() {
			j, by, err := waitAnywhere(ctx, id, rs, 2)
			outcomes <- outcome{who: "waiter of " + id, job: j, answered: by, err: err}
		}()
		go func() {
			j, seen, by, err := watchAnywhere(ctx, id, rs, 2)
			outcomes <- outcome{who: "watcher of " + id, job: j, answered: by, seen: seen, err: err}
		}()
	}
	victimFeed := &feed{}
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	go victimFeed.follow(feedCtx, rs, 2)
	waitFor(t, "the victim's waiters and watchers parked", func() bool {
		return victim.metric(t, "jobwatch_parked_waits") >= 3 && victim.metric(t, "jobwatch_open_watches") >= 4
	})

	// Submits in flight on the victim when it dies: every one it
	// acknowledged must exist afterwards.
	var acked []string
	var ackedMu sync.Mutex
	submitting := make(chan struct{})
	go func() {
		defer close(submitting)
		for victim.alive() {
			resp, err := victim.client.JobService().SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "acked", Queue: "acked"})
			if err != nil {
				continue
			}
			ackedMu.Lock()
			acked = append(acked, resp.GetJob().GetId())
			ackedMu.Unlock()
		}
	}()
	waitFor(t, "the victim acknowledging submits", func() bool {
		ackedMu.Lock()
		defer ackedMu.Unlock()
		return len(acked) >= 5
	})

	victim.kill(t)
	<-submitting
	stopVictimWorker()
	victimWorker.Wait()

	for range 2 * len(held) {
		o := <-outcomes
		if o.err == nil {
			ends[fmt.Sprintf("%v at attempt %d, answered by %s", o.job.GetState(), o.job.GetAttempt(), o.answered)]++
		}
		switch {
		case o.err != nil:
			t.Errorf("%s: %v", o.who, o.err)
		case o.answered == victim.name:
			t.Errorf("%s was answered by the killed replica", o.who)
		case o.job.GetState() == jobwatchv1.JobState_JOB_STATE_LOST:
		case o.job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || o.job.GetAttempt() != 2:
			t.Errorf("%s got %v at attempt %d, want LOST or SUCCEEDED at attempt 2 (retried by a survivor)",
				o.who, o.job.GetState(), o.job.GetAttempt())
		case o.seen != nil && !strictlyIncreasing(o.seen):
			t.Errorf("%s saw versions %v, not in increasing order", o.who, o.seen)
		}
	}
	t.Logf("what the victim's waiters and watchers saw, resumed elsewhere: %v", ends)
	waitFor(t, "the victim's tenant feed, resumed elsewhere, showing every held job ended", func() bool {
		return victimFeed.ended(t, held)
	})
	for _, r := range runs.all() {
		if slices.Contains(held, r.id) && r.attempt == 2 && r.replica == victim.name {
			t.Errorf("job %s's second attempt ran on the killed replica", r.id)
		}
	}

	ackedMu.Lock()
	defer ackedMu.Unlock()
	for _, id := range acked {
		if _, err := rs[0].client.Get(ctx, id); err != nil {
			t.Errorf("job %s, acknowledged by the killed replica: %v", id, err)
		}
	}
	t.Logf("the killed replica acknowledged %d submits, all there after", len(acked))
}

// replica is a jobwatch serve process of the test.
type replica struct {
	name   string
	url    string
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
	client *client.Client
	dead   chan struct{} // closed when the test has killed it
}

func startReplica(t *testing.T, ctx context.Context, name, dbURL, cfg string) *replica {
	t.Helper()
	return startReplicaWith(t, ctx, name, dbURL, cfg, "--log-level", "warn")
}

// startReplicaWith is startReplica with serve's flags after --config
// (and no --log-level of its own).
func startReplicaWith(t *testing.T, ctx context.Context, name, dbURL, cfg string, flags ...string) *replica {
	t.Helper()
	addr := freeAddr(t)
	r := &replica{name: name, url: "http://" + addr, logs: &lockedBuffer{}, exited: make(chan struct{}), dead: make(chan struct{})}
	r.cmd = jobwatchCmd(ctx, append([]string{"serve", "--addr", addr, "--db", dbURL, "--config", cfg}, flags...)...)
	r.supervise(t)
	waitFor(t, "replica "+name+" answering", func() bool {
		if r.hasExited() {
			t.Fatalf("replica %s exited: %s", name, r.logs.String())
		}
		return r.answers()
	})
	r.connect(t)
	return r
}

// supervise starts r.cmd with its stderr in r.logs, and stops it when
// the test ends (SIGTERM, then SIGKILL after 15 s), showing its log if
// the test failed.
func (r *replica) supervise(t *testing.T) {
	t.Helper()
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(15 * time.Second):
			r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("replica %s's log:\n%s", r.name, r.logs.String())
		}
	})
}

// hasExited reports whether r's process has ended.
func (r *replica) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// answers reports whether r answers HTTP (its /metrics) now: 401 when
// it was started with --tokens.
func (r *replica) answers() bool {
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized
}

// connect gives r a Go client that retries fast.
func (r *replica) connect(t *testing.T) {
	r.client = client.New(r.url, client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	t.Cleanup(r.client.Close)
}

// freeAddr is a loopback address whose port is free right now, for a
// replica to listen on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// kill ends the process with SIGKILL: no graceful shutdown, no answer to
// its parked calls.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	close(r.dead)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.exited
}

func (r *replica) alive() bool {
	select {
	case <-r.dead:
		return false
	default:
		return true
	}
}

// untilDead is ctx, also cancelled when the test kills r: what a caller
// behind a load balancer sees as its connection dropping.
func (r *replica) untilDead(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-r.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// metric reads one unlabelled sample of r's /metrics.
func (r *replica) metric(t *testing.T, name string) float64 {
	t.Helper()
	return sample(t, r.url, name)
}

// next returns the first replica alive from rs[i%3] on.
func next(rs []*replica, i int) *replica {
	for k := range rs {
		if r := rs[(i+k)%len(rs)]; r.alive() {
			return r
		}
	}
	panic("every replica is dead")
}

// waitAnywhere waits for job id on rs[start], and on the next replica
// when the one it waits on dies, as a client behind a load balancer
// would. It returns the job and the name of the replica that answered.
func waitAnywhere(ctx context.Context, id string, rs []*replica, start int) (*jobwatchv1.Job, string, error) {
	for i := start; ; i++ {
		r := next(rs, i)
		rctx, cancel := r.untilDead(ctx)
		j, err := r.client.WaitForJob(rctx, id)
		cancel()
		switch {
		case err == nil:
			return j, r.name, nil
		case ctx.Err() != nil, r.alive():
			return nil, r.name, fmt.Errorf("wait on %s: %w", r.name, err)
		}
	}
}

// watchAnywhere watches job id with WatchJob on rs[start] until its
// terminal snapshot, resuming after the last version it saw on the next
// replica when the one it watches dies. It returns the terminal job, the
// versions seen, and the replica that sent the terminal snapshot.
func watchAnywhere(ctx context.Context, id string, rs []*replica, start int) (*jobwatchv1.Job, []int64, string, error) {
	var seen []int64
	var last int64
	for i := start; ; {
		r := next(rs, i)
		rctx, cancel := r.untilDead(ctx)
		stream, err := r.client.JobService().WatchJob(rctx, &jobwatchv1.WatchJobRequest{JobId: id, AfterVersion: last})
		if err != nil {
			cancel()
			if r.alive() {
				return nil, seen, r.name, fmt.Errorf("watch on %s: %w", r.name, err)
			}
			i++
			continue
		}
		for stream.Receive() {
			j := stream.Msg().GetJob()
			if j == nil {
				continue // keepalive
			}
			seen = append(seen, j.GetVersion())
			last = j.GetVersion()
			if client.Terminal(j.GetState()) {
				stream.Close()
				cancel()
				return j, seen, r.name, nil
			}
		}
		err = stream.Err()
		stream.Close()
		cancel()
		if ctx.Err() != nil {
			return nil, seen, r.name, ctx.Err()
		}
		if r.alive() && err != nil {
			return nil, seen, r.name, fmt.Errorf("watch on %s: %w", r.name, err)
		}
		// A stream of a live replica that ended cleanly (its lifetime)
		// resumes there; one of a dead replica on the next.
		if !r.alive() {
			i++
		}
	}
}

// feed is a tenant feed (WatchJobs) followed from one replica, resumed
// with its last token on the next replica when that one dies; it keeps
// the highest version of every job it has heard of.
type feed struct {
	mu   sync.Mutex
	jobs map[string]*jobwatchv1.Job
	err  error
}

func (f *feed) follow(ctx context.Context, rs []*replica, start int) {
	var token string
	for i := start; ctx.Err() == nil; {
		r := next(rs, i)
		rctx, cancel := r.untilDead(ctx)
		stream, err := r.client.JobService().WatchJobs(rctx, &jobwatchv1.WatchJobsRequest{ResumeToken: token})
		if err == nil {
			for stream.Receive() {
				msg := stream.Msg()
				f.mu.Lock()
				if f.jobs == nil {
					f.jobs = map[string]*jobwatchv1.Job{}
				}
				for _, j := range msg.GetJobs() {
					if old := f.jobs[j.GetId()]; old == nil || old.GetVersion() < j.GetVersion() {
						f.jobs[j.GetId()] = j
					}
				}
				f.mu.Unlock()
				if msg.GetResumeToken() != "" {
					token = msg.GetResumeToken()
				}
			}
			err = stream.Err()
			stream.Close()
		}
		cancel()
		if ctx.Err() == nil && r.alive() && err != nil {
			f.mu.Lock()
			f.err = errors.Join(f.err, fmt.Errorf("feed on %s: %w", r.name, err))
			f.mu.Unlock()
			return
		}
		if !r.alive() {
			i++
		}
	}
}

// ended reports whether the feed has shown every job of ids in a
// terminal state; a feed that failed fails t.
func (f *feed) ended(t *testing.T, ids []string) bool {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		t.Fatal(f.err)
	}
	for _, id := range ids {
		if j := f.jobs[id]; j == nil || !client.Terminal(j.GetState()) {
			return false
		}
	}
	return true
}

// handlerRun is one handler call of a test worker: which job and attempt, on
// the workers of which replica, and when it began and ended.
type handlerRun struct {
	id         string
	attempt    int32
	replica    string
	start, end time.Time
}

type runKey struct {
	id      string
	attempt int32
}

// runLog collects the runs of every worker of the test.
type runLog struct {
	mu   sync.Mutex
	runs []*handlerRun
}

func (l *runLog) begin(id string, attempt int32, replica string) *handlerRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := &handlerRun{id: id, attempt: attempt, replica: replica, start: time.Now()}
	l.runs = append(l.runs, r)
	return r
}

func (l *runLog) finish(r *handlerRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.end = time.Now()
}

// all returns copies of the runs that have ended, and of those still
// running ended now.
func (l *runLog) all() []handlerRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []handlerRun
	for _, r := range l.runs {
		c := *r
		if c.end.IsZero() {
			c.end = time.Now()
		}
		out = append(out, c)
	}
	return out
}

func (l *runLog) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		if r.id == id {
			n++
		}
	}
	return n
}

func (l *runLog) claims() map[runKey]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[runKey]int{}
	for _, r := range l.runs {
		out[runKey{r.id, r.attempt}]++
	}
	return out
}

// runWorker runs a client.Worker of kind with concurrency slots against
// replica r until ctx ends, logging each handler call in runs.
func runWorker(t *testing.T, ctx context.Context, wg *sync.WaitGroup, r *replica, kind string, concurrency int,
	runs *runLog, work func(context.Context) error) {
	w := client.NewWorker(r.client.WorkerBackend(), client.WorkerConfig{
		ID: "worker-" + r.name, Concurrency: concurrency, Logger: slog.New(slog.DiscardHandler),
		Backoff: client.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	w.Handle(kind, func(ctx context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
		run := runs.begin(j.GetId(), j.GetAttempt(), r.name)
		defer runs.finish(run)
		return nil, work(ctx)
	})
	wg.Go(func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("worker on %s: %v", r.name, err)
		}
	})
}

// mostAtOnce is the largest number of runs whose spans overlap.
func mostAtOnce(runs []handlerRun) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		edges = append(edges, edge{r.start, 1}, edge{r.end, -1})
	}
	// At equal times an end comes first: a run that starts as another
	// ends does not overlap it.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	return most
}

func strictlyIncreasing(vs []int64) bool {
	for i := 1; i < len(vs); i++ {
		if vs[i] <= vs[i-1] {
			return false
		}
	}
	return true
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
