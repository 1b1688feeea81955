package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// TenantDepths reads only the partial index of unfinished jobs, in its
// order, whatever the statistics say: right after a bulk load (none yet,
// and no page of the table known all-visible), and after VACUUM ANALYZE.
// Never a scan of the table (which holds the ended jobs too), a sort or
// a hash of every pair.
func TestTenantDepthsReadsOnlyAnIndex(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	seedTenants(t, s, "queued", 20_000)
	seedTenants(t, s, "running", 100)
	seedTenants(t, s, "succeeded", 20_000)
	for _, when := range []string{"right after the bulk load", "after VACUUM ANALYZE"} {
		if when == "after VACUUM ANALYZE" {
			if _, err := s.pool.Exec(t.Context(), "VACUUM ANALYZE jobs"); err != nil {
				t.Fatal(err)
			}
		}
		var lines []string
		err := pgx.BeginFunc(t.Context(), s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), tenantDepthsSettings); err != nil {
				return err
			}
			rows, err := tx.Query(t.Context(), "EXPLAIN "+tenantDepthsQuery, t0.Add(time.Hour))
			if err != nil {
				return err
			}
			lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		drawn := strings.Join(lines, "\n")
		for _, bad := range []string{"Seq Scan", "Sort", "HashAggregate", "Bitmap"} {
			if strings.Contains(drawn, bad) {
				t.Errorf("%s: the plan has a %s:\n%s", when, bad, drawn)
			}
		}
		if !strings.HasPrefix(drawn, "GroupAggregate") || !strings.Contains(drawn, "Index Only Scan using jobs_unfinished_queue_tenant on jobs") {
			t.Errorf("%s: plan:\n%s\nwant a GroupAggregate over an index-only scan of jobs_unfinished_queue_tenant", when, drawn)
		}
	}
}

// BusyQueues seeks each queue it is asked of in an index of unfinished
// jobs and stops at the first entry, whatever the statistics: with
// statistics that have never seen the queued jobs (right after a bulk
// load) and after ANALYZE, planned for its arguments and generic. A scan
// of jobs, or a bitmap of every entry of a queue, would cost the
// queue's depth at every alert sweep.
func TestBusyQueuesPlanSeeksEachQueue(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	fillTenants(t, s, map[string]int{"acme": 20000, "globex": 30000})
	check := func(t *testing.T) {
		for _, generic := range []bool{false, true} {
			tx, err := s.pool.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			plan := explainInTx(t, tx, busyQueuesQuery, []any{[]string{"q", "empty"}}, "('{q,empty}')", generic)
			tx.Rollback(t.Context())
			seeks := 0
			var walk func(n planNode)
			walk = func(n planNode) {
				switch {
				case n.RelationName == "jobs" && (n.NodeType == "Index Only Scan" || n.NodeType == "Index Scan"):
					seeks++
				case n.RelationName == "jobs" || strings.HasPrefix(n.NodeType, "Bitmap"):
					t.Errorf("generic plan %v: a %s of jobs, in plan:\n%+v", generic, n.NodeType, plan)
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plan)
			if seeks == 0 {
				t.Errorf("generic plan %v seeks no index of jobs:\n%+v", generic, plan)
			}
		}
	}
	t.Run("stale statistics", check)
	if _, err := s.pool.Exec(t.Context(), "ANALYZE jobs"); err != nil {
		t.Fatal(err)
	}
	t.Run("after analyze", check)
}

// BenchmarkTenantDepths times TenantDepths, and QueueStats and
// BusyQueues (of the queue and of one with nothing unfinished) beside it,
// with depth QUEUED jobs of 10 tenants in one queue and 10,000 ended
// ones (which none reads), after VACUUM ANALYZE:
//
//	go test ./store/postgres/ -run '^$' -bench BenchmarkTenantDepths -benchtime 5x
func BenchmarkTenantDepths(b *testing.B) {
	for _, depth := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s := openURL(b, pgtest.URL(b))
			seedTenants(b, s, "queued", depth)
			seedTenants(b, s, "succeeded", 10_000)
			if _, err := s.pool.Exec(context.Background(), "VACUUM ANALYZE jobs"); err != nil {
				b.Fatal(err)
			}
			now := t0.Add(time.Hour)
			b.Run("TenantDepths", func(b *testing.B) {
				for b.Loop() {
					d, err := s.TenantDepths(context.Background(), now)
					if err != nil || len(d) != 10 {
						b.Fatalf("tenant depths: %d pairs, %v; want 10", len(d), err)
					}
				}
			})
			b.Run("QueueStats", func(b *testing.B) {
				for b.Loop() {
					if _, err := s.QueueStats(context.Background(), now); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("BusyQueues", func(b *testing.B) {
				for b.Loop() {
					busy, err := s.BusyQueues(context.Background(), []string{"q", "idle"})
					if err != nil || len(busy) != 1 {
						b.Fatalf("busy queues: %q, %v; want q", busy, err)
					}
				}
			})
		})
	}
}

// seedTenants inserts n jobs in state of tenants t0 to t9 in turn, in
// queue "q", due one µs apart from t0, with one statement.
func seedTenants(t testing.TB, s *Store, state string, n int) {
	t.Helper()
	_, err := s.pool.Exec(context.Background(), `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			attempt, max_attempts, unique_key, created_at, run_at, worker_id, lease_id)
		SELECT $1 || '-' || i, 't' || (i % 10), 'k', 'q', $1, 1, 0, '', 0, 1, '',
			$2::timestamptz + i * interval '1 microsecond', $2::timestamptz + i * interval '1 microsecond', '', ''
		FROM generate_series(1, $3::int) AS i`, state, t0, n)
	if err != nil {
		t.Fatal(err)
	}
}
