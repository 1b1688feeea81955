package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// fillKind adds n QUEUED jobs of tenant, kind and queue, named
// tenant-kind-0 on, in one statement.
func fillKind(tb testing.TB, s *Store, tenant, kind, queue string, n int) {
	tb.Helper()
	fillJobs(tb, s, tenant+"-"+kind, tenant, kind, queue, n)
}

// fillJobs adds n QUEUED jobs of tenant, kind and queue, named prefix-0
// on, their run_at in that order, in one statement.
func fillJobs(tb testing.TB, s *Store, prefix, tenant, kind, queue string, n int) {
	tb.Helper()
	zero := toMicro(time.Time{})
	err := s.writeTx(context.Background(), "fill", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
			started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, priority)
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :n)
			SELECT :prefix || '-' || i, :tenant, :kind, :queue, 'queued', 1, 0, '', '{}', NULL, NULL, NULL, 0, 3, '',
				i, :zero, i, :zero, i, '', '', :zero, i, 0
			FROM n`, sql.Named("n", n), sql.Named("prefix", prefix), sql.Named("tenant", tenant), sql.Named("kind", kind),
			sql.Named("queue", queue), sql.Named("zero", zero))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkKindClaimBesideAnotherTenantsBacklog measures claims of 10
// jobs of a kind one tenant submits to a queue where another tenant has
// a deep backlog of another kind: a worker of the first kind takes turns
// between the tenants whose jobs it may take, and must not walk the
// other tenant's backlog to learn that none of its jobs are of its kind.
// Claimed jobs go back to the queue outside the timer.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkKindClaimBesideAnotherTenantsBacklog
//
// With a tenant's bound on its running jobs (a third tenant's, with no
// job in the queue), the claim seeks each tenant's jobs in a lane of
// their own (laneCTEs): by kind too, or it walks the backlog again.
func BenchmarkKindClaimBesideAnotherTenantsBacklog(b *testing.B) {
	for _, tc := range []struct {
		backlog int
		caps    map[string]int
	}{{20_000, nil}, {200_000, nil}, {20_000, map[string]int{"carol": 3}}, {200_000, map[string]int{"carol": 3}}} {
		name := fmt.Sprintf("backlog=%d", tc.backlog)
		if tc.caps != nil {
			name += "/a_tenant's_max_running"
		}
		backlog := tc.backlog
		b.Run(name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			fillKind(b, s, "acme", "resize", "bulk", backlog)
			fillKind(b, s, "initech", "resize", "bulk", 1000)
			fillKind(b, s, "t5", "k5", "bulk", 1000)
			ctx := context.Background()
			now := time.Now()
			f := store.ClaimFilter{Kinds: []string{"k5"}, Queues: []string{"bulk"}, Now: now, TenantMaxRunning: tc.caps}
			lease := 0
			b.ResetTimer()
			for range b.N {
				c := store.Claim{WorkerID: "w", Now: now, Lease: time.Hour}
				for range 10 {
					lease++
					c.LeaseIDs = append(c.LeaseIDs, fmt.Sprintf("l-%d", lease))
				}
				claimed, err := s.ClaimJobs(ctx, f, c)
				if err != nil || len(claimed) != 10 {
					b.Fatalf("claim: %d jobs, %v", len(claimed), err)
				}
				b.StopTimer()
				if _, err := s.write.Exec(`UPDATE jobs SET state = 'queued' WHERE state = 'running'`); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
