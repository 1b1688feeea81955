package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// chaosForm is how long the chaos test kills, and how often.
type chaosForm struct {
	name   string
	length time.Duration // the killer kills for this long
	every  time.Duration // one kill each
	down   time.Duration // a killed replica stays down this long before its restart
}

var (
	// chaosShort runs in the PostgreSQL pass of make test.
	chaosShort = chaosForm{name: "short", length: 35 * time.Second, every: 5 * time.Second, down: time.Second}
	// chaosFull is make chaos (JOBWATCH_CHAOS=full).
	chaosFull = chaosForm{name: "full", length: 2 * time.Minute, every: 10 * time.Second, down: 2 * time.Second}
)

// The load of both forms.
const (
	chaosWorkers     = 16 // remote client.Workers
	chaosWorkerSlots = 2  // each one's Concurrency
	chaosSubmitters  = 16
	chaosWaiters     = 8                      // of the submitters, those who wait for each job they submit (WaitForJob)
	chaosPace        = 250 * time.Millisecond // the other submitters' pause between two submits
	chaosRunMin      = 5 * time.Millisecond   // a handler runs for chaosRunMin to chaosRunMin+chaosRunSpread
	chaosRunSpread   = 20 * time.Millisecond
	chaosDrainBound  = 3 * time.Minute // after the chaos, for every acknowledged job to end
	chaosKind        = "chaos"
	// The queue rules of chaosConfig that the checker holds the runs to.
	chaosMaxRunning = 3
	chaosPoolUnits  = 2
)

// chaosConfig is every replica's --config: a serial queue, a queue with
// max_running, two queues sharing a pool, and one with no rule. Leases
// are short so that a claim lost with its replica (committed, never
// answered) is retried within seconds, and attempts are many so that no
// job runs out of them.
var chaosConfig = fmt.Sprintf(`queues:
  - name: serial
    mode: serial
    lease_timeout: 3s
    retry: {max_attempts: 20, initial_backoff: 20ms, max_backoff: 200ms}
  - name: bounded
    max_running: %d
    lease_timeout: 3s
    retry: {max_attempts: 20, initial_backoff: 20ms, max_backoff: 200ms}
  - name: pool-a
    uses: [db]
    lease_timeout: 3s
    retry: {max_attempts: 20, initial_backoff: 20ms, max_backoff: 200ms}
  - name: pool-b
    uses: [db]
    lease_timeout: 3s
    retry: {max_attempts: 20, initial_backoff: 20ms, max_backoff: 200ms}
  - name: open
    lease_timeout: 3s
    retry: {max_attempts: 20, initial_backoff: 20ms, max_backoff: 200ms}
pools:
  db: %d
`, chaosMaxRunning, chaosPoolUnits)

// chaosMix is the queues submitters cycle through: a tenth serial (well
// within what one-at-a-time can run), the rest spread over the others.
var chaosMix = []string{"serial", "bounded", "pool-a", "open", "bounded", "pool-b", "pool-a", "bounded", "pool-b", "open"}

// TestChaosReplicasKilledUnderLoadKeepEveryPromise runs three jobwatch
// serve replicas on one PostgreSQL schema under load: chaosWorkers
// remote client.Workers and chaosSubmitters submitters, each with a Go
// client given the three addresses in an order of its own, submitting to
// a serial queue, a queue with max_running, two queues sharing a pool and
// one with no rule. A killer kills a random replica with SIGKILL every
// form.every for form.length and restarts it on its address form.down
// later. Then every acknowledged job must end within chaosDrainBound,
// and an invariant checker, fed by the workers' own records (each
// handler run's start and end, monotonic and wall clock, its worker; each
// completion the server acknowledged), by the submitters' (what was
// acknowledged, what each WaitForJob caller got) and by the jobs as the
// database has them, asserts and prints: every acknowledged submit ended
// SUCCEEDED; no job's completion was acknowledged twice; no two runs of
// one job overlapped (a job ran again only after its previous run ended,
// its worker having stopped it when the lease was lost); the serial queue
// never ran two at once, the max_running queue never more than its
// bound, the pool's queues never more than its units; every WaitForJob
// caller got its job's end. The short form runs in the PostgreSQL pass of
// make test; make chaos runs the full one (JOBWATCH_CHAOS=full).
func TestChaosReplicasKilledUnderLoadKeepEveryPromise(t *testing.T) {
	form := chaosShort
	switch v := os.Getenv("JOBWATCH_CHAOS"); v {
	case "full":
		form = chaosFull
	case "short":
	case "":
		if os.Getenv("JOBWATCH_TEST_BACKEND") != "postgres" {
			t.Skip("replicas need PostgreSQL: runs in the PostgreSQL pass (JOBWATCH_TEST_BACKEND=postgres), in full with make chaos")
		}
	default:
		t.Fatalf("JOBWATCH_CHAOS=%q: want full or short", v)
	}
	// A smaller pool than serve's 16 per replica: the PostgreSQL pass runs
	// other packages' tests beside this one on the same server.
	dbURL := pgtest.URL(t) + "&pool_max_conns=8"
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	writeFile(t, cfg, chaosConfig)
	ctx, cancel := context.WithTimeout(context.Background(), form.length+chaosDrainBound+3*time.Minute)
	defer cancel()

	rs := []*replica{startReplica(t, ctx, "A", dbURL, cfg)}
	rs = append(rs, startReplica(t, ctx, "B", dbURL, cfg), startReplica(t, ctx, "C", dbURL, cfg))
	c := &chaos{form: form, rec: newChaosRecords()}
	for _, r := range rs {
		c.addrs = append(c.addrs, r.url)
	}
	observer := c.client(t, 0)

	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer func() { stopWork(); workers.Wait() }()
	for i := range chaosWorkers {
		c.startWorker(t, workCtx, &workers, i)
	}
	submitCtx, stopSubmitting := context.WithCancel(ctx)
	defer stopSubmitting()
	waitCtx, stopWaiting := context.WithTimeout(ctx, form.length+chaosDrainBound)
	defer stopWaiting()
	var submitters sync.WaitGroup
	for i := range chaosSubmitters {
		cl := c.client(t, i)
		submitters.Go(func() { c.submitter(submitCtx, waitCtx, cl, i, i < chaosWaiters) })
	}

	// The killer.
	start := time.Now()
	for k := 1; time.Duration(k)*form.every <= form.length; k++ {
		chaosPause(ctx, time.Until(start.Add(time.Duration(k)*form.every)))
		v := rand.IntN(len(rs))
		victim := rs[v]
		killed := time.Now()
		victim.kill(t)
		c.rec.killed(victim.name, killed)
		chaosPause(ctx, form.down)
		rs[v] = restartReplica(t, ctx, victim, dbURL, cfg)
		c.logs = append(c.logs, victim.logs)
		t.Logf("killed %s at %v; answering again %v later", victim.name, killed.Sub(start).Round(10*time.Millisecond),
			time.Since(killed).Round(10*time.Millisecond))
	}
	chaosPause(ctx, time.Until(start.Add(form.length)))
	stopSubmitting()

	// Every acknowledged job must end, each WaitForJob caller hearing it.
	drainStart := time.Now()
	for {
		left, err := c.unfinished(ctx, observer)
		if err == nil && left == 0 {
			break
		}
		if time.Since(drainStart) > chaosDrainBound {
			t.Fatalf("%d jobs still unfinished %v after the chaos (%v)", left, chaosDrainBound, err)
		}
		chaosPause(ctx, 100*time.Millisecond)
	}
	drained := time.Since(drainStart)
	submitters.Wait()
	stopWork()
	workers.Wait()

	jobs := c.fetchJobs(t, ctx, observer)
	for _, r := range rs {
		c.logs = append(c.logs, r.logs)
	}
	figures := c.rec.check(t, jobs, c.logs)
	t.Logf("CHAOS (%s form): %d kills, one every %v for %v, each replica down %v before its restart; the backlog drained %v after the chaos",
		form.name, len(c.rec.kills), form.every, form.length, form.down, drained.Round(10*time.Millisecond))
	for _, f := range figures {
		t.Log("CHAOS " + f)
	}
}

// chaos is one run of the chaos test.
type chaos struct {
	form  chaosForm
	addrs []string        // the replicas' addresses, A B C
	rec   *chaosRecords   // what the workers and submitters saw
	logs  []*lockedBuffer // every replica process's stderr, killed ones included
}

// chaosOrders are the orders of the three addresses: client i gets
// chaosOrders[i%6].
var chaosOrders = [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {2, 1, 0}, {1, 0, 2}}

// client is a Go client given the three replicas' addresses in the i-th
// order, retrying quickly.
func (c *chaos) client(t *testing.T, i int) *client.Client {
	var addrs []string
	for _, k := range chaosOrders[i%len(chaosOrders)] {
		addrs = append(addrs, c.addrs[k])
	}
	cl := client.New(strings.Join(addrs, ","), client.WithBackoff(10*time.Millisecond, 250*time.Millisecond))
	t.Cleanup(cl.Close)
	return cl
}

// startWorker runs the i-th worker: client.Worker over the remote backend
// of a client of its own, through a backend that records the claims and
// completions the server answered.
func (c *chaos) startWorker(t *testing.T, ctx context.Context, wg *sync.WaitGroup, i int) {
	id := fmt.Sprintf("chaos-worker-%02d", i)
	backend := &chaosBackend{remote: c.client(t, i).WorkerBackend(), rec: c.rec, worker: id}
	w := client.NewWorker(backend, client.WorkerConfig{
		ID: id, Concurrency: chaosWorkerSlots, Logger: slog.New(slog.DiscardHandler),
		Backoff: client.Backoff{Initial: 10 * time.Millisecond, Max: 250 * time.Millisecond},
	})
	w.Handle(chaosKind, func(ctx context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
		run := c.rec.begin(j, id)
		timer := time.NewTimer(chaosRunMin + rand.N(chaosRunSpread))
		defer timer.Stop()
		select {
		case <-timer.C:
			c.rec.end(run, nil)
			return nil, nil
		case <-ctx.Done():
			// The worker stopped the run: its lease is lost (or the job
			// cancelled). The handler ends at once, as handlers must.
			c.rec.end(run, context.Cause(ctx))
			return nil, context.Cause(ctx)
		}
	})
	wg.Go(func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("worker %s: %v", id, err)
		}
	})
}

// submitter submits jobs until ctx ends, cycling through chaosMix. A
// waiting submitter then waits for each job with WaitForJob (bounded by
// waitCtx) and records what it got; the others pause chaosPace.
func (c *chaos) submitter(ctx, waitCtx context.Context, cl *client.Client, i int, waits bool) {
	for n := 0; ctx.Err() == nil; n++ {
		id := c.submit(ctx, cl, fmt.Sprintf("chaos-%02d-%05d", i, n), chaosMix[(i+n)%len(chaosMix)])
		switch {
		case id == "":
		case waits:
			j, err := cl.WaitForJob(waitCtx, id)
			c.rec.waited(id, j, err)
		default:
			chaosPause(ctx, chaosPace)
		}
	}
}

// submit submits one job under unique key key, as a careful caller
// would: a submit whose answer was lost (the replica died) is sent again
// with the same key, and a refusal already_exists naming the job is the
// acknowledgement the lost answer would have been. It returns the
// acknowledged job's id, or "" when ctx ended first.
func (c *chaos) submit(ctx context.Context, cl *client.Client, key, queue string) string {
	req := &jobwatchv1.SubmitJobRequest{Kind: chaosKind, Queue: queue, UniqueKey: key}
	for {
		j, err := cl.Submit(ctx, req)
		switch id := activeJobOf(err); {
		case err == nil:
			c.rec.acknowledged(j.GetId(), queue, false)
			return j.GetId()
		case id != "":
			c.rec.acknowledged(id, queue, true)
			return id
		case ctx.Err() != nil:
			// Cut by the end of the chaos: made or not, nobody knows.
			c.rec.submitAbandoned()
			return ""
		case connect.IsWireError(err) && connect.CodeOf(err) != connect.CodeUnavailable:
			c.rec.failed(fmt.Errorf("submit %s: %w", key, err))
			return ""
		}
		c.rec.submitRetried()
		chaosPause(ctx, 20*time.Millisecond)
	}
}

// activeJobOf is the id of the job an already_exists refusal names.
func activeJobOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeAlreadyExists {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if a, ok := v.(*jobwatchv1.JobAlreadyActive); ok {
				return a.GetJobId()
			}
		}
	}
	return ""
}

// unfinished counts the test's jobs not yet ended (the first page's worth).
func (c *chaos) unfinished(ctx context.Context, cl *client.Client) (int, error) {
	resp, err := cl.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Kind: chaosKind, PageSize: 500,
		States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_QUEUED, jobwatchv1.JobState_JOB_STATE_RUNNING}})
	if err != nil {
		return -1, err
	}
	return len(resp.GetJobs()), nil
}

// fetchJobs reads every job of the test, in full (attempts included).
func (c *chaos) fetchJobs(t *testing.T, ctx context.Context, cl *client.Client) map[string]*jobwatchv1.Job {
	jobs := map[string]*jobwatchv1.Job{}
	req := &jobwatchv1.ListJobsRequest{Kind: chaosKind, PageSize: 500, View: jobwatchv1.JobView_JOB_VIEW_FULL}
	for {
		resp, err := cl.JobService().ListJobs(ctx, req)
		if err != nil {
			t.Fatalf("list the jobs: %v", err)
		}
		for _, j := range resp.GetJobs() {
			jobs[j.GetId()] = j
		}
		if resp.GetNextPageToken() == "" {
			return jobs
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// restartReplica starts old's serve again on its address, as a
// supervisor would after the kill, with a log of its own.
func restartReplica(t *testing.T, ctx context.Context, old *replica, dbURL, cfg string) *replica {
	t.Helper()
	addr := strings.TrimPrefix(old.url, "http://")
	for try := 1; ; try++ {
		r := &replica{name: old.name, url: old.url, logs: &lockedBuffer{}, exited: make(chan struct{}), dead: make(chan struct{})}
		r.cmd = jobwatchCmd(ctx, "serve", "--addr", addr, "--db", dbURL, "--config", cfg, "--log-level", "warn")
		r.supervise(t)
		waitFor(t, "replica "+r.name+" answering again", func() bool { return r.hasExited() || r.answers() })
		if !r.hasExited() {
			return r
		}
		// The port may be held for a moment by the process that died.
		if try == 5 {
			t.Fatalf("replica %s did not start again: %s", r.name, r.logs.String())
		}
		chaosPause(ctx, 200*time.Millisecond)
	}
}

// chaosPause waits d, or until ctx ends.
func chaosPause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

// chaosBackend is a worker's remote backend that records what the server
// answered: each claim's jobs (or failure) and each acknowledged or
// refused completion.
type chaosBackend struct {
	remote client.WorkerBackend
	rec    *chaosRecords
	worker string
}

func (b *chaosBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	start := time.Now()
	l, err := b.remote.Claim(ctx, workerID, kinds, queues)
	n := 0
	if l != nil {
		n = 1
	}
	b.rec.claimed(b.worker, start, n, ctx.Err() == nil && err != nil)
	return l, err
}

// ClaimJobs keeps the remote backend's batched claims (client.BatchClaimer).
func (b *chaosBackend) ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) ([]*client.Lease, []*client.UndecodableJobError, error) {
	start := time.Now()
	leases, undecodable, err := b.remote.(client.BatchClaimer).ClaimJobs(ctx, workerID, kinds, queues, max)
	b.rec.claimed(b.worker, start, len(leases), ctx.Err() == nil && err != nil)
	return leases, undecodable, err
}

func (b *chaosBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	return b.remote.Heartbeat(ctx, l, percent, step)
}

func (b *chaosBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	b.rec.completing(l.Job.GetId(), l.Job.GetAttempt())
	err := b.remote.Complete(ctx, l, result)
	b.rec.completed(l.Job.GetId(), err)
	return err
}

func (b *chaosBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	return b.remote.Fail(ctx, l, jerr, retryable)
}

// chaosRun is one handler run, as its worker recorded it.
type chaosRun struct {
	job, queue, worker string
	attempt            int32
	start, end         time.Time // monotonic and wall clock (time.Now)
	cause              error     // why its ctx ended before it was done (ErrLeaseLost…), or nil
}

type chaosWait struct {
	id  string
	job *jobwatchv1.Job
	err error
}

// chaosClaim is one claim call of a worker: when it was made and
// answered, how many jobs it got, and whether it failed.
type chaosClaim struct {
	worker     string
	start, end time.Time
	jobs       int
	failed     bool // not the caller's doing
}

type chaosKill struct {
	replica string
	at      time.Time
}

// chaosRecords is everything the test's workers, submitters and killer
// recorded, for the checker.
type chaosRecords struct {
	mu          sync.Mutex
	runs        []*chaosRun
	acked       map[string]string // job id → queue, of every acknowledged submit
	ackedByKey  int               // acknowledged by already_exists on a retry with the key
	retries     int               // submits sent again after a failure
	abandoned   int               // submits whose answer never came before the submitters stopped
	completions map[string]int    // job id → completions the server acknowledged
	sent        map[string]int    // chaosAttempt → completions sent
	stale       int               // completions refused as stale
	waits       []chaosWait
	claims      []chaosClaim
	kills       []chaosKill
	errs        []error
}

func newChaosRecords() *chaosRecords {
	return &chaosRecords{acked: map[string]string{}, completions: map[string]int{}, sent: map[string]int{}}
}

func (r *chaosRecords) begin(j *jobwatchv1.Job, worker string) *chaosRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := &chaosRun{job: j.GetId(), queue: j.GetQueue(), worker: worker, attempt: j.GetAttempt(), start: time.Now()}
	r.runs = append(r.runs, run)
	return run
}

func (r *chaosRecords) end(run *chaosRun, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run.end, run.cause = time.Now(), cause
}

func (r *chaosRecords) acknowledged(id, queue string, byKey bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked[id] = queue
	if byKey {
		r.ackedByKey++
	}
}

func (r *chaosRecords) submitRetried()   { r.mu.Lock(); r.retries++; r.mu.Unlock() }
func (r *chaosRecords) submitAbandoned() { r.mu.Lock(); r.abandoned++; r.mu.Unlock() }

func (r *chaosRecords) failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *chaosRecords) waited(id string, j *jobwatchv1.Job, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, chaosWait{id: id, job: j, err: err})
}

func (r *chaosRecords) claimed(worker string, start time.Time, jobs int, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claims = append(r.claims, chaosClaim{worker: worker, start: start, end: time.Now(), jobs: jobs, failed: failed})
}

func (r *chaosRecords) completing(id string, attempt int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[chaosAttempt(id, attempt)]++
}

// chaosAttempt names one attempt of a job.
func chaosAttempt(id string, attempt int32) string { return fmt.Sprint(id, "/", attempt) }

func (r *chaosRecords) completed(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.completions[id]++
	case errors.Is(err, client.ErrLeaseLost):
		r.stale++
	}
}

func (r *chaosRecords) killed(name string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kills = append(r.kills, chaosKill{replica: name, at: at})
}

// check is the invariant checker: it fails t for every broken promise and
// returns the figures of the run. jobs are the test's jobs as the
// database has them at the end; logs are the replicas' stderr.
func (r *chaosRecords) check(t *testing.T, jobs map[string]*jobwatchv1.Job, logs []*lockedBuffer) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var figures []string
	fig := func(format string, args ...any) { figures = append(figures, fmt.Sprintf(format, args...)) }
	for _, err := range r.errs {
		t.Errorf("a submitter failed: %v", err)
	}

	// Every acknowledged submit ended SUCCEEDED.
	notSucceeded := 0
	for id := range r.acked {
		j := jobs[id]
		if j.GetState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			continue
		}
		notSucceeded++
		switch {
		case notSucceeded > 10:
		case j == nil:
			t.Errorf("job %s, acknowledged, is not in the database", id)
		default:
			t.Errorf("job %s, acknowledged, ended %v (attempt %d)", id, j.GetState(), j.GetAttempt())
		}
	}
	if notSucceeded > 0 {
		t.Errorf("%d of %d acknowledged jobs did not end SUCCEEDED", notSucceeded, len(r.acked))
	}
	fig("submits: %d acknowledged (%d of them, whose answer was lost, by already_exists when sent again with their unique key); %d sent again after a failure; %d never answered when the submitters stopped",
		len(r.acked), r.ackedByKey, r.retries, r.abandoned)
	// A submit sent again with its key after its answer was lost makes a
	// second job when the first had already ended: a unique key holds
	// only among active jobs.
	byKey := map[string]int{}
	for _, j := range jobs {
		byKey[j.GetUniqueKey()]++
	}
	twice := 0
	for _, n := range byKey {
		if n > 1 {
			twice++
		}
	}
	fig("jobs: %d acknowledged, %d SUCCEEDED; %d in the database in all (beyond the acknowledged: submits whose answer never came, run all the same); two jobs for %d unique keys (a submit made, its answer lost, its job ended before the same submit came again)",
		len(r.acked), len(r.acked)-notSucceeded, len(jobs), twice)

	// No completion acknowledged twice.
	completed := 0
	for id, n := range r.completions {
		completed += n
		if n > 1 {
			t.Errorf("job %s: %d completions acknowledged", id, n)
		}
	}
	fig("completions: %d acknowledged, none twice for a job; %d refused as stale (a completion sent again after its answer was lost, or after its lease)",
		completed, r.stale)

	// No two runs of one job overlap; re-runs, and why.
	byJob := map[string][]*chaosRun{}
	for _, run := range r.runs {
		byJob[run.job] = append(byJob[run.job], run)
	}
	var reruns, afterLeaseLost, afterUnsent, afterUnacknowledged int
	for id, runs := range byJob {
		slices.SortFunc(runs, func(a, b *chaosRun) int { return a.start.Compare(b.start) })
		for i := 1; i < len(runs); i++ {
			prev, run := runs[i-1], runs[i]
			reruns++
			if prev.end.IsZero() || prev.end.After(run.start) {
				t.Errorf("job %s: run of attempt %d by %s (%s–%s) overlaps the run of attempt %d by %s starting %s",
					id, prev.attempt, prev.worker, chaosClock(prev.start), chaosClock(prev.end), run.attempt, run.worker, chaosClock(run.start))
			}
			switch {
			case errors.Is(prev.cause, client.ErrLeaseLost):
				afterLeaseLost++
			case r.sent[chaosAttempt(id, prev.attempt)] == 0:
				afterUnsent++
			default:
				afterUnacknowledged++
			}
		}
	}
	// What the database says of the attempts: those ended by an expired
	// lease, and of those how many never had a handler run (a claim
	// committed by a replica killed before it answered).
	ran := map[string]bool{}
	for _, run := range r.runs {
		ran[chaosAttempt(run.job, run.attempt)] = true
	}
	var expired, claimsLost, rerunJobs int
	for id, j := range jobs {
		if j.GetAttempt() > 1 {
			rerunJobs++
		}
		for _, a := range j.GetAttempts() {
			if a.GetError().GetType() != "LeaseExpired" {
				continue
			}
			expired++
			if !ran[chaosAttempt(id, a.GetAttempt())] {
				claimsLost++
			}
		}
	}
	fig("runs: %d handler runs of %d jobs; %d runs again (%d after the worker stopped the run on losing its lease; after a run that ended on its own: %d whose completion the worker never sent, having found its lease lost, and %d whose completion was sent but never acknowledged), no two runs of one job overlapping",
		len(r.runs), len(byJob), reruns, afterLeaseLost, afterUnsent, afterUnacknowledged)
	fig("leases: %d jobs ran more than one attempt; %d attempts ended by an expired lease, %d of them claims that no handler ever ran (committed by a replica killed before it answered)",
		rerunJobs, expired, claimsLost)

	// The queue rules, on the handlers' own clocks.
	byQueue := map[string][]handlerRun{}
	for _, run := range r.runs {
		q := run.queue
		if q == "pool-a" || q == "pool-b" {
			q = "pool"
		}
		end := run.end
		if end.IsZero() {
			end = time.Now()
		}
		byQueue[q] = append(byQueue[q], handlerRun{id: run.job, attempt: run.attempt, start: run.start, end: end})
	}
	serial, bounded, pooled := mostAtOnce(byQueue["serial"]), mostAtOnce(byQueue["bounded"]), mostAtOnce(byQueue["pool"])
	if serial > 1 {
		t.Errorf("the serial queue ran %d handlers at once", serial)
	}
	if bounded > chaosMaxRunning {
		t.Errorf("the queue with max_running %d ran %d handlers at once", chaosMaxRunning, bounded)
	}
	if pooled > chaosPoolUnits {
		t.Errorf("the queues of the pool of %d units ran %d handlers at once", chaosPoolUnits, pooled)
	}
	fig("queue rules: serial ran at most %d at once (%d runs); max_running %d: at most %d (%d runs); pool of %d units over two queues: at most %d (%d runs)",
		serial, len(byQueue["serial"]), chaosMaxRunning, bounded, len(byQueue["bounded"]), chaosPoolUnits, pooled, len(byQueue["pool"]))

	// Every WaitForJob caller got its job's end.
	for _, w := range r.waits {
		end := jobs[w.id]
		switch {
		case w.err != nil:
			t.Errorf("WaitForJob(%s): %v", w.id, w.err)
		case !client.Terminal(w.job.GetState()):
			t.Errorf("WaitForJob(%s) returned %v, not an end", w.id, w.job.GetState())
		case w.job.GetState() != end.GetState() || w.job.GetVersion() != end.GetVersion():
			t.Errorf("WaitForJob(%s) returned %v at version %d; the job ended %v at version %d",
				w.id, w.job.GetState(), w.job.GetVersion(), end.GetState(), end.GetVersion())
		}
	}
	fig("waits: %d WaitForJob callers, each given its job's end", len(r.waits))

	// The workers whose parked claims a kill cut: from the kill to their
	// next claim that did not fail (sent to another replica), and to the
	// first job one of them claimed there.
	var failed, reasked, firsts []time.Duration
	for _, k := range r.kills {
		first := time.Duration(-1)
		for _, cut := range r.cutBy(k) {
			failed = append(failed, cut.end.Sub(k.at))
			asked := false
			for _, c := range r.claims {
				if c.worker != cut.worker || c.start.Before(cut.end) || c.failed {
					continue
				}
				if !asked {
					reasked = append(reasked, c.start.Sub(k.at))
					asked = true
				}
				if c.jobs > 0 {
					if d := c.end.Sub(k.at); first < 0 || d < first {
						first = d
					}
					break
				}
			}
		}
		if first >= 0 {
			firsts = append(firsts, first)
		}
	}
	if len(reasked) > 0 && len(firsts) > 0 {
		fig("failover: %d parked claims cut by the %d kills; after its kill, each claim failed at %s, was asked again of another replica at %s; the first job one of those workers claimed there came at %s",
			len(failed), len(r.kills), chaosSpread(failed), chaosSpread(reasked), chaosSpread(firsts))
	}

	// Nothing in any replica's log that a test must not pass over.
	for _, l := range logs {
		for _, bad := range []string{"DATA RACE", "panic:"} {
			if strings.Contains(l.String(), bad) {
				t.Errorf("a replica's log says %q:\n%s", bad, l.String())
			}
		}
	}
	return figures
}

// cutBy is the claims that were parked when kill k came and failed
// within a second of it: those parked on the killed replica.
func (r *chaosRecords) cutBy(k chaosKill) []chaosClaim {
	var cut []chaosClaim
	for _, c := range r.claims {
		if c.failed && c.start.Before(k.at) && !c.end.Before(k.at) && c.end.Sub(k.at) < time.Second {
			cut = append(cut, c)
		}
	}
	return cut
}

// chaosSpread shows durations as their median and slowest.
func chaosSpread(ds []time.Duration) string {
	slices.Sort(ds)
	return fmt.Sprintf("%v at the median (slowest %v)", ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}

// chaosClock shows a run's time on the wall clock.
func chaosClock(at time.Time) string {
	if at.IsZero() {
		return "still running"
	}
	return at.Format("15:04:05.000000")
}
