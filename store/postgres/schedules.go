package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// scheduleStates reads each schedule's latest run: the job's own state
// while it exists, else the state recorded at its end.
// A cron schedule not yet run has no job_id (store.ScheduleState).
const scheduleStates = `SELECT s.name, coalesce(s.job_id, ''), s.ended_at, coalesce(j.state, s.ended_state)
	FROM schedules AS s LEFT JOIN jobs AS j ON j.id = s.job_id`

func scanSchedule(r pgx.Row) (store.ScheduleState, error) {
	var (
		st    store.ScheduleState
		ended pgtype.Timestamptz
		state string
	)
	if err := r.Scan(&st.Name, &st.LastJobID, &ended, &state); err != nil {
		return store.ScheduleState{}, err
	}
	st.LastJobState = jobtype.State(state)
	st.LastEndedAt = fromTime(ended)
	return st, nil
}

// Schedules implements store.Store.
func (s *Store) Schedules(ctx context.Context) ([]store.ScheduleState, error) {
	return collect(ctx, s, "read schedules", func(r pgx.Rows) (store.ScheduleState, error) {
		return scanSchedule(r)
	}, scheduleStates+" ORDER BY s.name")
}

// RunSchedules implements store.Store in one transaction that first
// takes an advisory lock of the schema's schedules, so replicas run it
// one at a time, and then reads each schedule's state: each statement of
// a READ COMMITTED transaction sees every commit before it began, so each
// decision sees the runs the replica before it started. The end of a run
// is recorded by the trigger jobs_schedule_run_ended, in the transaction
// that ends its job, so a batch of completions of scheduled jobs and a
// run of their schedules may deadlock: write runs the loser again.
func (s *Store) RunSchedules(ctx context.Context, runs []store.ScheduleRun, now time.Time) ([]jobtype.Job, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	now = micro(now)
	var created []jobtype.Job
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			created = created[:0]
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(s.schema, "schedules", "")); err != nil {
				return err
			}
			for _, run := range runs {
				j, started, err := s.runSchedule(ctx, tx, run, now)
				if err != nil {
					return fmt.Errorf("run schedule %s: %w", run.Name, err)
				}
				if started {
					created = append(created, j)
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("run schedules: %w", classify(err))
	}
	for _, j := range created {
		s.announce(j)
	}
	return created, nil
}

// runSchedule does in tx what run.Step decides for run's schedule.
func (s *Store) runSchedule(ctx context.Context, tx pgx.Tx, run store.ScheduleRun, now time.Time) (jobtype.Job, bool, error) {
	var last *store.ScheduleState
	st, err := scanSchedule(tx.QueryRow(ctx, scheduleStates+" WHERE s.name = $1 FOR UPDATE OF s", run.Name))
	switch {
	case errors.Is(err, pgx.ErrNoRows): // never run
	case err != nil:
		return jobtype.Job{}, false, fmt.Errorf("read its state: %w", err)
	default:
		last = &st
	}
	step := run.Step(last, now)
	if step.RecordEnd {
		if _, err := tx.Exec(ctx, `UPDATE schedules SET ended_at = $1 WHERE name = $2`, now, run.Name); err != nil {
			return jobtype.Job{}, false, fmt.Errorf("record the end of a run that is gone: %w", err)
		}
	}
	if step.RecordSeen {
		if _, err := tx.Exec(ctx, `INSERT INTO schedules (name, ended_at) VALUES ($1, $2)`, run.Name, now); err != nil {
			return jobtype.Job{}, false, fmt.Errorf("record it first seen: %w", err)
		}
	}
	if !step.Start {
		return jobtype.Job{}, false, nil
	}
	j, err := s.insertRun(ctx, tx, run)
	if err != nil {
		return jobtype.Job{}, false, err
	}
	record := `UPDATE schedules SET job_id = $1, ended_at = NULL, ended_state = '' WHERE name = $2`
	if last == nil {
		record = `INSERT INTO schedules (job_id, name) VALUES ($1, $2)`
	}
	if _, err := tx.Exec(ctx, record, j.ID, run.Name); err != nil {
		return jobtype.Job{}, false, fmt.Errorf("record its run: %w", err)
	}
	return j, true, nil
}

// insertRun creates a schedule's run, counted in its tenant's quota mark
// (quota.go) under the tenant's lock, shared: a run is no creation the
// bound refuses, but an exact count must see it or come after it.
func (s *Store) insertRun(ctx context.Context, tx pgx.Tx, run store.ScheduleRun) (jobtype.Job, error) {
	j := normalize(run.Job)
	hi, lo := s.tenantLock(j.Tenant)
	b := &pgx.Batch{}
	b.Queue("SELECT pg_advisory_xact_lock_shared($1, $2)", hi, lo)
	b.Queue(insertJob, insertValues(j, 0)...)
	b.Queue(bumpQuotaMark, j.Tenant, 1)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return jobtype.Job{}, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	return j, nil
}
