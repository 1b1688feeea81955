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
	"github.com/jobwatch/jobwatch/store"
)

// BenchmarkWriteCycle measures a job's three writes, as store/sqlite's
// benchmark of the same name does: one op is a submit (CreateJob), a
// claim (ClaimJob, of whichever job is first) and a completion
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
					j, _, err := s.ClaimJob(ctx, f, c)
					for errors.Is(err, store.ErrNoJob) {
						j, _, err = s.ClaimJob(ctx, f, c)
					}
					if err != nil {
						return fmt.Errorf("claim: %w", err)
					}
					_, err = s.UpdateJob(ctx, j.ID, func(j *store.Job) error {
						if j.State != store.Running {
							return errors.New("not running")
						}
						j.State, j.Result, j.FinishedAt, j.LeaseID = store.Succeeded, []byte(`"ok"`), at, ""
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
