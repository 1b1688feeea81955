package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// The outage test's settings. The caps are short so that parked calls
// reach them while the database is away and must ask again; the parked
// calls' clients back off up to a second, as a patient client would.
const (
	outageJobs   = 500             // jobs parked on, each by a waiter and a watcher: 1,000 parked calls
	outageLength = 5 * time.Second // how long the database stays stopped
	// A keepalive well within the lifetime, as the defaults have it (15s
	// in 10min): a stream that ends at its lifetime has sent something,
	// so the client resumes at once rather than backing off.
	outageKeepalive = time.Second
	outageBackoff   = time.Second     // the parked calls' clients' longest backoff
	outageBound     = 5 * time.Minute // the whole scenario, replicas included
	// The promises checked.
	answerWithin  = time.Second     // a write while the database is away answers unavailable
	recoverWithin = 5 * time.Second // from the database answering to load back to normal
	// answerBound is what the test allows a refused write: five times
	// the promise, as the race detector on a loaded two-core machine
	// slows every answer (CI, with another suite beside it, saw 2.02 s);
	// the figures it logs are held to the promise in the docs, and
	// measured without -race the slowest is a few hundred ms.
	answerBound = 5 * answerWithin
	// recoverBound is what the test allows the recovery, for the same
	// reason: three times the promise (two suites and more tests beside
	// it once took the load 6.9 s to come back).
	recoverBound = 3 * recoverWithin
)

// The replicas' caps: outageWaitCap stays under outageLength, so every
// parked wait reaches it while the database is away. Under the race
// detector they are twice as long: every call costs several times as
// much there, and with 2 s and 3 s two test suites side by side kept the
// calls so busy asking again (streams cut with INTERNAL_ERROR at the
// lifetime's end while a write waited, and retried) that fewer than a
// third of them were ever parked at once.
var outageWaitCap, outageLifetime = underRace(2 * time.Second), underRace(3 * time.Second)

// underRace is d, twice as long under the race detector.
func underRace(d time.Duration) time.Duration {
	if raceEnabled {
		return 2 * d
	}
	return d
}

// TestReplicasRideOutPostgreSQLGoingAway runs two jobwatch serve
// processes on a PostgreSQL cluster of the test's own, with submitters,
// workers and 1,000 parked WaitJob and WatchJob calls (through the Go
// client's WaitForJob and Watch) on them, and takes the database away:
// stopped with pg_ctl stop -m immediate for a few seconds, and,
// separately, every connection cut with pg_terminate_backend. It checks
// what docs/OPERATING.md promises of that day. While the database is
// away: submits answer unavailable within answerWithin and are not
// acknowledged; gRPC health says NOT_SERVING; parked calls stay parked or
// end OK at their cap, and every error their clients see is one they
// retry; neither replica spins (CPU and log lines bounded, one warning
// per episode). When it is back: both replicas listen again, every
// waiter and watcher hears the end of its job (which workers finish on
// either replica only once the database is back), load is back to normal
// within recoverWithin, and every submit acknowledged, before, during or
// after, is there and runs.
func TestReplicasRideOutPostgreSQLGoingAway(t *testing.T) {
	if os.Getenv("JOBWATCH_TEST_BACKEND") != "postgres" {
		t.Skip("runs in the PostgreSQL pass (JOBWATCH_TEST_BACKEND=postgres)")
	}
	cl := pgtest.NewCluster(t)
	t.Run("pg_ctl stop -m immediate", func(t *testing.T) {
		rideOut(t, cl, func(t *testing.T, o *outage) {
			cl.Stop(t)
			// pg_ctl returns once the server is gone: a submit sent after
			// that must not be acknowledged.
			o.cut = time.Now()
			// Started again however whileAway ends, for the next subtest.
			defer cl.Start(t)
			o.whileAway(t)
		})
	})
	t.Run("pg_terminate_backend of every connection", func(t *testing.T) {
		rideOut(t, cl, func(t *testing.T, o *outage) {
			o.cut = time.Now()
			if n := cl.TerminateBackends(t); n < 4 {
				t.Errorf("pg_terminate_backend ended %d connections; want the replicas' pools and listeners", n)
			}
		})
	})
}

// outage is one run of rideOut: the replicas, and what the test's
// callers saw.
type outage struct {
	rs       []*replica
	cl       *pgtest.Cluster
	dbURL    string
	cut      time.Time // when the database went away (set by rideOut's takeAway)
	load     *steadyLoad
	figures  []string
	outageMu sync.Mutex
}

func (o *outage) report(format string, args ...any) {
	o.outageMu.Lock()
	defer o.outageMu.Unlock()
	o.figures = append(o.figures, fmt.Sprintf(format, args...))
}

func rideOut(t *testing.T, cl *pgtest.Cluster, takeAway func(*testing.T, *outage)) {
	dbURL := cl.URL(t)
	// The replicas run under ctx and are killed when it ends, so its
	// bound must hold every step's own (parking 1,000 calls alone may
	// take up to two minutes): a generous bound for race-detector builds
	// on a loaded two-core machine. A make test beside CI once took the
	// parking past an earlier 90 s, which killed the replicas mid-step.
	ctx, cancel := context.WithTimeout(context.Background(), outageBound)
	defer cancel()
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	writeFile(t, cfg, "queues:\n  - name: parked\n")
	flags := []string{"--wait-cap", outageWaitCap.String(), "--stream-lifetime", outageLifetime.String(),
		"--keepalive", outageKeepalive.String(), "--log-level", "info"}
	o := &outage{cl: cl, dbURL: dbURL}
	o.rs = []*replica{startReplicaWith(t, ctx, "A", dbURL, cfg, flags...)}
	o.rs = append(o.rs, startReplicaWith(t, ctx, "B", dbURL, cfg, flags...))
	defer func() {
		for _, f := range o.figures {
			t.Log(f)
		}
	}()

	// The parked calls: a waiter of each job on one replica and a
	// watcher on the other, through clients of their own that back off
	// as a patient client would, and that note every error they retry.
	parked := newParkedCalls(t, ctx, o.rs)
	// The steady load: submitters and workers on both replicas.
	o.load = startSteadyLoad(t, ctx, o.rs)
	o.load.waitRunning(t)

	takeAway(t, o)
	back := time.Now()
	t.Logf("the database is back after %v", back.Sub(o.cut).Round(time.Millisecond))

	serving := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if healthOf(t, o.rs[0]) == grpchealth.StatusServing && healthOf(t, o.rs[1]) == grpchealth.StatusServing {
				serving <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// The parked jobs end only now, on workers of both replicas: each
	// end must reach the waiter and watcher on the other replica too.
	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer func() { stopWork(); workers.Wait() }()
	for _, r := range o.rs {
		runWorker(t, workCtx, &workers, r, "parked", 8, &runLog{}, func(context.Context) error { return nil })
	}

	o.checkListening(t, back)
	parked.checkEveryEndHeard(t, o, back)
	o.load.checkBackToNormal(t, o, back)
	select {
	case at := <-serving:
		o.report("health SERVING again on both replicas %v after the database is back", at.Sub(back).Round(time.Millisecond))
		if took := at.Sub(back); took > recoverBound {
			t.Errorf("health took %v to say SERVING again, want within %v (the promise is %v)", took, recoverBound, recoverWithin)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("health not SERVING again on both replicas 20s after the database is back")
	}

	o.load.stop()
	o.load.checkNothingAcknowledgedLost(t, o)
	o.checkLogs(t)
}

// whileAway checks, while the database is stopped, what the replicas
// answer and what they spend, and returns after outageLength.
func (o *outage) whileAway(t *testing.T) {
	for _, r := range o.rs {
		waitFor(t, "replica "+r.name+" NOT_SERVING", func() bool { return healthOf(t, r) == grpchealth.StatusNotServing })
	}
	o.report("health NOT_SERVING on both replicas %v after the stop", time.Since(o.cut).Round(time.Millisecond))
	// A second in, the replicas have noticed; from then to the end of
	// the outage they should be idle but for what the callers ask.
	time.Sleep(time.Until(o.cut.Add(time.Second)))
	before := o.usage(t)
	time.Sleep(time.Until(o.cut.Add(outageLength)))
	after := o.usage(t)
	for i, r := range o.rs {
		secs := after[i].at.Sub(before[i].at).Seconds()
		cpu := (after[i].cpu - before[i].cpu).Seconds() / secs
		lines := float64(after[i].lines-before[i].lines) / secs
		o.report("replica %s while the database was away: %.0f%% of a core, %.1f log lines/s", r.name, 100*cpu, lines)
		// Idle but for 1,000 callers re-asking with backoff (about 2,000
		// calls a second, each refused at once): 30% of a core here on
		// a quiet machine, 54% on a loaded one; a spin takes a whole
		// one. Under the race detector every call costs several times
		// as much.
		maxCPU := 0.75
		if raceEnabled {
			maxCPU = 1
		}
		if cpu > maxCPU {
			t.Errorf("replica %s used %.0f%% of a core while the database was away: it spins", r.name, 100*cpu)
		}
		if lines > 1 {
			t.Errorf("replica %s logged %.1f lines a second while the database was away", r.name, lines)
		}
	}
	o.load.checkRefusedInTime(t, o)
}

type resourceUse struct {
	at    time.Time
	cpu   time.Duration
	lines int
}

func (o *outage) usage(t *testing.T) []resourceUse {
	var us []resourceUse
	for _, r := range o.rs {
		us = append(us, resourceUse{at: time.Now(), cpu: cpuTime(t, r.cmd.Process.Pid), lines: strings.Count(r.logs.String(), "\n")})
	}
	return us
}

// cpuTime is the user and system time process pid has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc to measure CPU time: %v", err)
	}
	// The fields after the command's name, which is in parentheses.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// checkListening waits for both replicas' listening connections.
func (o *outage) checkListening(t *testing.T, back time.Time) {
	schema := schemaOf(t, o.dbURL)
	waitFor(t, "both replicas listening again", func() bool {
		return o.cl.QueryInt(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
			"jobwatch-listen "+schema) == len(o.rs)
	})
	o.report("both replicas listen again %v after the database is back", time.Since(back).Round(time.Millisecond))
}

func schemaOf(t *testing.T, dbURL string) string {
	_, rest, _ := strings.Cut(dbURL, "search_path=")
	schema, _, _ := strings.Cut(rest, "&")
	if schema == "" {
		t.Fatalf("no search_path in %s", dbURL)
	}
	return schema
}

// checkLogs checks that each replica warned once about the episode.
// A warning that an answer was cut because its client did not read it
// names the test's own client, slow on a loaded machine under the race
// detector: it is counted, not held against the replica. So is a read
// for /metrics that did not answer within a scrape's wait, which a
// loaded machine gives before the episode too (its warning says the
// last read stands).
func (o *outage) checkLogs(t *testing.T) {
	for _, r := range o.rs {
		var warnings []string
		slowClients, released := 0, 0
		for _, line := range strings.Split(r.logs.String(), "\n") {
			switch {
			case strings.Contains(line, `msg="answer cut:`),
				strings.Contains(line, "; the last read stands") && strings.Contains(line, "context deadline exceeded"):
				slowClients++
			case strings.Contains(line, `msg="released a job whose claim's answer was lost"`):
				released++
			case strings.Contains(line, "level=WARN"), strings.Contains(line, "level=ERROR"):
				warnings = append(warnings, line)
			}
		}
		o.report("replica %s logged %d warnings (and %d answers cut for a client that did not read, or metrics reads slower than a scrape's wait); it released %d jobs whose claim's answer was lost",
			r.name, len(warnings), slowClients, released)
		if len(warnings) != 1 {
			t.Errorf("replica %s logged %d warnings and errors for one episode, want one:\n%s",
				r.name, len(warnings), strings.Join(warnings, "\n"))
		}
	}
}

// healthOf is r's gRPC health status of the whole server.
func healthOf(t *testing.T, r *replica) grpchealth.Status {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := grpchealth.NewClient(http.DefaultClient, r.url).Check(ctx, &grpchealth.CheckRequest{})
	if err != nil {
		t.Fatalf("health of %s: %v", r.name, err)
	}
	return resp.Status
}

// parkedCalls are the waiters and watchers of the parked jobs.
type parkedCalls struct {
	ids      []string
	outcomes chan parkedOutcome
	mu       sync.Mutex
	retried  map[string]int    // the codes of the errors the clients retried
	example  map[string]string // an error of each code
}

type parkedOutcome struct {
	who string
	job *jobwatchv1.Job
	err error
	at  time.Time
}

func newParkedCalls(t *testing.T, ctx context.Context, rs []*replica) *parkedCalls {
	p := &parkedCalls{outcomes: make(chan parkedOutcome, 2*outageJobs), retried: map[string]int{}, example: map[string]string{}}
	var clients []*client.Client
	for _, r := range rs {
		c := client.New(r.url, client.WithBackoff(100*time.Millisecond, outageBackoff),
			client.WithRetryNotify(func(err error, _ time.Duration) {
				p.mu.Lock()
				code := connect.CodeOf(err).String()
				p.retried[code]++
				if p.example[code] == "" {
					p.example[code] = time.Now().Format("15:04:05.000 ") + err.Error()
				}
				p.mu.Unlock()
			}))
		t.Cleanup(c.Close)
		clients = append(clients, c)
	}
	for i := range outageJobs {
		j, err := rs[i%2].client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "parked", Queue: "parked"})
		if err != nil {
			t.Fatalf("submit a parked job: %v", err)
		}
		p.ids = append(p.ids, j.GetId())
	}
	for i, id := range p.ids {
		waiter, watcher := clients[i%2], clients[(i+1)%2]
		go func() {
			j, err := waiter.WaitForJob(ctx, id)
			p.outcomes <- parkedOutcome{who: "waiter of " + id, job: j, err: err, at: time.Now()}
		}()
		go func() {
			var last *jobwatchv1.Job
			var err error
			for j, werr := range watcher.Watch(ctx, id) {
				last, err = j, werr
			}
			p.outcomes <- parkedOutcome{who: "watcher of " + id, job: last, err: err, at: time.Now()}
		}()
	}
	for _, r := range rs {
		// Each call ends at its cap (outageWaitCap, outageLifetime) and
		// asks again, so at any moment some are on their way back: on a
		// loaded two-core machine with race-detector builds, enough that
		// every one of them parked at one instant may never be seen
		// (a make test beside CI waited two minutes for it in vain). Three
		// quarters of each replica's share parked at once shows the calls
		// are there; checkEveryEndHeard then holds every one of them to
		// its job's end. 1,000 calls on such a machine: a generous bound.
		const bound = 2 * time.Minute
		enough := float64(outageJobs/2) * 3 / 4
		var waits, watches float64
		for deadline := time.Now().Add(bound); ; time.Sleep(10 * time.Millisecond) {
			if ctx.Err() != nil {
				t.Fatalf("the scenario's bound (%v) passed while the calls parked: the replicas were stopped", outageBound)
			}
			waits, watches = r.metric(t, "jobwatch_parked_waits"), r.metric(t, "jobwatch_open_watches")
			if waits >= enough && watches >= enough {
				break
			}
			if time.Now().After(deadline) {
				p.mu.Lock()
				t.Fatalf("replica %s: %v waits and %v watches parked after %v, want %v of each of its %d; errors the clients retried, by code: %v, the first of each: %v",
					r.name, waits, watches, bound, enough, outageJobs/2, p.retried, p.example)
			}
		}
	}
	return p
}

// checkEveryEndHeard waits for every parked call to end with its job
// SUCCEEDED.
func (p *parkedCalls) checkEveryEndHeard(t *testing.T, o *outage, back time.Time) {
	var last time.Time
	// A bound for a hang, not a pace: alone this takes seconds, but a
	// loaded machine running two test suites beside it took more than a
	// minute (the pace is reported below, not checked).
	timeout := time.After(3 * time.Minute)
	for range 2 * len(p.ids) {
		select {
		case out := <-p.outcomes:
			if out.at.After(last) {
				last = out.at
			}
			switch {
			case out.err != nil:
				t.Errorf("%s: %v", out.who, out.err)
			case out.job.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
				t.Errorf("%s got %v, want SUCCEEDED", out.who, out.job.GetState())
			}
		case <-timeout:
			t.Fatalf("parked calls still waiting three minutes after the database came back")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	o.report("every one of the %d parked calls heard its job end, the last %v after the database is back; errors their clients retried, by code: %v",
		2*len(p.ids), last.Sub(back).Round(time.Millisecond), p.retried)
}

// steadyLoad submits jobs on every replica one after another and runs
// them on workers of every replica.
type steadyLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	runs   *runLog
	mu     sync.Mutex
	calls  []submitCall
	acked  []string
	rs     []*replica
}

type submitCall struct {
	start, end time.Time
	code       connect.Code // 0 for OK
	err        error
}

const submittersPerReplica = 2

func startSteadyLoad(t *testing.T, ctx context.Context, rs []*replica) *steadyLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &steadyLoad{cancel: cancel, runs: &runLog{}, rs: rs}
	for _, r := range rs {
		runWorker(t, ctx, &l.wg, r, "steady", 4, l.runs, func(context.Context) error {
			time.Sleep(5 * time.Millisecond)
			return nil
		})
		for range submittersPerReplica {
			l.wg.Go(func() { l.submit(ctx, r) })
		}
	}
	return l
}

// submit submits until ctx ends, at most one job every 10ms, backing
// off 100ms after a refusal as a client would.
func (l *steadyLoad) submit(ctx context.Context, r *replica) {
	for ctx.Err() == nil {
		call := submitCall{start: time.Now()}
		resp, err := r.client.JobService().SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "steady"})
		call.end = time.Now()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			call.code, call.err = connect.CodeOf(err), err
		}
		l.mu.Lock()
		l.calls = append(l.calls, call)
		if err == nil {
			l.acked = append(l.acked, resp.GetJob().GetId())
		}
		l.mu.Unlock()
		pause := 10 * time.Millisecond
		if err != nil {
			pause = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

func (l *steadyLoad) stop() { l.cancel(); l.wg.Wait() }

// waitRunning waits until the load has run for a while, for a baseline.
func (l *steadyLoad) waitRunning(t *testing.T) {
	// A generous bound: two replicas, their workers and PostgreSQL
	// under the race detector on a loaded machine took more than 20 s.
	waitForWithin(t, 2*time.Minute, "the steady load running", func() bool { return len(l.runs.all()) >= 50 })
}

// completions counts the runs that ended within [from, to).
func (l *steadyLoad) completions(from, to time.Time) int {
	n := 0
	for _, r := range l.runs.all() {
		if !r.end.Before(from) && r.end.Before(to) {
			n++
		}
	}
	return n
}

// checkRefusedInTime checks the submits made while the database was
// away: each refused, unavailable, within answerWithin.
func (l *steadyLoad) checkRefusedInTime(t *testing.T, o *outage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var refused, acked int
	var slowest time.Duration
	firstRefusal := time.Duration(-1)
	for _, c := range l.calls {
		if c.end.Before(o.cut) {
			continue
		}
		took := c.end.Sub(c.start)
		slowest = max(slowest, took)
		switch {
		case c.err == nil && c.start.After(o.cut):
			t.Errorf("a submit made %v after the database stopped was acknowledged", c.start.Sub(o.cut))
		case c.err == nil:
			acked++ // sent before the stop
		case c.code != connect.CodeUnavailable:
			t.Errorf("a submit while the database was away answered %v, want unavailable", c.err)
		default:
			refused++
			if firstRefusal < 0 {
				firstRefusal = c.end.Sub(o.cut)
			}
			if took > answerBound {
				t.Errorf("a submit while the database was away took %v to answer unavailable, want within %v (promised: %v)", took, answerBound, answerWithin)
			}
		}
	}
	o.report("while the database was away: %d submits refused unavailable (the first %v after the stop), the slowest answer %v; %d in flight at the stop acknowledged",
		refused, firstRefusal.Round(time.Millisecond), slowest.Round(time.Millisecond), acked)
	if refused == 0 {
		t.Error("no submit was refused while the database was away")
	}
}

// checkBackToNormal waits for a second in which the workers completed
// at least half as many jobs as in a second before the outage, and
// checks that it came within recoverWithin of the database's return.
func (l *steadyLoad) checkBackToNormal(t *testing.T, o *outage, back time.Time) {
	baseline := l.completions(o.cut.Add(-2*time.Second), o.cut) / 2
	var normal time.Time
	waitFor(t, "the steady load back to normal", func() bool {
		for at := back; at.Add(time.Second).Before(time.Now()); at = at.Add(100 * time.Millisecond) {
			if 2*l.completions(at, at.Add(time.Second)) >= baseline {
				normal = at.Add(time.Second)
				return true
			}
		}
		return false
	})
	o.report("the steady load (%d jobs/s before) back to at least half of it %v after the database is back",
		baseline, normal.Sub(back).Round(time.Millisecond))
	if took := normal.Sub(back); took > recoverBound {
		t.Errorf("the steady load took %v to come back, want within %v (the promise is %v)", took, recoverBound, recoverWithin)
	}
}

// checkNothingAcknowledgedLost checks that every acknowledged submit is
// there and, once the workers have drained, ran.
func (l *steadyLoad) checkNothingAcknowledgedLost(t *testing.T, o *outage) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l.mu.Lock()
	acked := slices.Clone(l.acked)
	l.mu.Unlock()
	// Drain: workers on both replicas until every acknowledged job ended.
	drainCtx, stopDrain := context.WithCancel(ctx)
	var drain sync.WaitGroup
	for _, r := range o.rs {
		runWorker(t, drainCtx, &drain, r, "steady", 4, l.runs, func(context.Context) error { return nil })
	}
	defer func() { stopDrain(); drain.Wait() }()
	var missing []string
	for _, id := range acked {
		j, err := o.rs[0].client.WaitForJob(ctx, id)
		switch {
		case errors.Is(err, client.ErrJobNotFound):
			missing = append(missing, id)
		case err != nil:
			t.Fatalf("wait for acknowledged job %s: %v", id, err)
		case j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED:
			t.Errorf("acknowledged job %s ended %v, want SUCCEEDED", id, j.GetState())
		}
	}
	o.report("%d submits acknowledged, %d missing afterwards", len(acked), len(missing))
	if len(missing) > 0 {
		t.Errorf("%d acknowledged jobs are gone: %v", len(missing), missing[:min(len(missing), 10)])
	}
}
