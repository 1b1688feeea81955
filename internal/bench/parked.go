package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// Kinds of the jobs the fanout and parked scenarios create; a claim names
// its kind, so it never takes a job another part of the scenario needs.
const (
	fanoutKind = "fanout"
	parkedKind = "parked"
	probeKind  = "probe"
)

// longCall is one kind of parked call: WaitJob or WatchJob.
type longCall struct {
	name   string // as the table says it
	metric string // the /metrics gauge of such calls in flight
	watch  bool
}

var (
	waitCall  = longCall{name: "WaitJob", metric: "jobwatch_parked_waits"}
	watchCall = longCall{name: "WatchJob", metric: "jobwatch_open_watches", watch: true}
)

// untilEnd parks one call of kind on job id through c and returns when
// the caller holds the finished job. A WaitJob that answers with an
// unfinished job at its cap is issued again, as client.WaitForJob does.
// ready, if not nil, is closed once a watch has its first snapshot.
func (k longCall) untilEnd(ctx context.Context, c *client.Client, id string, ready chan<- struct{}) (time.Time, error) {
	if !k.watch {
		for {
			resp, err := c.JobService().WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: id})
			if err != nil {
				return time.Time{}, err
			}
			if client.Terminal(resp.GetJob().GetState()) {
				return time.Now(), nil
			}
		}
	}
	stream, err := c.JobService().WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id})
	if err != nil {
		return time.Time{}, err
	}
	defer stream.Close()
	for stream.Receive() {
		if ready != nil {
			close(ready)
			ready = nil
		}
		if client.Terminal(stream.Msg().GetJob().GetState()) {
			return time.Now(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, errors.New("the stream ended before the job did")
}

// parkedCalls are calls parked by one scenario; cancel ends them all.
type parkedCalls struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // the first call that failed while the scenario still ran
}

func newParkedCalls(ctx context.Context) *parkedCalls {
	pc := &parkedCalls{}
	pc.ctx, pc.cancel = context.WithCancelCause(ctx)
	return pc
}

// park starts one call; answered, if not nil, gets the time it ended.
func (pc *parkedCalls) park(k longCall, c *client.Client, id string, answered *time.Time) {
	pc.wg.Go(func() {
		t, err := k.untilEnd(pc.ctx, c, id, nil)
		if err != nil && pc.ctx.Err() == nil {
			pc.mu.Lock()
			if pc.err == nil {
				pc.err = fmt.Errorf("%s %s: %w", k.name, id, err)
			}
			pc.mu.Unlock()
			return
		}
		if answered != nil {
			*answered = t
		}
	})
}

// failed is the first call's failure, if any.
func (pc *parkedCalls) failed() error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.err
}

// stop ends every call still parked and waits for them.
func (pc *parkedCalls) stop() {
	pc.cancel(errors.New("scenario over"))
	pc.wg.Wait()
}

// awaitParked waits until the server counts want calls of k in flight,
// then lets them settle into their parked state.
func awaitParked(ctx context.Context, p *serverProc, pc *parkedCalls, k longCall, want int) error {
	if err := p.awaitMetric(ctx, k.metric, float64(want)); err != nil {
		return errors.Join(err, pc.failed())
	}
	return pc.failed()
}

// claimOne submits a job of kind and claims it, as a worker would.
func claimOne(ctx context.Context, c *client.Client, kind string) (id, lease string, err error) {
	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: kind})
	if err != nil {
		return "", "", fmt.Errorf("submit: %w", err)
	}
	claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{kind}})
	if err != nil {
		return "", "", fmt.Errorf("claim: %w", err)
	}
	if claim.GetJob().GetId() != job.GetId() {
		return "", "", fmt.Errorf("claimed %q, want %q", claim.GetJob().GetId(), job.GetId())
	}
	return job.GetId(), claim.GetLeaseId(), nil
}

// fanout parks N WaitJob, then N WatchJob, on one running job for each N
// of --fanout, against a fresh srv process, and times how long after the
// worker's CompleteJob call the last of them had the finished job.
func (b *benchRun) fanout(ctx context.Context, srv benchServer) ([]fanoutFigures, error) {
	p, err := startServer(ctx, srv, b.dir, b.serverOptions("fanout"))
	if err != nil {
		return nil, err
	}
	defer p.stop()
	ctl := b.newClient(p.base, 1)
	defer ctl.Close()
	clients, closeClients := b.clients(p.base)
	defer closeClients()

	var out []fanoutFigures
	for _, n := range b.o.fanout {
		f := fanoutFigures{N: n}
		for _, k := range []longCall{waitCall, watchCall} {
			d, err := b.fanoutOnce(ctx, p, ctl, clients, k, n)
			if err != nil {
				return nil, fmt.Errorf("%d %s: %w", n, k.name, errors.Join(err, p.alive()))
			}
			if k.watch {
				f.WatchLastMS = ms(d)
			} else {
				f.WaitLastMS = ms(d)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func (b *benchRun) fanoutOnce(ctx context.Context, p *serverProc, ctl *client.Client, clients []*client.Client, k longCall, n int) (time.Duration, error) {
	id, lease, err := claimOne(ctx, ctl, fanoutKind)
	if err != nil {
		return 0, err
	}
	before, err := p.metric(k.metric)
	if err != nil {
		return 0, err
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pc := newParkedCalls(callCtx)
	defer pc.stop()
	answered := make([]time.Time, n)
	for i := range n {
		pc.park(k, clients[i%len(clients)], id, &answered[i])
	}
	if err := awaitParked(ctx, p, pc, k, int(before)+n); err != nil {
		return 0, err
	}
	time.Sleep(b.o.settle / 5) // from the handlers' entry to their park
	// From the call, not its reply: the server that wakes ten thousand
	// callers at once may answer the worker last, which would hide the
	// fan-out's cost instead of measuring it.
	serverCPU, benchCPU := cpuMeter(p)
	sent := time.Now()
	if _, err := ctl.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: id, LeaseId: lease}); err != nil {
		return 0, fmt.Errorf("complete: %w", err)
	}
	pc.wg.Wait()
	if err := pc.failed(); err != nil {
		return 0, err
	}
	b.progress("  %d %s: the last answered %v after CompleteJob; CPU meanwhile: server %.2fs, bench %.2fs",
		n, k.name, time.Since(sent).Round(time.Millisecond), serverCPU(), benchCPU())
	last := sent
	for i, t := range answered {
		if t.IsZero() {
			return 0, fmt.Errorf("call %d never had the finished job", i)
		}
		if t.After(last) {
			last = t
		}
	}
	return last.Sub(sent), nil
}

// parked measures the cost of parked calls against a fresh srv process:
// WaitJob first, then WatchJob in a process of its own (a process's RSS
// does not shrink back when calls end), on the same jobs where the server
// keeps them.
func (b *benchRun) parked(ctx context.Context, srv benchServer) ([]parkedFigures, error) {
	out := make([]parkedFigures, 0, len(b.o.parked)+1)
	for _, n := range append([]int{0}, b.o.parked...) {
		out = append(out, parkedFigures{N: n})
	}
	var ids []string
	for _, k := range []longCall{waitCall, watchCall} {
		stages, kept, err := b.parkedRamp(ctx, srv, k, ids)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
		ids = kept
		for i, st := range stages {
			if k.watch {
				out[i].Watches = st
			} else {
				out[i].Waits = st
			}
		}
	}
	return out, nil
}

// parkedRamp starts srv, makes sure it holds a queued job for each call
// to park (ids, if the server kept them from the last ramp), measures it
// idle, then parks calls of k up to each count of --parked in turn and
// measures it again. It returns the jobs' ids for the next ramp.
func (b *benchRun) parkedRamp(ctx context.Context, srv benchServer, k longCall, ids []string) ([]parkedStage, []string, error) {
	p, err := startServer(ctx, srv, b.dir, b.serverOptions("parked"))
	if err != nil {
		return nil, nil, err
	}
	defer p.stop()
	ctl := b.newClient(p.base, 1)
	defer ctl.Close()
	probe := b.newClient(p.base, 1) // the probes' own connection
	defer probe.Close()
	clients, closeClients := b.clients(p.base)
	defer closeClients()

	most := b.o.parked[len(b.o.parked)-1]
	if len(ids) < most || !srv.durable() {
		if ids, err = submitMany(ctx, ctl, most, parkedKind); err != nil {
			return nil, nil, err
		}
	}
	pc := newParkedCalls(ctx)
	defer pc.stop()

	stages := []parkedStage{}
	base, err := b.measureStage(ctx, p, ctl, probe, k, ids[0], 0)
	if err != nil {
		return nil, nil, fmt.Errorf("idle: %w", errors.Join(err, p.alive()))
	}
	stages = append(stages, base)
	parked := 0
	for _, n := range b.o.parked {
		for ; parked < n; parked++ {
			pc.park(k, clients[parked%len(clients)], ids[parked], nil)
		}
		if err := awaitParked(ctx, p, pc, k, n); err != nil {
			return nil, nil, fmt.Errorf("%d parked: %w", n, err)
		}
		time.Sleep(b.o.settle)
		st, err := b.measureStage(ctx, p, ctl, probe, k, ids[0], n)
		if err != nil {
			return nil, nil, fmt.Errorf("%d parked: %w", n, errors.Join(err, p.alive()))
		}
		st.RSSPerCallKiB = (st.RSSKiB - base.RSSKiB) / float64(n)
		st.GoroutinesPerCall = (st.Goroutines - base.Goroutines) / float64(n)
		stages = append(stages, st)
		b.progress("  %d %s parked: %.1f KiB and %.2f goroutines per call", n, k.name, st.RSSPerCallKiB, st.GoroutinesPerCall)
	}
	return stages, ids, nil
}

// submitMany submits n jobs of kind, a few at a time, and returns their
// ids in submission order.
func submitMany(ctx context.Context, c *client.Client, n int, kind string) ([]string, error) {
	ids := make([]string, n)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				j, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: kind})
				if err != nil {
					errs <- fmt.Errorf("submit: %w", err)
					return
				}
				ids[i] = j.GetId()
			}
		})
	}
	wg.Wait()
	close(errs)
	return ids, <-errs
}

// measureStage reads the server with n calls of k parked: its RSS and
// goroutines, --short-calls sequential GetJob of short, its CPU over
// --idle, and --probes wake-ups of one more call of k.
func (b *benchRun) measureStage(ctx context.Context, p *serverProc, ctl, probe *client.Client, k longCall, short string, n int) (parkedStage, error) {
	var st parkedStage
	var err error
	if st.RSSKiB, err = p.rssKiB(); err != nil {
		return st, err
	}
	if st.Goroutines, err = p.metric("go_goroutines"); err != nil {
		return st, err
	}

	cpu0, err := p.cpuSeconds()
	if err != nil {
		return st, err
	}
	t0 := time.Now()
	select {
	case <-time.After(b.o.idle):
	case <-ctx.Done():
		return st, ctx.Err()
	}
	cpu1, err := p.cpuSeconds()
	if err != nil {
		return st, err
	}
	st.IdleCPUPct = (cpu1 - cpu0) / time.Since(t0).Seconds() * 100

	calls := make([]time.Duration, 0, b.o.shortCalls)
	for range b.o.shortCalls {
		t := time.Now()
		if _, err := ctl.Get(ctx, short); err != nil {
			return st, fmt.Errorf("GetJob: %w", err)
		}
		calls = append(calls, time.Since(t))
	}
	slices.Sort(calls)
	st.ShortP50MS, st.ShortP99MS = ms(quantile(calls, 0.5)), ms(quantile(calls, 0.99))

	wakes := make([]time.Duration, 0, b.o.probes)
	completes := make([]time.Duration, 0, b.o.probes)
	for range b.o.probes {
		wake, complete, err := wakeOne(ctx, p, ctl, probe, k, n)
		if err != nil {
			return st, fmt.Errorf("probe: %w", err)
		}
		wakes, completes = append(wakes, wake), append(completes, complete)
	}
	slices.Sort(wakes)
	slices.Sort(completes)
	st.WakeP50MS, st.WakeP99MS = ms(quantile(wakes, 0.5)), ms(quantile(wakes, 0.99))
	st.CompleteP50MS = ms(quantile(completes, 0.5))
	return st, nil
}

// wakeOne parks one call of k on a job of its own while n others are
// parked, completes the job, and returns how long after the CompleteJob
// reply the call had the finished job, and the CompleteJob round trip.
func wakeOne(ctx context.Context, p *serverProc, ctl, probe *client.Client, k longCall, n int) (wake, complete time.Duration, err error) {
	id, lease, err := claimOne(ctx, ctl, probeKind)
	if err != nil {
		return 0, 0, err
	}
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var answered time.Time
	var callErr error
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		answered, callErr = k.untilEnd(callCtx, probe, id, ready)
	}()
	if k.watch {
		select { // the first snapshot: the stream is open
		case <-ready:
		case <-done:
			return 0, 0, fmt.Errorf("%s: %w", k.name, callErr)
		}
	}
	if err := p.awaitMetric(callCtx, k.metric, float64(n+1)); err != nil {
		return 0, 0, err
	}
	time.Sleep(time.Millisecond) // the gauge counts the call from its handler's entry: let it park
	sent := time.Now()
	if _, err := ctl.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: id, LeaseId: lease}); err != nil {
		return 0, 0, fmt.Errorf("complete: %w", err)
	}
	replied := time.Now()
	<-done
	if callErr != nil {
		return 0, 0, fmt.Errorf("%s: %w", k.name, callErr)
	}
	return answered.Sub(replied), replied.Sub(sent), nil
}

// cpuMeter returns functions that say how much CPU time the server
// process and this one have used since the call, so a scenario can say
// which side its time went to.
func cpuMeter(p *serverProc) (server, bench func() float64) {
	s0, _ := p.cpuSeconds()
	b0 := selfCPUSeconds()
	return func() float64 { s1, _ := p.cpuSeconds(); return s1 - s0 },
		func() float64 { return selfCPUSeconds() - b0 }
}

// selfCPUSeconds is the CPU time (user + system) this process has used.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
