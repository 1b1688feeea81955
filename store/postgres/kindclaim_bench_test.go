package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
)

// BenchmarkKindClaimBesideAnotherTenantsBacklog measures claims of 10
// jobs of a kind one tenant submits to a queue where another tenant has
// a deep backlog of another kind, as the SQLite store's benchmark of
// the name does: a worker of the first kind takes turns between the
// tenants, and must not walk the other tenant's backlog to learn that
// none of its jobs are of its kind. Claimed jobs go back to the queue
// outside the timer.
//
//	JOBWATCH_TEST_BACKEND=postgres go test ./store/postgres/ -run '^$' -bench BenchmarkKindClaimBesideAnotherTenantsBacklog
//
// With a tenant's bound on its running jobs (a third tenant's, with no
// job in the queue), the claim seeks each tenant's jobs in a lane of
// their own (picker.lanes): by kind too, or it walks the backlog again.
func BenchmarkKindClaimBesideAnotherTenantsBacklog(b *testing.B) {
	for _, tc := range []struct {
		backlog int
		caps    map[string]int
	}{{20_000, nil}, {200_000, nil}, {20_000, map[string]int{"carol": 3}}, {200_000, map[string]int{"carol": 3}}} {
		name := fmt.Sprintf("backlog=%d", tc.backlog)
		if tc.caps != nil {
			name += "/a_tenant's_max_running"
		}
		backlog := tc.backlog
		b.Run(name, func(b *testing.B) {
			s := openURL(b, pgtest.URL(b))
			exec := execer(b, s)
			for _, g := range []struct {
				tenant, kind string
				n            int
			}{{"acme", "resize", backlog}, {"initech", "resize", 1000}, {"t5", "k5", 1000}} {
				exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
						unique_key, created_at, run_at, worker_id, lease_id)
					SELECT $3 || '-' || i, $3, $4, 'bulk', 'queued', 1, 0, '', 0, 3, '',
						$1::timestamptz + i * interval '1 ms', $1::timestamptz + i * interval '1 ms', '', ''
					FROM generate_series(1, $2::int) AS i`, t0, g.n, g.tenant, g.kind)
			}
			exec("ANALYZE jobs")
			ctx := context.Background()
			now := t0.Add(time.Hour)
			f := store.ClaimFilter{Kinds: []string{"k5"}, Queues: []string{"bulk"}, Now: now, TenantMaxRunning: tc.caps}
			lease := 0
			b.ResetTimer()
			for range b.N {
				c := store.Claim{WorkerID: "w", Now: now, Lease: time.Hour}
				for range 10 {
					lease++
					c.LeaseIDs = append(c.LeaseIDs, fmt.Sprintf("l-%d", lease))
				}
				claimed, err := s.ClaimJobs(ctx, f, c)
				if err != nil || len(claimed) != 10 {
					b.Fatalf("claim: %d jobs, %v", len(claimed), err)
				}
				b.StopTimer()
				exec(`UPDATE jobs SET state = 'queued', lease_id = '' WHERE state = 'running'`)
				b.StartTimer()
			}
		})
	}
}
