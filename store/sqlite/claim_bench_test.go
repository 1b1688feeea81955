package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// BenchmarkClaim claims from a backlog of 10,000 queued jobs, in one
// unbounded queue and spread over 100 queues under rules (serial, bounded
// and pooled mixed), and puts each claimed job back at the end of its
// queue, so the backlog stays at 10,000. An iteration is a claim and the
// write that requeues the job, two transactions:
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkClaim -benchtime 2000x
func BenchmarkClaim(b *testing.B) {
	const backlog = 10_000
	spread := map[string]store.QueueLimit{}
	for q := range 100 {
		name := fmt.Sprintf("q%02d", q)
		switch q % 4 {
		case 0:
			spread[name] = store.QueueLimit{MaxRunning: 1, Serial: true, HoldRetry: true}
		case 1:
			spread[name] = store.QueueLimit{MaxRunning: 4}
		case 2:
			spread[name] = store.QueueLimit{Pools: []string{"db"}}
		}
	}
	for _, bc := range []struct {
		name   string
		queues int
		limits map[string]store.QueueLimit
	}{
		{"10000 jobs in one queue", 1, nil},
		{"10000 jobs over 100 queues with rules", 100, spread},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			err = s.writeTx(ctx, "seed", func(ctx context.Context, tx *sql.Tx) error {
				for i := range backlog {
					at := start.Add(time.Duration(i) * time.Millisecond)
					j := store.Job{ID: fmt.Sprintf("job-%05d", i), Tenant: "t", Kind: "k",
						Queue: fmt.Sprintf("q%02d", i%bc.queues), State: store.Queued, Version: 1,
						MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
					if _, err := tx.ExecContext(ctx, insertJob, values(normalize(j))...); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			f := store.ClaimFilter{Now: start.Add(time.Hour), Limits: bc.limits, Pools: map[string]int{"db": 8}}
			b.ResetTimer()
			for i := range b.N {
				j, err := s.ClaimJob(ctx, f, func(j *store.Job) { j.State, j.LeaseID = store.Running, "l" })
				if err != nil {
					b.Fatalf("claim %d: %v", i, err)
				}
				if _, err := s.UpdateJob(ctx, j.ID, func(j *store.Job) error {
					j.State, j.LeaseID = store.Queued, ""
					j.RunAt = j.RunAt.Add(backlog * time.Millisecond)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}
