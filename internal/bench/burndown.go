package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/postgres"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// The burndown scenario measures how jobwatch copes with depth, in the
// shape of River's own benchmark: submitters insert N no-op jobs, then
// --burndown-slots worker slots claim and complete them all; the figure
// is N over the time from the workers' start to the last completion,
// with the latency of every backend claim call that returned work. The
// steady part runs the throughput scenario's submit → claim → complete
// loop with and without a deep backlog of another kind waiting in the
// same queue, the worst case for a claim that must skip what it does not
// run.

// idleKind is the kind of the steady part's deep backlog: no worker of
// the bench runs it, so it waits behind every claim.
const idleKind = "bench-idle"

// Burn-down modes (--burndown-modes) and stores.
const (
	modeInproc    = "inproc"
	modeRPC       = "rpc"
	storeSQLite   = "sqlite"
	storePostgres = "postgres"
)

// burndownFigures are the burndown scenario's figures (jobwatch only).
type burndownFigures struct {
	Runs   []burndownRunFigures `json:"runs"`
	Steady []steadyFigures      `json:"steady"`
}

// burndownRunFigures is one burn-down: Depth jobs inserted, then worked
// off by every slot at once.
type burndownRunFigures struct {
	Mode  string `json:"mode"`  // inproc or rpc
	Store string `json:"store"` // sqlite or postgres
	Depth int    `json:"depth"`
	// Priorities is the jobs' priority layout (--burndown-priorities):
	// "0", every job at 0, or "0-9", job i at i mod 10.
	Priorities string `json:"priorities"`
	// InsertPerS is the rate of the inserts (Engine.Submit from
	// --burndown-submitters goroutines). Only in process: over RPC the
	// database is filled the same way before serve starts on it, since
	// a million SubmitJob calls would take longer than the burn-down.
	InsertPerS *float64 `json:"insert_per_s,omitempty"`
	// Completed counts the completions the backends acknowledged: Depth,
	// unless --burndown-cap passed first, when BurndownPerS is the rate
	// of the part done.
	Completed int `json:"completed"`
	// Capped says --burndown-cap cut the run short (Completed < Depth).
	Capped       bool    `json:"capped,omitempty"`
	BurndownS    float64 `json:"burndown_s"`
	BurndownPerS float64 `json:"burndown_per_s"`
	claimFigures
}

// claimFigures are the backend claim calls that returned work, each
// timed around the call (one round trip over RPC); a batch claim
// (client.BatchClaimer) is one call however many jobs it returns.
type claimFigures struct {
	Calls int     `json:"claim_calls"`
	Jobs  int     `json:"claimed_jobs"`
	P50MS float64 `json:"claim_p50_ms"`
	P99MS float64 `json:"claim_p99_ms"`
}

// steadyFigures is the steady loop with Backlog ready jobs of idleKind
// waiting in the same queue (0: none).
type steadyFigures struct {
	Mode    string  `json:"mode"`
	Store   string  `json:"store"`
	Backlog int     `json:"backlog"`
	PerS    float64 `json:"per_s"`
	// Claim calls that returned work over --duration, including any
	// time parked until a submit arrived.
	claimFigures
}

// burndownSettings are the burndown scenario's flags, in the JSON when it
// ran.
type burndownSettings struct {
	Depths     []int    `json:"depths"`
	Slots      int      `json:"slots"`
	RPCWorkers int      `json:"rpc_workers"`
	Submitters int      `json:"submitters"`
	Modes      []string `json:"modes"`
	CapS       float64  `json:"cap_s"`
	Priorities []string `json:"priorities"`
	Steady     bool     `json:"steady"`
}

// priorityLayout is how the burn-down's jobs are spread over priorities
// (--burndown-priorities): job i at lo + i mod (hi-lo+1), so that with
// more than one priority they alternate job by job, as jobs of mixed
// urgency submitted together leave them, and a claim of the most urgent
// must take every (hi-lo+1)th row.
type priorityLayout struct{ lo, hi int32 }

// of is job i's priority.
func (p priorityLayout) of(i int64) int32 { return p.lo + int32(i%int64(p.hi-p.lo+1)) }

func (p priorityLayout) String() string {
	if p.lo == p.hi {
		return strconv.Itoa(int(p.lo))
	}
	return fmt.Sprintf("%d-%d", p.lo, p.hi)
}

// parsePriorityLayout reads "P" or "P-Q", priorities of jobtype's range.
func parsePriorityLayout(s string) (priorityLayout, error) {
	lo, hi, ranged := strings.Cut(s, "-")
	if !ranged {
		hi = lo
	}
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	if errA != nil || errB != nil || a < jobtype.MinPriority || b > jobtype.MaxPriority || a > b {
		return priorityLayout{}, fmt.Errorf("%q is not a priority from %d to %d or a range P-Q of them", s, jobtype.MinPriority, jobtype.MaxPriority)
	}
	return priorityLayout{lo: int32(a), hi: int32(b)}, nil
}

// burndown runs the scenario on each store of --burndown-stores
// (PostgreSQL only with --postgres), in each mode of --burndown-modes;
// srv is the jobwatch whose serve the RPC runs start.
func (b *benchRun) burndown(ctx context.Context, srv benchServer) (*burndownFigures, error) {
	f := &burndownFigures{}
	for _, st := range b.burndownStores() {
		for _, mode := range b.o.burndownModes {
			for _, depth := range b.o.depths {
				// The layouts of one depth run one after the other, so
				// that what they are compared with ran beside them.
				for _, p := range b.o.burndownPriorities {
					b.progress("burndown: %s, %s, %d queued, priorities %s", modeLabel(mode, b.o), storeLabel(st), depth, p)
					r, err := b.burndownOnce(ctx, srv, st, mode, depth, p, 1, b.o.burndownFillBatch)
					if err != nil {
						return nil, fmt.Errorf("%s, %s, %d queued, priorities %s: %w", mode, st, depth, p, err)
					}
					f.Runs = append(f.Runs, r)
				}
			}
		}
		if !b.o.burndownSteady {
			continue
		}
		deepest := slices.Max(b.o.depths)
		for _, backlog := range []int{0, deepest} {
			s, err := b.steady(ctx, srv, st, backlog)
			if err != nil {
				return nil, fmt.Errorf("steady, %s, %d waiting: %w", st, backlog, err)
			}
			f.Steady = append(f.Steady, s...)
		}
	}
	return f, nil
}

// burndownStores are the stores of --burndown-stores that this run
// measures: PostgreSQL only with --postgres.
func (b *benchRun) burndownStores() []string {
	var stores []string
	for _, st := range b.o.burndownStores {
		if st == storeSQLite || b.o.postgres != "" {
			stores = append(stores, st)
		}
	}
	return stores
}

// burndownOnce inserts depth jobs of priorities p, spread over tenants
// (see spreadTenant), into a fresh database and burns them down in mode.
func (b *benchRun) burndownOnce(ctx context.Context, srv benchServer, storeName, mode string, depth int, p priorityLayout, tenants, batch int) (r burndownRunFigures, err error) {
	r = burndownRunFigures{Mode: mode, Store: storeName, Depth: depth, Priorities: p.String()}
	db, err := b.newBurndownDB(ctx, storeName, fmt.Sprintf("burndown-%s-%d-p%s", mode, depth, p))
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	st, err := db.open(ctx)
	if err != nil {
		return r, err
	}
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	engine, stopEngine := b.startEngine(ctx, st)
	defer func() {
		if stopEngine != nil {
			stopEngine()
		}
	}()
	insert, err := b.fill(ctx, engine, throughputKind, depth, p, tenants, batch)
	if err != nil {
		return r, err
	}

	var backends []client.WorkerBackend
	var slots []int
	var alive func() error
	stopServer := func() {}
	switch mode {
	case modeInproc:
		r.InsertPerS = &insert
		backends, slots = []client.WorkerBackend{inproc.WorkerBackend(engine, 0)}, []int{b.o.burndownSlots}
		alive = func() error { return nil }
	case modeRPC:
		stopEngine()
		stopEngine = nil
		if err := st.Close(); err != nil {
			return r, err
		}
		st = nil
		p, err := startServer(ctx, srv, b.dir, db.server)
		if err != nil {
			return r, err
		}
		defer p.stop()
		stopServer = p.stop
		slots = splitSlots(b.o.burndownSlots, b.o.burndownRPCWorkers)
		for range slots {
			c := b.newClient(p.base, 1)
			defer c.Close()
			backends = append(backends, c.WorkerBackend())
		}
		alive = p.alive
	}

	c := newCrew(int64(depth), nil)
	t0 := time.Now()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	wait := c.run(runCtx, stop, backends, slots, b)
	capTimer := time.NewTimer(b.o.burndownCap)
	defer capTimer.Stop()
	var end time.Time
	var completed int64
	select {
	case <-c.done:
		end, completed = c.finishedAt, int64(depth)
	case <-capTimer.C:
		end, completed = time.Now(), c.completed.Load()
		b.progress("  --burndown-cap (%v) passed: %d of %d jobs completed", b.o.burndownCap, completed, depth)
	case <-runCtx.Done():
	}
	stop(nil)
	if err := errors.Join(wait(), alive()); err != nil {
		return r, err
	}
	if completed == 0 {
		return r, errors.New("no job completed")
	}
	took := end.Sub(t0)
	r.Completed, r.Capped, r.BurndownS = int(completed), completed < int64(depth), took.Seconds()
	r.BurndownPerS = float64(completed) / took.Seconds()
	r.claimFigures = c.claimFigures()
	b.progress("  %.0f jobs/s (%d in %.1fs); %s", r.BurndownPerS, completed, took.Seconds(), r.claimFigures)

	if st == nil {
		// The server stops first: it holds a SQLite file alone.
		stopServer()
		reopened, err := db.open(ctx)
		if err != nil {
			return r, fmt.Errorf("open the database to count its jobs: %w", err)
		}
		st = reopened
	}
	return r, checkBurnedDown(ctx, st, int64(depth), completed)
}

// checkBurnedDown checks the database against the completions the
// workers counted: every one SUCCEEDED, and nothing left to run when the
// burn-down finished.
func checkBurnedDown(ctx context.Context, st store.Store, depth, completed int64) error {
	counts, err := st.CountByState(ctx)
	if err != nil {
		return fmt.Errorf("count jobs: %w", err)
	}
	if got := counts[jobtype.Succeeded]; got < completed {
		return fmt.Errorf("%d jobs SUCCEEDED, but the workers had %d completions acknowledged", got, completed)
	}
	if completed == depth && counts[jobtype.Queued]+counts[jobtype.Running] != 0 {
		return fmt.Errorf("all %d completions acknowledged, but %d jobs QUEUED and %d RUNNING remain",
			depth, counts[jobtype.Queued], counts[jobtype.Running])
	}
	return nil
}

// steady runs the steady loop on a fresh database of storeName, first in
// process and then over RPC (as --burndown-modes says), with backlog
// ready jobs of idleKind inserted first; both modes share the backlog,
// which no worker takes.
func (b *benchRun) steady(ctx context.Context, srv benchServer, storeName string, backlog int) (out []steadyFigures, err error) {
	db, err := b.newBurndownDB(ctx, storeName, fmt.Sprintf("steady-%d", backlog))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	st, err := db.open(ctx)
	if err != nil {
		return nil, err
	}
	engine, stopEngine := b.startEngine(ctx, st)
	if backlog > 0 {
		b.progress("burndown: steady, %s: %d ready jobs of a kind no worker runs", storeLabel(storeName), backlog)
		if _, err := b.fill(ctx, engine, idleKind, backlog, priorityLayout{}, 1, b.o.burndownFillBatch); err != nil {
			stopEngine()
			st.Close()
			return nil, err
		}
	}
	if slices.Contains(b.o.burndownModes, modeInproc) {
		b.progress("burndown: steady, in process, %s, %d waiting behind", storeLabel(storeName), backlog)
		submit := func(ctx context.Context, i int64) error {
			_, err := engine.Submit(ctx, jobs.SubmitRequest{Kind: throughputKind, Payload: json.RawMessage(strconv.FormatInt(i, 10))})
			return err
		}
		s, err := b.steadyOver(ctx, []client.WorkerBackend{inproc.WorkerBackend(engine, 0)}, []int{b.o.burndownSlots}, submit, func() error { return nil })
		if err != nil {
			stopEngine()
			st.Close()
			return nil, fmt.Errorf("in process: %w", err)
		}
		s.Mode, s.Store, s.Backlog = modeInproc, storeName, backlog
		out = append(out, s)
	}
	stopEngine()
	if err := st.Close(); err != nil {
		return nil, err
	}
	if !slices.Contains(b.o.burndownModes, modeRPC) {
		return out, nil
	}
	b.progress("burndown: steady, %s, %s, %d waiting behind", modeLabel(modeRPC, b.o), storeLabel(storeName), backlog)
	p, err := startServer(ctx, srv, b.dir, db.server)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	submitter := b.newClient(p.base, 1)
	defer submitter.Close()
	submit := func(ctx context.Context, i int64) error {
		_, err := submitter.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: throughputKind, Payload: structpb.NewNumberValue(float64(i))})
		return err
	}
	slots := splitSlots(b.o.burndownSlots, b.o.burndownRPCWorkers)
	var backends []client.WorkerBackend
	for range slots {
		c := b.newClient(p.base, 1)
		defer c.Close()
		backends = append(backends, c.WorkerBackend())
	}
	s, err := b.steadyOver(ctx, backends, slots, submit, p.alive)
	if err != nil {
		return nil, fmt.Errorf("over RPC: %w", err)
	}
	s.Mode, s.Store, s.Backlog = modeRPC, storeName, backlog
	return append(out, s), nil
}

// steadyOver runs the steady loop: --burndown-submitters goroutines keep
// at most --backlog jobs unfinished while the workers complete them;
// jobs/s and claim latency over --duration after --warmup. Then the
// submitters stop and the workers finish what was submitted, so that
// every submitted job is accounted for.
func (b *benchRun) steadyOver(ctx context.Context, backends []client.WorkerBackend, slots []int,
	submit func(context.Context, int64) error, alive func() error) (steadyFigures, error) {
	var s steadyFigures
	tokens := make(chan struct{}, b.o.backlog) // one per unfinished job
	c := newCrew(0, tokens)
	workCtx, stopWork := context.WithCancelCause(ctx)
	defer stopWork(nil)
	wait := c.run(workCtx, stopWork, backends, slots, b)
	defer func() { stopWork(nil); wait() }()

	submitCtx, stopSubmits := context.WithCancel(workCtx)
	defer stopSubmits()
	var submitted atomic.Int64
	var submitters sync.WaitGroup
	keepSubmitting(submitCtx, stopWork, &submitters, b.o.burndownSubmitters, tokens, &submitted, submit)
	sleep := func(d time.Duration) error { return sleepCtx(workCtx, d) }
	if err := sleep(b.o.warmup); err != nil {
		return s, err
	}
	c.resetClaims()
	c0, t0 := c.completed.Load(), time.Now()
	if err := sleep(b.o.duration); err != nil {
		return s, err
	}
	c1, t1 := c.completed.Load(), time.Now()
	s.claimFigures = c.claimFigures()
	if c1 == c0 {
		return s, errors.New("no job completed")
	}
	s.PerS = float64(c1-c0) / t1.Sub(t0).Seconds()
	b.progress("  %.0f jobs/s; %s", s.PerS, s.claimFigures)

	stopSubmits()
	submitters.Wait()
	// A submit whose context ended may still have committed: the drain
	// waits for the ones acknowledged, and the database check of the
	// burn-down is not repeated here.
	deadline := time.Now().Add(time.Minute)
	for c.completed.Load() < submitted.Load() {
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%d of %d submitted jobs completed a minute after the submits stopped", c.completed.Load(), submitted.Load())
		}
		if err := sleep(10 * time.Millisecond); err != nil {
			return s, err
		}
	}
	return s, alive()
}

// burndownDB is the database of one run: a SQLite file in the bench's
// directory or a schema of its own in the --postgres database.
type burndownDB struct {
	open   func(context.Context) (store.Store, error)
	server serverOptions // how serve opens the same database
	drop   func() error
}

func (b *benchRun) newBurndownDB(ctx context.Context, storeName, name string) (*burndownDB, error) {
	opts := b.serverOptions(name)
	if storeName == storePostgres {
		url, drop, err := postgresSchema(ctx, b.o.postgres)
		if err != nil {
			return nil, err
		}
		opts.dbURL = url
		return &burndownDB{
			open:   func(ctx context.Context) (store.Store, error) { return postgres.Open(ctx, url) },
			server: opts, drop: drop,
		}, nil
	}
	// The file startServer names for this run, so that serve opens the
	// database the bench filled.
	path := filepath.Join(b.dir, "jobwatch-"+name+".db")
	return &burndownDB{
		open:   func(context.Context) (store.Store, error) { return sqlite.Open(path) },
		server: opts,
		drop: func() error {
			var errs []error
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}, nil
}

// startEngine runs an engine over st, as serve would, until stop.
func (b *benchRun) startEngine(ctx context.Context, st store.Store) (*jobs.Engine, func()) {
	engine := jobs.New(st, jobs.Config{Logger: b.quiet})
	engineCtx, stopEngine := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { engine.Run(engineCtx); close(done) }()
	return engine, func() { stopEngine(); engine.Shutdown(); <-done }
}

// fill submits n no-op jobs of kind with priorities p, spread over
// tenants (see spreadTenant), through the engine from
// --burndown-submitters goroutines, and returns the inserts per second.
// Each goroutine takes the next batch jobs and submits them in one
// SubmitMany (one Submit each with several tenants, so that their jobs
// interleave), so the rows come nearly in the order of i, and of p.of(i).
func (b *benchRun) fill(ctx context.Context, engine *jobs.Engine, kind string, n int, p priorityLayout, tenants, size int) (float64, error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	batch := int64(max(size, 1))
	if tenants > 1 {
		batch = 1
	}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range b.o.burndownSubmitters {
		wg.Go(func() {
			for last := next.Add(batch); last-batch < int64(n); last = next.Add(batch) {
				var rs []jobs.SubmitRequest
				for i := last - batch + 1; i <= min(last, int64(n)); i++ {
					priority := p.of(i)
					rs = append(rs, jobs.SubmitRequest{Tenant: spreadTenant(i, tenants), Kind: kind,
						Payload: json.RawMessage(strconv.FormatInt(i, 10)), Priority: &priority})
				}
				var err error
				if len(rs) == 1 {
					_, err = engine.Submit(ctx, rs[0])
				} else {
					_, err = engine.SubmitMany(ctx, rs)
				}
				if err != nil {
					stop(fmt.Errorf("submit: %w", err))
					return
				}
				done.Add(int64(len(rs)))
			}
		})
	}
	// A million inserts take minutes: say how far they got now and then.
	filled := make(chan struct{})
	go func() { wg.Wait(); close(filled) }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-filled:
			waiting = false
		case <-tick.C:
			b.progress("  inserted %d of %d", done.Load(), n)
		}
	}
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	rate := float64(n) / took.Seconds()
	b.progress("  inserted %d %s jobs in %.1fs: %.0f jobs/s", n, kind, took.Seconds(), rate)
	return rate, nil
}

// splitSlots spreads slots over workers as evenly as can be.
func splitSlots(slots, workers int) []int {
	workers = min(workers, slots)
	out := make([]int, workers)
	for i := range out {
		out[i] = slots / workers
		if i < slots%workers {
			out[i]++
		}
	}
	return out
}

func modeLabel(mode string, o benchOptions) string {
	if mode == modeInproc {
		return "in process"
	}
	slots := splitSlots(o.burndownSlots, o.burndownRPCWorkers)
	if slots[0] == slots[len(slots)-1] {
		return fmt.Sprintf("over RPC (%d workers × %d)", len(slots), slots[0])
	}
	return fmt.Sprintf("over RPC (%d workers, %d slots)", len(slots), o.burndownSlots)
}

func storeLabel(s string) string {
	if s == storePostgres {
		return "PostgreSQL"
	}
	return "SQLite"
}

func (f claimFigures) String() string {
	return fmt.Sprintf("claim p50 %.2f ms, p99 %.2f ms over %d calls (%.1f jobs a call)",
		f.P50MS, f.P99MS, f.Calls, float64(f.Jobs)/float64(max(f.Calls, 1)))
}

// crew is the workers of one run: client.Workers running no-op jobs of
// throughputKind over timed backends.
type crew struct {
	completed  atomic.Int64
	target     int64         // done closes when completed reaches it; 0: never
	done       chan struct{} // see target
	finishedAt time.Time     // when completed reached target; read after done
	tokens     chan struct{} // one per unfinished job, freed as each ends; nil: none

	mu          sync.Mutex
	claims      []time.Duration
	claimedJobs int
}

func newCrew(target int64, tokens chan struct{}) *crew {
	return &crew{target: target, done: make(chan struct{}), tokens: tokens}
}

// run starts a Worker per backend with slots[i] slots, until ctx ends;
// a Worker that fails stops ctx through stop. wait waits for them all
// to drain and returns the first failure.
func (c *crew) run(ctx context.Context, stop context.CancelCauseFunc, backends []client.WorkerBackend, slots []int, b *benchRun) (wait func() error) {
	var wg sync.WaitGroup
	for i, be := range backends {
		w := client.NewWorker(timed(be, c),
			client.WorkerConfig{ID: fmt.Sprintf("burndown-%d", i), Concurrency: slots[i], Logger: b.quiet})
		w.Handle(throughputKind, func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return map[string]bool{"ok": true}, nil
		})
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				stop(fmt.Errorf("worker: %w", err))
			}
		})
	}
	return func() error {
		wg.Wait()
		if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// claimed records a claim call that took d and returned jobs jobs.
func (c *crew) claimed(d time.Duration, n int) {
	c.mu.Lock()
	c.claims = append(c.claims, d)
	c.claimedJobs += n
	c.mu.Unlock()
}

func (c *crew) resetClaims() {
	c.mu.Lock()
	c.claims, c.claimedJobs = c.claims[:0], 0
	c.mu.Unlock()
}

// claimFigures are the claim calls that returned work since the last
// reset: how many, the jobs they returned, and their p50 and p99.
func (c *crew) claimFigures() claimFigures {
	c.mu.Lock()
	ds, n := slices.Clone(c.claims), c.claimedJobs
	c.mu.Unlock()
	slices.Sort(ds)
	return claimFigures{Calls: len(ds), Jobs: n, P50MS: ms(quantile(ds, 0.5)), P99MS: ms(quantile(ds, 0.99))}
}

// ended counts a job the backend acknowledged as ended.
func (c *crew) ended(completed bool) {
	if completed && c.completed.Add(1) == c.target {
		c.finishedAt = time.Now()
		close(c.done)
	}
	if c.tokens != nil {
		select { // never blocking: a report retried after an error must not hang
		case <-c.tokens:
		default:
		}
	}
}

// timedBackend times each claim call that returns work, and counts
// completions. It must offer every claim method client.Worker may call,
// or the Worker would fall back to the ones it does offer: over a
// client.BatchClaimer it is a timedBatchBackend (see timed).
type timedBackend struct {
	client.WorkerBackend
	crew *crew
}

// timedBatchBackend is a timedBackend over a client.BatchClaimer; a
// batch claim is one call, however many jobs it returns.
type timedBatchBackend struct {
	*timedBackend
	batch client.BatchClaimer
}

// timed wraps be for c, keeping its batch claims if it has them.
func timed(be client.WorkerBackend, c *crew) client.WorkerBackend {
	t := &timedBackend{WorkerBackend: be, crew: c}
	if bc, ok := be.(client.BatchClaimer); ok {
		return &timedBatchBackend{timedBackend: t, batch: bc}
	}
	return t
}

func (t *timedBatchBackend) ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) ([]*client.Lease, []*client.UndecodableJobError, error) {
	t0 := time.Now()
	ls, undecodable, err := t.batch.ClaimJobs(ctx, workerID, kinds, queues, max)
	if n := len(ls) + len(undecodable); n > 0 {
		t.crew.claimed(time.Since(t0), n)
	}
	return ls, undecodable, err
}

func (t *timedBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	t0 := time.Now()
	l, err := t.WorkerBackend.Claim(ctx, workerID, kinds, queues)
	if err == nil && l != nil {
		t.crew.claimed(time.Since(t0), 1)
	}
	return l, err
}

func (t *timedBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	err := t.WorkerBackend.Complete(ctx, l, result)
	t.crew.ended(err == nil)
	return err
}

func (t *timedBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	err := t.WorkerBackend.Fail(ctx, l, jerr, retryable)
	t.crew.ended(false)
	return err
}
