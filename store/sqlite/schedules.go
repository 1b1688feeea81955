package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// scheduleStates reads each schedule's latest run: the job's own state
// while it exists, else the state recorded at its end.
// A cron schedule not yet run has no job_id (store.ScheduleState).
const scheduleStates = `SELECT s.name, COALESCE(s.job_id, ''), s.ended_at, COALESCE(j.state, s.ended_state)
	FROM schedules s LEFT JOIN jobs j ON j.id = s.job_id`

func scanSchedule(r scanner) (store.ScheduleState, error) {
	var (
		st    store.ScheduleState
		ended sql.NullInt64
		state string
	)
	if err := r.Scan(&st.Name, &st.LastJobID, &ended, &state); err != nil {
		return store.ScheduleState{}, err
	}
	st.LastJobState = jobtype.State(state)
	if ended.Valid {
		st.LastEndedAt = fromMicro(ended.Int64)
	}
	return st, nil
}

// Schedules implements store.Store: one read of the (small) schedules
// table, joined to each latest run's job by its id.
func (s *Store) Schedules(ctx context.Context) ([]store.ScheduleState, error) {
	rows, err := s.read.QueryContext(ctx, scheduleStates+" ORDER BY s.name")
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", classify(err))
	}
	defer rows.Close()
	var states []store.ScheduleState
	for rows.Next() {
		st, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("read schedules: %w", classify(err))
		}
		states = append(states, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schedules: %w", classify(err))
	}
	return states, nil
}

// RunSchedules implements store.Store. The writer's BEGIN IMMEDIATE
// holds the database's write lock from the first read, so the state each
// decision reads cannot change before the commit, in this process or in
// another sharing the file.
func (s *Store) RunSchedules(ctx context.Context, runs []store.ScheduleRun, now time.Time) ([]jobtype.Job, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	var created []jobtype.Job
	err := s.writeTx(ctx, "run schedules", func(ctx context.Context, tx *sql.Tx) error {
		created = created[:0]
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
	if err != nil {
		return nil, err
	}
	return created, nil
}

// runSchedule does in tx what run.Step decides for run's schedule.
func (s *Store) runSchedule(ctx context.Context, tx *sql.Tx, run store.ScheduleRun, now time.Time) (jobtype.Job, bool, error) {
	var last *store.ScheduleState
	st, err := scanSchedule(tx.QueryRowContext(ctx, scheduleStates+" WHERE s.name = ?", run.Name))
	switch {
	case errors.Is(err, sql.ErrNoRows): // never run
	case err != nil:
		return jobtype.Job{}, false, fmt.Errorf("read its state: %w", classify(err))
	default:
		last = &st
	}
	step := run.Step(last, now)
	if step.RecordEnd {
		if _, err := tx.ExecContext(ctx, `UPDATE schedules SET ended_at = ? WHERE name = ?`, toMicro(now), run.Name); err != nil {
			return jobtype.Job{}, false, fmt.Errorf("record the end of a run that is gone: %w", classify(err))
		}
	}
	if step.RecordSeen {
		if _, err := tx.ExecContext(ctx, `INSERT INTO schedules (name, ended_at) VALUES (?, ?)`, run.Name, toMicro(now)); err != nil {
			return jobtype.Job{}, false, fmt.Errorf("record it first seen: %w", classify(err))
		}
	}
	if !step.Start {
		return jobtype.Job{}, false, nil
	}
	j, err := s.insertRun(ctx, tx, run)
	if err != nil {
		return jobtype.Job{}, false, err
	}
	record := `UPDATE schedules SET job_id = ?, ended_at = NULL, ended_state = '' WHERE name = ?`
	if last == nil {
		record = `INSERT INTO schedules (job_id, name) VALUES (?, ?)`
	}
	if _, err := tx.ExecContext(ctx, record, j.ID, run.Name); err != nil {
		return jobtype.Job{}, false, fmt.Errorf("record its run: %w", classify(err))
	}
	return j, true, nil
}

func (s *Store) insertRun(ctx context.Context, tx *sql.Tx, run store.ScheduleRun) (jobtype.Job, error) {
	j := normalize(run.Job)
	if err := s.insert(ctx, tx, j, 0); err != nil {
		return jobtype.Job{}, fmt.Errorf("create job %s: %w", j.ID, classify(err))
	}
	return j, nil
}
