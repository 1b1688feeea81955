package sqlite

// What the engine's periodic work reads and writes: scheduled jobs,
// expired leases, timed-out attempts, queue drains and alerts, the
// deletion of finished jobs, and the counts behind the gauges.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// finishedBeforeQuery reads a batch of the jobs that ended before a
// time, but for one a WAITING job waits for (see waiterOf): a seek of jobs_finished, which holds only ended jobs, in the
// order they ended (TestSweepsSeekIndexesOfTheJobsTheyRead). Without
// INDEXED BY, SQLite with no statistics seeks jobs_state_queue_run_at
// by state instead and reads every ended job that is kept.
const finishedBeforeQuery = `SELECT seq FROM jobs INDEXED BY jobs_finished
	WHERE (state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost') AND finished_at < ?
		AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id WHERE d.after_id = jobs.id AND w.state = 'waiting')
	LIMIT ?`

// DeleteFinishedBefore implements store.Store, each batch of at most
// deleteBatch jobs, and as many records of deletions, in a transaction
// of its own: one write when there is little to delete, as on most
// sweeps, and Submit and Complete take turns with a large deletion.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time, limit int) (int, error) {
	var deleted, forgotten int
	for max(deleted, forgotten) < limit {
		batch := min(s.deleteBatch, limit-max(deleted, forgotten))
		var jobs, records int64
		err := s.writeTx(ctx, "delete finished jobs", func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, "DELETE FROM jobs WHERE seq IN ("+finishedBeforeQuery+")", toMicro(t), batch)
			if err != nil {
				return fmt.Errorf("delete finished jobs: %w", classify(err))
			}
			if jobs, err = res.RowsAffected(); err != nil {
				return err
			}
			res, err = tx.ExecContext(ctx, `DELETE FROM job_deletions WHERE seq IN (
				SELECT seq FROM job_deletions WHERE deleted_at < ? LIMIT ?)`, toMicro(t), batch)
			if err != nil {
				return fmt.Errorf("forget deletions: %w", classify(err))
			}
			records, err = res.RowsAffected()
			return err
		})
		deleted += int(jobs)
		forgotten += int(records)
		if err != nil || max(jobs, records) < int64(batch) {
			return deleted, err
		}
	}
	return deleted, nil
}

// scheduledJobsQuery walks the index jobs_state_run_at from the first
// RunAt after now, in its order: it reads only the rows it returns
// (TestScheduledJobsPlanSeeksTheIndex).
const scheduledJobsQuery = "SELECT id, tenant, kind, queue, run_at, version FROM jobs WHERE state = 'queued' AND run_at > ? ORDER BY run_at, seq LIMIT ?"

// ScheduledJobs implements store.Store.
func (s *Store) ScheduledJobs(ctx context.Context, now time.Time, limit int) ([]store.ScheduledJob, error) {
	rows, err := s.read.QueryContext(ctx, scheduledJobsQuery, toMicro(now), limit)
	if err != nil {
		return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
	}
	defer rows.Close()
	var jobs []store.ScheduledJob
	for rows.Next() {
		var (
			j     store.ScheduledJob
			runAt int64
		)
		if err := rows.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &runAt, &j.Version); err != nil {
			return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
		}
		j.RunAt = fromMicro(runAt)
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
	}
	return jobs, nil
}

// expiredLeasesQuery is a seek of jobs_running_lease, which holds only
// RUNNING jobs, by the end of their lease
// (TestSweepsSeekIndexesOfTheJobsTheyRead).
const expiredLeasesQuery = "SELECT id FROM jobs INDEXED BY jobs_running_lease WHERE state = 'running' AND lease_expires_at < ?"

// ExpiredLeases implements store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, expiredLeasesQuery, toMicro(now))
	if err != nil {
		return nil, fmt.Errorf("expired leases: %w", classify(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("expired leases: %w", classify(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("expired leases: %w", classify(err))
	}
	return ids, nil
}

// heldLeasesQuery reads the RUNNING jobs through jobs_running_lease,
// which holds only them, and keeps those under one of the leases.
const heldLeasesQuery = `SELECT id, lease_id FROM jobs INDEXED BY jobs_running_lease
	WHERE state = 'running' AND lease_id IN (SELECT value FROM json_each(?))`

// HeldLeases implements store.Store.
func (s *Store) HeldLeases(ctx context.Context, leaseIDs []string) ([]store.Attempt, error) {
	ids, _ := json.Marshal(leaseIDs) // strings always encode
	return s.readAttempts(ctx, "held leases", heldLeasesQuery, string(ids))
}

// timedOutQuery reads the queue's RUNNING jobs (a handful) through
// jobs_state_queue_run_at and each one's attempt by seq; it never scans
// jobs (TestTimedOutReadsRunningAttemptsNotTheJobsTable).
const timedOutQuery = `SELECT j.id, j.lease_id FROM running_attempts a JOIN jobs j ON j.seq = a.seq
	WHERE a.started_at < ? AND j.state = 'running' AND j.queue = ?`

// TimedOut implements store.Store.
func (s *Store) TimedOut(ctx context.Context, queue string, startedBefore time.Time) ([]store.Attempt, error) {
	return s.readAttempts(ctx, "timed out attempts", timedOutQuery, toMicro(startedBefore), queue)
}

// readAttempts reads the rows of query, each a job id and a lease.
func (s *Store) readAttempts(ctx context.Context, what, query string, args ...any) ([]store.Attempt, error) {
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, classify(err))
	}
	defer rows.Close()
	var attempts []store.Attempt
	for rows.Next() {
		var a store.Attempt
		if err := rows.Scan(&a.JobID, &a.LeaseID); err != nil {
			return nil, fmt.Errorf("%s: %w", what, classify(err))
		}
		attempts = append(attempts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, classify(err))
	}
	return attempts, nil
}

// MarkDrained implements store.Store, in one transaction.
func (s *Store) MarkDrained(ctx context.Context, queues []string, t time.Time) error {
	if len(queues) == 0 {
		return nil
	}
	return s.writeTx(ctx, "mark queues drained", func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range queues {
			if _, err := tx.ExecContext(ctx, `INSERT INTO queue_drains (queue, drained_at) VALUES (?, ?)
				ON CONFLICT (queue) DO UPDATE SET drained_at = max(drained_at, excluded.drained_at)`,
				q, toMicro(t)); err != nil {
				return fmt.Errorf("mark queue %s drained: %w", q, classify(err))
			}
		}
		return nil
	})
}

// SetAlerting implements store.Store. The statement changes a row only
// if the recorded state differs, and the writer runs writes one at a
// time, so of two callers recording one change the second changes
// nothing.
func (s *Store) SetAlerting(ctx context.Context, queue string, alerting bool, at time.Time) (bool, error) {
	query := `INSERT INTO queue_alerts (queue, alerting, changed_at) VALUES (?, 1, ?)
		ON CONFLICT (queue) DO UPDATE SET alerting = 1, changed_at = excluded.changed_at WHERE alerting = 0`
	if !alerting {
		query = `UPDATE queue_alerts SET alerting = 0, changed_at = ? WHERE queue = ? AND alerting = 1`
	}
	var changed bool
	err := s.writeStatement(ctx, "record a queue alerting", func(ctx context.Context, tx *sql.Tx) error {
		if err := callerLeft(ctx); err != nil {
			return leftError("record queue "+queue+" alerting", err)
		}
		args := []any{queue, toMicro(at)}
		if !alerting {
			args = []any{toMicro(at), queue}
		}
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("record queue %s alerting: %w", queue, classify(err))
		}
		n, err := res.RowsAffected()
		changed = n > 0
		return err
	})
	return changed, err
}

// LastDrained implements store.Store.
func (s *Store) LastDrained(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT queue, drained_at FROM queue_drains")
	if err != nil {
		return nil, fmt.Errorf("read queue drains: %w", classify(err))
	}
	defer rows.Close()
	drained := map[string]time.Time{}
	for rows.Next() {
		var (
			q  string
			at int64
		)
		if err := rows.Scan(&q, &at); err != nil {
			return nil, fmt.Errorf("read queue drains: %w", classify(err))
		}
		drained[q] = fromMicro(at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read queue drains: %w", classify(err))
	}
	return drained, nil
}

// CountByState implements store.Store.
func (s *Store) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT state, COUNT(*) FROM jobs GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", classify(err))
	}
	defer rows.Close()
	counts := map[jobtype.State]int64{}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", classify(err))
		}
		counts[jobtype.State(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", classify(err))
	}
	return counts, nil
}

// busyQueuesQuery seeks each queue named in its JSON array in the
// index jobs_state_queue_run_at, once per unfinished state, and stops at
// the first entry (TestBusyQueuesSeeksEachQueue holds it to that).
const busyQueuesQuery = `SELECT value FROM json_each(?) AS q
	WHERE EXISTS (SELECT 1 FROM jobs WHERE jobs.queue = q.value AND state IN ('queued', 'running'))`

// BusyQueues implements store.Store.
func (s *Store) BusyQueues(ctx context.Context, queues []string) ([]string, error) {
	names, err := json.Marshal(queues)
	if err != nil {
		return nil, fmt.Errorf("busy queues: %w", err)
	}
	rows, err := s.read.QueryContext(ctx, busyQueuesQuery, string(names))
	if err != nil {
		return nil, fmt.Errorf("busy queues: %w", classify(err))
	}
	defer rows.Close()
	var busy []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("busy queues: %w", classify(err))
		}
		busy = append(busy, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("busy queues: %w", classify(err))
	}
	return busy, nil
}

// queueStatsQuery groups by (state, queue), the order of the index
// jobs_state_queue_run_at, so SQLite answers it from that index alone
// (TestQueueStatsReadsOnlyAnIndex holds it to that).
const queueStatsQuery = `SELECT queue, state, COUNT(*),
	MIN(CASE WHEN state = 'queued' AND run_at <= ? THEN run_at END)
	FROM jobs WHERE state IN ('queued', 'running')
	GROUP BY state, queue`

// QueueStats implements store.Store.
func (s *Store) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	rows, err := s.read.QueryContext(ctx, queueStatsQuery, toMicro(now))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", classify(err))
	}
	defer rows.Close()
	byName := map[string]*store.QueueStats{}
	for rows.Next() {
		var (
			name, state string
			n           int64
			oldest      sql.NullInt64
		)
		if err := rows.Scan(&name, &state, &n, &oldest); err != nil {
			return nil, fmt.Errorf("queue stats: %w", classify(err))
		}
		q := byName[name]
		if q == nil {
			q = &store.QueueStats{Name: name}
			byName[name] = q
		}
		switch jobtype.State(state) {
		case jobtype.Queued:
			q.Queued = n
			if oldest.Valid {
				q.OldestReadyRunAt = fromMicro(oldest.Int64)
			}
		case jobtype.Running:
			q.Running = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue stats: %w", classify(err))
	}
	stats := make([]store.QueueStats, 0, len(byName))
	for _, q := range byName {
		stats = append(stats, *q)
	}
	slices.SortFunc(stats, func(a, b store.QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return stats, nil
}
