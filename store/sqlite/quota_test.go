package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/storetest"
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

// fillTenant adds n jobs of tenant, QUEUED, of kind k in queue q, named
// tenant-0 on, in one statement.
func fillTenant(tb testing.TB, s *Store, tenant string, n int) {
	tb.Helper()
	fillJobs(tb, s, tenant, tenant, "k", "q", n)
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
		{"max_queued=1000000, 100000 queued", 100000, store.Quota{MaxQueued: map[string]int{"acme": 1000000}}},
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

// The seeks a mark's check makes (quota.go): the jobs not yet running
// stored after a seq, from jobs_tenant_queued past the seq in each
// state's range, and the RUNNING ones, from jobs_running_tenant.
func TestQuotaMarkSeeksPastTheMark(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	fillPlanTable(t, s, 0, 20000)
	for _, tt := range []struct {
		query string
		args  []any
		want  string
	}{
		{queuedSince, []any{"acme", 100, 10001}, "SEARCH jobs USING COVERING INDEX jobs_tenant_queued (tenant=? AND state=? AND rowid>?)"},
		{runningSince, []any{"acme", 100}, "SEARCH jobs USING COVERING INDEX jobs_running_tenant (tenant=? AND rowid>?)"},
	} {
		joined := strings.Join(explain(t, s.read, tt.query, tt.args...), "\n")
		if !strings.Contains(joined, tt.want) || strings.Contains(joined, "SCAN jobs") {
			t.Errorf("plan of %s:\n%s\nwant %s, and no scan", tt.query, joined, tt.want)
		}
	}
}

// quotaJob is a QUEUED job of tenant acme.
func quotaJob(id string) jobtype.Job {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return jobtype.Job{ID: id, Tenant: "acme", Kind: "k", Queue: "q", State: jobtype.Queued, Version: 1,
		MaxAttempts: 3, CreatedAt: at, UpdatedAt: at, RunAt: at}
}

// marked reports whether acme has a quota mark.
func marked(t *testing.T, s *Store) bool {
	t.Helper()
	var n int
	if err := s.read.QueryRow("SELECT count(*) FROM quota_marks WHERE tenant = 'acme'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A tenant's ended jobs taken back by a retry count again at once, also
// when they were retried with no quota in force (as while a reload had
// lifted the tenant's bound): the retry deletes the mark, which held
// none of them, so the next submission counts exactly.
func TestAQuotaMarkIsForgottenWhenEndedJobsComeBack(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	ctx := t.Context()
	fillTenant(t, s, "acme", 2000)
	// Half of them ended before the first count.
	if _, err := s.write.Exec(`UPDATE jobs SET state = 'succeeded' WHERE tenant = 'acme' AND seq % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	q := store.Quota{MaxQueued: map[string]int{"acme": 1010}}
	if _, err := s.CreateJobsWithin(ctx, []jobtype.Job{quotaJob("first")}, q); err != nil {
		t.Fatal(err)
	}
	if !marked(t, s) {
		t.Fatal("no mark after a count of 1,000")
	}
	for i := 0; i < 2000; i += 2 {
		if _, err := s.UpdateJob(ctx, fmt.Sprintf("acme-%d", i+1), func(j *jobtype.Job) error {
			if j.State != jobtype.Succeeded {
				return fmt.Errorf("job %s is %s", j.ID, j.State)
			}
			j.State, j.Attempt = jobtype.Queued, 0
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if marked(t, s) {
		t.Error("the mark outlived a retry")
	}
	_, err := s.CreateJobsWithin(ctx, []jobtype.Job{quotaJob("second")}, q)
	storetest.WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 1010, Queued: 1011, Adding: 1})
}
