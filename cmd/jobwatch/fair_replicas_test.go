package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// Fair claiming black-box (issue 22, docs/OPERATING.md "Fair claiming"):
// real jobwatch serve processes and real client.Workers, one serve on
// SQLite, or with JOBWATCH_TEST_BACKEND=postgres two replicas on one
// PostgreSQL schema with the workers and the submits spread over both.
// Tenants a and b submit with client tokens of their own; the workers
// hold a worker token of every tenant, run one job at a time each, and
// record every job they are handed, with the start time the server gave
// it (the clock the claims are stamped by).
//
// Two sizes. The full form is the issue's: a backlog of 100,000 jobs
// and a split counted over 10,000 claims. With the race detector on
// PostgreSQL it takes from 2.5 minutes on a quiet machine to twice that
// on a busy one (the 100,000 submits took 24 s to 89 s; 10,000 claims
// between two tenants, each reading and writing the queue's passes, 2
// minutes), so it runs only with JOBWATCH_FAIR=full, as make chaos's full
// form does with JOBWATCH_CHAOS=full:
//
//	JOBWATCH_FAIR=full go test -race -count=1 -run '^TestFair' ./cmd/jobwatch/
//	JOBWATCH_FAIR=full JOBWATCH_TEST_BACKEND=postgres go test -race -count=1 -run '^TestFair' ./cmd/jobwatch/
//
// The short form runs in make test's SQLite and PostgreSQL passes: a
// backlog of 10,000 and a split over 2,000 claims. The bounds are the
// same at either size: fair claiming's do not grow with the backlog, and
// stride scheduling's shares are exact to a claim or so whatever the
// count.
type fairForm struct {
	name    string
	backlog int // tenant a's jobs queued before the starvation test's first b job
	claims  int // claims the weighted split is counted over
}

var (
	fairShort = fairForm{name: "short", backlog: 10_000, claims: 2_000}
	fairFull  = fairForm{name: "full", backlog: 100_000, claims: 10_000}
)

// The fair tests' load.
const (
	fairWorkers = 4 // client.Workers, Concurrency 1 each, spread over the servers
	fairBatch   = 1_000
	fairKind    = "noop"
	// fairNewcomerBound is how long the starvation test waits for each
	// of b's jobs: generous, as fair claiming hands it out within
	// milliseconds; a's backlog, which oldest-first would put first,
	// takes longer, or shows as thousands of a's claims between.
	fairNewcomerBound = 2 * time.Minute
)

// fairTokens are the tokens of the fair tests' tokens file: a client
// token of each tenant, and a worker token of every tenant.
var fairTokens = map[string]string{
	"a":      "jw_fair-tenant-a",
	"b":      "jw_fair-tenant-b",
	"worker": "jw_fair-worker",
}

func fairFormOf(t *testing.T) fairForm {
	form := fairShort
	switch v := os.Getenv("JOBWATCH_FAIR"); v {
	case "full":
		form = fairFull
	case "", "short":
	default:
		t.Fatalf("JOBWATCH_FAIR=%q: want full or short", v)
	}
	t.Logf("the %s form (JOBWATCH_FAIR=full: the full one)", form.name)
	return form
}

// fairServers starts the servers of a fair test with the config cfg (a
// YAML text) and fairTokens: one serve on SQLite, or two replicas on one
// PostgreSQL schema.
func fairServers(t *testing.T, ctx context.Context, cfg string) []*replica {
	t.Helper()
	dir := t.TempDir()
	cfgPath, tokensPath := filepath.Join(dir, "jobwatch.yaml"), filepath.Join(dir, "tokens.yaml")
	writeFile(t, cfgPath, cfg)
	writeFile(t, tokensPath, "tokens:\n"+
		tokensEntry(fairTokens["a"], "role: client, tenant: a")+
		tokensEntry(fairTokens["b"], "role: client, tenant: b")+
		tokensEntry(fairTokens["worker"], "role: worker"))
	db := testdb.New(t)
	flags := []string{"--log-level", "warn", "--tokens", tokensPath}
	rs := []*replica{startReplicaWith(t, ctx, "A", db, cfgPath, flags...)}
	if !testdb.IsSQLite(db) {
		rs = append(rs, startReplicaWith(t, ctx, "B", db, cfgPath, flags...))
	}
	return rs
}

// fairClient is a client of servers[i % len] with the token of who.
func fairClient(t *testing.T, servers []*replica, i int, who string) *client.Client {
	c := client.New(servers[i%len(servers)].url, client.WithToken(fairTokens[who]),
		client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	t.Cleanup(c.Close)
	return c
}

// fairRecord is a job a worker was handed.
type fairRecord struct {
	id, tenant string
	started    time.Time // its StartedAt, as the server stamped the claim
}

// fairCrew is the fair tests' workers and what they were handed.
type fairCrew struct {
	mu      sync.Mutex
	records []fairRecord
	stop    func() // stops the workers and waits for them to drain
}

// startFairCrew runs fairWorkers workers, round-robin over servers, until
// stop; the records of tenant b's jobs also go to bJobs when it is not
// nil, which must have room for every one of them.
func startFairCrew(t *testing.T, ctx context.Context, servers []*replica, bJobs chan<- fairRecord) *fairCrew {
	c := &fairCrew{}
	workCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range fairWorkers {
		w := client.NewWorker(fairClient(t, servers, i, "worker").WorkerBackend(), client.WorkerConfig{
			ID: fmt.Sprintf("fair-%d", i), Concurrency: 1, Logger: slog.New(slog.DiscardHandler),
			Backoff: client.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		})
		w.Handle(fairKind, func(_ context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
			r := fairRecord{id: j.GetId(), tenant: j.GetTenant(), started: j.GetStartedAt().AsTime()}
			c.mu.Lock()
			c.records = append(c.records, r)
			c.mu.Unlock()
			if bJobs != nil && r.tenant == "b" {
				bJobs <- r
			}
			return nil, nil
		})
		wg.Go(func() {
			if err := w.Run(workCtx); err != nil && workCtx.Err() == nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	c.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(c.stop)
	return c
}

// countSince is how many of tenant's jobs the workers were handed whose
// claims were stamped after t.
func (c *fairCrew) countSince(tenant string, t time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.records {
		if r.tenant == tenant && r.started.After(t) {
			n++
		}
	}
	return n
}

// count is how many jobs the workers were handed so far.
func (c *fairCrew) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

// byStart is every record, in the order the server stamped the claims;
// call it after stop, when every job claimed has been handed over.
func (c *fairCrew) byStart() []fairRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.records)
	slices.SortStableFunc(out, func(a, b fairRecord) int { return a.started.Compare(b.started) })
	return out
}

// submitBacklog submits n jobs of tenant who in SubmitJobs calls of
// fairBatch, turn about over servers.
func submitBacklog(t *testing.T, ctx context.Context, servers []*replica, who string, n int) {
	t.Helper()
	t0 := time.Now()
	var cs []*client.Client
	for i := range servers {
		cs = append(cs, fairClient(t, servers, i, who))
	}
	for call := 0; call*fairBatch < n; call++ {
		if _, err := cs[call%len(cs)].SubmitJobs(ctx, fairBatchOf(min(fairBatch, n-call*fairBatch))); err != nil {
			t.Fatalf("tenant %s's SubmitJobs %d: %v", who, call+1, err)
		}
	}
	t.Logf("tenant %s's %d jobs submitted in %v on %d server(s)", who, n, time.Since(t0).Round(time.Millisecond), len(servers))
}

func fairBatchOf(n int) []*jobwatchv1.SubmitJobRequest {
	reqs := make([]*jobwatchv1.SubmitJobRequest, n)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: fairKind}
	}
	return reqs
}

// TestFairClaimingServesANewcomerWithinTwoClaims: tenant a has a backlog
// (100,000 jobs in the full form) and keeps submitting SubmitJobs of 1,000 while the test
// runs; tenant b submits one job, five times, each once b's last was
// handed out, turn about on each server. Each of b's jobs must start
// within 2 + (workers - 1) claims of its submit's acknowledgement, its
// own included, counted in the order of the start times the server
// stamped on the claims (the workers' records of them):
//
//   - 2 is the bound, the tenants with ready work: the first
//     claim to see b's job may still go to a (the queue's passes are
//     level when a newcomer arrives, and ties go by name), the next is
//     b's.
//   - workers - 1: a claim is stamped when the server takes the call,
//     before it waits its turn at the queue's lock (SQLite's writer,
//     PostgreSQL's row lock), so a claim stamped before b's may be
//     decided after it. Each worker claims one job at a time, so at most
//     workers - 1 claims wait beside b's: that many of a's jobs may carry
//     an earlier stamp than b's and still have been claimed after it.
//
// So at most workers of a's jobs may be stamped after the acknowledgement
// and before b's job, where oldest-first would put b behind the whole
// backlog. The measure can miss a few: a claim stamped before the
// acknowledgement and decided after it (it waited at the lock while b's
// submit committed) is not counted. That exact count is the store
// conformance test's (storetest, fair claiming), which decides claims one
// by one; here the bound is held through real servers, replicas and
// workers.
func TestFairClaimingServesANewcomerWithinTwoClaims(t *testing.T) {
	form := fairFormOf(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	servers := fairServers(t, ctx, "tenants:\n  a: {weight: 1}\n  b: {weight: 1}\n")
	submitBacklog(t, ctx, servers, "a", form.backlog)

	// a keeps submitting while the test runs.
	moreCtx, stopMore := context.WithCancel(ctx)
	var more sync.WaitGroup
	c := fairClient(t, servers, 1, "a")
	more.Go(func() {
		for moreCtx.Err() == nil {
			if _, err := c.SubmitJobs(moreCtx, fairBatchOf(fairBatch)); err != nil && moreCtx.Err() == nil {
				t.Errorf("tenant a's SubmitJobs while b submits: %v", err)
				return
			}
		}
	})
	defer func() { stopMore(); more.Wait() }()

	const rounds = 5
	bJobs := make(chan fairRecord, rounds)
	crew := startFairCrew(t, ctx, servers, bJobs)
	waitFor(t, "the workers to run some of a's jobs", func() bool { return crew.count() >= 5*fairWorkers })

	type round struct {
		acked time.Time // when b's submit was acknowledged
		id    string
	}
	var rs []round
	for i := range rounds {
		j, err := fairClient(t, servers, i, "b").Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: fairKind})
		if err != nil {
			t.Fatalf("tenant b's submit %d: %v", i+1, err)
		}
		rs = append(rs, round{acked: time.Now(), id: j.GetId()})
		select {
		case r := <-bJobs:
			if r.id != j.GetId() {
				t.Fatalf("tenant b's job %d: the workers were handed %s, want %s", i+1, r.id, j.GetId())
			}
		case <-time.After(fairNewcomerBound):
			// Starved: it waits behind a's backlog, as oldest-first
			// would have it.
			t.Fatalf("tenant b's job %d (%s) was not handed out %v after its submit was acknowledged; a's jobs handed out meanwhile: %d",
				i+1, j.GetId(), fairNewcomerBound, crew.countSince("a", rs[i].acked))
		}
	}
	// Every job claimed so far is handed over before the workers stop.
	crew.stop()
	stopMore()
	more.Wait()

	all := crew.byStart()
	for i, r := range rs {
		at := slices.IndexFunc(all, func(x fairRecord) bool { return x.id == r.id })
		if at < 0 {
			t.Fatalf("b's job %d (%s) is not in the workers' records", i+1, r.id)
		}
		before := 0
		for _, x := range all[:at] {
			if x.tenant == "a" && x.started.After(r.acked) {
				before++
			}
		}
		t.Logf("b's job %d: claim stamped %v after its submit's acknowledgement, %d of a's between", i+1,
			all[at].started.Sub(r.acked).Round(time.Microsecond), before)
		if bound := 2 + (fairWorkers - 1); before+1 > bound {
			t.Errorf("b's job %d (%s) was claim %d after its submit was acknowledged (%d of a's before it), want within %d",
				i+1, r.id, before+1, before, bound)
		}
	}
}

// TestFairClaimingSplitsByWeight: tenants a (weight 3 in the config) and
// b (the default, 1) each have a backlog deeper than the claims counted
// before any worker starts; of the first claims by the servers' start
// stamps (2,000, or 10,000 in the full form), a's and b's are 3:1 within
// 5%.
func TestFairClaimingSplitsByWeight(t *testing.T) {
	form := fairFormOf(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	servers := fairServers(t, ctx, "tenants:\n  a: {weight: 3}\n")
	// Each backlog outlasts the counted claims even if every one were its.
	for _, who := range []string{"a", "b"} {
		submitBacklog(t, ctx, servers, who, form.claims+fairBatch)
	}

	t0 := time.Now()
	crew := startFairCrew(t, ctx, servers, nil)
	for crew.count() < form.claims {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d claims before the bound", crew.count(), form.claims)
		case <-time.After(50 * time.Millisecond):
		}
	}
	crew.stop()
	t.Logf("%d claims in %v", crew.count(), time.Since(t0).Round(time.Millisecond))

	got := map[string]int{}
	for _, r := range crew.byStart()[:form.claims] {
		got[r.tenant]++
	}
	if got["a"]+got["b"] != form.claims {
		t.Fatalf("the first %d claims went to %v, want only a and b", form.claims, got)
	}
	ratio := float64(got["a"]) / float64(max(got["b"], 1))
	t.Logf("of the first %d claims: a %d, b %d (%.3f:1)", form.claims, got["a"], got["b"], ratio)
	if ratio < 3*0.95 || ratio > 3*1.05 {
		t.Errorf("a:b = %d:%d = %.3f:1, want 3:1 within 5%%", got["a"], got["b"], ratio)
	}
}

// TestARatePerTenantHoldsEachTenantApart runs a queue with a rate per
// tenant (rate: {limit: 2, per: 1s, per_tenant: true}) on the fair
// tests' servers (two replicas on PostgreSQL), tenants a and b each
// submitting 6 jobs, and the four workers eager for them: every job
// runs; no second holds more than 2 starts of one tenant, by the start
// times the server stamped; and the tenants' windows are their own, so
// some second holds more than 2 starts of the two together, which one
// window for the queue would not allow.
func TestARatePerTenantHoldsEachTenantApart(t *testing.T) {
	const limit, per, each = 2, time.Second, 6
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	servers := fairServers(t, ctx, "queues:\n  - name: metered\n    rate: {limit: 2, per: 1s, per_tenant: true}\n")
	for i, who := range []string{"a", "b"} {
		reqs := fairBatchOf(each)
		for _, r := range reqs {
			r.Queue = "metered"
		}
		if _, err := fairClient(t, servers, i, who).SubmitJobs(ctx, reqs); err != nil {
			t.Fatalf("tenant %s's SubmitJobs: %v", who, err)
		}
	}
	crew := startFairCrew(t, ctx, servers, nil)
	for crew.count() < 2*each {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs started before the bound", crew.count(), 2*each)
		case <-time.After(50 * time.Millisecond):
		}
	}
	crew.stop()
	all := crew.byStart()
	starts := map[string][]time.Time{}
	for _, r := range all {
		starts[r.tenant] = append(starts[r.tenant], r.started)
	}
	for _, who := range []string{"a", "b"} {
		s := starts[who]
		if len(s) != each {
			t.Fatalf("tenant %s: %d jobs started, want %d", who, len(s), each)
		}
		for i := limit; i < len(s); i++ {
			if gap := s[i].Sub(s[i-limit]); gap < per {
				t.Errorf("tenant %s's starts %d and %d were %v apart: %d starts in one window of %v, the limit is %d per tenant",
					who, i-limit+1, i+1, gap, limit+1, per, limit)
			}
		}
	}
	most := 0
	for i := range all {
		n := 0
		for _, r := range all[i:] {
			if r.started.Sub(all[i].started) < per {
				n++
			}
		}
		most = max(most, n)
	}
	if most <= limit {
		t.Errorf("at most %d starts of the two tenants in any window of %v: the tenants share one window, want one each", most, per)
	}
	t.Logf("%d starts over %v, at most %d in one window of %v", len(all), all[len(all)-1].started.Sub(all[0].started), most, per)
}
