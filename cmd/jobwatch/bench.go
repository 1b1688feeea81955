package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// bench measures what jobwatch is for: how soon a caller learns that a job
// ended. It runs a real server on a temporary SQLite file on loopback and,
// for each of --jobs jobs, parks a WaitJob, opens a WatchJob and starts a
// GetJob poll loop (--poll apart), all through the Go client over HTTP,
// then completes the job. Each observer's latency is the time from the
// commit of the completion (the job's finished_at, same clock) to the
// moment the observer holds the terminal job; the worker's own CompleteJob
// reply is measured the same way, as the floor (the commit's fsync is in
// every row). The three are measured side
// by side on the same jobs, so their ratio survives a noisy machine.
//
// A second table parks --parked waits at once and reports what each costs
// the process in goroutines and heap, and how fast one completion wakes
// its waiter while they are all parked.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	n := fs.Int("jobs", 200, "jobs to complete, one after another")
	poll := fs.Duration("poll", 10*time.Millisecond, "interval of the GetJob poll loop measured for comparison")
	parked := fs.Int("parked", 10000, "waits to park at once for the cost table (0: skip it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n <= 0 || *poll <= 0 || *parked < 0 {
		return usageError{"--jobs and --poll must be positive, --parked not negative"}
	}

	dir, err := os.MkdirTemp("", "jobwatch-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "bench.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := server.NewMetrics()
	engine := jobs.New(st, jobs.Config{Logger: quiet, Metrics: metrics})
	// Room for every wait the cost table parks, and the first table's.
	srv := server.New(engine, server.Config{Logger: quiet, Metrics: metrics, MaxParkedCalls: *parked + server.DefaultMaxParkedCalls})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(srvCtx, ln) }()
	defer func() { stopServer(); <-served }()

	base := "http://" + ln.Addr().String()
	c := client.New(base, client.WithLongCallConns(4))
	defer c.Close()
	fmt.Fprintf(stderr, "bench: server on %s, SQLite at %s, %d jobs\n", base, dir, *n)

	// lat is each observer's latency from the commit; behind, the same
	// less the worker's own reply, per job: how much later than the worker
	// that finished the job the observer knew (negative: sooner).
	lat, behind := map[string][]time.Duration{}, map[string][]time.Duration{}
	for i := 0; i < *n; i++ {
		r, err := benchOne(ctx, c, *poll)
		if err != nil {
			return fmt.Errorf("job %d: %w", i, err)
		}
		for k, d := range r {
			lat[k] = append(lat[k], d)
			behind[k] = append(behind[k], d-r[completeName])
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "observer\tjobs\tmedian\tp99\tmax\tbehind the reply: median\tp99\t\n")
	for _, k := range []string{completeName, "WaitJob", "WatchJob", fmt.Sprintf("GetJob every %v", *poll)} {
		ds, bs := lat[k], behind[k]
		slices.Sort(ds)
		slices.Sort(bs)
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t%v\t%v\t\n", k, len(ds),
			round(quantile(ds, 0.5)), round(quantile(ds, 0.99)), round(ds[len(ds)-1]),
			round(quantile(bs, 0.5)), round(quantile(bs, 0.99)))
	}
	tw.Flush()

	if *parked > 0 {
		return benchParked(ctx, c, *parked, stdout)
	}
	return nil
}

// completeName is the reference row: the worker's own CompleteJob reply,
// which carries the same commit (and its fsync) the observers wait for.
const completeName = "CompleteJob reply"

// benchOne runs one job past the three observers and returns how long
// each took to see it end.
func benchOne(ctx context.Context, c *client.Client, poll time.Duration) (map[string]time.Duration, error) {
	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "bench"})
	if err != nil {
		return nil, err
	}
	claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{"bench"}})
	if err != nil {
		return nil, err
	}
	if claim.GetJob().GetId() != job.GetId() {
		return nil, fmt.Errorf("claimed %q, want %q", claim.GetJob().GetId(), job.GetId())
	}

	// An observer that fails cancels the others with its error as the
	// cause; every way out waits for all three, so none outlives the call.
	seen := map[string]time.Time{}
	var mu sync.Mutex
	saw := func(who string) {
		mu.Lock()
		seen[who] = time.Now()
		mu.Unlock()
	}
	failed, fail := context.WithCancelCause(ctx)
	obsCtx, cancel := context.WithTimeoutCause(failed, time.Minute, errors.New("no observer saw the job end within a minute"))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		fail(nil)
		wg.Wait()
	}()
	observe := func(who string, f func() error) {
		wg.Go(func() {
			if err := f(); err != nil && obsCtx.Err() == nil {
				fail(fmt.Errorf("%s: %w", who, err))
			}
		})
	}
	// ready: the wait's request is about to go out, and the watch holds
	// the claim's snapshot, so both are under way before the completion.
	ready := make(chan struct{}, 2)
	observe("WaitJob", func() error {
		ready <- struct{}{}
		if _, err := c.WaitForJob(obsCtx, job.GetId()); err != nil {
			return err
		}
		saw("WaitJob")
		return nil
	})
	observe("WatchJob", func() error {
		for j, err := range c.Watch(obsCtx, job.GetId()) {
			if err != nil {
				return err
			}
			if j.GetVersion() == job.GetVersion()+1 { // the claim's snapshot
				ready <- struct{}{}
			}
			if client.Terminal(j.GetState()) {
				saw("WatchJob")
				return nil
			}
		}
		return errors.New("the stream ended before the job did")
	})
	pollName := fmt.Sprintf("GetJob every %v", poll)
	observe(pollName, func() error {
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			j, err := c.Get(obsCtx, job.GetId())
			if err != nil {
				return err
			}
			if client.Terminal(j.GetState()) {
				saw(pollName)
				return nil
			}
			select {
			case <-t.C:
			case <-obsCtx.Done():
				return context.Cause(obsCtx)
			}
		}
	})
	for range 2 {
		select {
		case <-ready:
		case <-obsCtx.Done():
			return nil, context.Cause(obsCtx)
		}
	}
	// The wait's request is on the wire once its goroutine runs; give it
	// time to park, and the poll loop a random phase, before completing.
	time.Sleep(20*time.Millisecond + time.Duration(time.Now().UnixNano()%int64(poll)))
	done, err := c.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: claim.GetLeaseId()})
	if err != nil {
		return nil, err
	}
	saw(completeName)
	wg.Wait()
	if obsCtx.Err() != nil { // an observer failed, or the minute passed
		return nil, context.Cause(obsCtx)
	}
	ended := done.GetJob().GetFinishedAt().AsTime()
	out := map[string]time.Duration{}
	for _, who := range []string{completeName, "WaitJob", "WatchJob", pollName} {
		t, ok := seen[who]
		if !ok {
			return nil, fmt.Errorf("%s never saw the job end", who)
		}
		out[who] = t.Sub(ended)
	}
	return out, nil
}

// benchParked parks n waits on n running jobs, reports the cost per wait,
// then ends the jobs one by one and reports the wake-up latency of each.
func benchParked(ctx context.Context, c *client.Client, n int, stdout io.Writer) error {
	type running struct{ id, lease string }
	jobsRunning := make([]running, n)
	for i := range jobsRunning {
		job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "parked"})
		if err != nil {
			return err
		}
		claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "bench", Kinds: []string{"parked"}})
		if err != nil {
			return err
		}
		jobsRunning[i] = running{job.GetId(), claim.GetLeaseId()}
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	// A completion that fails returns early: the waits still parked are
	// cancelled and waited for, not left behind.
	waitCtx, cancel := context.WithCancel(ctx)
	woke := make([]time.Time, n)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, r := range jobsRunning {
		wg.Go(func() {
			if _, err := c.WaitForJob(waitCtx, r.id); err == nil {
				woke[i] = time.Now()
			}
		})
	}
	// Parked: every wait's handler is in the engine (a metric would tell
	// exactly; the goroutine count is a plain proxy both sides share).
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if runtime.NumGoroutine()-g0 >= 2*n {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()

	ended := make([]time.Time, n)
	for i, r := range jobsRunning {
		done, err := c.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: r.id, LeaseId: r.lease})
		if err != nil {
			return err
		}
		ended[i] = done.GetJob().GetFinishedAt().AsTime()
	}
	wg.Wait()
	var ds []time.Duration
	for i := range woke {
		if woke[i].IsZero() {
			return fmt.Errorf("wait %d never returned", i)
		}
		ds = append(ds, woke[i].Sub(ended[i]))
	}
	slices.Sort(ds)
	fmt.Fprintf(stdout, "\n%d waits parked at once (client and server in this process):\n", n)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "goroutines per parked wait\theap per parked wait\twake median\twake p99\t\n")
	fmt.Fprintf(tw, "%.1f\t%.1f KiB\t%v\t%v\t\n",
		float64(g1-g0)/float64(n),
		(float64(after.HeapAlloc)-float64(before.HeapAlloc))/float64(n)/1024,
		round(quantile(ds, 0.5)), round(quantile(ds, 0.99)))
	return tw.Flush()
}

// round keeps a table readable: microseconds are plenty.
func round(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// quantile returns the q-quantile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
