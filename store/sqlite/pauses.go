package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jobwatch/jobwatch/store"
)

// Paused queues are rows of queue_pauses. The claim picks (claims.go)
// pass over the queues that have one in their own statement, so a pause
// holds from its commit on; the writer then tells this file's listeners
// (a Change with QueueChange), so that an engine wakes the claims parked
// on a queue resumed through another Store of this process.

// PauseQueue implements store.Store: an insert that keeps the row of a
// queue paused already, then a read of the row as stored.
func (s *Store) PauseQueue(ctx context.Context, p store.QueuePause) (store.QueuePause, error) {
	var out store.QueuePause
	err := s.writeTx(ctx, "pause queue "+p.Queue, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO queue_pauses (queue, paused_at, paused_by) VALUES (?, ?, ?)
			ON CONFLICT (queue) DO NOTHING`, p.Queue, toMicro(p.PausedAt), p.PausedBy)
		if err != nil {
			return fmt.Errorf("pause queue %s: %w", p.Queue, classify(err))
		}
		inserted, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("pause queue %s: %w", p.Queue, classify(err))
		}
		var at int64
		out.Queue = p.Queue
		if err := tx.QueryRowContext(ctx, "SELECT paused_at, paused_by FROM queue_pauses WHERE queue = ?", p.Queue).
			Scan(&at, &out.PausedBy); err != nil {
			return fmt.Errorf("pause queue %s: %w", p.Queue, classify(err))
		}
		out.PausedAt = fromMicro(at)
		if inserted > 0 {
			s.queueChanged(p.Queue, true)
		}
		return nil
	})
	if err != nil {
		return store.QueuePause{}, err
	}
	return out, nil
}

// ResumeQueue implements store.Store.
func (s *Store) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	var resumed bool
	err := s.writeStatement(ctx, "resume queue "+queue, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM queue_pauses WHERE queue = ?", queue)
		if err != nil {
			return fmt.Errorf("resume queue %s: %w", queue, classify(err))
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("resume queue %s: %w", queue, classify(err))
		}
		resumed = n > 0
		if resumed {
			s.queueChanged(queue, false)
		}
		return nil
	})
	return resumed, err
}

// AnnounceStopClaiming implements store.Store: the stop goes to the
// listeners of every Store of this process on the file, as a committed
// change does (listen.go); one SQLite file serves one process.
func (s *Store) AnnounceStopClaiming(_ context.Context, worker, caller string) error {
	s.feed.deliver(s, []store.Change{{Worker: worker, Caller: caller, StopClaiming: true}})
	return nil
}

// QueuePauses implements store.Store.
func (s *Store) QueuePauses(ctx context.Context) ([]store.QueuePause, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT queue, paused_at, paused_by FROM queue_pauses ORDER BY queue")
	if err != nil {
		return nil, fmt.Errorf("read paused queues: %w", classify(err))
	}
	defer rows.Close()
	var out []store.QueuePause
	for rows.Next() {
		var (
			p  store.QueuePause
			at int64
		)
		if err := rows.Scan(&p.Queue, &at, &p.PausedBy); err != nil {
			return nil, fmt.Errorf("read paused queues: %w", classify(err))
		}
		p.PausedAt = fromMicro(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read paused queues: %w", classify(err))
	}
	return out, nil
}

// QueueHasJobs implements store.Store with one seek per state in
// jobs_state_queue_run_at.
func (s *Store) QueueHasJobs(ctx context.Context, queue string) (bool, error) {
	var one int
	err := s.read.QueryRowContext(ctx, `SELECT 1 FROM jobs INDEXED BY jobs_state_queue_run_at
		WHERE state IN ('pending', 'waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'lost') AND queue = ? LIMIT 1`,
		queue).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for jobs of queue %s: %w", queue, classify(err))
	}
	return true, nil
}

// queueChanged records, for the batch being written, that queue was
// paused or resumed; the writer delivers it with the batch's changes
// once it commits. Only the writer goroutine calls it.
func (s *Store) queueChanged(queue string, paused bool) {
	if !s.w.collect {
		return
	}
	s.w.changes = append(s.w.changes, store.Change{Queue: queue, QueueChange: true, Paused: paused})
}

// notPaused is the condition that queue (an SQL expression) is not
// paused: every claim pick (claims.go) checks it in its own statement,
// so no claim takes a job of a queue paused before it began.
// queue_pauses has a row per paused queue, a handful at most, read once
// per statement.
func notPaused(queue string) string {
	return queue + " NOT IN (SELECT queue FROM queue_pauses)"
}
