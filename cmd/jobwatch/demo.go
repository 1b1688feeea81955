package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/client"
	"github.com/jobwatch/jobwatch/config"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobs/inproc"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
	"github.com/jobwatch/jobwatch/web"
)

const demoUsage = `Usage: jobwatch demo [flags]

Runs a server on a local SQLite file with in-process workers for the demo
kinds, submits a few jobs and keeps submitting new ones, so the page has
something to show. Open the URL it prints.

  enrich   processes a catalogue in batches ("batch 5 of 11")
  pairing  runs weighted phases (loading is quick, matching is most of it)
  flaky    fails with a typed, retryable error; the demo's own flaky jobs
           get 2 attempts, then FAILED (one you submit gets the
           default queue's 1)
  hang     stops heartbeating and is LOST after the lease timeout

and, under queue rules (its configuration, as serve --config reads it):

  reindex  in the serial queue "index": one at a time, in order; the queue
           alerts when it has not drained for 45s
  render   in the queues "readme" and "thumbnails", which share the pool
           "db" of 2 units: never more than 2 running between them
  digest   the schedule "digest" in the queue "reports": a run 20s after
           the previous one ended
`

// demoKinds are the kinds the demo's workers run, in submission rotation;
// the page's demo button submits them.
var demoKinds = []string{"enrich", "pairing", "flaky", "hang"}

// demoConfig is the demo's configuration file, in the format of serve
// --config (docs/OPERATING.md "The configuration file"), so that the page shows queue
// rules at work: a serial queue, two queues sharing a pool, a schedule.
const demoConfig = `queues:
  - name: index           # one git repository: one writer at a time, in order
    mode: serial
    on_failure: block
    alert_after: 45s
  - name: readme
    uses: [db]
  - name: thumbnails
    uses: [db]
pools:
  db: 2                   # readme and thumbnails together: at most 2 running
schedules:
  - name: digest
    kind: digest
    queue: reports
    every: 20s              # the next run 20s after the previous one ended
    payload: {"recipients": "team"}
`

// demo runs "jobwatch demo".
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var addr, db, allowedHosts string
	var every, leaseTimeout time.Duration
	var concurrency int
	var insecure bool
	fs := newFlagSet("demo", stderr)
	fs.StringVar(&addr, "addr", defaultAddr, "`host:port` to listen on")
	fs.BoolVar(&insecure, "insecure", false, "allow a non-loopback --addr: the demo has no tokens, so whoever reaches it may submit and cancel its jobs")
	fs.StringVar(&allowedHosts, "allowed-hosts", "",
		"comma-separated `hosts` (name or address, with or without a port) whose Host header is answered besides loopback ones, as serve's: the name a browser uses to reach a demo in a VM or container")
	fs.StringVar(&db, "db", "jobwatch-demo.db", "SQLite database `file` (created if missing)")
	fs.DurationVar(&every, "every", 6*time.Second, "submit a new demo job this often (0: only the first few)")
	fs.DurationVar(&leaseTimeout, "lease-timeout", 5*time.Second, "how long a silent job runs before it is LOST")
	fs.IntVar(&concurrency, "concurrency", 8, "demo jobs that run at once")
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage, "\nIts configuration:\n\n", indent(demoConfig, "  "), "\nFlags:\n")
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	switch {
	case concurrency < 1:
		return usageError{fmt.Sprintf("--concurrency must be at least 1, got %d", concurrency)}
	case leaseTimeout < time.Second:
		return usageError{fmt.Sprintf("--lease-timeout must be at least 1s, as serve's, got %v", leaseTimeout)}
	}
	for _, h := range splitList(allowedHosts) {
		if err := server.CheckAllowedHost(h); err != nil {
			return usageError{"--allowed-hosts: " + err.Error()}
		}
	}
	if err := checkLoopback("--addr", addr, insecure,
		"the demo has no tokens: listen on 127.0.0.1 or [::1], or pass --insecure to let anyone who can reach it submit and cancel its jobs"); err != nil {
		return err
	}
	ln, err := listen("--addr", addr)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr) // checked above
	ctx, stopHangups := stopOnHangup(ctx)
	defer stopHangups()
	return serveDemo(ctx, ln, demoOptions{db: db, every: every, leaseTimeout: leaseTimeout, concurrency: concurrency,
		exposed: !isLoopback(host), allowedHosts: splitList(allowedHosts)}, stdout, stderr)
}

// demoOptions are demo's flags beyond the address.
type demoOptions struct {
	db                  string
	every, leaseTimeout time.Duration
	concurrency         int
	// exposed is a listener beyond loopback (--insecure); allowedHosts
	// are the Host names answered besides loopback ones. As serve does,
	// an exposed demo answers any Host unless allowedHosts names some.
	exposed      bool
	allowedHosts []string
}

// serveDemo runs the demo on ln until ctx ends or serving fails; either
// way it stops the workers and the submitter and returns only when they
// have stopped.
func serveDemo(ctx context.Context, ln net.Listener, o demoOptions, stdout, stderr io.Writer) error {
	defer ln.Close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	st, err := sqlite.Open(o.db)
	if err != nil {
		return fmt.Errorf("open database %s: %w", o.db, err)
	}
	defer st.Close()
	rules, err := demoRules()
	if err != nil {
		return err
	}
	metrics := server.NewMetrics()
	engine := jobs.New(st, jobs.Config{
		Rules:               rules,
		LeaseTimeout:        o.leaseTimeout,
		SweepInterval:       250 * time.Millisecond,
		RetryInitialBackoff: time.Second,
		RetryMaxBackoff:     2 * time.Second,
		Logger:              log,
		Metrics:             metrics,
	})
	srv := server.New(engine, server.Config{
		Logger:    log,
		Metrics:   metrics,
		DemoKinds: demoKinds,
		// The demo has no tokens: it listens on loopback unless
		// --insecure, and answers loopback Host names and those of
		// --allowed-hosts (DNS rebinding), as serve without tokens does.
		Insecure:     o.exposed,
		AnyHost:      o.exposed && len(o.allowedHosts) == 0,
		AllowedHosts: o.allowedHosts,
		Version:      version(),
		Page:         web.Handler(),
	})

	// The workers and the submitter run until ctx ends or the server
	// stops serving, whichever is first: a server that failed must not
	// leave them waiting for a Ctrl-C. The engine's duties run until the
	// server has shut down (server.Server.Run).
	demoCtx, stopDemo := context.WithCancel(ctx)
	defer stopDemo()
	var bg sync.WaitGroup

	w := client.NewWorker(&demoBackend{WorkerBackend: inproc.WorkerBackend(engine, 0)}, client.WorkerConfig{
		ID:                "demo-worker",
		Concurrency:       o.concurrency,
		HeartbeatInterval: o.leaseTimeout / 5,
		DrainTimeout:      2 * time.Second,
		Logger:            log,
	})
	w.Handle("enrich", enrichJob)
	w.Handle("pairing", pairingJob)
	w.Handle("flaky", flakyJob)
	w.Handle("hang", hangJob)
	w.Handle("reindex", reindexJob)
	w.Handle("render", renderJob)
	w.Handle("digest", digestJob)
	bg.Go(func() {
		if err := w.Run(demoCtx); err != nil {
			log.Error("demo worker stopped", "err", err)
		}
	})
	// The hint below suggests a list: it shows the first jobs once they
	// are in.
	firstIn := make(chan struct{})
	bg.Go(func() { submitDemoJobs(demoCtx, engine, o.every, log, firstIn) })
	select {
	case <-firstIn:
	case <-demoCtx.Done():
	}

	page, here := demoHosts(ln.Addr(), o.allowedHosts)
	fmt.Fprintf(stdout, "jobwatch demo: open http://%s/\n", page)
	fmt.Fprintf(stdout, "  try: %s list --server http://%s   (Ctrl-C stops the demo)\n", rerunCommand(), here)
	err = srv.Run(ctx, ln)
	if err != nil {
		err = fmt.Errorf("serve: %w", err)
	}
	stopDemo()
	bg.Wait()
	return err
}

// submitDemoJobs submits one job of each kind, closes firstIn, then
// submits a random one every interval, until ctx ends.
func submitDemoJobs(ctx context.Context, e *jobs.Engine, every time.Duration, log *slog.Logger, firstIn chan<- struct{}) {
	submit := func(kind string) {
		r := jobs.SubmitRequest{Kind: kind} // the default tenant, which the page opens on
		switch kind {
		case "enrich":
			r.Payload = json.RawMessage(fmt.Sprintf(`{"catalogue":"spring-%d","batches":%d}`, rand.N(90)+10, rand.N(8)+6))
		case "pairing":
			r.Payload = json.RawMessage(fmt.Sprintf(`{"products":%d}`, (rand.N(40)+10)*100))
		case "flaky":
			r.MaxAttempts = 2
		}
		if _, err := e.Submit(ctx, r); err != nil && ctx.Err() == nil {
			log.Warn("demo submit failed", "kind", kind, "err", err)
		}
	}
	for _, k := range demoKinds {
		submit(k)
	}
	submitRuledDemoJobs(ctx, e, log)
	close(firstIn)
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	// enrich and pairing are what a page should mostly show; the failing
	// and hanging kinds come now and then, and every fifth tick a burst
	// for the ruled queues.
	weighted := []string{"enrich", "enrich", "enrich", "pairing", "pairing", "flaky", "hang"}
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if tick%5 == 0 {
				submitRuledDemoJobs(ctx, e, log)
				continue
			}
			submit(weighted[rand.N(len(weighted))])
		}
	}
}

// indent puts prefix before every line of text.
func indent(text, prefix string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
	return prefix + strings.Join(lines, prefix) + "\n"
}

// demoRules are demoConfig's rules.
func demoRules() (jobtype.Rules, error) {
	f, err := config.Parse("demo.yaml", []byte(demoConfig))
	if err != nil {
		return jobtype.Rules{}, fmt.Errorf("the demo's configuration: %w", err)
	}
	return f.Rules()
}

// submitRuledDemoJobs submits a burst for the ruled queues: three
// reindexes wait their turn in the serial queue, and three renders in
// each of the pooled queues wait for a unit of the db pool.
func submitRuledDemoJobs(ctx context.Context, e *jobs.Engine, log *slog.Logger) {
	var reqs []jobs.SubmitRequest
	for i := range 3 {
		reqs = append(reqs,
			jobs.SubmitRequest{Kind: "reindex", Queue: "index",
				Payload: json.RawMessage(fmt.Sprintf(`{"repository":"catalogue","commit":"%07x"}`, rand.N(1<<28)))},
			jobs.SubmitRequest{Kind: "render", Queue: "readme", Payload: json.RawMessage(fmt.Sprintf(`{"page":%d}`, i+1))},
			jobs.SubmitRequest{Kind: "render", Queue: "thumbnails", Payload: json.RawMessage(fmt.Sprintf(`{"image":%d}`, i+1))})
	}
	for _, r := range reqs {
		if _, err := e.Submit(ctx, r); err != nil && ctx.Err() == nil {
			log.Warn("demo submit failed", "kind", r.Kind, "queue", r.Queue, "err", err)
		}
	}
}

// sleep waits d or until ctx ends, reporting which.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// enrichJob enriches a catalogue batch by batch: the percent is the share
// of batches done and the step says which batch.
func enrichJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	var p struct {
		Batches int `json:"batches"`
	}
	decodePayload(job, &p)
	p.Batches = max(p.Batches, 1)
	rows := 0
	for i := 1; i <= p.Batches; i++ {
		progress((i-1)*100/p.Batches, fmt.Sprintf("batch %d of %d", i, p.Batches))
		if err := sleep(ctx, time.Duration(600+rand.N(900))*time.Millisecond); err != nil {
			return nil, err
		}
		n := 200 + rand.N(300)
		rows += n
		progress.Logf("batch %d of %d: enriched %d rows (%d so far)", i, p.Batches, n, rows)
	}
	return map[string]any{"batches": p.Batches, "rows_enriched": rows}, nil
}

// pairingJob runs phases of very different lengths; each phase's weight
// is its share of the bar, so the percent moves at an honest speed.
func pairingJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	phases := []struct {
		name   string
		weight int // percent of the whole
		steps  int
	}{
		{"load catalogue", 10, 2},
		{"match candidates", 60, 12},
		{"score pairs", 25, 5},
		{"write report", 5, 1},
	}
	done := 0
	for _, ph := range phases {
		progress.Logf("\x1b[1m%s\x1b[0m: %d steps", ph.name, ph.steps)
		for s := 1; s <= ph.steps; s++ {
			progress(done+ph.weight*(s-1)/ph.steps, fmt.Sprintf("%s (%d/%d)", ph.name, s, ph.steps))
			if err := sleep(ctx, time.Duration(300+rand.N(400))*time.Millisecond); err != nil {
				return nil, err
			}
		}
		done += ph.weight
	}
	return map[string]any{"pairs": 1000 + rand.N(4000), "unmatched": rand.N(200)}, nil
}

// reindexJob updates a repository's search index: only one may touch the
// repository at a time, which the serial queue "index" guarantees.
func reindexJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	steps := []string{"fetch", "diff", "write index", "commit"}
	out := progress.LogTo(jobwatchv1.LogStream_LOG_STREAM_STDOUT)
	for i, step := range steps {
		progress(i*100/len(steps), step)
		fmt.Fprintf(out, "$ index %s\n", step)
		if err := sleep(ctx, time.Duration(800+rand.N(700))*time.Millisecond); err != nil {
			return nil, err
		}
	}
	files := 100 + rand.N(900)
	fmt.Fprintf(out, "\x1b[32mok\x1b[0m %d files indexed\n", files)
	return map[string]any{"files_indexed": files}, nil
}

// renderJob renders with a connection of the pool "db", which the queues
// readme and thumbnails share.
func renderJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	for i := 1; i <= 3; i++ {
		progress((i-1)*33, fmt.Sprintf("query %d of 3", i))
		if err := sleep(ctx, time.Duration(700+rand.N(600))*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return map[string]any{"bytes": 10_000 + rand.N(90_000)}, nil
}

// digestJob is the schedule's run: it gathers what happened and mails a
// digest.
func digestJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	for i, step := range []string{"gather", "summarise", "send"} {
		progress(i*33, step)
		if err := sleep(ctx, time.Duration(500+rand.N(500))*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return map[string]any{"items": rand.N(50)}, nil
}

// UpstreamTimeoutError is the flaky kind's failure: a typed error whose
// message is written for callers, and worth a retry.
type UpstreamTimeoutError struct {
	Service string
	After   time.Duration
}

func (e *UpstreamTimeoutError) Error() string {
	return fmt.Sprintf("%s did not answer within %v", e.Service, e.After)
}
func (e *UpstreamTimeoutError) PublicMessage() string { return e.Error() }
func (e *UpstreamTimeoutError) Retryable() bool       { return true }

// flakyJob gets some way and then fails with UpstreamTimeoutError.
func flakyJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	for i := 1; i <= 3; i++ {
		progress(i*20, fmt.Sprintf("calling pricing API (try %d of 3)", i))
		if err := sleep(ctx, 700*time.Millisecond); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress.LogTo(jobwatchv1.LogStream_LOG_STREAM_STDERR), "\x1b[31mpricing API: no answer\x1b[0m (try %d of 3)\n", i)
	}
	return nil, &UpstreamTimeoutError{Service: "pricing API", After: 2 * time.Second}
}

// hangJob starts, reports a little progress and then never returns; its
// worker goes silent (see demoBackend) and the job is LOST.
func hangJob(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
	progress(15, "waiting for the upstream export")
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

func decodePayload(job *jobwatchv1.Job, v any) {
	if job.GetPayload() == nil {
		return
	}
	b, err := job.GetPayload().MarshalJSON()
	if err == nil {
		_ = json.Unmarshal(b, v)
	}
}

// demoBackend plays a worker that freezes while running a "hang" job: it
// forwards that job's heartbeats for the first second and then swallows
// them, as a stuck process would, so the engine's reaper sees a silent
// lease and marks the job LOST. Once the lease must have expired it
// forwards again, learns the lease is lost, and the worker frees the slot.
type demoBackend struct {
	client.WorkerBackend
	mu     sync.Mutex
	frozen map[string]time.Time // lease id → when it went silent
}

// AppendLogs implements client.LogAppender: the demo's jobs log too.
func (b *demoBackend) AppendLogs(ctx context.Context, l *client.Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	return b.WorkerBackend.(client.LogAppender).AppendLogs(ctx, l, lines)
}

// StopClaiming implements client.ClaimStopper: the demo's parked claims
// answer at once as it stops.
func (b *demoBackend) StopClaiming(ctx context.Context, workerID string) error {
	return b.WorkerBackend.(client.ClaimStopper).StopClaiming(ctx, workerID)
}

// Release implements client.Releaser: a job claimed as the demo stops
// goes back to its queue.
func (b *demoBackend) Release(ctx context.Context, l *client.Lease) error {
	return b.WorkerBackend.(client.Releaser).Release(ctx, l)
}

func (b *demoBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	if l.Job.GetKind() != "hang" {
		return b.WorkerBackend.Heartbeat(ctx, l, percent, step)
	}
	b.mu.Lock()
	if b.frozen == nil {
		b.frozen = make(map[string]time.Time)
	}
	since, ok := b.frozen[l.ID]
	if !ok {
		since = time.Now().Add(time.Second)
		b.frozen[l.ID] = since
	}
	b.mu.Unlock()
	if now := time.Now(); now.Before(since) || now.After(since.Add(l.TTL+time.Second)) {
		cancelled, err := b.WorkerBackend.Heartbeat(ctx, l, percent, step)
		if err != nil || cancelled {
			b.mu.Lock()
			delete(b.frozen, l.ID)
			b.mu.Unlock()
		}
		return cancelled, err
	}
	return false, nil
}

// demoHosts are the host:port the demo's hints name, each one its
// listener answers and its Host check lets through: page, for a browser
// (the first --allowed-hosts entry, on the listener's port unless it
// names one, when the listener is beyond loopback), and here, for a
// command on this machine (loopback when the listener takes every
// address). A listener on 0.0.0.0 printed http://[::]:8080/, which a
// browser cannot open and the Host check refuses.
func demoHosts(addr net.Addr, allowed []string) (page, here string) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return addr.String(), addr.String()
	}
	port := strconv.Itoa(tcp.Port)
	here = addr.String()
	if tcp.IP.IsUnspecified() {
		here = net.JoinHostPort("127.0.0.1", port)
	}
	page = here
	if len(allowed) > 0 {
		page = allowed[0]
		if h, p, err := net.SplitHostPort(page); err != nil || p == "" {
			page = net.JoinHostPort(strings.Trim(page, "[]"), port)
		} else {
			page = net.JoinHostPort(h, p)
		}
		if !tcp.IP.IsUnspecified() {
			here = page
		}
	}
	return page, here
}
