package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// tenantDepthsQuery groups and sorts by (queue, tenant, state), the
// order of the partial index jobs_unfinished_queue_tenant (schema step
// 16), whose WHERE it repeats, and names that index (on a table without
// statistics SQLite would rather search jobs_state_queue_run_at by state
// and group in a temp B-tree), so it answers from that index alone, with
// no temp B-tree (TestTenantDepthsReadsOnlyAnIndex holds it to that):
// one pass over the unfinished jobs' index entries, as QueueStats makes
// over jobs_state_queue_run_at. What it costs at 1,000,000 QUEUED jobs
// of 10 tenants in one queue (BenchmarkTenantDepths, two runs on a
// shared 2-core machine): 0.17 and 0.25 s, QueueStats 0.15 and 0.21 s
// beside it; about 1.1 s while other processes loaded the machine.
const tenantDepthsQuery = `SELECT queue, tenant, state, COUNT(*),
	MIN(CASE WHEN state = 'queued' AND run_at <= ? THEN run_at END)
	FROM jobs INDEXED BY jobs_unfinished_queue_tenant WHERE state IN ('queued', 'running')
	GROUP BY queue, tenant, state
	ORDER BY queue, tenant, state`

// TenantDepths implements store.Store.
func (s *Store) TenantDepths(ctx context.Context, now time.Time) ([]store.TenantDepth, error) {
	rows, err := s.read.QueryContext(ctx, tenantDepthsQuery, toMicro(now))
	if err != nil {
		return nil, fmt.Errorf("tenant depths: %w", classify(err))
	}
	defer rows.Close()
	var out []store.TenantDepth
	for rows.Next() {
		var (
			queue, tenant, state string
			n                    int64
			oldest               sql.NullInt64
		)
		if err := rows.Scan(&queue, &tenant, &state, &n, &oldest); err != nil {
			return nil, fmt.Errorf("tenant depths: %w", classify(err))
		}
		// The rows come in (queue, tenant) order, a pair's states
		// together.
		if len(out) == 0 || out[len(out)-1].Queue != queue || out[len(out)-1].Tenant != tenant {
			out = append(out, store.TenantDepth{Queue: queue, Tenant: tenant})
		}
		d := &out[len(out)-1]
		switch jobtype.State(state) {
		case jobtype.Queued:
			d.Queued = n
			if oldest.Valid {
				d.OldestReadyRunAt = fromMicro(oldest.Int64)
			}
		case jobtype.Running:
			d.Running = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tenant depths: %w", classify(err))
	}
	return out, nil
}
