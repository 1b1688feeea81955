package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobwatch/jobwatch/store"
)

// tenantDepthsQuery groups by (queue, tenant), the leading columns of
// the partial index jobs_unfinished_queue_tenant (schema step 12), whose
// WHERE it repeats, so that PostgreSQL can read that index alone (an
// index-only scan, as QueueStats reads the partial indexes of queued and
// running jobs) and aggregate in its order.
//
// It runs after tenantDepthsSettings, in one pipelined batch and so one
// implicit transaction (as claims run after their prelude): with
// statistics, the planner finds reading the unfinished jobs through
// jobs_state and hashing the pairs a little cheaper, a plan that reads a
// table page per job where the index-only scan reads none; right after a
// bulk load it would rather make a bitmap of the table's pages. With
// hashing, sorts, bitmaps and sequential scans off, the index in the
// GROUP BY's order is the one plan left, whatever the statistics say
// (TestTenantDepthsReadsOnlyAnIndex pins it). JIT is off too: the
// disabled paths' cost would pass jit_above_cost.
//
// What it costs at 1,000,000 QUEUED jobs of 10 tenants in one queue,
// after VACUUM ANALYZE (BenchmarkTenantDepths, two runs on a shared
// 2-core machine): 0.29 and 0.39 s, QueueStats 0.27 and 0.41 s beside
// it; about 1.2 s while other processes loaded the machine.
const tenantDepthsQuery = `SELECT queue, tenant,
	count(*) FILTER (WHERE state = 'queued'),
	count(*) FILTER (WHERE state = 'running'),
	min(run_at) FILTER (WHERE state = 'queued' AND run_at <= $1)
	FROM jobs WHERE state IN ('queued', 'running')
	GROUP BY queue, tenant`

// tenantDepthsSettings are tenantDepthsQuery's plan settings, for its
// transaction only.
const tenantDepthsSettings = `SELECT set_config('enable_hashagg', 'off', true),
	set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('jit', 'off', true)`

// TenantDepths implements store.Store. The pairs are sorted here, by
// byte order as Go compares strings, not by the database's collation.
func (s *Store) TenantDepths(ctx context.Context, now time.Time) ([]store.TenantDepth, error) {
	b := &pgx.Batch{}
	b.Queue(tenantDepthsSettings)
	b.Queue(tenantDepthsQuery, micro(now))
	br := s.pool.SendBatch(ctx, b)
	depths, err := readTenantDepths(br)
	if err = errors.Join(err, br.Close()); err != nil {
		return nil, fmt.Errorf("tenant depths: %w", classify(err))
	}
	slices.SortFunc(depths, func(a, b store.TenantDepth) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Tenant, b.Tenant))
	})
	return depths, nil
}

func readTenantDepths(br pgx.BatchResults) ([]store.TenantDepth, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.TenantDepth, error) {
		var (
			d      store.TenantDepth
			oldest pgtype.Timestamptz
		)
		err := r.Scan(&d.Queue, &d.Tenant, &d.Queued, &d.Running, &oldest)
		d.OldestReadyRunAt = fromTime(oldest)
		return d, err
	})
}
