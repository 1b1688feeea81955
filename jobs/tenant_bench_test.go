package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// listCountingStore counts the store's reads of jobs.
type listCountingStore struct {
	store.Store
	lists atomic.Int64
}

func (s *listCountingStore) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	s.lists.Add(1)
	return s.Store.ListJobs(ctx, f)
}

// BenchmarkWatchTenantBurst is the hostile caller's burst, in the engine:
// 500 streams of one tenant, then 4,000 jobs of it submitted in four
// SubmitJobs; an op ends when every stream has sent all 4,000. It reports
// the store's reads of changed jobs per op.
func BenchmarkWatchTenantBurst(b *testing.B) {
	const streams, burst = 500, 4 * jobtype.MaxBatchJobs
	st := &listCountingStore{Store: openBenchStore(b)}
	e := newEngineOver(b, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	seen := make([]int, streams) // jobs each stream has sent
	started := 0
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			_ = e.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Send: func(js []jobtype.Job, _ []string, _ string) error {
				mu.Lock()
				defer mu.Unlock()
				if first {
					first = false
					started++
				} else {
					seen[i] += len(js)
				}
				cond.Broadcast()
				return nil
			}})
		}()
	}
	waitFor := func(done func() bool) {
		mu.Lock()
		defer mu.Unlock()
		for !done() {
			cond.Wait()
		}
	}
	waitFor(func() bool { return started == streams })

	reqs := make([]jobs.SubmitRequest, jobtype.MaxBatchJobs)
	for k := range reqs {
		reqs[k] = jobs.SubmitRequest{Tenant: "acme", Kind: "k"}
	}
	st.lists.Store(0)
	b.ResetTimer()
	for n := 1; n <= b.N; n++ {
		for range burst / len(reqs) {
			if _, err := e.SubmitMany(ctx, reqs); err != nil {
				b.Fatal(err)
			}
		}
		waitFor(func() bool {
			for _, s := range seen {
				if s < n*burst {
					return false
				}
			}
			return true
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(st.lists.Load())/float64(b.N), "reads/op")
	cancel()
	wg.Wait()
}
