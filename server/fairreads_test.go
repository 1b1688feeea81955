package server_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// heldLists is a store whose ListJobs wait for a word from the test,
// recording whose reads of jobs reached it, in order; it reads two at a
// time.
type heldLists struct {
	store.Store
	proceed chan struct{}

	mu      sync.Mutex
	entered []string
}

func (s *heldLists) ReadConns() int { return 2 }

func (s *heldLists) enter(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entered = append(s.entered, tenant)
}

func (s *heldLists) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entered)
}

func (s *heldLists) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	s.enter(f.Tenant)
	select {
	case <-s.proceed:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	return s.Store.ListJobs(ctx, f)
}

func (s *heldLists) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	s.enter(r.Tenant)
	return s.Store.ReadJob(ctx, id, r)
}

// A tenant's many reads cannot keep another tenant's read waiting: they
// take the store's places in turn by tenant, so globex's GetJob, sent
// behind acme's ListJobs that fill the store's places and its queue,
// reads at the first place freed, ahead of acme's queue (the store's
// pool handed a freed connection to any waiter: see the benchmark
// below).
func TestATenantsManyReadsDoNotKeepAnotherTenantWaiting(t *testing.T) {
	held := &heldLists{proceed: make(chan struct{})}
	ts := startServer(t, serverOptions{
		config:    server.Config{Tokens: testTokens(t)},
		wrapStore: func(st store.Store) store.Store { held.Store = st; return held },
	})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	globex := ts.clientsWithToken(authProtocols[0], globexToken)
	mine := submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "k"})

	lists := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := acme.jobs.ListJobs(ctxTimeout(t, time.Minute), &jobwatchv1.ListJobsRequest{})
			lists <- err
		}()
	}
	waitUntil(t, "two of acme's reads in the store, three waiting their turn", func() bool {
		return len(held.order()) == 2 && ts.engine.ReadsWaiting() == 3
	})
	got := make(chan error, 1)
	go func() {
		_, err := globex.jobs.GetJob(ctxTimeout(t, time.Minute), &jobwatchv1.GetJobRequest{JobId: mine.GetId()})
		got <- err
	}()
	waitUntil(t, "globex's read waiting behind acme's", func() bool { return ts.engine.ReadsWaiting() == 4 })
	held.proceed <- struct{}{} // one of acme's reads ends: its place is globex's
	if err := <-got; err != nil {
		t.Fatalf("globex's GetJob: %v", err)
	}
	for range 4 {
		held.proceed <- struct{}{}
	}
	for range 5 {
		if err := <-lists; err != nil {
			t.Fatalf("acme's ListJobs: %v", err)
		}
	}
	want := []string{"acme", "acme", "globex", "acme", "acme", "acme"}
	if got := held.order(); !slices.Equal(got, want) {
		t.Errorf("the reads reached the store in the order %q, want %q", got, want)
	}
}

// BenchmarkAnotherTenantsGetJobBehindManyLists measures globex's GetJob
// while 200 callers of acme list its 20,000 jobs for a kind none has,
// over and over: reads that keep the store's read places busy and answer
// little. It reports GetJob's median and 99th percentile, and acme's
// lists per second beside them (over 5 s at least).
//
//	go test -run XXX -bench AnotherTenantsGetJob -benchtime 100x ./server/
func BenchmarkAnotherTenantsGetJobBehindManyLists(b *testing.B) {
	ts := startServer(b, serverOptions{config: server.Config{Tokens: testTokens(b)}})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	globex := ts.clientsWithToken(authProtocols[1], globexToken)
	reqs := make([]*jobwatchv1.SubmitJobRequest, 1000)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true}
	}
	for range 20 {
		if _, err := acme.jobs.SubmitJobs(ctxTimeout(b, time.Minute), &jobwatchv1.SubmitJobsRequest{Jobs: reqs}); err != nil {
			b.Fatal(err)
		}
	}
	mine := submit(b, globex, &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var lists atomic.Int64
	for range 200 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := acme.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Kind: "nomatch"}); err == nil {
					lists.Add(1)
				}
			}
		})
	}
	for lists.Load() < 200 { // every lister under way
		time.Sleep(time.Millisecond)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start, before := time.Now(), lists.Load()
	for range b.N {
		t0 := time.Now()
		if _, err := globex.jobs.GetJob(ctxTimeout(b, time.Minute), &jobwatchv1.GetJobRequest{JobId: mine.GetId()}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	// acme's lists counted over 5 s at least, whatever globex's calls
	// took, so that the figure compares across builds.
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	listed := float64(lists.Load()-before) / time.Since(start).Seconds()
	cancel()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(listed, "lists/s")
}
