package sqlite

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// BenchmarkClaimTenants measures claims of 1 and 50 jobs from one queue
// of 20,000 queued jobs of 1 or 10 tenants taking turns (fair
// claiming): with 10, every claim finds the queue contested and takes
// its turns. Claimed jobs go back to the end of the queue outside the
// timer. ns/op is per call; jobs/s counts jobs.
//
//	go test ./store/sqlite/ -run '^$' -bench BenchmarkClaimTenants
func BenchmarkClaimTenants(b *testing.B) {
	for _, tenants := range []int{1, 10} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			d := seedDepth(b, 20_000)
			if _, err := d.s.write.Exec(fmt.Sprintf(`UPDATE jobs SET tenant = 't' || (rowid %% %d)`, tenants)); err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{1, 12, 50} {
				b.Run(fmt.Sprintf("ClaimJobs=%d", n), func(b *testing.B) {
					var cpu time.Duration
					for b.Loop() {
						start := cpuTime()
						if err := d.claim(n); err != nil {
							b.Fatal(err)
						}
						cpu += cpuTime() - start
						b.StopTimer()
						d.requeue(b, jobtype.Running)
						b.StartTimer()
					}
					reportJobs(b, n, cpu)
				})
			}
		})
	}
}
