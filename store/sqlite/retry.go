package sqlite

// DeleteJob, and the start of a RUNNING job's attempt that the writes
// which may end it (UpdateJob, WriteLeases) hand on for its History.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// attemptStart selects, after a job's columns, when its current attempt
// began: the row running_attempts keeps for TimedOut (migration 5), by
// the job's primary key, so it costs one seek of a small table in the
// read a write makes anyway, not a statement of its own.
const attemptStart = "(SELECT a.started_at FROM running_attempts AS a WHERE a.seq = jobs.seq)"

// attemptLease selects, after attemptStart, the lease the attempt's
// claim granted, in microseconds (NULL for an attempt begun before
// migration 28).
const attemptLease = "(SELECT a.lease_us FROM running_attempts AS a WHERE a.seq = jobs.seq)"

// attemptStartedAt is j's AttemptStartedAt from what attemptStart read:
// zero unless j is RUNNING with a recorded start.
func attemptStartedAt(j jobtype.Job, started sql.NullInt64) time.Time {
	if j.State != jobtype.Running || !started.Valid {
		return time.Time{}
	}
	return fromMicro(started.Int64)
}

// returned is j as a Store returns it: without AttemptStartedAt and
// AttemptLease, which only the writes see (jobtype.Job.AttemptStartedAt).
func returned(j jobtype.Job) jobtype.Job {
	j.AttemptStartedAt, j.AttemptLease = time.Time{}, 0
	return j
}

// getJobForWrite is getJob with the start of the job's attempt and the
// lease its claim granted, for UpdateJob's update.
func getJobForWrite(ctx context.Context, tx *sql.Tx, id string) (jobtype.Job, int64, error) {
	var started, lease sql.NullInt64
	j, seq, err := scanJob(also(tx.QueryRowContext(ctx, "SELECT "+columns+", "+attemptStart+", "+attemptLease+" FROM jobs WHERE id = ?", id), &started, &lease))
	if errors.Is(err, sql.ErrNoRows) {
		return jobtype.Job{}, 0, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, 0, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	j.AttemptStartedAt = attemptStartedAt(j, started)
	if !j.AttemptStartedAt.IsZero() && lease.Valid && lease.Int64 > 0 {
		j.AttemptLease = time.Duration(lease.Int64) * time.Microsecond
	}
	return j, seq, nil
}

// waiterOf finds a WAITING job that waits for job ?, which DeleteJob
// refuses to delete: it would wait for ever. Rows of job_deps whose job
// no longer waits (cancelled while it did) do not count.
const waiterOf = `SELECT d.job_id FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
	WHERE d.after_id = ? AND w.state = 'waiting' LIMIT 1`

// DeleteJob implements store.Store: one statement of the writer's batch
// that reads the job's summary and deletes it if it is terminal, and
// records the deletion for JobsDeleted. The deletion is announced as a
// change of the job at its version plus one.
func (s *Store) DeleteJob(ctx context.Context, id string) (jobtype.Job, bool, error) {
	var (
		j       jobtype.Job
		deleted bool
	)
	err := s.writeStatement(ctx, "delete job", func(ctx context.Context, tx *sql.Tx) error {
		j, deleted = jobtype.Job{}, false
		old, _, err := scanJob(tx.QueryRowContext(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id = ?", id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("delete job %s: %w", id, classify(err))
		}
		j = old
		if !old.State.Terminal() {
			return nil
		}
		var waiter string
		err = tx.QueryRowContext(ctx, waiterOf, id).Scan(&waiter)
		switch {
		case err == nil:
			return &jobtype.WaitedForError{ID: id, Waiter: waiter}
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("delete job %s: %w", id, classify(err))
		}
		if err := callerLeft(ctx); err != nil {
			return leftError("delete job "+id, err)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM jobs WHERE id = ?", id); err != nil {
			return fmt.Errorf("delete job %s: %w", id, classify(err))
		}
		// Rows of jobs that no longer wait (cancelled while they did).
		if _, err := tx.ExecContext(ctx, "DELETE FROM job_deps WHERE after_id = ?", id); err != nil {
			return fmt.Errorf("delete job %s: %w", id, classify(err))
		}
		if _, err := tx.ExecContext(ctx, recordDeletion, old.Tenant, old.Batch, id, s.w.change, toMicro(time.Now())); err != nil {
			return fmt.Errorf("delete job %s: %w", id, classify(err))
		}
		deleted = true
		gone := old
		gone.Version++
		s.changed(gone)
		return nil
	})
	if wf := (*jobtype.WaitedForError)(nil); errors.As(err, &wf) {
		return j, false, err // with the job, whose state the refusal names
	}
	if err != nil {
		return jobtype.Job{}, false, err
	}
	return j, deleted, nil
}
