package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string  `json:"Node Type"`
	RelationName string  `json:"Relation Name"`
	IndexName    string  `json:"Index Name"`
	ActualLoops  float64 `json:"Actual Loops"` // with ANALYZE
	// With BUFFERS, the buffers the node and those under it read.
	SharedHit  float64    `json:"Shared Hit Blocks"`
	SharedRead float64    `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// explainPlan explains query (with args) on tx, whose transaction has
// the claim's plan settings, and returns the plan and whether the
// server would compile it (JIT).
func explainPlan(t *testing.T, tx pgx.Tx, query string, args ...any) (planNode, bool) {
	t.Helper()
	return explainWith(t, tx, "FORMAT JSON", query, args...)
}

// explainWith is explainPlan with EXPLAIN's options (FORMAT JSON and
// others, such as ANALYZE).
func explainWith(t *testing.T, tx pgx.Tx, options, query string, args ...any) (planNode, bool) {
	t.Helper()
	var out []byte
	if err := tx.QueryRow(t.Context(), "EXPLAIN ("+options+") "+query, args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, query)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
		JIT  any      `json:"JIT"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan %s: %v", out, err)
	}
	return plans[0].Plan, plans[0].JIT != nil
}

// explainPrepared explains query as a claim or a lease write runs it: after the prelude, in
// its transaction, with a plan made for its arguments (custom) or for
// any arguments (generic), which a statement the pool prepared may use
// after a few runs.
func explainPrepared(t *testing.T, s *Store, query string, args []any, generic bool) (planNode, bool) {
	t.Helper()
	ctx := t.Context()
	tx := claimTx(t, s)
	defer tx.Rollback(ctx)
	if !generic {
		return explainPlan(t, tx, query, args...)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	// A prepared statement outlives its transaction, on the connection.
	name := fmt.Sprintf("explained_%d", explained.Add(1))
	if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+query); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	execute := "EXECUTE " + name
	if len(args) > 0 {
		execute += "(" + literals(t, args) + ")"
	}
	plan, jit := explainPlan(t, tx, execute)
	if _, err := tx.Exec(ctx, "DEALLOCATE "+name); err != nil {
		t.Fatal(err)
	}
	return plan, jit
}

// claimTx begins a transaction as a claim's: after the prelude, with
// the claim's plan settings. The caller rolls it back.
func claimTx(t *testing.T, s *Store) pgx.Tx {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), prelude, []int64(nil)); err != nil {
		tx.Rollback(t.Context())
		t.Fatal(err)
	}
	return tx
}

// explained names the statements explainPrepared prepares.
var explained atomic.Int64

// literals are args as SQL literals of their types, for EXECUTE.
func literals(t *testing.T, args []any) string {
	quote := func(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
	array := func(typ string, n int, elem func(i int) string) string {
		elems := make([]string, n)
		for i := range elems {
			elems[i] = elem(i)
		}
		return "ARRAY[" + strings.Join(elems, ", ") + "]::" + typ + "[]"
	}
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case time.Time:
			out[i] = quote(v.Format(time.RFC3339Nano)) + "::timestamptz"
		case string:
			out[i] = quote(v) + "::text"
		case int:
			out[i] = fmt.Sprint(v)
		case int64:
			out[i] = fmt.Sprint(v) + "::bigint"
		case []string:
			out[i] = array("text", len(v), func(i int) string { return quote(v[i]) })
		case []int64:
			out[i] = array("bigint", len(v), func(i int) string { return fmt.Sprint(v[i]) })
		case []int32:
			out[i] = array("int", len(v), func(i int) string { return fmt.Sprint(v[i]) })
		case []bool:
			out[i] = array("bool", len(v), func(i int) string { return fmt.Sprint(v[i]) })
		case []float64:
			out[i] = array("float8", len(v), func(i int) string { return fmt.Sprint(v[i]) })
		case []*string:
			out[i] = array("text", len(v), func(i int) string {
				if v[i] == nil {
					return "NULL"
				}
				return quote(*v[i])
			})
		default:
			t.Fatalf("argument %d: no SQL literal for %T", i+1, a)
		}
	}
	return strings.Join(out, ", ")
}

// String draws the plan as EXPLAIN's text does, roughly, for failures.
func (n planNode) String() string {
	var b strings.Builder
	var draw func(n planNode, depth int)
	draw = func(n planNode, depth int) {
		fmt.Fprintf(&b, "%s-> %s", strings.Repeat("  ", depth), n.NodeType)
		if n.RelationName != "" {
			fmt.Fprintf(&b, " on %s", n.RelationName)
		}
		if n.IndexName != "" {
			fmt.Fprintf(&b, " using %s", n.IndexName)
		}
		b.WriteString("\n")
		for _, c := range n.Plans {
			draw(c, depth+1)
		}
	}
	draw(n, 0)
	return b.String()
}

// seekProblems lists what in plan would make a claim's cost grow with
// the jobs that wait: a scan of the jobs that is not an index scan; a
// scan of the queued jobs' indexes that nothing above it stops (a Limit)
// before a node that reads all of its input (a sort, an aggregate, a
// hash); a scan of the index on state alone, which holds every job. It
// also counts the seeks of the queued jobs' indexes.
func seekProblems(plan planNode) (problems []string, seeks int) {
	var walk func(n planNode, stopped bool, above string)
	walk = func(n planNode, stopped bool, above string) {
		switch n.NodeType {
		case "Limit":
			stopped, above = true, ""
		case "Sort", "Incremental Sort", "Aggregate", "Hash", "Materialize", "WindowAgg":
			if stopped {
				stopped, above = false, n.NodeType
			} else if above == "" {
				above = n.NodeType
			}
		}
		if n.RelationName == "jobs" && n.NodeType != "ModifyTable" {
			switch {
			case n.NodeType != "Index Scan" && n.NodeType != "Index Only Scan":
				problems = append(problems, n.NodeType+" on jobs")
			case n.IndexName == "jobs_state":
				problems = append(problems, "a scan of jobs_state, every job of a state")
			case strings.HasPrefix(n.IndexName, "jobs_queued"):
				seeks++
				if !stopped && above != "" {
					problems = append(problems, fmt.Sprintf("%s over every row of %s", above, n.IndexName))
				}
			}
		}
		for _, c := range n.Plans {
			walk(c, stopped, above)
		}
	}
	walk(plan, true, "")
	return problems, seeks
}

// seeksByPriority says whether plan seeks one of the indexes of the
// queued jobs in claim order, whose columns hold priority before run_at:
// every pick finds the most urgent ready jobs first.
// usesIndex says whether plan reads index.
func usesIndex(plan planNode, index string) bool {
	if plan.IndexName == index {
		return true
	}
	return slices.ContainsFunc(plan.Plans, func(c planNode) bool { return usesIndex(c, index) })
}

func seeksByPriority(plan planNode) bool {
	switch plan.IndexName {
	case "jobs_queued_priority", "jobs_queued_queue_priority", "jobs_queued_kind", "jobs_queued_queue_kind", "jobs_queued_queue_tenant",
		"jobs_queued_queue_tenant_kind":
		return true
	}
	for _, c := range plan.Plans {
		if seeksByPriority(c) {
			return true
		}
	}
	return false
}

// claimFilters are worker filters of every shape a claim's statement
// takes, over the queues, kinds and tenants of the plan tests' jobs.
func claimFilters() []struct {
	name   string
	filter store.ClaimFilter
} {
	limits := map[string]store.QueueLimit{
		"index":  {MaxRunning: 1, Serial: true, HoldRetry: true},
		"readme": {MaxRunning: 8, Pools: []string{"db"}},
	}
	pools := map[string]int{"db": 4}
	perTenant := maps.Clone(limits)
	perTenant["q"] = store.QueueLimit{MaxRunning: 8, MaxRunningPerTenant: 2}
	return []struct {
		name   string
		filter store.ClaimFilter
	}{
		{"any job", store.ClaimFilter{}},
		{"one kind", store.ClaimFilter{Kinds: []string{"a"}}},
		{"some kinds", store.ClaimFilter{Kinds: []string{"a", "b"}}},
		{"one queue", store.ClaimFilter{Queues: []string{"q"}}},
		{"some queues", store.ClaimFilter{Queues: []string{"q", "other"}}},
		{"a queue and a kind", store.ClaimFilter{Queues: []string{"q"}, Kinds: []string{"b"}}},
		{"queues and kinds", store.ClaimFilter{Queues: []string{"q", "other"}, Kinds: []string{"a", "c"}}},
		{"queues with rules and a pool", store.ClaimFilter{Limits: limits, Pools: pools}},
		{"rules and a kind", store.ClaimFilter{Kinds: []string{"a"}, Limits: limits, Pools: pools}},
		{"rules, kinds and queues", store.ClaimFilter{Kinds: []string{"a", "b"}, Queues: []string{"index", "readme", "q"}, Limits: limits, Pools: pools}},
		{"some tenants", store.ClaimFilter{Tenants: []string{"acme", "globex"}}},
		{"a tenant's bound on its running jobs", store.ClaimFilter{TenantMaxRunning: map[string]int{"acme": 2}}},
		{"a tenant's bound, rules and kinds", store.ClaimFilter{Kinds: []string{"a", "b"}, Limits: limits, Pools: pools, TenantMaxRunning: map[string]int{"acme": 2}}},
		{"rules with a per-tenant bound", store.ClaimFilter{Kinds: []string{"a"}, Limits: perTenant, Pools: pools}},
		{"a rate per tenant", store.ClaimFilter{Limits: map[string]store.QueueLimit{"q": {Rate: jobtype.Rate{Limit: 5, Per: time.Second, PerTenant: true}}}}},
		{"a tenant and a queue", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}}},
		{"a tenant, a queue and a kind", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}, Kinds: []string{"a"}}},
		{"a tenant, a queue and kinds", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}, Kinds: []string{"a", "b"}}},
		{"rules, a tenant, a queue and kinds", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"readme"}, Kinds: []string{"a", "b"}, Limits: limits, Pools: pools}},
		{"rules and tenants", store.ClaimFilter{Tenants: []string{"acme"}, Limits: limits, Pools: pools}},
		{"rules, tenants, kinds and queues", store.ClaimFilter{Tenants: []string{"acme"}, Kinds: []string{"a"}, Queues: []string{"index", "readme"}, Limits: limits, Pools: pools}},
	}
}

// A claim's statement is one text whatever number of jobs it asks for:
// the pool prepares and plans each text once per connection, so a
// number written into the text made most claims parse and plan anew.
func TestClaimStatementIsOneTextForAnyNumberOfJobs(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tt := range claimFilters() {
		f := tt.filter
		f.Now = now
		text := func(n int) string {
			query, _ := claimQuery(f, store.Claim{WorkerID: "w", LeaseIDs: make([]string, n), Now: now, Lease: time.Minute})
			return query
		}
		want := text(1)
		for _, n := range []int{2, 10, 64} {
			if got := text(n); got != want {
				t.Errorf("%s: the statement of a claim of %d jobs differs from that of one:\n%s\n\nagainst\n%s", tt.name, n, got, want)
			}
		}
	}
}

// Every claim and every parked claimer's look runs pickQuery, so it must
// seek each queue's (or kind's) first jobs in an index in claim order,
// never scan the table or sort the queued jobs, whatever the statistics
// say: right after a bulk insert into a table the planner last saw with
// only finished jobs (it then expects no queued job at all), and after
// ANALYZE.
func TestClaimPlanSeeksIndexesWithStaleStatistics(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	exec := execer(t, s)
	exec("ALTER TABLE jobs SET (autovacuum_enabled = false)")
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, finished_at, worker_id, lease_id)
		SELECT 'done-'||i, 'acme', 'a', 'q', 'succeeded', 3, 100, '', 1, 1, '', $1::timestamptz, $1::timestamptz,
			$1::timestamptz, '', '' FROM generate_series(1, 5000) AS i`, t0)
	exec("ANALYZE jobs")
	// 50,000 jobs the statistics know nothing of, over 4 queues, 3 kinds,
	// 3 tenants and every priority, queued but for 1 in 100 running.
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, worker_id, lease_id, priority)
		SELECT 'job-'||i, (ARRAY['acme', 'globex', 'initech'])[1 + i % 3], (ARRAY['a', 'b', 'c'])[1 + i % 5 % 3],
			(ARRAY['q', 'index', 'readme', 'other'])[1 + i % 4], CASE WHEN i % 100 = 1 THEN 'running' ELSE 'queued' END,
			1, 0, '', i % 7 / 6, 3, '', $1::timestamptz + i * interval '1 ms', $1::timestamptz + i * interval '1 ms', '', '',
			i % 11 % 10
		FROM generate_series(1, 50000) AS i`, t0)

	filters := claimFilters()
	now := t0.Add(time.Hour)
	// check explains query as the claim runs it: after the prelude, in
	// its transaction, with a plan for its arguments (custom) and with
	// one for any arguments (generic), which a statement prepared by the
	// pool uses after a few runs.
	check := func(t *testing.T, query string, args []any) {
		t.Helper()
		for _, generic := range []bool{false, true} {
			plan, jit := explainPrepared(t, s, query, args, generic)
			problems, seeks := seekProblems(plan)
			if seeks == 0 {
				problems = append(problems, "no seek of an index of the queued jobs")
			}
			if !seeksByPriority(plan) {
				problems = append(problems, "no seek of an index of the queued jobs by priority")
			}
			if jit {
				problems = append(problems, "JIT compiles it")
			}
			for _, p := range problems {
				t.Errorf("generic plan %v: %s, in plan:\n%s", generic, p, plan)
			}
		}
	}
	run := func(t *testing.T) {
		for _, tt := range filters {
			f := tt.filter
			f.Now = now
			for _, n := range []int{1, 10} {
				t.Run(fmt.Sprintf("%s, claim %d", tt.name, n), func(t *testing.T) {
					query, args := claimQuery(f, store.Claim{WorkerID: "w", LeaseIDs: make([]string, n), Now: now, Lease: time.Minute})
					check(t, query, args)
				})
			}
			t.Run(tt.name+", next ready", func(t *testing.T) {
				query, args := pickQuery(f, false, 1, "j.run_at", false, 1)
				check(t, query, args)
			})
			if len(f.Tenants) == 1 && len(f.Queues) == 1 && len(f.Kinds) > 0 {
				// Fair claiming's pick of one tenant's jobs of the
				// worker's kinds seeks them by kind, never walking the
				// tenant's jobs of other kinds.
				t.Run(tt.name+", by kind", func(t *testing.T) {
					query, args := pickQuery(f, true, 10, "j.seq", true, 1)
					for _, generic := range []bool{false, true} {
						plan, _ := explainPrepared(t, s, query, args, generic)
						if !usesIndex(plan, "jobs_queued_queue_tenant_kind") || usesIndex(plan, "jobs_queued_queue_tenant") {
							t.Errorf("generic plan %v: want jobs_queued_queue_tenant_kind alone, in plan:\n%s", generic, plan)
						}
					}
				})
			}
		}
		// Fair claiming's look at a queue's tenants with ready jobs: a
		// seek per tenant in jobs_unfinished_queue_tenant.
		t.Run("the tenants with ready jobs in a queue", func(t *testing.T) {
			for _, generic := range []bool{false, true} {
				plan, _ := explainPrepared(t, s, readyTenantsSQL, []any{"q", now}, generic)
				problems, _ := seekProblems(plan)
				if !usesIndex(plan, "jobs_unfinished_queue_tenant") {
					problems = append(problems, "no seek of jobs_unfinished_queue_tenant")
				}
				for _, p := range problems {
					t.Errorf("generic plan %v: %s, in plan:\n%s", generic, p, plan)
				}
			}
		})
	}
	// Lease writes find each job by id, never by a walk of the RUNNING
	// jobs.
	writes := func(t *testing.T) {
		e := &jobtype.JobError{Type: "Timeout", Message: "too slow"}
		ws := []store.LeaseWrite{
			{Op: store.Heartbeat, JobID: "job-1", LeaseID: "", Percent: 50, Step: "half"},
			{Op: store.Complete, JobID: "job-101", LeaseID: "", Result: []byte(`1`)},
			{Op: store.Fail, JobID: "job-201", LeaseID: "", Error: e, Retry: true, Jitter: 0.5},
		}
		args := append(leaseWriteArgs(ws, []int{0, 1, 2}), leaseRuleArgs(store.LeaseRules{Now: now, Lease: time.Minute})...)
		for _, generic := range []bool{false, true} {
			plan, _ := explainPrepared(t, s, writeLeases, args, generic)
			var walk func(n planNode)
			walk = func(n planNode) {
				if n.RelationName == "jobs" && n.NodeType != "ModifyTable" && n.IndexName != "jobs_id_key" {
					t.Errorf("generic plan %v: %s on jobs %s, want each job found by id, in plan:\n%s", generic, n.NodeType, n.IndexName, plan)
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plan)
		}
	}
	t.Run("stale statistics", run)
	t.Run("stale statistics, lease writes", writes)
	exec("ANALYZE jobs")
	t.Run("after analyze", run)
	t.Run("after analyze, lease writes", writes)
}

// TestClaimGuardAsksOnlyOfOtherTenants pins what the guard of a claim
// (contestedCTEs) costs on a queue whose ready jobs are all one tenant's:
// the skip scan of the queue's tenants, two seeks, and no look for a
// ready job of the picked tenant itself. That look steps over the dead
// entries of every job claimed since the last vacuum, and asked once
// per picked job it made claims of 50 jobs twelve times slower.
func TestClaimGuardAsksOnlyOfOtherTenants(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	ctx := t.Context()
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, worker_id, lease_id)
		SELECT 'job-'||i, 'acme', 'a', 'q', 'queued', 1, 0, '', 0, 3, '', $1::timestamptz + i * interval '1 ms',
			$1::timestamptz + i * interval '1 ms', '', '' FROM generate_series(1, 2000) AS i`, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	f := store.ClaimFilter{Queues: []string{"q"}, Kinds: []string{"a"}, Now: now}
	query, args := claimQuery(f, store.Claim{WorkerID: "w", LeaseIDs: make([]string, 50), Now: now, Lease: time.Minute})

	// The first 1,000 have been claimed and have ended since the last
	// vacuum: their entries in the queue's index are dead, ahead of
	// every live one.
	if _, err := s.pool.Exec(ctx, "ALTER TABLE jobs SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{"running", "succeeded"} {
		if _, err := s.pool.Exec(ctx, "UPDATE jobs SET state = $1, version = version + 1 WHERE seq <= 1000", state); err != nil {
			t.Fatal(err)
		}
	}

	tx := claimTx(t, s)
	defer tx.Rollback(ctx)
	plan, _ := explainWith(t, tx, "ANALYZE, BUFFERS, FORMAT JSON", query, args...)
	seeks, buffers := 0.0, 0.0
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.IndexName == "jobs_unfinished_queue_tenant" {
			seeks += n.ActualLoops
			buffers += n.SharedHit + n.SharedRead
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan)
	if seeks > 2 {
		t.Errorf("the guard sought jobs_unfinished_queue_tenant %v times for a claim of 50 jobs of one tenant, want 2 (its skip scan), in plan:\n%s", seeks, plan)
	}
	// Two seeks from the picked tenant read a few pages each; a seek
	// of the queue's first entry steps over the 1,000 dead ones.
	if buffers > 12 {
		t.Errorf("the guard read %v buffers of jobs_unfinished_queue_tenant, want at most 12: it steps over the dead entries of claimed jobs, in plan:\n%s", buffers, plan)
	}
}

// TestReadyTenantsSeekPastClaimedJobs pins what fair claiming's look at
// a queue's tenants with ready jobs (readyTenantsSQL) costs midway
// through a burn-down: each tenant's oldest jobs have been claimed and
// have ended since the last vacuum, so their entries, dead, sit ahead of
// the live ones in jobs_unfinished_queue_tenant. The look seeks each
// tenant from its newest entries, which are alive, and does not step
// over them.
func TestReadyTenantsSeekPastClaimedJobs(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	ctx := t.Context()
	exec := execer(t, s)
	exec("ALTER TABLE jobs SET (autovacuum_enabled = false)")
	// Three tenants with 2,000 jobs each, interleaved; the oldest 1,000
	// of each claimed and ended, the next 10 running.
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, worker_id, lease_id)
		SELECT 'job-'||i, 'tenant-'||(i % 3), 'a', 'q', 'queued', 1, 0, '', 0, 3, '', $1::timestamptz + i * interval '1 ms',
			$1::timestamptz + i * interval '1 ms', '', '' FROM generate_series(1, 6000) AS i`, t0)
	for _, state := range []string{"running", "succeeded"} {
		exec("UPDATE jobs SET state = $1, version = version + 1 WHERE seq <= 3000", state)
	}
	exec("UPDATE jobs SET state = 'running', version = version + 1 WHERE seq > 3000 AND seq <= 3030")

	now := t0.Add(time.Hour)
	tx := claimTx(t, s)
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, readyTenantsSQL, "q", now)
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tenants)
	if want := []string{"tenant-0", "tenant-1", "tenant-2"}; !slices.Equal(tenants, want) {
		t.Fatalf("tenants with ready jobs: %v, want %v", tenants, want)
	}
	plan, _ := explainWith(t, tx, "ANALYZE, BUFFERS, FORMAT JSON", readyTenantsSQL, "q", now)
	buffers := 0.0
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.IndexName == "jobs_unfinished_queue_tenant" {
			buffers += n.SharedHit + n.SharedRead
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan)
	t.Logf("the look read %v buffers of jobs_unfinished_queue_tenant", buffers)
	// Two seeks a tenant and one more past the first, a few pages each;
	// stepping over a tenant's 1,000 dead entries reads tens of them.
	if buffers > 30 {
		t.Errorf("the look read %v buffers of jobs_unfinished_queue_tenant, want at most 30: it steps over the dead entries of claimed jobs, in plan:\n%s", buffers, plan)
	}
}

// execer is a function that runs a statement on s's pool and fails tb
// if it fails.
func execer(tb testing.TB, s *Store) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		tb.Helper()
		if _, err := s.pool.Exec(context.Background(), sql, args...); err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
	}
}
