package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// benchDepths are the backlogs of docs/BENCHMARKS.md "Depth": how a claim and a completion
// cost at 2,000 queued jobs and at a million.
var benchDepths = []int{2_000, 20_000, 200_000, 1_000_000}

// depthStart is the RunAt (and CreatedAt) of the first seeded job; job i
// is due i µs later. The benchmarks' clock runs after the last of them,
// so that a job put back at the clock's time queues behind the backlog.
var depthStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// depthKind is the kind of every seeded job; claims name it, as a
// worker names the kinds it runs.
const depthKind = "k"

// BenchmarkClaimAtDepth times one caller's claims and completions with
// depth jobs queued in one queue, the depth kept by putting the jobs
// taken back at the end of the queue (untimed). claim: a ClaimJob, or a
// ClaimJobs of 1 or 100 (ns/op is per call; jobs/s counts jobs).
// complete: the engine's completion before batched claims (an UpdateJob whose
// function checks the lease), or a WriteLeases of 1 or 100 completions,
// of jobs claimed untimed before:
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkClaimAtDepth -benchtime 2s
func BenchmarkClaimAtDepth(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			d := seedDepth(b, depth)
			for _, n := range []int{0, 1, 100} {
				name := "ClaimJob"
				if n > 0 {
					name = fmt.Sprintf("ClaimJobs=%d", n)
				}
				b.Run(name, func(b *testing.B) {
					d.benchClaims(b, n)
				})
			}
			for _, n := range []int{0, 1, 100} {
				name := "UpdateJob"
				if n > 0 {
					name = fmt.Sprintf("WriteLeases=%d", n)
				}
				b.Run(name, func(b *testing.B) {
					var cpu time.Duration
					for b.Loop() {
						b.StopTimer()
						claimed, err := d.claimed(n)
						if err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
						start := cpuTime()
						if err := d.complete(claimed, n > 0); err != nil {
							b.Fatal(err)
						}
						cpu += cpuTime() - start
						b.StopTimer()
						d.requeue(b, jobtype.Succeeded)
						b.StartTimer()
					}
					reportJobs(b, max(n, 1), cpu)
				})
			}
		})
	}
}

// BenchmarkClaimBehindOtherKinds claims jobs of one kind from a queue
// where depth jobs of another kind, which no claim takes, wait ahead of
// 1,000 of it (the steady part of the burn-down): a claim must
// reach the jobs it may take without walking the others.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkClaimBehindOtherKinds
func BenchmarkClaimBehindOtherKinds(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			d := seedDepth(b, 0)
			d.add(b, "idle", depth)
			d.add(b, depthKind, 1000)
			for _, n := range []int{1, 100} {
				b.Run(fmt.Sprintf("ClaimJobs=%d", n), func(b *testing.B) {
					d.benchClaims(b, n)
				})
			}
		})
	}
}

// BenchmarkBurnDownAtDepth works off the first min(depth, 20,000) jobs
// of a backlog of depth with 100 slots at once, as the burn-down
// does through the engine: claims of batch jobs each, and each claim's
// jobs completed together (batch 0: ClaimJob and one UpdateJob per job,
// the store calls of the engine before batched claims). Claim latency is of
// the calls that returned jobs.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkBurnDownAtDepth -benchtime 1x
func BenchmarkBurnDownAtDepth(b *testing.B) {
	const slots = 100
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			d := seedDepth(b, depth)
			for _, batch := range []int{0, 1, 10} {
				b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
					burn := min(depth, 20_000)
					var (
						latencies []time.Duration
						completed int
						cpu       time.Duration
					)
					for b.Loop() {
						start := cpuTime()
						n, l, err := d.burnDown(burn, slots, batch)
						if err != nil {
							b.Fatal(err)
						}
						cpu += cpuTime() - start
						completed += n
						latencies = append(latencies, l...)
						b.StopTimer()
						d.requeue(b, jobtype.Succeeded)
						b.StartTimer()
					}
					b.ReportMetric(float64(completed)/b.Elapsed().Seconds(), "jobs/s")
					b.ReportMetric(float64(cpu.Microseconds())/float64(completed), "cpu-µs/job")
					slices.Sort(latencies)
					q := func(p float64) float64 {
						return float64(latencies[int(p*float64(len(latencies)-1))].Microseconds()) / 1000
					}
					b.ReportMetric(q(0.5), "claim-p50-ms")
					b.ReportMetric(q(0.99), "claim-p99-ms")
				})
			}
		})
	}
}

// benchClaims times claims of n jobs (ClaimJob for 0), putting each
// claim's jobs back at the end of the queue outside the timer, and
// reports jobs/s and CPU µs a job.
func (d *depthStore) benchClaims(b *testing.B, n int) {
	var cpu time.Duration
	for b.Loop() {
		start := cpuTime()
		if err := d.claim(n); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - start
		b.StopTimer()
		d.requeue(b, jobtype.Running)
		b.StartTimer()
	}
	reportJobs(b, max(n, 1), cpu)
}

// reportJobs reports the jobs per second of b's ops, perOp jobs each,
// and the process's CPU time per job over cpu, the ops' share of it.
func reportJobs(b *testing.B, perOp int, cpu time.Duration) {
	jobs := float64(b.N * perOp)
	b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(cpu.Microseconds())/jobs, "cpu-µs/job")
}

// depthStore is a store holding a backlog, and the clock of the
// benchmark's writes, which moves on by a µs per use so that every job
// put back queues after every other.
type depthStore struct {
	s     *Store
	depth int
	// ruleElsewhere: claims name the queue "q" and carry the rule of
	// another, a serial "index" (BenchmarkContestedClaimBesideRules).
	ruleElsewhere bool
	clock         atomic.Int64 // µs
	lease         atomic.Int64
}

// seedDepth opens a store with depth QUEUED jobs of depthKind in queue
// "q", checkpointed as a server's many small commits would have left
// the file.
func seedDepth(b testing.TB, depth int) *depthStore {
	s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	d := &depthStore{s: s, depth: depth}
	d.clock.Store(toMicro(depthStart))
	d.add(b, depthKind, depth)
	return d
}

// add inserts n QUEUED jobs of kind in queue "q", due one µs apart from
// the clock's time on, with one statement, and moves the clock past them.
func (d *depthStore) add(b testing.TB, kind string, n int) {
	if n == 0 {
		return
	}
	start := d.clock.Add(int64(n)) - int64(n)
	zero := toMicro(time.Time{})
	err := d.s.writeTx(context.Background(), "seed", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
			started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq)
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :n)
			SELECT printf('%s-%08d', :kind, i), 't', :kind, 'q', 'queued', 1, 0, '',
				'{"n":' || i || '}', NULL, NULL, NULL, 0, 1000000, '', :start + i,
				:zero, :start + i, :zero, :start + i, '', '', :zero, 0
			FROM n`,
			sql.Named("n", n), sql.Named("kind", kind), sql.Named("start", start), sql.Named("zero", zero))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.s.write.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
}

func (d *depthStore) now() time.Time { return fromMicro(d.clock.Add(1)) }

// filter is a worker's: its kind, any queue; every job due.
func (d *depthStore) filter() store.ClaimFilter {
	f := store.ClaimFilter{Kinds: []string{depthKind}, Now: depthStart.AddDate(1, 0, 0)}
	if d.ruleElsewhere {
		f.Queues, f.Limits = []string{"q"}, map[string]store.QueueLimit{"index": {Serial: true}}
	}
	return f
}

func (d *depthStore) leases(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "lease-" + strconv.FormatInt(d.lease.Add(1), 10)
	}
	return ids
}

// claim takes n jobs with one ClaimJobs, or one with ClaimJob for n 0.
func (d *depthStore) claim(n int) error {
	_, err := d.claimed(n)
	return err
}

func (d *depthStore) claimed(n int) ([]jobtype.Job, error) {
	ctx := context.Background()
	c := store.Claim{WorkerID: "w", Now: d.now(), Lease: time.Hour}
	if n == 0 {
		c.LeaseID = d.leases(1)[0]
		j, _, err := store.ClaimOne(ctx, d.s, d.filter(), c)
		if err != nil {
			return nil, fmt.Errorf("claim job: %w", err)
		}
		return []jobtype.Job{j}, nil
	}
	c.LeaseIDs = d.leases(n)
	claimed, err := d.s.ClaimJobs(ctx, d.filter(), c)
	if err != nil {
		return nil, fmt.Errorf("claim %d jobs: %w", n, err)
	}
	jobs := make([]jobtype.Job, len(claimed))
	for i, c := range claimed {
		jobs[i] = c.Job
	}
	return jobs, nil
}

// complete completes jobs: with one WriteLeases, or with batched false
// one UpdateJob each, whose function applies the same LeaseWrite.
func (d *depthStore) complete(jobs []jobtype.Job, batched bool) error {
	ctx := context.Background()
	r := store.LeaseRules{Now: d.now(), Lease: time.Hour}
	ws := make([]store.LeaseWrite, len(jobs))
	for i, j := range jobs {
		ws[i] = store.LeaseWrite{Op: store.Complete, JobID: j.ID, LeaseID: j.LeaseID, Result: []byte(`{}`)}
	}
	if batched {
		results, err := d.s.WriteLeases(ctx, ws, r)
		if err != nil {
			return fmt.Errorf("complete %d jobs: %w", len(ws), err)
		}
		for _, res := range results {
			if !res.Held {
				return fmt.Errorf("complete job %s: lease not held", res.Job.ID)
			}
		}
		return nil
	}
	for _, w := range ws {
		_, err := d.s.UpdateJob(ctx, w.JobID, func(j *jobtype.Job) error {
			if !w.Apply(j, r) {
				return errors.New("lease not held")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("complete job %s: %w", w.JobID, err)
		}
	}
	return nil
}

// requeue puts every job in state back at the end of the queue, as
// QUEUED jobs due at the clock's time, so that the backlog is depth again.
func (d *depthStore) requeue(b testing.TB, state jobtype.State) {
	at := toMicro(d.now())
	zero := toMicro(time.Time{})
	err := d.s.writeTx(context.Background(), "requeue", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE jobs SET state = 'queued', run_at = ?, updated_at = ?,
			lease_id = '', lease_expires_at = ?, finished_at = ?, result = NULL, percent = 0
			WHERE state = ?`, at, at, zero, zero, string(state))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// burnDown completes about burn jobs with slots at once, batch to a
// claim (batch 0: ClaimJob and UpdateJob), and returns how many it
// completed and the claims' latencies.
func (d *depthStore) burnDown(burn, slots, batch int) (int, []time.Duration, error) {
	var (
		taken     atomic.Int64
		completed atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
		errs      = make(chan error, slots)
	)
	claimers, size := slots, 1
	if batch > 1 {
		claimers, size = slots/batch, batch
	}
	for range claimers {
		wg.Go(func() {
			var own []time.Duration
			defer func() {
				mu.Lock()
				latencies = append(latencies, own...)
				mu.Unlock()
			}()
			for {
				n := min(int64(size), int64(burn)-taken.Load())
				if n <= 0 {
					return
				}
				start := time.Now()
				jobs, err := d.claimed(min(int(n), batch))
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				own = append(own, time.Since(start))
				taken.Add(int64(len(jobs)))
				if err := d.complete(jobs, batch > 0); err != nil {
					errs <- err
					return
				}
				completed.Add(int64(len(jobs)))
			}
		})
	}
	wg.Wait()
	close(errs)
	return int(completed.Load()), latencies, <-errs
}
