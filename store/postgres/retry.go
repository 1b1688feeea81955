package postgres

// DeleteJob, and the start of a RUNNING job's attempt that UpdateJob
// hands its update for the History (WriteLeases reads it in its SQL).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
)

// attemptStart selects, after a job's columns, when its current attempt
// began (jobs_stamp keeps attempt_started_at), NULL unless RUNNING.
const attemptStart = "CASE WHEN state = 'running' THEN attempt_started_at END"

// forWrite reads job $1 for UpdateJob's update, with when its attempt
// began; forWriteLocked locks its row too.
const (
	forWrite       = "SELECT " + columns + ", " + attemptStart + " FROM jobs WHERE id = $1"
	forWriteLocked = forWrite + " FOR NO KEY UPDATE"
)

// readForWrite reads job id for UpdateJob's update, with its
// AttemptStartedAt; lock adds FOR NO KEY UPDATE.
func readForWrite(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string, lock bool) (storedRow, error) {
	query := forWrite
	if lock {
		query = forWriteLocked
	}
	return scanForWrite(q.QueryRow(ctx, query, id), id)
}

// scanForWrite scans job id from r, a row of forWrite.
func scanForWrite(r pgx.Row, id string) (storedRow, error) {
	var started pgtype.Timestamptz
	row, err := scanJob(r, &started)
	if errors.Is(err, pgx.ErrNoRows) {
		return storedRow{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return storedRow{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	row.job.AttemptStartedAt = fromTime(started)
	return row, nil
}

// returned is j as a Store returns it: without AttemptStartedAt, which
// only the writes see (jobtype.Job.AttemptStartedAt).
func returned(j jobtype.Job) jobtype.Job {
	j.AttemptStartedAt = time.Time{}
	return j
}

// waiterOf finds a WAITING job that waits for job $1, which DeleteJob
// refuses to delete: it would wait for ever. Rows of job_deps whose job
// no longer waits (cancelled while it did) do not count.
const waiterOf = `(SELECT d.job_id FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
	WHERE d.after_id = $1 AND w.state = 'waiting' LIMIT 1)`

// deleteJob reads job $1's summary and deletes it if it is terminal and
// no WAITING job waits for it (waiterOf), recording the deletion for
// JobsDeleted and dropping the rows of job_deps of jobs that no longer
// wait for it, in one statement; the last columns say whether it did,
// and which job waits for it.
var deleteJob = `WITH old AS (SELECT ` + summaryColumns + ` FROM jobs WHERE id = $1),
waiter AS (SELECT ` + waiterOf + ` AS id),
gone AS (DELETE FROM jobs WHERE id = $1 AND state IN ('succeeded', 'failed', 'cancelled', 'lost')
	AND (SELECT id FROM waiter) IS NULL RETURNING id, tenant, batch),
noted AS (INSERT INTO job_deletions (tenant, batch, job_id) SELECT tenant, batch, id FROM gone),
deps AS (DELETE FROM job_deps WHERE after_id IN (SELECT id FROM gone))
SELECT old.*, EXISTS (SELECT 1 FROM gone), (SELECT id FROM waiter) FROM old`

// DeleteJob implements store.Store with deleteJob, in a transaction that
// locks the job's row first: a retry that settles a job after it reads
// it FOR SHARE (store.SettleRetry), so deleteJob, a statement after the
// lock, sees that job's rows in job_deps once it has committed. The
// deletion is announced as a change of the job at its version plus one,
// which every listener's read then finds gone.
func (s *Store) DeleteJob(ctx context.Context, id string) (jobtype.Job, bool, error) {
	var (
		deleted bool
		waiter  *string
		row     storedRow
	)
	err := s.write(ctx, func(wctx context.Context, conn *pgxpool.Conn) error {
		return pgx.BeginFunc(wctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(wctx, "SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", id); err != nil {
				return err
			}
			var err error
			row, err = scanJob(tx.QueryRow(wctx, deleteJob, id), &deleted, &waiter)
			return err
		})
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return jobtype.Job{}, false, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, false, fmt.Errorf("delete job %s: %w", id, classify(err))
	}
	if waiter != nil && row.job.State.Terminal() {
		return row.job, false, &jobtype.WaitedForError{ID: id, Waiter: *waiter}
	}
	if deleted {
		gone := row.job
		gone.Version++
		s.announce(gone)
	}
	return row.job, deleted, nil
}
