package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// TestARateHoldsAcrossReplicas runs two jobwatch serve processes on one
// PostgreSQL schema with a queue allowing 3 starts in 2 seconds, and
// four remote workers of 4 slots, two on each replica, eager for its 12
// jobs: every job runs, and no 2 seconds hold more than 3 starts, by the
// start time each worker was handed with its job (the server's clock,
// the one the rate is kept by). It logs the closest 4 starts came on the
// workers' own clocks (when each handler began), which the window's
// guard keeps apart on a quiet machine but not always under two test
// suites' load (docs/OPERATING.md, "Rate limits").
func TestARateHoldsAcrossReplicas(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	const limit, per, jobs = 3, 2 * time.Second, 12
	writeFile(t, cfg, "queues:\n  - name: metered\n    rate: {limit: 3, per: 2s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startReplica(t, ctx, "A", dbURL, cfg)
	b := startReplica(t, ctx, "B", dbURL, cfg)

	var (
		mu             sync.Mutex
		starts, handed []time.Time // the server's start times, the handlers' own
		done           = make(chan struct{})
	)
	workCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i, r := range []*replica{a, a, b, b} {
		w := client.NewWorker(r.client.WorkerBackend(), client.WorkerConfig{
			ID: "worker-" + r.name + string(rune('0'+i)), Concurrency: 4, Queues: []string{"metered"},
			Logger: slog.New(slog.DiscardHandler),
		})
		w.Handle("call", func(ctx context.Context, j *jobwatchv1.Job, _ client.Progress) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			handed = append(handed, time.Now())
			starts = append(starts, j.GetStartedAt().AsTime())
			if len(starts) == jobs {
				close(done)
			}
			return nil, nil
		})
		wg.Go(func() {
			if err := w.Run(workCtx); err != nil && workCtx.Err() == nil {
				t.Errorf("worker on %s: %v", r.name, err)
			}
		})
	}
	for i := range jobs {
		r := a
		if i%2 == 1 {
			r = b
		}
		if _, err := r.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "call", Queue: "metered"}); err != nil {
			t.Fatalf("submit on %s: %v", r.name, err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("%d of %d jobs started before the bound", len(starts), jobs)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, time.Time.Compare)
	for i := limit; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-limit]); gap < per {
			t.Errorf("starts %d and %d were %v apart: %d starts in one window of %v, the limit is %d",
				i-limit+1, i+1, gap, limit+1, per, limit)
		}
	}
	slices.SortFunc(handed, time.Time.Compare)
	closest := time.Duration(1<<63 - 1)
	for i := limit; i < len(handed); i++ {
		closest = min(closest, handed[i].Sub(handed[i-limit]))
	}
	t.Logf("on the workers' clocks, the closest %d starts were %v apart (the window is %v)", limit+1, closest, per)
	t.Logf("%d starts over %v", jobs, starts[len(starts)-1].Sub(starts[0]))
}
