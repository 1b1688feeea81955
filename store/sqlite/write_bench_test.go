package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// BenchmarkWrite measures the store's write path: one CreateJob per op,
// each its own transaction with its own fsync (synchronous=FULL), by
// GOMAXPROCS writers and by 16 times as many. With one commit per write,
// more writers get no more done: the baseline that group commit (issue 10) is to
// beat, compared with benchstat:
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkWrite -count 6
func BenchmarkWrite(b *testing.B) {
	for _, perProc := range []int{1, 16} {
		b.Run(fmt.Sprintf("writers=%d", perProc*runtime.GOMAXPROCS(0)), func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			var n atomic.Int64
			at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			b.SetParallelism(perProc) // GOMAXPROCS × perProc goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					j := store.Job{ID: fmt.Sprintf("job-%09d", i), Tenant: "t", Kind: "k", Queue: "q",
						State: store.Queued, Version: 1, MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
					if _, err := s.CreateJob(ctx, j); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
