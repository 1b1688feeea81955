package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// benchWriters are the numbers of concurrent writers the write benchmarks
// run with. 2 and 32 are the cases of the first baseline (GOMAXPROCS 2
// and 16 times that), so benchstat can compare them across versions.
var benchWriters = []int{1, 2, 8, 32, 128}

// BenchmarkWrite measures the store's write path: one CreateJob per op,
// by a number of concurrent writers, with full durability
// (synchronous=FULL: a write returns after the fsync of its commit).
// With one commit per write more writers get no more done; with group
// commit (docs/DESIGN-NOTES.md) concurrent writes share commits. Compare with
// benchstat:
//
//	go test ./store/sqlite/ -run '^$' -bench 'BenchmarkWrite' -count 6
func BenchmarkWrite(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openBench(b)
			var n atomic.Int64
			cpu := runWriters(b, writers, func() error {
				_, err := s.CreateJob(context.Background(), benchJob(n.Add(1)))
				return err
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/write")
		})
	}
}

// BenchmarkWriteCycle measures a job's three writes: one op is a submit
// (CreateJob), a claim (ClaimJob, of whichever job is first) and a
// completion (UpdateJob of the claimed job), by a number of concurrent
// writers, as in-process workers and submitters would make them.
func BenchmarkWriteCycle(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			s := openBench(b)
			ctx := context.Background()
			var n atomic.Int64
			at := benchJob(0).CreatedAt
			cpu := runWriters(b, writers, func() error {
				if _, err := s.CreateJob(ctx, benchJob(n.Add(1))); err != nil {
					return err
				}
				j, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: at}, store.Claim{WorkerID: "w", LeaseID: "lease", Now: at, Lease: time.Minute})
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
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(3*float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
		})
	}
}

func openBench(b *testing.B) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func benchJob(i int64) jobtype.Job {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return jobtype.Job{ID: fmt.Sprintf("job-%09d", i), Tenant: "t", Kind: "k", Queue: "q",
		State: jobtype.Queued, Version: 1, MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
}

// runWriters runs op b.N times in all, from writers goroutines at once,
// and returns the CPU time the process used meanwhile: the cost of the
// writes whatever else runs on the machine (the writer's share, the
// callers', the runtime's).
func runWriters(b *testing.B, writers int, op func() error) time.Duration {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := cpuTime()
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
	return cpuTime() - start
}
