package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/storetest"
)

// BenchmarkWriteCycle measures a job's three writes, as store/sqlite's
// benchmark of the same name does: one op is a submit (CreateJob), a
// claim (ClaimOne, of whichever job is first) and a completion
// (UpdateJob of the claimed job), by a number of concurrent writers on
// a pool of as many connections. "limited" claims from a queue with a
// max_running rule, so every claim takes the queue's advisory lock.
//
//	go test ./store/postgres/ -run '^$' -bench 'BenchmarkWriteCycle' -count 6
func BenchmarkWriteCycle(b *testing.B) {
	for _, limited := range []bool{false, true} {
		for _, writers := range []int{1, 2, 8, 32} {
			b.Run(fmt.Sprintf("limited=%v/writers=%d", limited, writers), func(b *testing.B) {
				s := openURL(b, pgtest.URL(b)+fmt.Sprintf("&pool_max_conns=%d", writers))
				ctx := context.Background()
				at := t0.Add(time.Hour)
				f := store.ClaimFilter{Now: at}
				if limited {
					f.Limits = map[string]store.QueueLimit{"q": {MaxRunning: 1 << 20}}
				}
				c := store.Claim{WorkerID: "w", LeaseID: "l", Now: at, Lease: time.Minute}
				var n, next atomic.Int64
				op := func() error {
					j := job(fmt.Sprintf("job-%09d", n.Add(1)), "q", 0)
					if _, err := s.CreateJob(ctx, j); err != nil {
						return err
					}
					// A claim may find every job it saw taken by claims
					// running beside it (ErrNoJob after claimAttempts), as
					// a worker's may; a worker claims again, so does this.
					j, _, err := store.ClaimOne(ctx, s, f, c)
					for errors.Is(err, jobtype.ErrNoJob) {
						j, _, err = store.ClaimOne(ctx, s, f, c)
					}
					if err != nil {
						return fmt.Errorf("claim: %w", err)
					}
					_, err = s.UpdateJob(ctx, j.ID, func(j *jobtype.Job) error {
						if j.State != jobtype.Running {
							return errors.New("not running")
						}
						j.State, j.Result, j.FinishedAt, j.LeaseID = jobtype.Succeeded, []byte(`"ok"`), at, ""
						return nil
					})
					return err
				}
				var wg sync.WaitGroup
				b.ResetTimer()
				for range writers {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := op(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// fillQueued gives s a table as a backlog leaves it: finished jobs that
// the statistics know (ANALYZE), then depth QUEUED jobs of kind "email"
// in queue "default", inserted in one statement, which they do not
// know, with autovacuum off for the table so that they stay unknown.
func fillQueued(tb testing.TB, s *Store, depth int) {
	tb.Helper()
	ctx := tb.Context()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{"ALTER TABLE jobs SET (autovacuum_enabled = false)", nil},
		{`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, finished_at, worker_id, lease_id)
		SELECT 'done-'||i, 'acme', 'email', 'default', 'succeeded', 3, 100, '', 1, 1, '', $1::timestamptz,
			$1::timestamptz, $1::timestamptz, '', '' FROM generate_series(1, 2000) AS i`, []any{t0}},
		{"ANALYZE jobs", nil},
		{`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, worker_id, lease_id)
		SELECT 'job-'||i, 'acme', 'email', 'default', 'queued', 1, 0, '', 0, 3, '',
			$1::timestamptz + i * interval '1 ms', $1::timestamptz + i * interval '1 ms', '', ''
		FROM generate_series(1, $2::int) AS i`, []any{t0, depth}},
	} {
		if _, err := s.pool.Exec(ctx, st.sql, st.args...); err != nil {
			tb.Fatalf("%s: %v", st.sql, err)
		}
	}
}

// requeue puts the RUNNING and finished jobs among ids back in the
// queue, after every job fillQueued made (a day after t0, in the order of
// ids, one microsecond apart from at), so that the backlog stays as deep
// as it was. It returns the at of the next requeue.
func requeue(tb testing.TB, s *Store, ids []string, at time.Time) time.Time {
	tb.Helper()
	_, err := s.pool.Exec(tb.Context(), `UPDATE jobs AS j SET state = 'queued', lease_id = '', worker_id = '',
			lease_expires_at = NULL, finished_at = NULL, result = NULL, percent = 0, version = version + 1,
			run_at = $2::timestamptz + r.i * interval '1 microsecond'
		FROM unnest($1::text[]) WITH ORDINALITY AS r(id, i)
		WHERE j.id = r.id AND j.state <> 'queued'`, ids, at)
	if err != nil {
		tb.Fatal(err)
	}
	return at.Add(time.Duration(len(ids)+1) * time.Microsecond)
}

// BenchmarkClaimAtDepth measures what a claim and a completion cost
// when depth jobs wait, with statistics that have not seen them
// (fillQueued): a claim of 1, 10 and 100 jobs by a worker of one kind,
// and the completion of 1 or 100 claimed jobs in one WriteLeases, or of
// one by UpdateJob (a read, then a compare-and-swap). The backlog keeps
// its depth: what an op takes goes back to the end of the queue, outside
// the timer. ns/job is the cost per job.
//
//	go test ./store/postgres/ -run '^$' -bench 'BenchmarkClaimAtDepth' -benchtime 200x
func BenchmarkClaimAtDepth(b *testing.B) {
	for _, depth := range []int{2_000, 20_000, 200_000, 1_000_000} {
		b.Run(fmt.Sprintf("queued=%d", depth), func(b *testing.B) {
			s := openURL(b, pgtest.URL(b)+"&pool_max_conns=2")
			fillQueued(b, s, depth)
			ctx := context.Background()
			now := t0.Add(24 * time.Hour * 365)
			f := store.ClaimFilter{Kinds: []string{"email"}, Now: now}
			claim := func(b *testing.B, n int) []store.Claimed {
				c := store.Claim{WorkerID: "w", LeaseIDs: make([]string, n), Now: now, Lease: time.Minute}
				for i := range c.LeaseIDs {
					c.LeaseIDs[i] = fmt.Sprint("lease-", i)
				}
				got, err := s.ClaimJobs(ctx, f, c)
				if err != nil || len(got) != n {
					b.Fatalf("claim %d: %d claimed, %v", n, len(got), err)
				}
				return got
			}
			requeued := t0.Add(24 * time.Hour)
			idsOf := func(cs []store.Claimed) []string {
				ids := make([]string, len(cs))
				for i, c := range cs {
					ids[i] = c.Job.ID
				}
				return ids
			}
			perJob := func(b *testing.B, n int) {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
			}
			for _, n := range []int{1, 10, 100} {
				b.Run(fmt.Sprintf("claim=%d", n), func(b *testing.B) {
					for b.Loop() {
						got := claim(b, n)
						b.StopTimer()
						requeued = requeue(b, s, idsOf(got), requeued)
						b.StartTimer()
					}
					perJob(b, n)
				})
			}
			rules := store.LeaseRules{Now: now, Lease: time.Minute}
			for _, n := range []int{1, 100} {
				b.Run(fmt.Sprintf("complete=%d", n), func(b *testing.B) {
					for b.Loop() {
						b.StopTimer()
						got := claim(b, n)
						ws := make([]store.LeaseWrite, n)
						for i, c := range got {
							ws[i] = store.LeaseWrite{Op: store.Complete, JobID: c.Job.ID, LeaseID: c.Job.LeaseID, Result: []byte(`"ok"`)}
						}
						b.StartTimer()
						res, err := s.WriteLeases(ctx, ws, rules)
						if err != nil || len(res) != n || !res[0].Held {
							b.Fatalf("complete %d: %v", n, err)
						}
						b.StopTimer()
						requeued = requeue(b, s, idsOf(got), requeued)
						b.StartTimer()
					}
					perJob(b, n)
				})
			}
			b.Run("complete=1/by-update", func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					got := claim(b, 1)
					b.StartTimer()
					_, err := s.UpdateJob(ctx, got[0].Job.ID, func(j *jobtype.Job) error {
						if j.State != jobtype.Running || j.LeaseID != got[0].Job.LeaseID {
							return errors.New("lease lost")
						}
						j.State, j.Percent, j.Result, j.Error, j.FinishedAt = jobtype.Succeeded, 100, []byte(`"ok"`), nil, now
						j.LeaseID, j.LeaseExpiresAt, j.UpdatedAt = "", time.Time{}, now
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					requeued = requeue(b, s, idsOf(got), requeued)
					b.StartTimer()
				}
				perJob(b, 1)
			})
		})
	}
}

// BenchmarkClaimTenants measures a claim of one job from one queue of
// 20,000 queued jobs of 1 or 10 tenants taking turns (fair claiming):
// with 10, every claim finds the queue contested and takes its turn
// under the queue's fair lock. Claimed jobs go back to the end of the
// queue outside the timer.
//
//	JOBWATCH_TEST_BACKEND=postgres go test ./store/postgres/ -run '^$' -bench BenchmarkClaimTenants
func BenchmarkClaimTenants(b *testing.B) {
	for _, tenants := range []int{1, 10} {
		for _, writers := range []int{1, 8} {
			b.Run(fmt.Sprintf("tenants=%d/claimers=%d", tenants, writers), func(b *testing.B) {
				s := openURL(b, pgtest.URL(b)+fmt.Sprintf("&pool_max_conns=%d", writers+1))
				fillQueued(b, s, 20_000)
				// The tenants, set after the insert: the old rows' entries are
				// vacuumed away, as a backlog inserted with its tenants has none.
				for _, q := range []string{`UPDATE jobs SET tenant = 't' || (seq % ` + fmt.Sprint(tenants) + `) WHERE state = 'queued'`, `VACUUM jobs`} {
					if _, err := s.pool.Exec(b.Context(), q); err != nil {
						b.Fatal(err)
					}
				}
				ctx := context.Background()
				now := t0.Add(24 * time.Hour * 365)
				f := store.ClaimFilter{Kinds: []string{"email"}, Now: now}
				var (
					mu   sync.Mutex
					ids  []string
					next atomic.Int64
					wg   sync.WaitGroup
				)
				b.ResetTimer()
				for w := range writers {
					wg.Go(func() {
						c := store.Claim{WorkerID: fmt.Sprint("w", w), LeaseID: "l", Now: now, Lease: time.Minute}
						for next.Add(1) <= int64(b.N) {
							j, _, err := store.ClaimOne(ctx, s, f, c)
							for errors.Is(err, jobtype.ErrNoJob) {
								j, _, err = store.ClaimOne(ctx, s, f, c)
							}
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							ids = append(ids, j.ID)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
				b.StopTimer()
				requeue(b, s, ids, now)
			})
		}
	}
}

// BenchmarkAppendLogs: appends of 10 lines, with and without the look for
// the same append sent again (docs/BENCHMARKS.md, "Job logs").
func BenchmarkAppendLogs(b *testing.B) {
	storetest.BenchAppendLogs(b, func(b *testing.B) store.Store { return openURL(b, pgtest.URL(b)) })
}

// BenchmarkContestedClaimBesideRules: a claim of 20 jobs from the queue
// "default", which has no rules, where 10 tenants' jobs wait, with and
// without a rule on another queue (a serial "index"). A rule elsewhere
// is no reason for this claim to take its turns job by job under the
// queue's lock (an outside probe saw such claims 3.5 to 8 times slower).
//
//	JOBWATCH_TEST_BACKEND=postgres go test ./store/postgres/ -run '^$' -bench BenchmarkContestedClaimBesideRules
func BenchmarkContestedClaimBesideRules(b *testing.B) {
	for _, elsewhere := range []bool{false, true} {
		b.Run(fmt.Sprintf("rule-elsewhere=%v", elsewhere), func(b *testing.B) {
			s := openURL(b, pgtest.URL(b)+"&pool_max_conns=4")
			fillQueued(b, s, 20_000)
			for _, q := range []string{`UPDATE jobs SET tenant = 't' || (seq % 10) WHERE state = 'queued'`, `VACUUM ANALYZE jobs`} {
				if _, err := s.pool.Exec(b.Context(), q); err != nil {
					b.Fatal(err)
				}
			}
			now := t0.Add(24 * time.Hour * 365)
			f := store.ClaimFilter{Kinds: []string{"email"}, Queues: []string{"default"}, Now: now}
			if elsewhere {
				f.Limits = map[string]store.QueueLimit{"index": {Serial: true}}
			}
			c := store.Claim{WorkerID: "w", LeaseIDs: make([]string, 20), Now: now, Lease: time.Minute}
			for i := range c.LeaseIDs {
				c.LeaseIDs[i] = fmt.Sprint("lease-", i)
			}
			requeued := t0.Add(24 * time.Hour)
			for b.Loop() {
				got, err := s.ClaimJobs(b.Context(), f, c)
				if err != nil || len(got) != len(c.LeaseIDs) {
					b.Fatalf("claim of %d: %d claimed, %v", len(c.LeaseIDs), len(got), err)
				}
				b.StopTimer()
				ids := make([]string, len(got))
				for i, g := range got {
					ids[i] = g.Job.ID
				}
				requeued = requeue(b, s, ids, requeued)
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(c.LeaseIDs)), "ns/job")
		})
	}
}

// BenchmarkBulkUpdates times what a bulk action's page asks of the
// store: 1,000 jobs of one tenant changed by UpdateJob, 8 at a time (as
// jobs.Engine.Bulk does): a retry (FAILED to QUEUED, a job that comes
// back, which takes its tenant's lock) and a cancel (QUEUED to
// CANCELLED). ns/op is per job.
//
//	go test ./store/postgres/ -run '^$' -bench BenchmarkBulkUpdates -count 3
func BenchmarkBulkUpdates(b *testing.B) {
	for _, tc := range []struct {
		name     string
		from, to jobtype.State
	}{
		{"retry", jobtype.Failed, jobtype.Queued},
		{"cancel", jobtype.Queued, jobtype.Cancelled},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := openURL(b, pgtest.URL(b))
			ctx := context.Background()
			const page = 1000
			round := 0
			for b.Loop() {
				b.StopTimer()
				round++
				ids := make(chan string, page)
				for i := range page {
					j := job(fmt.Sprintf("job-%d-%04d", round, i), "q", 0)
					j.State = tc.from
					if tc.from.Terminal() {
						j.FinishedAt = j.CreatedAt
					}
					mustCreate(b, s, j)
					ids <- j.ID
				}
				close(ids)
				b.StartTimer()
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for id := range ids {
							_, err := s.UpdateJob(ctx, id, func(j *jobtype.Job) error {
								j.State = tc.to
								j.FinishedAt = time.Time{}
								if tc.to.Terminal() {
									j.FinishedAt = t0
								}
								return nil
							})
							if err != nil {
								b.Error(err)
							}
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*page), "ns/job")
		})
	}
}

// BenchmarkFanInCompletions times the completions of 1,000 RUNNING jobs
// that one WAITING job runs after, 8 at a time, each its own write (as
// workers that report alone): every write but the last leaves the job
// waiting for others, and locks its row to look again (migration 20).
// ns/op is per completion.
//
//	go test ./store/postgres/ -run '^$' -bench BenchmarkFanInCompletions -benchtime 3x
func BenchmarkFanInCompletions(b *testing.B) {
	s := openURL(b, pgtest.URL(b))
	ctx := context.Background()
	const parents = 1000
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		ids := make(chan string, parents)
		var after []string
		for i := range parents {
			j := job(fmt.Sprintf("p-%d-%04d", round, i), "q", 0)
			j.State = jobtype.Running
			mustCreate(b, s, j)
			ids <- j.ID
			after = append(after, j.ID)
		}
		close(ids)
		child := job(fmt.Sprintf("child-%d", round), "q", 0)
		child.State, child.After, child.OnDependencyFailure = jobtype.Waiting, after, jobtype.CancelOnDependencyFailure
		mustCreate(b, s, child)
		b.StartTimer()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for id := range ids {
					if _, err := s.UpdateJob(ctx, id, func(j *jobtype.Job) error {
						j.State, j.FinishedAt = jobtype.Succeeded, t0
						return nil
					}); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		got, err := s.GetJob(ctx, child.ID)
		if err != nil || got.State != jobtype.Queued {
			b.Fatalf("the job after them: %s, %v; want QUEUED", got.State, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*parents), "ns/completion")
}
