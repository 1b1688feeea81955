package store_test

import (
	"testing"

	"github.com/jobwatch/jobwatch/store"
)

// A claim is ruled by the rules of the queues it may take from, not by
// every queue's: Limits holds them all (an outside probe's claims of a
// queue without rules took turns job by job, 3.5 to 8 times slower,
// because another queue was serial).
func TestAClaimIsRuledByTheQueuesItMayTakeFrom(t *testing.T) {
	limits := map[string]store.QueueLimit{"index": {Serial: true}}
	for _, tc := range []struct {
		name string
		f    store.ClaimFilter
		want bool
	}{
		{"no rules anywhere", store.ClaimFilter{Queues: []string{"deep"}}, false},
		{"a rule on another queue only", store.ClaimFilter{Queues: []string{"deep"}, Limits: limits}, false},
		{"a rule on a queue it names", store.ClaimFilter{Queues: []string{"deep", "index"}, Limits: limits}, true},
		{"a rule anywhere, and it names no queue", store.ClaimFilter{Limits: limits}, true},
		{"a tenant's bound on its running jobs", store.ClaimFilter{Queues: []string{"deep"}, TenantMaxRunning: map[string]int{"acme": 2}}, true},
		{"a tenant's bound of 0 is none", store.ClaimFilter{Queues: []string{"deep"}, TenantMaxRunning: map[string]int{"acme": 0}}, false},
	} {
		if got := tc.f.Ruled(); got != tc.want {
			t.Errorf("%s: Ruled() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
