package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// collect runs query and reads every row with scan.
func collect[T any](ctx context.Context, s *Store, what string, scan func(pgx.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, classify(err))
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, classify(err))
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, classify(err))
	}
	return out, nil
}

// ScheduledJobs implements store.Store, from the index jobs_queued.
func (s *Store) ScheduledJobs(ctx context.Context, now time.Time, limit int) ([]store.ScheduledJob, error) {
	return collect(ctx, s, "scheduled jobs", func(r pgx.Rows) (store.ScheduledJob, error) {
		var (
			j     store.ScheduledJob
			runAt pgtype.Timestamptz
		)
		err := r.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &runAt, &j.Version)
		j.RunAt = fromTime(runAt)
		return j, err
	}, `SELECT id, tenant, kind, queue, run_at, version FROM jobs
		WHERE state = 'queued' AND run_at > $1 ORDER BY run_at, seq LIMIT $2`, micro(now), limit)
}

// ExpiredLeases implements store.Store. A RUNNING job without a lease
// expiry (the zero time) has expired, as the zero time is before now.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]string, error) {
	return collect(ctx, s, "expired leases", scanOne[string],
		`SELECT id FROM jobs WHERE state = 'running' AND (lease_expires_at < $1 OR lease_expires_at IS NULL)`, micro(now))
}

// heldLeasesQuery reads only RUNNING jobs, through an index of them
// alone, whatever the statistics say
// (TestHeldLeasesReadOnlyRunningJobs).
const heldLeasesQuery = `SELECT id, lease_id FROM jobs WHERE state = 'running' AND lease_id = ANY($1)`

// HeldLeases implements store.Store.
func (s *Store) HeldLeases(ctx context.Context, leaseIDs []string) ([]store.Attempt, error) {
	return collect(ctx, s, "held leases", scanAttempt, heldLeasesQuery, leaseIDs)
}

// scanAttempt reads a row of a job id and a lease.
func scanAttempt(r pgx.Rows) (store.Attempt, error) {
	var a store.Attempt
	err := r.Scan(&a.JobID, &a.LeaseID)
	return a, err
}

func scanOne[T any](r pgx.Rows) (T, error) {
	var v T
	err := r.Scan(&v)
	return v, err
}

// TimedOut implements store.Store, from attempt_started_at, which the
// trigger jobs_stamp sets on every write that makes a job RUNNING.
func (s *Store) TimedOut(ctx context.Context, queue string, startedBefore time.Time) ([]store.Attempt, error) {
	return collect(ctx, s, "timed out attempts", scanAttempt, `SELECT id, lease_id FROM jobs WHERE state = 'running' AND queue = $1
		AND (attempt_started_at < $2 OR attempt_started_at IS NULL)`, queue, micro(startedBefore))
}

// MarkDrained implements store.Store in one statement; GREATEST keeps
// the later time, so replicas sweeping at once never move a drain back.
func (s *Store) MarkDrained(ctx context.Context, queues []string, t time.Time) error {
	if len(queues) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO queue_drains (queue, drained_at)
		SELECT DISTINCT q, $2::timestamptz FROM unnest($1::text[]) AS q
		ON CONFLICT (queue) DO UPDATE SET drained_at = GREATEST(queue_drains.drained_at, excluded.drained_at)`,
		queues, orderTime(micro(t)))
	if err != nil {
		return fmt.Errorf("mark queues drained: %w", classify(err))
	}
	return nil
}

// SetAlerting implements store.Store. Each statement changes the row only
// if the recorded state differs; a concurrent caller's statement waits for
// the row and checks that again on the version the first committed, so of
// callers recording one change exactly one changes a row.
func (s *Store) SetAlerting(ctx context.Context, queue string, alerting bool, at time.Time) (bool, error) {
	query := `INSERT INTO queue_alerts (queue, alerting, changed_at) VALUES ($1, true, $2)
		ON CONFLICT (queue) DO UPDATE SET alerting = true, changed_at = excluded.changed_at
		WHERE NOT queue_alerts.alerting`
	if !alerting {
		query = `UPDATE queue_alerts SET alerting = false, changed_at = $2 WHERE queue = $1 AND alerting`
	}
	var tag pgconn.CommandTag
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		var err error
		tag, err = conn.Exec(ctx, query, queue, orderTime(micro(at)))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record queue %s alerting: %w", queue, classify(err))
	}
	return tag.RowsAffected() > 0, nil
}

// LastDrained implements store.Store.
func (s *Store) LastDrained(ctx context.Context) (map[string]time.Time, error) {
	type drain struct {
		queue string
		at    time.Time
	}
	drains, err := collect(ctx, s, "read queue drains", func(r pgx.Rows) (drain, error) {
		var (
			d  drain
			at pgtype.Timestamptz
		)
		err := r.Scan(&d.queue, &at)
		d.at = fromTime(at)
		return d, err
	}, "SELECT queue, drained_at FROM queue_drains")
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(drains))
	for _, d := range drains {
		out[d.queue] = d.at
	}
	return out, nil
}

// retentionPick picks up to $2 ended jobs that ended before $1 (or
// have no end time), none a WAITING job runs after. Its two halves each
// seek jobs_finished: one condition with an OR of the two would have
// the planner scan the whole table, every second on every replica,
// once most of it is ended jobs kept by a long retention (an outside
// probe: 107 to 255 ms a sweep at 690,000 rows, finding nothing).
const retentionPick = `
	SELECT seq FROM jobs AS e WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost') AND finished_at < $1
		AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
			WHERE d.after_id = e.id AND w.state = 'waiting')
	UNION ALL
	SELECT seq FROM jobs AS e WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost') AND finished_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
			WHERE d.after_id = e.id AND w.state = 'waiting')
	LIMIT $2`

// DeleteFinishedBefore implements store.Store in statements of at most
// deleteBatch jobs, and as many records of deletions, each its own
// transaction: one commit when there is little to delete, as on most
// sweeps. A terminal job without a FinishedAt (the zero time) counts as
// finished before t.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time, limit int) (int, error) {
	var deleted, forgotten int
	for max(deleted, forgotten) < limit {
		batch := min(deleteBatch, limit-max(deleted, forgotten))
		var jobs, records int
		err := s.pool.QueryRow(ctx, `WITH j AS (DELETE FROM jobs WHERE seq IN (`+retentionPick+`) RETURNING 1),
			d AS (DELETE FROM job_deletions WHERE seq IN (
				SELECT seq FROM job_deletions WHERE deleted_at < $1 LIMIT $2) RETURNING 1)
			SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM d)`, micro(t), batch).Scan(&jobs, &records)
		if err != nil {
			return deleted, fmt.Errorf("delete finished jobs: %w", classify(err))
		}
		deleted += jobs
		forgotten += records
		// Each deleted job is a dead row, as a claimed one is: a large
		// purge (a retention shortened) brings the vacuum's look, not
		// only later claims.
		s.vacuum.wrote(jobs)
		if max(jobs, records) < batch {
			break
		}
	}
	return deleted, nil
}

// CountByState implements store.Store.
func (s *Store) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	type count struct {
		state string
		n     int64
	}
	counts, err := collect(ctx, s, "count jobs", func(r pgx.Rows) (count, error) {
		var c count
		err := r.Scan(&c.state, &c.n)
		return c, err
	}, "SELECT state, count(*) FROM jobs GROUP BY state")
	if err != nil {
		return nil, err
	}
	out := make(map[jobtype.State]int64, len(counts))
	for _, c := range counts {
		out[jobtype.State(c.state)] = c.n
	}
	return out, nil
}

// QueueStats implements store.Store, from the partial indexes of queued
// and running jobs.
func (s *Store) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	type part struct {
		queue, state string
		n            int64
		oldest       pgtype.Timestamptz
	}
	parts, err := collect(ctx, s, "queue stats", func(r pgx.Rows) (part, error) {
		var p part
		err := r.Scan(&p.queue, &p.state, &p.n, &p.oldest)
		return p, err
	}, `SELECT queue, 'queued', count(*), min(run_at) FILTER (WHERE run_at <= $1)
			FROM jobs WHERE state = 'queued' GROUP BY queue
		UNION ALL
		SELECT queue, 'running', count(*), NULL FROM jobs WHERE state = 'running' GROUP BY queue`, micro(now))
	if err != nil {
		return nil, err
	}
	byName := map[string]*store.QueueStats{}
	for _, p := range parts {
		q := byName[p.queue]
		if q == nil {
			q = &store.QueueStats{Name: p.queue}
			byName[p.queue] = q
		}
		if p.state == "queued" {
			q.Queued = p.n
			q.OldestReadyRunAt = fromTime(p.oldest)
		} else {
			q.Running = p.n
		}
	}
	stats := make([]store.QueueStats, 0, len(byName))
	for _, q := range byName {
		stats = append(stats, *q)
	}
	slices.SortFunc(stats, func(a, b store.QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return stats, nil
}

// busyQueuesQuery seeks each queue of its array in the partial index of
// unfinished jobs, jobs_unfinished_queue_tenant, and stops at the first
// entry. The ORDER BY is the index's order after the queue: without it,
// a planner that knows a queue is deep prices a scan of the table that
// stops at its first match below one seek, and that scan reads the
// whole table for a queue with nothing unfinished; with it, any plan
// but the index's must sort every match (TestBusyQueuesPlanSeeksEachQueue).
const busyQueuesQuery = `SELECT q FROM unnest($1::text[]) AS q
	CROSS JOIN LATERAL (SELECT 1 FROM jobs WHERE jobs.queue = q AND state IN ('queued', 'running')
		ORDER BY tenant, state, run_at, seq LIMIT 1) AS busy`

// BusyQueues implements store.Store.
func (s *Store) BusyQueues(ctx context.Context, queues []string) ([]string, error) {
	return collect(ctx, s, "busy queues", func(r pgx.Rows) (string, error) {
		var q string
		err := r.Scan(&q)
		return q, err
	}, busyQueuesQuery, queues)
}

// Now implements store.Store: the database's clock, which every replica
// shares, to the microsecond.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", classify(err))
	}
	return t.UTC(), nil
}
