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

// BenchmarkContestedClaimBesideRules: claims of 50 jobs from the queue
// "q", which has no rules, where 10 tenants' jobs wait, with and without
// a rule on another queue (a serial "index"), which is no reason for the
// claim to take the ruled pick.
//
//	go test ./store/sqlite -run '^$' -bench BenchmarkContestedClaimBesideRules
func BenchmarkContestedClaimBesideRules(b *testing.B) {
	for _, elsewhere := range []bool{false, true} {
		b.Run(fmt.Sprintf("rule-elsewhere=%v", elsewhere), func(b *testing.B) {
			d := seedDepth(b, 20_000)
			d.ruleElsewhere = elsewhere
			if _, err := d.s.write.Exec(`UPDATE jobs SET tenant = 't' || (rowid % 10)`); err != nil {
				b.Fatal(err)
			}
			d.benchClaims(b, 50)
		})
	}
}
