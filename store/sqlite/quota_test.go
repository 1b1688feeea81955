package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// A submission under a quota counts its tenant's jobs not yet running
// with a seek per state of jobs_tenant_queued, reading the index alone
// (covering), never a walk of the tenant's jobs or of the table: on a
// deep file, and after ANALYZE has told the planner that one tenant
// holds half of it.
func TestQueuedCountPlanSeeksTheTenantIndex(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	fillPlanTable(t, s, 0, 20000)
	check := func(t *testing.T) {
		plan := explain(t, s.read, queuedCount, "acme", 10001)
		joined := strings.Join(plan, "\n")
		// The count reads the subquery's rows as they come (a
		// co-routine), so the LIMIT stops the search.
		if !strings.Contains(joined, "SEARCH jobs USING COVERING INDEX jobs_tenant_queued (tenant=? AND state=?)") ||
			strings.Contains(joined, "SCAN jobs") || strings.Contains(joined, "TEMP") || strings.Contains(joined, "MATERIALIZE") {
			t.Errorf("plan:\n%s\nwant a covering search of jobs_tenant_queued by tenant and state, and nothing else of jobs", joined)
		}
	}
	t.Run("without statistics", check)
	if _, err := s.write.ExecContext(t.Context(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	t.Run("after analyze", check)
}

// fillTenant adds n jobs of tenant, QUEUED, from id prefix, in one
// statement.
func fillTenant(tb testing.TB, s *Store, tenant string, n int) {
	tb.Helper()
	zero := toMicro(time.Time{})
	err := s.writeTx(context.Background(), "fill", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
			started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, priority)
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :n)
			SELECT :tenant || '-' || i, :tenant, 'k', 'q', 'queued', 1, 0, '', '{}', NULL, NULL, NULL, 0, 3, '',
				i, :zero, i, :zero, i, '', '', :zero, i, 0
			FROM n`, sql.Named("n", n), sql.Named("tenant", tenant), sql.Named("zero", zero))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSubmitUnderQuota measures one submission (a job created
// QUEUED, one write of the writer's batch, durable) of a tenant with
// jobs not yet running, beside another tenant's 50,000: with no quota,
// and under a max_queued of 10,000 (CreateJobsWithin counts the tenant's
// jobs before it inserts), with 100 and with 9,999 queued. Each job made
// is ended after its op, outside the timer, so every op finds as many.
// cpu-µs/submit is the process's CPU time in the submissions (most of
// it the writer's), which the disk's fsync does not blur.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkSubmitUnderQuota -count 6
func BenchmarkSubmitUnderQuota(b *testing.B) {
	for _, tt := range []struct {
		name   string
		queued int
		quota  store.Quota
	}{
		{"no quota, 9999 queued", 9999, store.Quota{}},
		{"max_queued=10000, 100 queued", 100, store.Quota{MaxQueued: map[string]int{"acme": 10000}}},
		{"max_queued=10000, 9999 queued", 9999, store.Quota{MaxQueued: map[string]int{"acme": 10000}}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			fillTenant(b, s, "acme", tt.queued)
			fillTenant(b, s, "globex", 50000)
			ctx := context.Background()
			at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var cpu time.Duration
			b.ResetTimer()
			for i := range b.N {
				j := jobtype.Job{ID: fmt.Sprintf("new-%09d", i), Tenant: "acme", Kind: "k", Queue: "q",
					State: jobtype.Queued, Version: 1, MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
				start := cpuTime()
				if _, err := s.CreateJobsWithin(ctx, []jobtype.Job{j}, tt.quota); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
				b.StopTimer()
				if _, err := s.UpdateJob(ctx, j.ID, func(j *jobtype.Job) error {
					j.State, j.FinishedAt = jobtype.Cancelled, at
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/submit")
		})
	}
}
