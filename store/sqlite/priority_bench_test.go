package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
)

// priorityLayouts are the backlogs' priorities (of each job by its seq):
// all 0; 0 to 9 in turn, so that the jobs of one priority are every
// tenth row, as jobs of mixed priorities submitted together leave them;
// 0 to 9 in runs of 1,000 jobs, the same priorities with the rows of
// one priority together, which tells what the claim's query costs from
// what writing rows spread over ten times as many pages costs.
var priorityLayouts = []struct{ name, expr string }{
	{"0", "0"},
	{"0-9", "seq % 10"},
	{"0-9-in-runs", "seq / 1000 % 10"},
}

// BenchmarkClaimAtDepthWithPriorities is BenchmarkClaimAtDepth's claim
// loop over a backlog of depth jobs whose priorities are all 0 or spread
// over 0 to 9 (priorityLayouts), for the figure: claims per second with priorities in use
// within 10% of without. A job taken goes back at the end of the queue
// with its priority, so the most urgent priority never runs dry, as in
// a queue where urgent work keeps coming. ns/job is per claimed job.
//
//	go test ./store/sqlite/ -run '^$' -bench ClaimAtDepthWithPriorities -benchtime 2s -count 5
func BenchmarkClaimAtDepthWithPriorities(b *testing.B) {
	for _, depth := range []int{20_000, 200_000} {
		for _, p := range priorityLayouts {
			b.Run(fmt.Sprintf("depth=%d/priorities=%s", depth, p.name), func(b *testing.B) {
				d := seedDepth(b, depth)
				// Every backlog is rewritten alike and checkpointed, so
				// that they differ only in their priorities.
				priority := p.expr
				err := d.s.writeTx(context.Background(), "priorities", func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE jobs SET priority = "+priority)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := d.s.write.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
					b.Fatal(err)
				}
				// The pick alone, a read, apart from the claim's writes,
				// whose cost also depends on how many pages the claimed
				// jobs' rows and index entries share.
				for _, n := range []int{1, 100} {
					b.Run(fmt.Sprintf("pick=%d", n), func(b *testing.B) {
						query, args := unruledPickQuery(d.filter(), true, n, "seq")
						for b.Loop() {
							rows, err := d.s.read.Query(query, args...)
							if err != nil {
								b.Fatal(err)
							}
							got := 0
							for got < n && rows.Next() {
								got++
							}
							if err := errors.Join(rows.Err(), rows.Close()); err != nil || got != n {
								b.Fatalf("pick %d: %d rows, %v", n, got, err)
							}
						}
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
					})
				}
				for _, n := range []int{0, 1, 100} {
					name := "ClaimJob"
					if n > 0 {
						name = fmt.Sprintf("ClaimJobs=%d", n)
					}
					b.Run(name, func(b *testing.B) {
						d.benchClaims(b, n)
						b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*max(n, 1)), "ns/job")
					})
				}
			})
		}
	}
}
