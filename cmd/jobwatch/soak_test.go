package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// The soak's load. The parked calls are spread over soakParkedClients
// clients, each with its own long-call connection (client.New: every call
// on one HTTP/2 connection until it has 4,000 streams), so that no
// connection holds more than the server's 3,600 parked calls per
// connection (server.DefaultMaxParkedCallsPerConn).
const (
	soakParked        = 10_000 // parked WaitJob and WatchJob calls, half each
	soakParkedClients = 4
	soakFastRate      = 200 // jobs submitted per second, all told
	soakSubmitters    = 8
	soakFastWorkers   = 16 // the fast jobs' worker's slots
	// The slow jobs are the ones the parked calls wait on: run 1 to 3 s
	// each by 25 slots, about 12 a second end, so each of the 10,000 is
	// queued about 13 minutes: its WaitJob reaches the 60 s cap about a
	// dozen times, its WatchJob the 10 min stream lifetime about once,
	// and when the job ends its caller submits another and parks again.
	soakSlowWorkers = 25
	soakSlowMin     = time.Second
	soakSlowSpread  = 2 * time.Second
	// A server allows a quarter of --max-parked-calls to one tenant by
	// default; the soak's calls are all the default tenant's, and the
	// workers' parked claims count too.
	soakMaxParked = 12_000

	soakSampleEvery = 5 * time.Second
	soakRowEvery    = time.Minute
	soakGrowthBound = 0.05 // RSS, goroutines, open files: end-window median over first-window median, at most 1 + this
	soakParkedFloor = 0.99 // the median of every minute's samples: at least this share of soakParked parked
	soakParkedLow   = 0.90 // and every sample at least this share
	soakRateFloor   = 0.25 // every minute: at least this share of soakFastRate completed

	soakFastKind = "soak-fast"
	soakSlowKind = "soak-slow"
)

// soakConfig is serve's --config: the fast queue retries the one job in
// twenty whose first attempt fails; retention is the warm-up (filled in),
// so the jobs table stops growing as the warm-up ends.
const soakConfig = `retention: %s
queues:
  - name: soak-fast
    retry: {max_attempts: 2, initial_backoff: 10ms, max_backoff: 100ms}
  - name: soak-slow
`

// TestSoak is `make soak`: JOBWATCH_SOAK (a duration, 30m from make) of
// steady load against one jobwatch serve process, on SQLite or, with
// JOBWATCH_TEST_BACKEND=postgres, PostgreSQL. Submitters and a worker
// keep about soakFastRate jobs a second flowing; 10,000 WaitJob and
// WatchJob calls stay parked on slow jobs throughout, each re-parked by
// the Go client when it ends at its cap (or its stream's lifetime) and
// on a new job when its job ends. The server's /metrics is read every
// soakSampleEvery and a row printed every minute.
//
// The verdict, after a warm-up of the first fifth of the run (at most 5
// minutes): RSS, goroutines and open files each grow by at most
// soakGrowthBound, compared as the median of the samples in the last
// window against the median of those in the first window after the
// warm-up (a window is a fifth of the rest of the run, at least a
// minute). Medians of a few dozen samples step over the GC's sawtooth
// and a passing spike, which the max over the min of the samples would
// count as growth; a leak moves the whole later window. Besides: each
// minute's median of parked calls is at least soakParkedFloor of them
// (and every sample soakParkedLow); each minute completes at least
// soakRateFloor of the fast rate; no call of the soak's clients fails
// for good (after the client's own retries); no parked call is refused;
// serve logs no line above WARN (a line that is no slog record at all,
// such as a panic's, counts as above); and it exits 0 on SIGTERM at the
// end. A broken bound fails the test with "SOAK FAILED".
func TestSoak(t *testing.T) {
	spec := os.Getenv("JOBWATCH_SOAK")
	if spec == "" {
		t.Skip("the soak runs only with JOBWATCH_SOAK set to its length, such as 30m: make soak (SOAKTIME=30m)")
	}
	length, err := time.ParseDuration(spec)
	if err != nil || length < 3*time.Minute {
		t.Fatalf("JOBWATCH_SOAK=%q: want a duration of at least 3m (the warm-up and two windows of a minute)", spec)
	}
	if raceEnabled {
		t.Log("the race detector is on: serve runs with it, and its memory and goroutines are the race detector's as much as jobwatch's")
	}
	warmup := min(5*time.Minute, length/5)
	window := max(time.Minute, (length-warmup)/5)

	ctx, cancel := context.WithTimeout(context.Background(), length+15*time.Minute)
	defer cancel()
	db := testdb.New(t)
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	writeFile(t, cfg, fmt.Sprintf(soakConfig, warmup))
	srv := startReplicaWith(t, ctx, "soak", db, cfg, "--log-level", "info",
		"--max-parked-calls", strconv.Itoa(soakMaxParked), "--max-parked-calls-per-tenant", strconv.Itoa(soakMaxParked))
	t.Logf("soak: %v on %s (warm-up %v, windows of %v), serve pid %d", length, testdb.Backend(), warmup, window, srv.cmd.Process.Pid)

	s := &soak{t: t, srv: srv, errs: map[string]int{}, examples: map[string]string{}, retried: map[string]int{}}
	idle := s.sample(0)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	s.startWorkers(loadCtx, &load)
	s.startSubmitters(loadCtx, &load)
	s.startParked(loadCtx, &load)
	began := time.Now()
	s.waitParked(t, 5*time.Minute)
	t.Logf("soak: %d calls parked %v after the load began; the run starts now", soakParked, time.Since(began).Round(time.Millisecond))

	start := time.Now()
	samples := []soakSample{s.sample(0)}
	s.logRow(samples[0], nil)
	lastRow := samples[0]
	for at := start.Add(soakSampleEvery); !at.After(start.Add(length)); at = at.Add(soakSampleEvery) {
		select {
		case <-time.After(time.Until(at)):
		case <-srv.exited:
			t.Fatalf("SOAK FAILED: serve exited %v into the run", time.Since(start).Round(time.Second))
		case <-ctx.Done():
			t.Fatal("SOAK FAILED: the soak's own deadline passed")
		}
		sm := s.sample(at.Sub(start))
		samples = append(samples, sm)
		if sm.elapsed-lastRow.elapsed >= soakRowEvery {
			s.logRow(sm, &lastRow)
			lastRow = sm
		}
	}
	stopLoad()
	load.Wait()
	// Stopped as an operator would, so that what shutting down logs is
	// held to the same bound.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.exited:
	case <-time.After(time.Minute):
		t.Fatal("SOAK FAILED: serve did not exit within a minute of SIGTERM")
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("SOAK FAILED: serve exited %d on SIGTERM", code)
	}

	s.verdict(t, idle, samples, warmup, window)
}

// soak is one run: the server, the load's counters, and what its
// clients saw go wrong.
type soak struct {
	t   *testing.T
	srv *replica

	fastSubmitted, fastDone, fastRetried, slowDone atomic.Int64
	waitEnds, watchEnds                            atomic.Int64 // parked calls that heard their job end

	mu       sync.Mutex
	errs     map[string]int    // calls that failed for good, by what and code
	examples map[string]string // one error of each
	retried  map[string]int    // errors the clients retried, by code
	workerWarnings
}

// workerWarnings counts what the soak's workers log at WARN and above
// (a report or claim they had to retry), keeping the first few.
type workerWarnings struct {
	warnings int
	first    []string
}

func (s *soak) failed(what string, err error) {
	key := what + ": " + connect.CodeOf(err).String()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[key]++
	if s.examples[key] == "" {
		s.examples[key] = time.Now().Format("15:04:05 ") + err.Error()
	}
}

func (s *soak) retry(err error, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retried[connect.CodeOf(err).String()]++
}

func (s *soak) newClient() *client.Client {
	c := client.New(s.srv.url, client.WithRetryNotify(s.retry))
	s.t.Cleanup(c.Close)
	return c
}

// startWorkers runs the fast and the slow jobs' workers, each on a
// client of its own.
func (s *soak) startWorkers(ctx context.Context, wg *sync.WaitGroup) {
	log := slog.New(soakLogHandler{s})
	fast := client.NewWorker(s.newClient().WorkerBackend(), client.WorkerConfig{
		ID: "soak-fast", Concurrency: soakFastWorkers, Queues: []string{soakFastKind}, Logger: log,
	})
	fast.Handle(soakFastKind, func(ctx context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
		if j.GetAttempt() == 1 && rand.N(20) == 0 {
			s.fastRetried.Add(1)
			return nil, client.Retryable(errors.New("soak: the first attempt of one job in twenty fails"))
		}
		s.fastDone.Add(1)
		return map[string]any{"attempt": j.GetAttempt()}, nil
	})
	slow := client.NewWorker(s.newClient().WorkerBackend(), client.WorkerConfig{
		ID: "soak-slow", Concurrency: soakSlowWorkers, Queues: []string{soakSlowKind}, Logger: log,
	})
	slow.Handle(soakSlowKind, func(ctx context.Context, j *jobwatchv1.Job, progress client.Progress) (any, error) {
		d := soakSlowMin + rand.N(soakSlowSpread)
		for i, step := range []string{"first half", "second half"} {
			progress(50*i, step)
			if i == 1 {
				progress.Logf("soak: %v of work", d)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d / 2):
			}
		}
		s.slowDone.Add(1)
		return map[string]any{"ms": d.Milliseconds()}, nil
	})
	for _, w := range []*client.Worker{fast, slow} {
		wg.Go(func() {
			if err := w.Run(ctx); err != nil && ctx.Err() == nil {
				s.failed("worker", err)
			}
		})
	}
}

// startSubmitters submits fast jobs at soakFastRate in all. A submitter
// whose call takes longer than its tick skips ticks rather than
// catching up, so a slow server gets less load, not a backlog.
func (s *soak) startSubmitters(ctx context.Context, wg *sync.WaitGroup) {
	c := s.newClient()
	for range soakSubmitters {
		wg.Go(func() {
			tick := time.NewTicker(soakSubmitters * time.Second / soakFastRate)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: soakFastKind, Queue: soakFastKind})
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					s.failed("submit a fast job", err)
				default:
					s.fastSubmitted.Add(1)
				}
			}
		})
	}
}

// startParked starts the soakParked callers, each submitting a slow job
// and parking on it, then again on a new one when it ends: half with
// WaitJob (client.WaitForJob), on two of the clients, half with
// WatchJob (client.Watch), on the other two. The first submits go a few
// dozen at a time, so the start does not throw 10,000 at the server at
// once.
func (s *soak) startParked(ctx context.Context, wg *sync.WaitGroup) {
	var clients []*client.Client
	for range soakParkedClients {
		clients = append(clients, s.newClient())
	}
	first := make(chan struct{}, 64)
	for i := range soakParked {
		c, watch := clients[i%soakParkedClients], i%2 == 1
		wg.Go(func() {
			first <- struct{}{}
			for n := 0; ctx.Err() == nil; n++ {
				j, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: soakSlowKind, Queue: soakSlowKind})
				if n == 0 {
					<-first
				}
				if err != nil {
					if ctx.Err() == nil {
						s.failed("submit a slow job", err)
						soakPause(ctx, time.Second)
					}
					continue
				}
				s.parkUntilEnd(ctx, c, j.GetId(), watch)
			}
		})
	}
}

func (s *soak) parkUntilEnd(ctx context.Context, c *client.Client, id string, watch bool) {
	if !watch {
		j, err := c.WaitForJob(ctx, id)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			s.failed("WaitForJob", err)
			soakPause(ctx, time.Second)
		case j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
			s.failed("WaitForJob", fmt.Errorf("job %s ended %v", id, j.GetState()))
		default:
			s.waitEnds.Add(1)
		}
		return
	}
	var last *jobwatchv1.Job
	for j, err := range c.Watch(ctx, id) {
		if err != nil {
			if ctx.Err() == nil {
				s.failed("Watch", err)
				soakPause(ctx, time.Second)
			}
			return
		}
		last = j
	}
	if last.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		s.failed("Watch", fmt.Errorf("job %s's last snapshot is %v", id, last.GetState()))
		return
	}
	s.watchEnds.Add(1)
}

func soakPause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// waitParked waits until the server's gauges hold every parked call.
func (s *soak) waitParked(t *testing.T, within time.Duration) {
	for deadline := time.Now().Add(within); ; {
		if sm := s.sample(0); sm.parked() >= soakParked {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("SOAK FAILED: %v after the load began, %.0f calls parked, want %d; errors: %v", within, sm.parked(), soakParked, s.errsNow())
		}
		select {
		case <-s.srv.exited:
			t.Fatal("SOAK FAILED: serve exited while the calls were parking")
		case <-time.After(time.Second):
		}
	}
}

// soakSample is one reading of the server's /metrics, with the load's
// counters and serve's log lines by level at that moment.
type soakSample struct {
	elapsed time.Duration
	metrics map[string]float64 // by series, as /metrics writes it: name{labels}
	levels  map[string]int

	fastDone, slowDone, waitEnds, watchEnds int64
}

func (sm soakSample) rss() float64        { return sm.metrics["process_resident_memory_bytes"] }
func (sm soakSample) goroutines() float64 { return sm.metrics["go_goroutines"] }
func (sm soakSample) fds() float64        { return sm.metrics["process_open_fds"] }
func (sm soakSample) parked() float64 {
	return sm.metrics["jobwatch_parked_waits"] + sm.metrics["jobwatch_open_watches"]
}

// sum adds every series of metric whose labels contain each of with.
func (sm soakSample) sum(metric string, with ...string) float64 {
	var total float64
	for series, v := range sm.metrics {
		name, labels, _ := strings.Cut(series, "{")
		if name != metric {
			continue
		}
		ok := true
		for _, w := range with {
			ok = ok && strings.Contains(labels, w)
		}
		if ok {
			total += v
		}
	}
	return total
}

func (s *soak) sample(elapsed time.Duration) soakSample {
	s.t.Helper()
	sm := soakSample{
		elapsed: elapsed, metrics: map[string]float64{},
		fastDone: s.fastDone.Load(), slowDone: s.slowDone.Load(), waitEnds: s.waitEnds.Load(), watchEnds: s.watchEnds.Load(),
		levels: soakLogLevels(s.srv.logs.String()),
	}
	resp, err := http.Get(s.srv.url + "/metrics")
	if err != nil {
		s.t.Fatalf("SOAK FAILED: read /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			s.t.Fatalf("/metrics line %q: %v", line, err)
		}
		sm.metrics[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		s.t.Fatalf("SOAK FAILED: read /metrics: %v", err)
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "process_open_fds", "jobwatch_parked_waits", "jobwatch_open_watches"} {
		if _, ok := sm.metrics[name]; !ok {
			s.t.Fatalf("/metrics has no %s", name)
		}
	}
	return sm
}

var soakLevelRE = regexp.MustCompile(`(?:^| )level=(\S+)`)

// soakLogLevels counts serve's log lines by their slog level; a line
// without one is counted as "none" (a panic's trace, a runtime message).
func soakLogLevels(logs string) map[string]int {
	out := map[string]int{}
	for line := range strings.Lines(logs) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if m := soakLevelRE.FindStringSubmatch(line); m != nil {
			out[m[1]]++
		} else {
			out["none"]++
		}
	}
	return out
}

// aboveWarn reports whether a level counted by soakLogLevels is above
// WARN.
func soakAboveWarn(level string) bool {
	return !slices.Contains([]string{"DEBUG", "INFO", "WARN"}, level)
}

func soakLevelsString(levels map[string]int) string {
	var parts []string
	for _, l := range []string{"DEBUG", "INFO", "WARN", "ERROR"} {
		parts = append(parts, fmt.Sprintf("%s %d", l, levels[l]))
	}
	for l, n := range levels {
		if !slices.Contains([]string{"DEBUG", "INFO", "WARN", "ERROR"}, l) {
			parts = append(parts, fmt.Sprintf("%s %d", l, n))
		}
	}
	return strings.Join(parts, ", ")
}

// soakColumns are the table's columns, each right-aligned to its width.
var soakColumns = []struct {
	name  string
	width int
}{
	{"min", 5}, {"CPU %", 6}, {"RSS MiB", 8}, {"heap MiB", 9}, {"goroutines", 11}, {"fds", 4}, {"waits", 6}, {"watches", 8},
	{"claims", 7}, {"fast/s", 7}, {"slow/s", 7}, {"queued", 7}, {"WARN", 5}, {"ERROR+", 7},
}

func soakLine(cells []string) string {
	var b strings.Builder
	for i, c := range soakColumns {
		fmt.Fprintf(&b, "%*s", c.width, cells[i])
	}
	return b.String()
}

func soakHeader() string {
	var names []string
	for _, c := range soakColumns {
		names = append(names, c.name)
	}
	return soakLine(names)
}

// logRow logs one row of the table: sm, with the rates since prev (the
// first row, with no prev, comes with the header).
func (s *soak) logRow(sm soakSample, prev *soakSample) {
	if prev == nil {
		s.t.Log("soak:\n" + soakHeader() + "\n" + soakRow(sm, prev))
		return
	}
	s.t.Log("soak:\n" + soakRow(sm, prev))
}

func soakRow(sm soakSample, prev *soakSample) string {
	cpu, fast, slow := "-", "-", "-"
	if prev != nil {
		secs := (sm.elapsed - prev.elapsed).Seconds()
		cpu = fmt.Sprintf("%.0f", 100*(sm.metrics["process_cpu_seconds_total"]-prev.metrics["process_cpu_seconds_total"])/secs)
		fast = fmt.Sprintf("%.0f", float64(sm.fastDone-prev.fastDone)/secs)
		slow = fmt.Sprintf("%.1f", float64(sm.slowDone-prev.slowDone)/secs)
	}
	above := 0
	for l, n := range sm.levels {
		if soakAboveWarn(l) {
			above += n
		}
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	return soakLine([]string{
		fmt.Sprintf("%.1f", sm.elapsed.Minutes()), cpu, f(sm.rss() / (1 << 20)), f(sm.metrics["go_memstats_heap_inuse_bytes"] / (1 << 20)),
		f(sm.goroutines()), f(sm.fds()), f(sm.metrics["jobwatch_parked_waits"]), f(sm.metrics["jobwatch_open_watches"]),
		f(sm.metrics["jobwatch_parked_claims"]), fast, slow, f(sm.metrics[`jobwatch_jobs{state="queued"}`]),
		strconv.Itoa(sm.levels["WARN"]), strconv.Itoa(above),
	})
}

// soakWindows are the samples the growth bound compares: those in the
// first window after the warm-up, and those in the last window of the
// run.
func soakWindows(samples []soakSample, warmup, window time.Duration) (first, last []soakSample) {
	end := samples[len(samples)-1].elapsed
	for _, sm := range samples {
		if sm.elapsed >= warmup && sm.elapsed < warmup+window {
			first = append(first, sm)
		}
		if sm.elapsed > end-window {
			last = append(last, sm)
		}
	}
	return first, last
}

// soakGrowth is the growth bound's figure: the median of value over the
// last window's samples, over its median in the first window, less 1.
func soakGrowth(first, last []soakSample, value func(soakSample) float64) (m1, m2, change float64) {
	median := func(sms []soakSample) float64 {
		var vs []float64
		for _, sm := range sms {
			vs = append(vs, value(sm))
		}
		slices.Sort(vs)
		if n := len(vs); n%2 == 1 {
			return vs[n/2]
		}
		return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	m1, m2 = median(first), median(last)
	return m1, m2, m2/m1 - 1
}

func (s *soak) errsNow() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.errs)
}

// verdict prints the table and the figures, and fails t for every bound
// the run broke.
func (s *soak) verdict(t *testing.T, idle soakSample, samples []soakSample, warmup, window time.Duration) {
	final := samples[len(samples)-1]
	end := final.elapsed
	firstWin, lastWin := soakWindows(samples, warmup, window)

	rows := []string{soakHeader(), soakRow(samples[0], nil)}
	prev := samples[0]
	for _, sm := range samples[1:] {
		if sm.elapsed-prev.elapsed >= soakRowEvery {
			rows = append(rows, soakRow(sm, &prev))
			prev = sm
		}
	}
	t.Logf("soak: the samples, one a minute (of %d, every %v):\n%s", len(samples), soakSampleEvery, strings.Join(rows, "\n"))

	var broken []string
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "figure\tidle\tstart\tfirst window\tlast window\tend\tchange\tbound\t\n")
	for _, f := range []struct {
		name  string
		value func(soakSample) float64
		unit  float64
	}{
		{"RSS, MiB", soakSample.rss, 1 << 20},
		{"goroutines", soakSample.goroutines, 1},
		{"open files", soakSample.fds, 1},
	} {
		m1, m2, change := soakGrowth(firstWin, lastWin, f.value)
		verdict := "ok"
		if change > soakGrowthBound {
			verdict = "BROKEN"
			broken = append(broken, fmt.Sprintf("%s grew %.1f%% (median %.1f in the first window after the warm-up, %.1f in the last), bound %.0f%%",
				f.name, 100*change, m1/f.unit, m2/f.unit, 100*soakGrowthBound))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%+.1f%%\t≤ +%.0f%%: %s\t\n", f.name, f.value(idle)/f.unit, f.value(samples[0])/f.unit,
			m1/f.unit, m2/f.unit, f.value(final)/f.unit, 100*change, 100*soakGrowthBound, verdict)
	}
	tw.Flush()
	t.Logf("soak: RSS, goroutines and open files (medians of %d samples in [%v, %v) and of %d in (%v, %v]):\n%s",
		len(firstWin), warmup, warmup+window, len(lastWin), end-window, end, b.String())

	// A sample also misses the calls between their answer at the cap and
	// their next WaitJob: the waits that parked together at the start
	// reach their cap together, a few hundred at a time on a loaded
	// machine. So each minute's median is held to the floor, and every
	// sample to a lower one that only a collapse breaks.
	lowest := samples[0]
	for _, sm := range samples {
		if sm.parked() < lowest.parked() {
			lowest = sm
		}
	}
	if floor := soakParkedLow * soakParked; lowest.parked() < floor {
		broken = append(broken, fmt.Sprintf("%.0f calls parked at %v, below %.0f", lowest.parked(), lowest.elapsed.Round(time.Second), floor))
	}
	lowestMinute := math.Inf(1)
	var lowestMinuteAt time.Duration
	for from := time.Duration(0); from < end; from += soakRowEvery {
		var minute []soakSample
		for _, sm := range samples {
			if sm.elapsed > from && sm.elapsed <= from+soakRowEvery {
				minute = append(minute, sm)
			}
		}
		if len(minute) == 0 {
			continue
		}
		if m, _, _ := soakGrowth(minute, minute, soakSample.parked); m < lowestMinute {
			lowestMinute, lowestMinuteAt = m, from+soakRowEvery
		}
	}
	if floor := soakParkedFloor * soakParked; lowestMinute < floor {
		broken = append(broken, fmt.Sprintf("the minute to %v had a median of %.0f calls parked, below %.0f", lowestMinuteAt, lowestMinute, floor))
	}
	slowest := -1.0
	var slowestAt time.Duration
	prev = samples[0]
	for _, sm := range samples[1:] {
		if sm.elapsed-prev.elapsed >= soakRowEvery {
			rate := float64(sm.fastDone-prev.fastDone) / (sm.elapsed - prev.elapsed).Seconds()
			if slowest < 0 || rate < slowest {
				slowest, slowestAt = rate, sm.elapsed
			}
			prev = sm
		}
	}
	if floor := soakRateFloor * soakFastRate; slowest < floor {
		broken = append(broken, fmt.Sprintf("the minute to %v completed %.0f fast jobs/s, below %.0f", slowestAt.Round(time.Second), slowest, floor))
	}
	refused := final.sum("jobwatch_parked_calls_refused_total") + final.sum("jobwatch_parked_calls_tenant_refused_total") +
		final.sum("jobwatch_parked_calls_conn_refused_total")
	if refused > 0 {
		broken = append(broken, fmt.Sprintf("%.0f parked calls refused (/metrics jobwatch_parked_calls*_refused_total)", refused))
	}

	levels := soakLogLevels(s.srv.logs.String())
	var warnings, above []string
	for line := range strings.Lines(s.srv.logs.String()) {
		m := soakLevelRE.FindStringSubmatch(line)
		switch {
		case strings.TrimSpace(line) == "":
		case m == nil || soakAboveWarn(m[1]):
			above = append(above, strings.TrimSpace(line))
		case m[1] == "WARN":
			warnings = append(warnings, strings.TrimSpace(line))
		}
	}
	if len(warnings) > 0 {
		t.Logf("soak: serve's warnings (allowed, %d in all; the first 10):\n%s", len(warnings), strings.Join(warnings[:min(10, len(warnings))], "\n"))
	}
	if len(above) > 0 {
		broken = append(broken, fmt.Sprintf("serve logged %d lines above WARN, the first: %s", len(above), above[0]))
	}
	s.mu.Lock()
	errs, examples, retried, ww := maps.Clone(s.errs), maps.Clone(s.examples), maps.Clone(s.retried), s.workerWarnings
	s.mu.Unlock()
	for what, n := range errs {
		broken = append(broken, fmt.Sprintf("%d calls failed: %s (%s)", n, what, examples[what]))
	}

	notOK := map[string]float64{}
	for series, v := range final.metrics {
		if strings.HasPrefix(series, "jobwatch_requests_total{") && !strings.Contains(series, `code="ok"`) && v > 0 {
			notOK[strings.TrimPrefix(series, "jobwatch_requests_total")] = v
		}
	}
	t.Logf("soak: figures over %v on %s:\n"+
		"  parked calls: %d at the start, the fewest %.0f (at %v), the lowest minute's median %.0f, %.0f at the end; %d waits and %d watches heard their job end and parked again; WaitJob answered OK %.0f times, WatchJob streams ended OK %.0f times\n"+
		"  jobs done: %d fast (%.0f/s; %d first attempts failed and were retried), %d slow; %.0f fast submitted\n"+
		"  serve's log lines by level: %s\n"+
		"  answers not OK (/metrics, before the load stopped): %v\n"+
		"  errors the clients retried, by code: %v; the workers' warnings: %d %v",
		end, testdb.Backend(),
		int(samples[0].parked()), lowest.parked(), lowest.elapsed.Round(time.Second), lowestMinute, final.parked(),
		final.waitEnds-samples[0].waitEnds, final.watchEnds-samples[0].watchEnds,
		final.sum("jobwatch_requests_total", `WaitJob"`, `code="ok"`),
		final.sum("jobwatch_requests_total", `WatchJob"`, `code="ok"`),
		final.fastDone-samples[0].fastDone, float64(final.fastDone-samples[0].fastDone)/end.Seconds(), s.fastRetried.Load(),
		final.slowDone-samples[0].slowDone, float64(s.fastSubmitted.Load()),
		soakLevelsString(levels), notOK, retried, ww.warnings, ww.first)

	if len(broken) > 0 {
		t.Errorf("SOAK FAILED: %d bounds broken:\n  %s", len(broken), strings.Join(broken, "\n  "))
		return
	}
	t.Logf("soak: PASSED: every bound held over %v", end)
}

// soakLogHandler counts the soak's workers' records at WARN and above.
type soakLogHandler struct{ s *soak }

func (h soakLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h soakLogHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h soakLogHandler) WithGroup(string) slog.Handler                { return h }
func (h soakLogHandler) Handle(_ context.Context, r slog.Record) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.s.warnings++
	if len(h.s.first) < 5 {
		var b strings.Builder
		b.WriteString(r.Time.Format("15:04:05 ") + r.Message)
		r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
		h.s.first = append(h.s.first, b.String())
	}
	return nil
}

// TestSoakGrowthRuleStepsOverTheGCSawtoothAndCatchesALeak holds the
// soak's growth bound (soakWindows, soakGrowth) to what it is for, on
// made-up samples of a 30-minute run taken as the soak takes them: RSS
// that swings 10% with the GC's cycle but stays level passes (the max
// over the min of the same samples would fail it), so does RSS that
// climbs to its level during the warm-up; RSS that keeps growing by
// 0.3% a minute after the warm-up fails.
func TestSoakGrowthRuleStepsOverTheGCSawtoothAndCatchesALeak(t *testing.T) {
	const length, warmup, window = 30 * time.Minute, 5 * time.Minute, 5 * time.Minute
	sawtooth := func(at time.Duration) float64 {
		const cycle = 35 * time.Second
		return 400 + 40*float64(at%cycle)/float64(cycle)
	}
	tests := []struct {
		name     string
		rss      func(at time.Duration) float64
		wantPass bool
	}{
		{"a level sawtooth passes", sawtooth, true},
		{"a climb during the warm-up, then level, passes", func(at time.Duration) float64 {
			return sawtooth(at) * min(1, 0.5+0.5*at.Minutes()/5)
		}, true},
		{"growth of 0.3% a minute after the warm-up fails", func(at time.Duration) float64 {
			return sawtooth(at) * (1 + 0.003*max(0, at.Minutes()-5))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var samples []soakSample
			lo, hi := math.Inf(1), math.Inf(-1)
			for at := time.Duration(0); at <= length; at += soakSampleEvery {
				v := tt.rss(at)
				samples = append(samples, soakSample{elapsed: at, metrics: map[string]float64{"process_resident_memory_bytes": v}})
				if at >= warmup {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
			first, last := soakWindows(samples, warmup, window)
			if len(first) != 60 || len(last) != 60 {
				t.Fatalf("windows of %d and %d samples, want a minute's worth times five (60) each", len(first), len(last))
			}
			m1, m2, change := soakGrowth(first, last, soakSample.rss)
			if pass := change <= soakGrowthBound; pass != tt.wantPass {
				t.Errorf("medians %.1f then %.1f: %+.1f%%, passes %v, want %v", m1, m2, 100*change, pass, tt.wantPass)
			}
			if tt.wantPass && hi/lo-1 <= soakGrowthBound {
				t.Errorf("max over min of the samples after the warm-up is %.3f: the case does not show what the medians are for", hi/lo)
			}
		})
	}
}
