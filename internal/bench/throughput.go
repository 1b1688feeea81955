package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// throughputKind is the kind of the throughput scenarios' no-op jobs.
const throughputKind = "bench"

// throughputRPC runs --workers remote Workers, each with a client of its
// own, against a fresh srv process, and returns the jobs completed per
// second over --duration.
func (b *benchRun) throughputRPC(ctx context.Context, srv benchServer) (float64, error) {
	p, err := startServer(ctx, srv, b.dir, b.serverOptions("throughput"))
	if err != nil {
		return 0, err
	}
	defer p.stop()
	return b.throughputOver(ctx, []*serverProc{p})
}

// throughputOver runs the throughput-rpc scenario against running server
// processes (replicas of one database when there are several): worker i
// and the submits of job i go to procs[i%len(procs)], as a round-robin
// load balancer would send them.
func (b *benchRun) throughputOver(ctx context.Context, procs []*serverProc) (float64, error) {
	var submitters []*client.Client
	for _, p := range procs {
		c := b.newClient(p.base, 1)
		defer c.Close()
		submitters = append(submitters, c)
	}
	backends := make([]client.WorkerBackend, b.o.workers)
	for i := range backends {
		c := b.newClient(procs[i%len(procs)].base, 1)
		defer c.Close()
		backends[i] = c.WorkerBackend()
	}
	submit := func(ctx context.Context, i int64) error {
		c := submitters[i%int64(len(submitters))]
		_, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: throughputKind, Payload: structpb.NewNumberValue(float64(i))})
		return err
	}
	var serverCPU []func() float64
	var benchCPU func() float64
	for _, p := range procs {
		s, b := cpuMeter(p)
		serverCPU, benchCPU = append(serverCPU, s), b
	}
	t0 := time.Now()
	rate, err := b.throughput(ctx, backends, b.o.submitters, submit)
	for _, p := range procs {
		if err == nil {
			err = p.alive()
		}
	}
	took := time.Since(t0).Seconds()
	var used float64
	for _, s := range serverCPU {
		used += s()
	}
	if err == nil {
		// A run cut short (Ctrl-C) measured nothing worth a line.
		b.progress("  %.0f jobs/s; the server processes used %.0f%% of a core, the bench %.0f%%", rate, used/took*100, benchCPU()/took*100)
	}
	return rate, err
}

// throughputInproc runs --inproc-workers Workers over an embedded engine on a
// SQLite file, in this process, and returns the jobs completed per
// second over --duration.
func (b *benchRun) throughputInproc(ctx context.Context) (float64, error) {
	st, err := sqlite.Open(filepath.Join(b.dir, "inproc.db"))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	engine := jobs.New(st, jobs.Config{Logger: b.quiet})
	engineCtx, stopEngine := context.WithCancel(ctx)
	engineDone := make(chan struct{})
	go func() { engine.Run(engineCtx); close(engineDone) }()
	defer func() { stopEngine(); engine.Shutdown(); <-engineDone }()

	backends := make([]client.WorkerBackend, b.o.inprocWorkers)
	for i := range backends {
		backends[i] = inproc.WorkerBackend(engine, 0)
	}
	submit := func(ctx context.Context, i int64) error {
		_, err := engine.Submit(ctx, jobs.SubmitRequest{Kind: throughputKind, Payload: json.RawMessage(fmt.Sprint(i))})
		return err
	}
	return b.throughput(ctx, backends, b.o.inprocSubmitters, submit)
}

// throughput runs one Worker per backend, one job at a time each, while
// submitters goroutines keep at most --backlog jobs unfinished, and
// counts the completions the backends acknowledge over --duration after
// --warmup.
func (b *benchRun) throughput(ctx context.Context, backends []client.WorkerBackend, submitters int,
	submit func(context.Context, int64) error) (float64, error) {
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var completed atomic.Int64
	backlog := make(chan struct{}, b.o.backlog) // one token per unfinished job
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop(nil) // before wg.Wait: every goroutine ends with runCtx

	for i, be := range backends {
		w := client.NewWorker(&countingBackend{WorkerBackend: be, completed: &completed, backlog: backlog},
			client.WorkerConfig{ID: fmt.Sprintf("bench-%d", i), Concurrency: 1, Logger: b.quiet})
		w.Handle(throughputKind, func(context.Context, *jobwatchv1.Job, client.Progress) (any, error) {
			return map[string]bool{"ok": true}, nil
		})
		wg.Go(func() {
			if err := w.Run(runCtx); err != nil {
				stop(fmt.Errorf("worker: %w", err))
			}
		})
	}
	var seq atomic.Int64
	keepSubmitting(runCtx, stop, &wg, submitters, backlog, &seq, submit)

	sleep := func(d time.Duration) error { return sleepCtx(runCtx, d) }
	if err := sleep(b.o.warmup); err != nil {
		return 0, err
	}
	c0, t0 := completed.Load(), time.Now()
	if err := sleep(b.o.duration); err != nil {
		return 0, err
	}
	// A window in which nothing completed says nothing (a short one on a
	// loaded machine): it is stretched until a job completes, up to
	// stretchWindow, and the rate is over the window as stretched.
	c1, t1 := completed.Load(), time.Now()
	for giveUp := t1.Add(stretchWindow); c1 == c0 && t1.Before(giveUp); c1, t1 = completed.Load(), time.Now() {
		if err := sleep(10 * time.Millisecond); err != nil {
			return 0, err
		}
	}
	if c1 == c0 {
		return 0, fmt.Errorf("no job completed in %v", t1.Sub(t0).Round(time.Millisecond))
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), nil
}

// keepSubmitting starts n goroutines on wg that submit one job for each
// token they put in tokens (a place in the backlog, taken back when the
// job ends), numbering them from seq, until ctx ends. A failed submit
// stops the run (unless it ended already) and is not counted in seq: cut
// short, it may not have committed.
func keepSubmitting(ctx context.Context, stop context.CancelCauseFunc, wg *sync.WaitGroup, n int,
	tokens chan<- struct{}, seq *atomic.Int64, submit func(context.Context, int64) error) {
	for range n {
		wg.Go(func() {
			for {
				select {
				case tokens <- struct{}{}:
				case <-ctx.Done():
					return
				}
				if err := submit(ctx, seq.Add(1)); err != nil {
					seq.Add(-1)
					if ctx.Err() == nil {
						stop(fmt.Errorf("submit: %w", err))
					}
					return
				}
			}
		})
	}
}

// sleepCtx waits d, or less if ctx ends first (then its cause).
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// stretchWindow is how much longer than --duration a throughput window
// may last when no job completed in it.
const stretchWindow = 30 * time.Second

// countingBackend counts the completions its backend acknowledges and
// frees a backlog slot for each job that ends.
type countingBackend struct {
	client.WorkerBackend
	completed *atomic.Int64
	backlog   chan struct{}
}

func (c *countingBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	err := c.WorkerBackend.Complete(ctx, l, result)
	if err == nil {
		c.completed.Add(1)
	}
	c.free()
	return err
}

func (c *countingBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	err := c.WorkerBackend.Fail(ctx, l, jerr, retryable)
	c.free()
	return err
}

// free gives back a backlog slot; never blocking, so a report retried
// after a transient error cannot hang the worker.
func (c *countingBackend) free() {
	select {
	case <-c.backlog:
	default:
	}
}
