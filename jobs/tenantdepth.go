package jobs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// How many tenants BusiestTenants keeps per queue: 0 (or less) means
// DefaultTenantsPerQueue, more than MaxTenantsPerQueue is cut to it, so
// one answer stays small whatever the number of tenants.
const (
	DefaultTenantsPerQueue = 10
	MaxTenantsPerQueue     = 100
)

// TenantDepth is one tenant's unfinished work in one queue as of the
// engine's clock.
type TenantDepth struct {
	store.TenantDepth
	// OldestQueuedAge is how long the tenant's longest waiting ready job
	// in the queue has been ready: now minus OldestReadyRunAt. It is
	// zero, and means nothing, when OldestReadyRunAt is zero.
	OldestQueuedAge time.Duration
}

// Waiting reports whether a ready job of the tenant waits in the queue.
func (d TenantDepth) Waiting() bool { return !d.OldestReadyRunAt.IsZero() }

// TenantDepths returns every (queue, tenant) with a QUEUED or RUNNING
// job, sorted by queue, then tenant, from one read of the store's index
// of unfinished jobs (store.Store.TenantDepths): it costs about what
// QueueStats costs, a pass over every unfinished job's index entry.
func (e *Engine) TenantDepths(ctx context.Context) ([]TenantDepth, error) {
	now := e.now()
	stored, err := e.store.TenantDepths(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("tenant depths: %w", err)
	}
	out := make([]TenantDepth, len(stored))
	for i, s := range stored {
		out[i] = TenantDepth{TenantDepth: s}
		if out[i].Waiting() {
			// The store compared RunAt with this same now.
			out[i].OldestQueuedAge = now.Sub(s.OldestReadyRunAt)
		}
	}
	return out, nil
}

// QueueTenants is a queue's busiest tenants, as BusiestTenants keeps
// them.
type QueueTenants struct {
	// Busiest are the tenants kept, busiest first (see Busier).
	Busiest []TenantDepth
	// LeftOut counts the queue's other tenants with unfinished work.
	LeftOut int
}

// BusiestTenants reads TenantDepths and keeps, for each queue with
// unfinished work (the map's keys), its n busiest tenants (see Busiest).
func (e *Engine) BusiestTenants(ctx context.Context, n int) (map[string]QueueTenants, error) {
	depths, err := e.TenantDepths(ctx)
	if err != nil {
		return nil, err
	}
	return Busiest(depths, n), nil
}

// Busiest keeps, for each queue of depths (sorted by queue, as
// TenantDepths returns them), its n busiest tenants (n as
// DefaultTenantsPerQueue and MaxTenantsPerQueue say) and how many it
// left out. depths is left as it is, so callers may share it.
func Busiest(depths []TenantDepth, n int) map[string]QueueTenants {
	switch {
	case n <= 0:
		n = DefaultTenantsPerQueue
	case n > MaxTenantsPerQueue:
		n = MaxTenantsPerQueue
	}
	out := map[string]QueueTenants{}
	// depths holds each queue's tenants together.
	for start := 0; start < len(depths); {
		end := start + 1
		for end < len(depths) && depths[end].Queue == depths[start].Queue {
			end++
		}
		tenants := slices.Clone(depths[start:end])
		slices.SortFunc(tenants, Busier)
		kept := min(n, len(tenants))
		out[depths[start].Queue] = QueueTenants{Busiest: slices.Clip(tenants[:kept]), LeftOut: len(tenants) - kept}
		start = end
	}
	return out
}

// Busier orders tenants of one queue busiest first: the most QUEUED
// plus RUNNING jobs, then the one whose oldest ready job has waited
// longest (one with no ready job after every one with), then by name.
func Busier(a, b TenantDepth) int {
	if c := cmp.Compare(b.Queued+b.Running, a.Queued+a.Running); c != 0 {
		return c
	}
	if a.Waiting() != b.Waiting() {
		if a.Waiting() {
			return -1
		}
		return 1
	}
	if c := a.OldestReadyRunAt.Compare(b.OldestReadyRunAt); c != 0 {
		return c
	}
	return strings.Compare(a.Tenant, b.Tenant)
}
