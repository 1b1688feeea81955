package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
)

// BenchmarkClaimAtDepthWithPriorities is BenchmarkClaimAtDepth's claim
// loop over a backlog of depth jobs (fillQueued: statistics that have not
// seen them) whose priorities are all 0 ("priorities=0") or spread over
// 0 to 9 (in turn, or in runs), for the figure: claims per
// second with priorities in use within 10% of without. A job taken goes
// back at the end of the queue with its priority, so the most urgent
// priority never runs dry, as in a queue where urgent work keeps coming.
// ns/job is per claimed job.
//
//	go test ./store/postgres/ -run '^$' -bench 'ClaimAtDepthWithPriorities' -benchtime 200x -count 5
func BenchmarkClaimAtDepthWithPriorities(b *testing.B) {
	for _, depth := range []int{20_000, 200_000} {
		for _, p := range []struct{ name, expr string }{
			// All 0; 0 to 9 in turn (a priority's jobs are every tenth
			// row, as mixed submissions leave them); 0 to 9 in runs of
			// 1,000 jobs (the same priorities, a priority's rows
			// together), which tells the query's cost from that of
			// writing rows spread over ten times as many pages.
			{"0", "0"}, {"0-9", "seq % 10"}, {"0-9-in-runs", "seq / 1000 % 10"},
		} {
			b.Run(fmt.Sprintf("queued=%d/priorities=%s", depth, p.name), func(b *testing.B) {
				s := openURL(b, pgtest.URL(b)+"&pool_max_conns=2")
				fillQueued(b, s, depth)
				// Every backlog is rewritten alike, so that they differ
				// only in their priorities; the statistics stay stale.
				priority := p.expr
				if _, err := s.pool.Exec(context.Background(), "UPDATE jobs SET priority = "+priority+" WHERE state = 'queued'"); err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				now := t0.Add(24 * time.Hour * 365)
				f := store.ClaimFilter{Kinds: []string{"email"}, Now: now}
				requeued := t0.Add(24 * time.Hour)
				for _, n := range []int{1, 10, 100} {
					b.Run(fmt.Sprintf("claim=%d", n), func(b *testing.B) {
						for b.Loop() {
							c := store.Claim{WorkerID: "w", LeaseIDs: make([]string, n), Now: now, Lease: time.Minute}
							for i := range c.LeaseIDs {
								c.LeaseIDs[i] = fmt.Sprint("lease-", i)
							}
							got, err := s.ClaimJobs(ctx, f, c)
							if err != nil || len(got) != n {
								b.Fatalf("claim %d: %d claimed, %v", n, len(got), err)
							}
							b.StopTimer()
							ids := make([]string, len(got))
							for i, c := range got {
								ids[i] = c.Job.ID
							}
							requeued = requeue(b, s, ids, requeued)
							b.StartTimer()
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
					})
				}
			})
		}
	}
}
