package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TenantDepths reads only the partial index of unfinished jobs, in its
// order: one search of it, no table row, no temp B-tree to group or sort.
func TestTenantDepthsReadsOnlyAnIndex(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	plan := explain(t, s.read, tenantDepthsQuery, int64(0))
	joined := strings.Join(plan, "\n")
	if len(plan) != 1 || !strings.Contains(joined, "USING COVERING INDEX jobs_unfinished_queue_tenant") {
		t.Errorf("plan:\n%s\nwant one scan of the covering index jobs_unfinished_queue_tenant", joined)
	}
	if strings.Contains(joined, "TEMP B-TREE") {
		t.Errorf("plan sorts in a temp B-tree:\n%s", joined)
	}
}

// BenchmarkTenantDepths times TenantDepths, and QueueStats and
// BusyQueues (of the queue and of one with nothing unfinished) beside it,
// with depth QUEUED jobs of 10 tenants in one queue and 10,000 ended
// ones (which none reads):
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkTenantDepths -benchtime 5x
func BenchmarkTenantDepths(b *testing.B) {
	for _, depth := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			seedTenants(b, s, "queued", depth)
			seedTenants(b, s, "succeeded", 10_000)
			now := depthStart.AddDate(1, 0, 0)
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
// queue "q", due one µs apart from depthStart, with one statement.
func seedTenants(b *testing.B, s *Store, state string, n int) {
	b.Helper()
	zero := toMicro(time.Time{})
	start := toMicro(depthStart)
	err := s.writeTx(context.Background(), "seed", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			attempt, max_attempts, unique_key, created_at, started_at, updated_at, finished_at, run_at,
			worker_id, lease_id, lease_expires_at)
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :n)
			SELECT printf('%s-%08d', :state, i), 't' || (i % 10), 'k', 'q', :state, 1, 0, '',
				0, 1, '', :start + i, :zero, :start + i, :zero, :start + i, '', '', :zero
			FROM n`,
			sql.Named("n", n), sql.Named("state", state), sql.Named("start", start), sql.Named("zero", zero))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.write.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
}
