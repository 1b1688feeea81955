package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Removed is what one reading of a configuration file declared that a
// later one does not: whole entries, by name, and the alert webhook. A
// reload applies it all the same (an operator may mean it), but a copy
// a deploy cut off at a line boundary parses cleanly and drops
// everything after the cut, so the reload says what went. A value
// changed in an entry both declare (a bound raised, a key of a kept
// queue or tenant left out, strict or retention) is not a removal.
type Removed struct {
	Queues    []string // in the earlier file's order
	Pools     []string // sorted
	Schedules []string // in the earlier file's order
	Tenants   []string // sorted
	Webhook   bool     // alerts.webhook was set and is not
}

// MaxRemovedNames bounds how many names of one kind Removed.String
// lists; the rest are counted ("and 12 more"), so a file cut to its
// first line makes one readable log line, not one as long as the file.
const MaxRemovedNames = 5

// RemovedSince returns what before declares that f does not.
func (f *File) RemovedSince(before *File) Removed {
	if before == nil {
		return Removed{}
	}
	var r Removed
	for _, q := range before.Queues {
		if !slices.ContainsFunc(f.Queues, func(n Queue) bool { return n.Name == q.Name }) {
			r.Queues = append(r.Queues, q.Name)
		}
	}
	for _, s := range before.Schedules {
		if !slices.ContainsFunc(f.Schedules, func(n Schedule) bool { return n.Name == s.Name }) {
			r.Schedules = append(r.Schedules, s.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before.Pools)) {
		if _, ok := f.Pools[name]; !ok {
			r.Pools = append(r.Pools, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before.Tenants)) {
		if _, ok := f.Tenants[name]; !ok {
			r.Tenants = append(r.Tenants, name)
		}
	}
	r.Webhook = before.Alerts.Webhook != "" && f.Alerts.Webhook == ""
	return r
}

// Empty reports whether nothing was removed.
func (r Removed) Empty() bool {
	return len(r.Queues)+len(r.Pools)+len(r.Schedules)+len(r.Tenants) == 0 && !r.Webhook
}

// String names what was removed, by kind, as the file's keys do:
// "queues bulk, reports; schedules digest, nightly; alerts.webhook".
// The webhook's URL is not repeated: it may carry a secret.
func (r Removed) String() string {
	var parts []string
	for _, kind := range []struct {
		key   string
		names []string
	}{{"queues", r.Queues}, {"pools", r.Pools}, {"schedules", r.Schedules}, {"tenants", r.Tenants}} {
		if len(kind.names) == 0 {
			continue
		}
		shown := kind.names[:min(len(kind.names), MaxRemovedNames)]
		part := kind.key + " " + strings.Join(shown, ", ")
		if more := len(kind.names) - len(shown); more > 0 {
			part += fmt.Sprintf(" and %d more", more)
		}
		parts = append(parts, part)
	}
	if r.Webhook {
		parts = append(parts, "alerts.webhook")
	}
	return strings.Join(parts, "; ")
}
