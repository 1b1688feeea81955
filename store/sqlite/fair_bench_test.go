package sqlite

import (
	"fmt"
	"testing"
)

// BenchmarkClaimTenants measures claims of 1, 12 and 50 jobs from one queue
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
					d.benchClaims(b, n)
				})
			}
		})
	}
}
