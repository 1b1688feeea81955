package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// fillTenants gives s a table as a bulk load leaves it: finished jobs
// the statistics know (ANALYZE), then, in one statement each, queued
// jobs of tenants they know nothing of (autovacuum is off for the
// table, so they stay unknown): n[tenant] of each.
func fillTenants(tb testing.TB, s *Store, n map[string]int) {
	tb.Helper()
	exec := execer(tb, s)
	exec("ALTER TABLE jobs SET (autovacuum_enabled = false)")
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, finished_at, worker_id, lease_id)
		SELECT 'done-'||i, 'acme', 'k', 'q', 'succeeded', 3, 100, '', 1, 1, '', $1::timestamptz,
			$1::timestamptz, $1::timestamptz, '', '' FROM generate_series(1, 2000) AS i`, t0)
	exec("ANALYZE jobs")
	for tenant, count := range n {
		exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
				unique_key, created_at, run_at, worker_id, lease_id)
			SELECT $3 || '-' || i, $3, 'k', 'q', 'queued', 1, 0, '', 0, 3, '',
				$1::timestamptz + i * interval '1 ms', $1::timestamptz + i * interval '1 ms', '', ''
			FROM generate_series(1, $2::int) AS i`, t0, count, tenant)
	}
}

// A submission under a quota counts its tenant's jobs not yet running in
// jobs_tenant_queued alone (an index only scan, or an index scan),
// stopping at the bound, never by a scan of the table or a bitmap of
// every entry of the tenant: with statistics that have never seen the
// tenant's jobs (right after a bulk load), and after ANALYZE; with a
// plan made for its arguments and a generic one.
func TestQueuedCountPlanSeeksTheTenantIndex(t *testing.T) {
	testQuotaCountPlan(t, queuedCount, []any{"acme", int64(10001)}, "('acme', 10001)", "jobs_tenant_queued")
}

// A submission that may pass on its tenant's quota mark (markedCount)
// reads, if the mark does not take it, the tenant's jobs not yet running
// in jobs_tenant_queued and its RUNNING ones in jobs_running_tenant, and
// nothing else of jobs, whatever the statistics.
func TestMarkedCountPlanSeeksTheTenantIndexes(t *testing.T) {
	testQuotaCountPlan(t, markedCount, []any{"acme", int64(1), int64(10001)}, "('acme', 1, 10001)",
		"jobs_tenant_queued", "jobs_running_tenant")
}

// testQuotaCountPlan checks that query, run as a create under a quota
// runs it, reads jobs only through the indexes want, each of them, with
// no sort or bitmap: with statistics that have never seen the tenants'
// jobs, and after ANALYZE; planned for args, and generic (run with the
// EXECUTE arguments execArgs).
func testQuotaCountPlan(t *testing.T, query string, args []any, execArgs string, want ...string) {
	s := openURL(t, pgtest.URL(t))
	fillTenants(t, s, map[string]int{"acme": 20000, "globex": 30000})
	check := func(t *testing.T) {
		for _, generic := range []bool{false, true} {
			plan := explainCount(t, s, query, args, execArgs, generic)
			found := map[string]bool{}
			var walk func(n planNode)
			walk = func(n planNode) {
				switch {
				case slices.Contains(want, n.IndexName):
					found[n.IndexName] = true
				case n.RelationName == "jobs":
					t.Errorf("generic plan %v: %s of jobs (%s), want %v alone, in plan:\n%s", generic, n.NodeType, n.IndexName, want, plan)
				case n.NodeType == "Sort" || n.NodeType == "Bitmap Heap Scan" || n.NodeType == "Bitmap Index Scan":
					t.Errorf("generic plan %v: a %s, in plan:\n%s", generic, n.NodeType, plan)
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plan)
			for _, index := range want {
				if !found[index] {
					t.Errorf("generic plan %v reads no %s:\n%s", generic, index, plan)
				}
			}
		}
	}
	t.Run("stale statistics", check)
	if _, err := s.pool.Exec(t.Context(), "ANALYZE jobs"); err != nil {
		t.Fatal(err)
	}
	t.Run("after analyze", check)
}

// A create that a tenant's quota mark takes reads nothing of jobs: the
// exact counts of markedCount are in the branches of its CASE that the
// mark's answer does not take, which PostgreSQL never runs. And the
// mark is the count the first create made, plus what each create since
// added.
func TestACreateThatPassesOnItsMarkReadsNoJobs(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	fillTenants(t, s, map[string]int{"acme": 20000})
	ctx := t.Context()
	q := store.Quota{MaxQueued: map[string]int{"acme": 100000}}
	for i := range 3 {
		j := jobtype.Job{ID: fmt.Sprintf("new-%d", i), Tenant: "acme", Kind: "k", Queue: "q", State: jobtype.Queued,
			Version: 1, MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0, RunAt: t0}
		if _, err := s.CreateJobsWithin(ctx, []jobtype.Job{j}, q); err != nil {
			t.Fatal(err)
		}
	}
	var unfinished int
	if err := s.pool.QueryRow(ctx, "SELECT unfinished FROM quota_marks WHERE tenant = 'acme'").Scan(&unfinished); err != nil {
		t.Fatalf("acme's mark: %v", err)
	}
	if unfinished != 20003 {
		t.Errorf("acme's mark is %d, want the 20,000 counted and the 3 created", unfinished)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	plan, _ := explainWith(t, tx, "ANALYZE, FORMAT JSON", markedCount, "acme", int64(1), int64(100000))
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.RelationName == "jobs" && n.ActualLoops > 0 {
			t.Errorf("a %s of jobs (%s) ran %v times for a create the mark took", n.NodeType, n.IndexName, n.ActualLoops)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan)
}

// explainCount explains query as a create under a quota runs it: after
// quotaLocks, in its transaction.
func explainCount(t *testing.T, s *Store, query string, args []any, execArgs string, generic bool) planNode {
	t.Helper()
	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	hi, lo := s.tenantLock("acme")
	if _, err := tx.Exec(ctx, quotaLocks, []int32{hi}, []int32{lo}, []bool{false}); err != nil {
		t.Fatal(err)
	}
	return explainInTx(t, tx, query, args, execArgs, generic)
}

// explainInTx explains query on tx with a plan made for args, or, if
// generic, with a generic plan run with the EXECUTE arguments execArgs.
func explainInTx(t *testing.T, tx pgx.Tx, query string, args []any, execArgs string, generic bool) planNode {
	t.Helper()
	ctx := t.Context()
	if !generic {
		plan, _ := explainPlan(t, tx, query, args...)
		return plan
	}
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("explained_%d", explained.Add(1))
	if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+query); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	plan, _ := explainPlan(t, tx, "EXECUTE "+name+execArgs)
	return plan
}

// BenchmarkSubmitUnderQuota measures one submission (a job created
// QUEUED, committed) of a tenant with jobs not yet running, beside
// another tenant's 50,000, with statistics that have not seen either:
// with no quota (one pipelined insert), and under a max_queued of 10,000
// (a transaction that takes the tenant's lock, counts its jobs and
// inserts), with 100 and with 9,999 queued, and with 9,999 after a
// VACUUM. Without one the count's index only scan reads each queued
// job's row too (the visibility map knows none of their pages). Each job
// made is ended after its op, outside the timer, so every op finds as
// many.
//
//	go test ./store/postgres/ -run '^$' -bench BenchmarkSubmitUnderQuota -count 6
func BenchmarkSubmitUnderQuota(b *testing.B) {
	bounded := store.Quota{MaxQueued: map[string]int{"acme": 10000}}
	for _, tt := range []struct {
		name   string
		queued int
		quota  store.Quota
		vacuum bool
	}{
		{"no quota, 9999 queued", 9999, store.Quota{}, false},
		{"max_queued=10000, 100 queued", 100, bounded, false},
		{"max_queued=10000, 9999 queued", 9999, bounded, false},
		{"max_queued=10000, 9999 queued, vacuumed", 9999, bounded, true},
		{"max_queued=1000000, 100000 queued", 100000, store.Quota{MaxQueued: map[string]int{"acme": 1000000}}, false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := openURL(b, pgtest.URL(b))
			fillTenants(b, s, map[string]int{"acme": tt.queued, "globex": 50000})
			ctx := context.Background()
			if tt.vacuum {
				// As autovacuum leaves jobs that have waited a while: the
				// visibility map says their pages are all visible, so the
				// count reads the index alone.
				if _, err := s.pool.Exec(ctx, "VACUUM jobs"); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				j := jobtype.Job{ID: fmt.Sprintf("new-%09d", i), Tenant: "acme", Kind: "k", Queue: "q",
					State: jobtype.Queued, Version: 1, MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0, RunAt: t0}
				if _, err := s.CreateJobsWithin(ctx, []jobtype.Job{j}, tt.quota); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if _, err := s.pool.Exec(ctx, "UPDATE jobs SET state = 'cancelled', finished_at = $2 WHERE id = $1", j.ID, t0.Add(time.Hour)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// HeldLeases, which the engine asks after a claim whose answer was lost,
// reads only RUNNING jobs, through an index that holds them alone (or
// the state index's entries of RUNNING jobs), never the queued ones: with
// statistics that have never seen the 50,000 queued jobs (right after a
// bulk load) and after ANALYZE; with a plan made for its arguments and a
// generic one.
func TestHeldLeasesReadOnlyRunningJobs(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	fillTenants(t, s, map[string]int{"acme": 20000, "globex": 30000})
	execer(t, s)(`UPDATE jobs SET state = 'running', lease_id = 'lease-' || id,
		lease_expires_at = $1::timestamptz + interval '1 minute' WHERE id IN ('acme-1', 'acme-2', 'globex-7')`, t0)
	leases := []string{"lease-acme-1", "lease-globex-7", "lease-unknown"}
	check := func(t *testing.T) {
		for _, generic := range []bool{false, true} {
			ctx := t.Context()
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			query, args := heldLeasesQuery, []any{leases}
			if generic {
				if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("explained_%d", explained.Add(1))
				if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+heldLeasesQuery); err != nil {
					t.Fatalf("prepare: %v", err)
				}
				query, args = "EXECUTE "+name+"(ARRAY['"+strings.Join(leases, "','")+"'])", nil
			}
			plan, _ := explainPlan(t, tx, query, args...)
			var walk func(n planNode)
			walk = func(n planNode) {
				if n.RelationName == "jobs" || n.IndexName != "" {
					switch n.IndexName {
					case "jobs_running_lease", "jobs_running_queue", "jobs_running_tenant", "jobs_state":
					default:
						t.Errorf("plan (generic %v): %s of jobs (index %q), want one of the running jobs' indexes, in plan:\n%s",
							generic, n.NodeType, n.IndexName, plan)
					}
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plan)
		}
		held, err := s.HeldLeases(t.Context(), leases)
		if err != nil || len(held) != 2 {
			t.Errorf("held leases %v, %v; want those of acme-1 and globex-7", held, err)
		}
	}
	t.Run("stale statistics", check)
	execer(t, s)("ANALYZE jobs")
	t.Run("after analyze", check)
}
