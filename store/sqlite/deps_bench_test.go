package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// depsStart is the time of every job the dependency benchmarks and tests
// create; their ends come later, a second each.
var depsStart = time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC)

// depsJob is a QUEUED job of tenant t, created at depsStart.
func depsJob(id string) jobtype.Job {
	return jobtype.Job{ID: id, Tenant: "t", Kind: "k", Queue: "q", State: jobtype.Queued,
		Version: 1, Attempt: 1, MaxAttempts: 1, CreatedAt: depsStart, UpdatedAt: depsStart, RunAt: depsStart}
}

// depsWaiting is a job WAITING for after, cancelled if one of them fails.
func depsWaiting(id string, after []string) jobtype.Job {
	j := depsJob(id)
	j.State, j.After, j.OnDependencyFailure = jobtype.Waiting, after, jobtype.CancelOnDependencyFailure
	return j
}

// depsRunning is a RUNNING job holding the lease "lease-"+id.
func depsRunning(id string) jobtype.Job {
	j := depsJob(id)
	j.State, j.WorkerID, j.LeaseID = jobtype.Running, "w", "lease-"+id
	j.StartedAt, j.LeaseExpiresAt = depsStart, depsStart.Add(24*time.Hour)
	return j
}

// createAll stores jobs, at most 500 a call.
func createAll(tb testing.TB, s *Store, jobs []jobtype.Job) {
	tb.Helper()
	for len(jobs) > 0 {
		n := min(len(jobs), 500)
		if _, err := s.CreateJobs(context.Background(), jobs[:n]); err != nil {
			tb.Fatalf("create %d jobs: %v", n, err)
		}
		jobs = jobs[n:]
	}
}

// completeOne completes RUNNING job id with one WriteLeases, as the
// engine writes a lone CompleteJob.
func completeOne(s *Store, id string, now time.Time) error {
	w := store.LeaseWrite{Op: store.Complete, JobID: id, LeaseID: "lease-" + id, Result: []byte(`{}`)}
	res, err := s.WriteLeases(context.Background(), []store.LeaseWrite{w}, store.LeaseRules{Now: now, Lease: time.Hour})
	if err != nil {
		return fmt.Errorf("complete %s: %w", id, err)
	}
	if !res[0].Held {
		return fmt.Errorf("complete %s: lease not held", id)
	}
	return nil
}

// cancelOne cancels job id at now, as jobs.Engine.Cancel writes it.
func cancelOne(s *Store, id string, now time.Time) error {
	_, err := s.UpdateJob(context.Background(), id, func(j *jobtype.Job) error {
		j.State, j.FinishedAt, j.UpdatedAt = jobtype.Cancelled, now, now
		j.Error = &jobtype.JobError{Type: "Cancelled", Message: "cancelled"}
		return nil
	})
	return err
}

// openListened opens a store in a directory of tb's with a listener, as
// the engine always has one: only then does the writer read the jobs a
// dependency's end released (drainReleases). The listener counts the
// changes it hears marked Released.
func openListened(tb testing.TB) (*Store, *atomic.Int64) {
	tb.Helper()
	s, err := Open(filepath.Join(tb.TempDir(), "jobs.db"))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() {
		cancel()
		s.Close()
	})
	var released atomic.Int64
	err = s.Listen(ctx, func(cs []store.Change, _ bool) {
		for _, c := range cs {
			if c.Released {
				released.Add(1)
			}
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s, &released
}

// seedWaiters stores parents RUNNING jobs and k WAITING jobs, each after
// all of them, and returns the parents' ids.
func seedWaiters(tb testing.TB, s *Store, parents, k int) []string {
	tb.Helper()
	ids := make([]string, parents)
	jobs := make([]jobtype.Job, parents)
	for i := range ids {
		ids[i] = fmt.Sprintf("p-%04d", i)
		jobs[i] = depsRunning(ids[i])
	}
	createAll(tb, s, jobs)
	for i := range k {
		createAll(tb, s, []jobtype.Job{depsWaiting(fmt.Sprintf("w-%04d", i), ids)})
	}
	return ids
}

// seedGraph stores a graph of levels levels of width jobs: level 0
// PENDING (held), each job of every other level WAITING for every job of
// the level before. It returns the ids of each level.
func seedGraph(tb testing.TB, s *Store, width, levels int) [][]string {
	tb.Helper()
	graph := make([][]string, levels)
	for l := range levels {
		var jobs []jobtype.Job
		for w := range width {
			id := fmt.Sprintf("g%03d-%03d", l, w)
			graph[l] = append(graph[l], id)
			j := depsJob(id)
			if l == 0 {
				j.State = jobtype.Pending
			} else {
				j = depsWaiting(id, graph[l-1])
			}
			jobs = append(jobs, j)
		}
		createAll(tb, s, jobs)
	}
	return graph
}

// BenchmarkCompleteBeforeWaiters completes, one WriteLeases each, 1,000
// RUNNING jobs that k WAITING jobs each wait for (all 1,000 of them):
// ns/op is one completion; the last of the 1,000 releases the k jobs.
// A completion's cost should not grow with k.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkCompleteBeforeWaiters
func BenchmarkCompleteBeforeWaiters(b *testing.B) {
	const parents = 1000
	for _, k := range []int{0, 1, 10, 30} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			var (
				s    *Store
				ids  []string
				next int
				cpu  time.Duration
			)
			for b.Loop() {
				if next == len(ids) {
					b.StopTimer()
					if s != nil {
						s.Close()
					}
					s, _ = openListened(b)
					ids, next = seedWaiters(b, s, parents, k), 0
					b.StartTimer()
				}
				start := cpuTime()
				if err := completeOne(s, ids[next], depsStart.Add(time.Duration(next+1)*time.Millisecond)); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
				next++
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkCascadeCancel cancels one held job of the first level of a
// graph of width jobs a level, each job after every job of the level
// before (seedGraph): the cancel runs down every level below, in the
// one write, and holds the writer for all of it. ns/op is that write.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkCascadeCancel -benchtime 3x
func BenchmarkCascadeCancel(b *testing.B) {
	const width = 30
	for _, levels := range []int{20, 40, 60} {
		b.Run(fmt.Sprintf("graph=%dx%d", width, levels), func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				s, _ := openListened(b)
				graph := seedGraph(b, s, width, levels)
				b.StartTimer()
				start := cpuTime()
				if err := cancelOne(s, graph[0][0], depsStart.Add(time.Second)); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - start
				b.StopTimer()
				if got := get(b, s, graph[levels-1][width-1]); got.State != jobtype.Cancelled {
					b.Fatalf("the last job after the cancel: %s, want CANCELLED", got.State)
				}
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(width*(levels-1)), "jobs-cancelled")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/1000, "cpu-ms/op")
		})
	}
}

// get reads job id as the store has it.
func get(tb testing.TB, s *Store, id string) jobtype.Job {
	tb.Helper()
	j, err := s.GetJob(context.Background(), id)
	if err != nil {
		tb.Fatalf("get %s: %v", id, err)
	}
	return j
}
