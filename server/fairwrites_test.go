package server_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/heldstore"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// heldWritesServer is a server over a heldCreates store whose writes
// wait at most wait for their turn, with acme's two batches of 1,000
// in the store, holding every place for writes; send sends one more.
func heldWritesServer(t *testing.T, wait time.Duration) (ts *testServer, held *heldstore.Creates, acme, globex clients, send func(), batches chan error) {
	ts = startServer(t, serverOptions{
		config:    server.Config{Tokens: testTokens(t)},
		engine:    jobs.Config{WriteTurnWait: wait},
		wrapStore: func(st store.Store) store.Store { held = heldstore.New(st); return held },
	})
	acme = ts.clientsWithToken(authProtocols[1], acmeToken)
	globex = ts.clientsWithToken(authProtocols[0], globexToken)
	batches = make(chan error, 3)
	send = func() {
		_, err := acme.jobs.SubmitJobs(ctxTimeout(t, time.Minute), batchRequest(t, "bulk", "", jobtype.MaxBatchJobs))
		batches <- err
	}
	go send()
	go send()
	waitUntil(t, "acme's two batches in the store", func() bool { return len(held.Order()) == 2 })
	return ts, held, acme, globex, send, batches
}

// A tenant's burst of SubmitJobs cannot keep another tenant's submit
// waiting behind all of it: writes take turns by tenant, so globex's
// SubmitJob, sent behind acme's batches of 1,000 that hold every place
// for writes and wait for more, is written at the first places freed,
// ahead of acme's waiting batch.
func TestATenantsBurstOfBatchesDoesNotKeepAnotherTenantsSubmitWaiting(t *testing.T) {
	ts, held, _, globex, send, batches := heldWritesServer(t, time.Hour)
	go send()
	waitUntil(t, "acme's third batch waiting its turn", func() bool { return ts.engine.WritesWaiting() == 1 })
	got := make(chan error, 1)
	go func() {
		_, err := globex.jobs.SubmitJob(ctxTimeout(t, time.Minute), &jobwatchv1.SubmitJobRequest{Kind: "one"})
		got <- err
	}()
	waitUntil(t, "globex's submit waiting behind acme's batch", func() bool { return ts.engine.WritesWaiting() == 2 })
	held.Release("acme") // one of acme's batches is written: globex's turn
	waitUntil(t, "globex's submit in the store", func() bool { return len(held.Order()) == 3 })
	held.Release("globex")
	if err := <-got; err != nil {
		t.Fatalf("globex's SubmitJob: %v", err)
	}
	for range 2 {
		held.Release("acme")
	}
	for range 3 {
		if err := <-batches; err != nil {
			t.Fatalf("acme's SubmitJobs: %v", err)
		}
	}
	if want := []string{"acme", "acme", "globex", "acme"}; !slices.Equal(held.Order(), want) {
		t.Errorf("the writes reached the store in the order %q, want %q", held.Order(), want)
	}
}

// A write that waits too long for its turn is refused unavailable,
// saying why, with nothing written, and the server goes on serving.
func TestAWriteThatWaitsTooLongForItsTurnIsRefused(t *testing.T) {
	_, held, acme, _, _, batches := heldWritesServer(t, time.Second)
	_, err := acme.jobs.SubmitJob(ctxTimeout(t, time.Minute), &jobwatchv1.SubmitJobRequest{Kind: "late"})
	if connect.CodeOf(err) != connect.CodeUnavailable ||
		!strings.Contains(err.Error(), "the write waited 1s for its turn behind the other writes of tenant acme") ||
		!strings.Contains(err.Error(), "nothing was changed: retry with backoff") {
		t.Fatalf("a write past its turn's wait answered %v; want unavailable saying it waited for its turn behind acme's writes, nothing changed", err)
	}
	for range 2 {
		held.Release("acme")
	}
	for range 2 {
		if err := <-batches; err != nil {
			t.Fatalf("acme's SubmitJobs: %v", err)
		}
	}
	resp, err := acme.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Kind: "late"})
	if err != nil || len(resp.GetJobs()) != 0 {
		t.Errorf("acme's jobs of the refused write: %v, %v; want none", resp.GetJobs(), err)
	}
	go held.Release("acme")
	if _, err := acme.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "again"}); err != nil {
		t.Errorf("the same write once acme's batches are written: %v", err)
	}
}

// BenchmarkAnotherTenantsSubmitBehindAFlood measures globex's SubmitJob
// while callers of acme write over and over: 64 of them sending
// SubmitJobs of 1,000 jobs, or 500 sending SubmitJob. It reports
// SubmitJob's median and 99th percentile, and acme's jobs written per
// second and calls refused beside them (over 5 s at least).
//
//	go test -run XXX -bench AnotherTenantsSubmit -benchtime 100x ./server/
func BenchmarkAnotherTenantsSubmitBehindAFlood(b *testing.B) {
	for _, flood := range []struct {
		name         string
		callers, per int
	}{{"64_batches_of_1000", 64, jobtype.MaxBatchJobs}, {"500_single_submits", 500, 1}} {
		b.Run(flood.name, func(b *testing.B) { benchmarkSubmitBehind(b, flood.callers, flood.per) })
	}
}

func benchmarkSubmitBehind(b *testing.B, callers, per int) {
	ts := startServer(b, serverOptions{config: server.Config{Tokens: testTokens(b)}})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	globex := ts.clientsWithToken(authProtocols[1], globexToken)
	reqs := make([]*jobwatchv1.SubmitJobRequest, per)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var written, refused, calls atomic.Int64
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				calls.Add(1)
				var err error
				if per == 1 {
					_, err = acme.jobs.SubmitJob(ctx, reqs[0])
				} else {
					_, err = acme.jobs.SubmitJobs(ctx, &jobwatchv1.SubmitJobsRequest{Jobs: reqs})
				}
				switch {
				case err == nil:
					written.Add(int64(per))
				case ctx.Err() == nil:
					refused.Add(1)
				}
			}
		})
	}
	for calls.Load() < int64(callers) { // every caller under way
		time.Sleep(time.Millisecond)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start, before, refusedBefore := time.Now(), written.Load(), refused.Load()
	for range b.N {
		t0 := time.Now()
		if _, err := globex.jobs.SubmitJob(ctxTimeout(b, time.Minute), &jobwatchv1.SubmitJobRequest{Kind: "k", Hold: true}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	secs := time.Since(start).Seconds()
	rate, refusals := float64(written.Load()-before)/secs, float64(refused.Load()-refusedBefore)/secs
	cancel()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(rate, "acme-jobs/s")
	b.ReportMetric(refusals, "acme-refused/s")
}
