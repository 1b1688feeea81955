package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Fingerprint names the rules a server enforces, whatever file they came
// from and however it says them: the first 12 hex digits of a SHA-256 of
// rules as the engine takes them (Source left out; a tenant's weight of
// 1 and an entry that sets nothing as left out; a schedule's default
// queue, tenant and time zone as named; schedules and pools' uses in
// name order), with retention the one in effect (the config's, else the
// server's). Replicas that serve under the same rules show the same
// fingerprint (serve logs it, and /metrics' jobwatch_config_info has
// it), so an operator can see a replica left with other rules, which it
// would enforce on its own claims: a serial queue parallel on one
// replica, another bound. A server without --config has the fingerprint
// of rules{}.
func Fingerprint(rules jobtype.Rules, retention time.Duration) string {
	r := rules
	r.Source = ""
	r.Retention = retention
	r.Queues = maps.Clone(r.Queues)
	for name, q := range r.Queues {
		q.Uses = slices.Sorted(slices.Values(q.Uses))
		r.Queues[name] = q
	}
	r.Tenants = map[string]jobtype.TenantRules{}
	for name, t := range rules.Tenants {
		if t.Weight == 1 {
			t.Weight = 0
		}
		if t != (jobtype.TenantRules{}) {
			r.Tenants[name] = t
		}
	}
	r.Schedules = slices.Clone(r.Schedules)
	for i, s := range r.Schedules {
		if s.Queue == "" {
			s.Queue = jobtype.DefaultQueue
		}
		if s.Tenant == "" {
			s.Tenant = jobtype.DefaultTenant
		}
		if s.Cron != "" && s.Timezone == "" {
			s.Timezone = "UTC"
		}
		r.Schedules[i] = s
	}
	slices.SortFunc(r.Schedules, func(a, b jobtype.Schedule) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(r)
	if err != nil {
		// Every field is a string, number, bool, JSON, or a slice or map
		// of them.
		panic("config: fingerprint: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
