package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// openBenchStore is openStore for benchmarks.
func openBenchStore(b *testing.B) store.Store {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// countingStore counts the claim writes and the NextReady reads that
// reach the store.
type countingStore struct {
	store.Store
	claims, reads atomic.Int64
}

func (s *countingStore) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	defer s.reads.Add(1)
	return s.Store.NextReady(ctx, f)
}

func (s *countingStore) ClaimJob(ctx context.Context, f store.ClaimFilter, claim func(*store.Job)) (store.Job, error) {
	s.claims.Add(1)
	return s.Store.ClaimJob(ctx, f, claim)
}

// parkClaimers starts n claimers for r that claim until ctx ends, and
// returns once each has made its first claim write (the first look of a
// claim goes to the store) and had a moment to park. stop waits for them.
func parkClaimers(tb testing.TB, e *jobs.Engine, st *countingStore, ctx context.Context, n int, r jobs.ClaimRequest) (stop func()) {
	tb.Helper()
	before := st.claims.Load()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := r
			r.WorkerID = fmt.Sprintf("parked-%d", i)
			for ctx.Err() == nil {
				if _, err := e.Claim(ctx, r, time.Time{}); err != nil && !errors.Is(err, jobs.ErrNoJob) && ctx.Err() == nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for st.claims.Load()-before < int64(n) {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d claimers looked within 10s", st.claims.Load()-before, n)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	return wg.Wait
}

// waitFor waits until n reaches want and fails if it passes it.
func waitFor(t *testing.T, what string, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d within 10s, want %d", what, n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := n.Load(); got != want {
		t.Fatalf("%s: %d, want %d", what, got, want)
	}
}

func TestParkedClaimersThatCannotUseAJobDoNotWrite(t *testing.T) {
	const parked = 10
	tests := []struct {
		name string
		job  jobs.SubmitRequest
	}{
		{"a job of another kind", jobs.SubmitRequest{Kind: "report", Queue: "mail"}},
		{"a job in another queue", jobs.SubmitRequest{Kind: "mail", Queue: "bulk"}},
		{"a job of theirs that runs later", jobs.SubmitRequest{Kind: "mail", Queue: "mail", RunAt: time.Now().Add(time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &countingStore{Store: openStore(t)}
			e := newEngineOver(t, st, jobs.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			claimed := make(chan store.Job, parked)
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			for i := range parked {
				wg.Go(func() {
					r := jobs.ClaimRequest{WorkerID: fmt.Sprintf("w%d", i), Kinds: []string{"mail"}, Queues: []string{"mail"}}
					if j, err := e.Claim(ctx, r, time.Time{}); err == nil {
						claimed <- j
					}
				})
			}
			// Each claimer's first look writes, then reads when to look
			// again, having taken the signal's channel before both.
			waitFor(t, "claim writes", &st.claims, parked)
			waitFor(t, "reads", &st.reads, parked)

			// Every job wakes every claimer once: each reads, and sees
			// nothing it may claim. A claimer that wrote would do so
			// before its next read, so two jobs in turn show it.
			for round := int64(2); round <= 3; round++ {
				submit(t, e, tt.job)
				waitFor(t, "reads", &st.reads, round*parked)
			}
			if n := st.claims.Load(); n != parked {
				t.Errorf("claim writes: %d, want only the %d first looks", n, parked)
			}

			// They are still parked and still claim what they may run.
			want := submit(t, e, jobs.SubmitRequest{Kind: "mail", Queue: "mail"})
			select {
			case j := <-claimed:
				if j.ID != want.ID {
					t.Errorf("claimed %s, want %s", j.ID, want.ID)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no parked claimer claimed a job it may run")
			}
		})
	}
}

// BenchmarkSubmitWithParkedClaimers submits a job and claims it while
// workers of another kind are parked: what those workers cost everyone
// else. claimwrites/op counts every ClaimJob that reached the store.
func BenchmarkSubmitWithParkedClaimers(b *testing.B) {
	for _, parked := range []int{0, 50} {
		b.Run(fmt.Sprintf("parked=%d", parked), func(b *testing.B) {
			st := &countingStore{Store: openBenchStore(b)}
			e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
			defer e.Shutdown()
			ctx, cancel := context.WithCancel(context.Background())
			stop := parkClaimers(b, e, st, ctx, parked, jobs.ClaimRequest{Kinds: []string{"other"}})
			defer func() { cancel(); stop() }()

			work := jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"work"}}
			st.claims.Store(0)
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "work"}); err != nil {
					b.Fatal(err)
				}
				if _, err := e.Claim(ctx, work, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.claims.Load())/float64(b.N), "claimwrites/op")
		})
	}
}

// BenchmarkNewJobWithParkedClaimersOfItsKind submits a job of the kind 50
// parked claimers run, waits for one of them to claim it and for every
// claimer to be parked again (the counters stop moving), and reports what
// the job cost the store: reads/op counts NextReady reads, claimwrites/op
// ClaimJob writes. Both include the winner's next Claim, whose first look
// writes once and reads once before it parks, so the wake-ups a job causes
// are reads/op less that one read. ns/op includes the settling wait and
// means nothing here.
//
//	go test ./jobs/ -run '^$' -bench BenchmarkNewJobWithParkedClaimersOfItsKind -benchtime 200x
func BenchmarkNewJobWithParkedClaimersOfItsKind(b *testing.B) {
	const parked = 50
	st := &countingStore{Store: openBenchStore(b)}
	e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	defer e.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	claimed := make(chan string, parked)
	r := jobs.ClaimRequest{Kinds: []string{"work"}}
	var wg sync.WaitGroup
	for i := range parked {
		wg.Go(func() {
			r := r
			r.WorkerID = fmt.Sprintf("parked-%d", i)
			for ctx.Err() == nil {
				j, err := e.Claim(ctx, r, time.Time{})
				switch {
				case err == nil:
					claimed <- j.ID
				case !errors.Is(err, jobs.ErrNoJob) && ctx.Err() == nil:
					b.Error(err)
					return
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	settle(st)

	reads0, claims0 := st.reads.Load(), st.claims.Load()
	for b.Loop() {
		j, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "work"})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case id := <-claimed:
			if id != j.ID {
				b.Fatalf("claimed %s, want %s", id, j.ID)
			}
		case <-time.After(10 * time.Second):
			b.Fatal("no parked claimer claimed the job within 10s")
		}
		settle(st)
	}
	b.ReportMetric(float64(st.reads.Load()-reads0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(st.claims.Load()-claims0)/float64(b.N), "claimwrites/op")
}

// settle waits until the store's counters have not moved for 10ms: the
// claimers have done what a change made them do and are parked. Only
// benchmarks use it; tests wait for conditions.
func settle(st *countingStore) {
	last := st.reads.Load() + st.claims.Load()
	quiet := time.Now()
	for time.Since(quiet) < 10*time.Millisecond {
		time.Sleep(time.Millisecond)
		if n := st.reads.Load() + st.claims.Load(); n != last {
			last, quiet = n, time.Now()
		}
	}
}
