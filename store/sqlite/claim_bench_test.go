package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
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
	for _, bc := range claimBenchCases() {
		b.Run(bc.name, func(b *testing.B) {
			s, f := seedClaimBench(b, bc)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				j, _, err := store.ClaimOne(ctx, s, f, store.Claim{LeaseID: "l", Now: f.Now, Lease: time.Minute})
				if err != nil {
					b.Fatalf("claim %d: %v", i, err)
				}
				if _, err := s.UpdateJob(ctx, j.ID, func(j *jobtype.Job) error {
					j.State, j.LeaseID = jobtype.Queued, ""
					j.RunAt = j.RunAt.Add(claimBacklog * time.Millisecond)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}

// BenchmarkClaimPick runs only the query that picks the job to claim
// (through NextReady, which shares it), over the same backlogs as
// BenchmarkClaim: what the rules cost a claim apart from its commit's
// fsync.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkClaimPick
func BenchmarkClaimPick(b *testing.B) {
	for _, bc := range claimBenchCases() {
		b.Run(bc.name, func(b *testing.B) {
			s, f := seedClaimBench(b, bc)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, ok, err := s.NextReady(ctx, f); err != nil || !ok {
					b.Fatalf("next ready: %v, %v", ok, err)
				}
			}
		})
	}
}

const claimBacklog = 10_000

type claimBenchCase struct {
	name    string
	queues  int
	limits  map[string]store.QueueLimit
	tenants int // the jobs' tenants, taking turns (fair claiming); 0 for one
}

// claimBenchCases are one unbounded queue, and 100 queues of which a
// quarter each are serial, bounded to 4 running, in the pool "db" (8
// units), and without rules.
func claimBenchCases() []claimBenchCase {
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
	return []claimBenchCase{
		{"10000 jobs in one queue", 1, nil, 0},
		{"10000 jobs of 10 tenants in one queue", 1, nil, 10},
		{"10000 jobs over 100 queues with rules", 100, spread, 0},
		{"10000 jobs of 10 tenants over 100 queues with rules", 100, spread, 10},
	}
}

// seedClaimBench opens a store holding claimBacklog queued jobs spread
// over queues, and the filter that claims them under limits.
func seedClaimBench(b *testing.B, bc claimBenchCase) (*Store, store.ClaimFilter) {
	s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	err = s.writeTx(context.Background(), "seed", func(ctx context.Context, tx *sql.Tx) error {
		for i := range claimBacklog {
			at := start.Add(time.Duration(i) * time.Millisecond)
			j := jobtype.Job{ID: fmt.Sprintf("job-%05d", i), Tenant: fmt.Sprint("t", i%max(bc.tenants, 1)), Kind: "k",
				Queue: fmt.Sprintf("q%02d", i%bc.queues), State: jobtype.Queued, Version: 1,
				MaxAttempts: 1, CreatedAt: at, UpdatedAt: at, RunAt: at}
			if _, err := tx.ExecContext(ctx, insertJob, append(values(normalize(j)), int64(0), 0)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return s, store.ClaimFilter{Now: start.Add(time.Hour), Limits: bc.limits, Pools: map[string]int{"db": 8}}
}
