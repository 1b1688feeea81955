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

	"github.com/jobwatch/jobwatch/jobtype"
)

// attemptStart selects, after a job's columns, when its current attempt
// began (jobs_stamp keeps attempt_started_at), NULL unless RUNNING.
const attemptStart = "CASE WHEN state = 'running' THEN attempt_started_at END"

// readForWrite reads job id for UpdateJob's update, with its
// AttemptStartedAt; lock adds FOR NO KEY UPDATE.
func readForWrite(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string, lock bool) (storedRow, error) {
	query := "SELECT " + columns + ", " + attemptStart + " FROM jobs WHERE id = $1"
	if lock {
		query += " FOR NO KEY UPDATE"
	}
	var started pgtype.Timestamptz
	row, err := scanJob(q.QueryRow(ctx, query, id), &started)
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

// deleteJob reads job $1's summary and deletes it if it is terminal,
// recording the deletion for JobsDeleted, in one statement; the last
// column says whether it did.
var deleteJob = `WITH old AS (SELECT ` + summaryColumns + ` FROM jobs WHERE id = $1),
gone AS (DELETE FROM jobs WHERE id = $1 AND state IN ('succeeded', 'failed', 'cancelled', 'lost') RETURNING id, tenant),
noted AS (INSERT INTO job_deletions (tenant, job_id) SELECT tenant, id FROM gone)
SELECT old.*, EXISTS (SELECT 1 FROM gone) FROM old`

// DeleteJob implements store.Store with deleteJob. The deletion is
// announced as a change of the job at its version plus one, which every
// listener's read then finds gone.
func (s *Store) DeleteJob(ctx context.Context, id string) (jobtype.Job, bool, error) {
	var deleted bool
	row, err := scanJob(s.pool.QueryRow(ctx, deleteJob, id), &deleted)
	if errors.Is(err, pgx.ErrNoRows) {
		return jobtype.Job{}, false, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, false, fmt.Errorf("delete job %s: %w", id, classify(err))
	}
	if deleted {
		gone := row.job
		gone.Version++
		s.announce(gone)
	}
	return row.job, deleted, nil
}
