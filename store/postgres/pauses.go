package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobwatch/jobwatch/store"
)

// Paused queues are rows of queue_pauses. The claim picks (claims.go)
// pass over the queues that have one in their own statement, so a pause
// holds on every replica from its commit on, whether or not the replica
// has heard of it. A pause or resume notifies in its own transaction
// (unlike job writes, see notify.go: pauses are rare, so the notify
// lock's cost does not matter), so a committed change is always
// notified; a listener that loses its connection reports missed, and
// the engine then wakes every claim, which covers a resume it did not
// hear.

// pauseNotice is the payload of a pause's or resume's notification: a
// JSON object, where a job's changes are a JSON array (packChanges).
type pauseNotice struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

// PauseQueue implements store.Store in one transaction: an insert that
// keeps the row of a queue paused already, its notification if it
// inserted, and otherwise a read of the row as another pause stored it.
func (s *Store) PauseQueue(ctx context.Context, p store.QueuePause) (store.QueuePause, error) {
	out := store.QueuePause{Queue: p.Queue}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var at pgtype.Timestamptz
		err := tx.QueryRow(ctx, `INSERT INTO queue_pauses (queue, paused_at, paused_by) VALUES ($1, $2, $3)
			ON CONFLICT (queue) DO NOTHING RETURNING paused_at, paused_by`,
			p.Queue, micro(p.PausedAt), p.PausedBy).Scan(&at, &out.PausedBy)
		if errors.Is(err, pgx.ErrNoRows) {
			// Paused already (maybe by a pause committed while this one
			// waited for its row): this statement's snapshot sees it.
			err = tx.QueryRow(ctx, "SELECT paused_at, paused_by FROM queue_pauses WHERE queue = $1", p.Queue).
				Scan(&at, &out.PausedBy)
			out.PausedAt = fromTime(at)
			return err
		}
		if err != nil {
			return err
		}
		out.PausedAt = fromTime(at)
		return s.notifyPause(ctx, tx, pauseNotice{Queue: p.Queue, Paused: true})
	})
	if err != nil {
		return store.QueuePause{}, fmt.Errorf("pause queue %s: %w", p.Queue, classify(err))
	}
	return out, nil
}

// ResumeQueue implements store.Store: the delete and, if it removed a
// pause, its notification, in one transaction.
func (s *Store) ResumeQueue(ctx context.Context, queue string) (bool, error) {
	var resumed bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM queue_pauses WHERE queue = $1", queue)
		if err != nil {
			return err
		}
		if resumed = tag.RowsAffected() > 0; !resumed {
			return nil
		}
		return s.notifyPause(ctx, tx, pauseNotice{Queue: queue})
	})
	if err != nil {
		return false, fmt.Errorf("resume queue %s: %w", queue, classify(err))
	}
	return resumed, nil
}

func (s *Store) notifyPause(ctx context.Context, tx pgx.Tx, n pauseNotice) error {
	payload, err := json.Marshal(n)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, string(payload))
	return err
}

// isPauseNotice reports whether a notification's payload is a
// pauseNotice rather than a list of job changes.
func isPauseNotice(payload string) bool { return strings.HasPrefix(payload, "{") }

// parsePauseNotice reads a pauseNotice as the change a listener hands on.
func parsePauseNotice(payload string) (store.Change, error) {
	var n pauseNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return store.Change{}, fmt.Errorf("read a queue's pause notice: %w", err)
	}
	return store.Change{Queue: n.Queue, QueueChange: true, Paused: n.Paused}, nil
}

// stopNotice is the payload of AnnounceStopClaiming's notification: a
// JSON object, told apart from the other object notices by its "stop"
// key, the worker's id; by is who asked (store.Change.Caller).
type stopNotice struct {
	Stop string `json:"stop"`
	By   string `json:"by,omitempty"`
}

// AnnounceStopClaiming implements store.Store with a notification alone:
// a stop is not kept, as it matters only to the claims parked when it
// is heard (and to those sent in the seconds after, which the engine
// that hears it remembers).
func (s *Store) AnnounceStopClaiming(ctx context.Context, worker, caller string) error {
	payload, err := json.Marshal(stopNotice{Stop: worker, By: caller})
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, string(payload)); err != nil {
		return fmt.Errorf("announce that worker %s stops claiming: %w", worker, classify(err))
	}
	return nil
}

// parseStopNotice reads an object notice (isPauseNotice) that is a
// worker's stop as the change a listener hands on; ok is false for
// another notice.
func parseStopNotice(payload string) (c store.Change, ok bool, err error) {
	if !strings.Contains(payload, `"stop"`) {
		return store.Change{}, false, nil
	}
	var n stopNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return store.Change{}, false, fmt.Errorf("read a notice: %w", err)
	}
	if n.Stop == "" {
		return store.Change{}, false, nil
	}
	return store.Change{Worker: n.Stop, Caller: n.By, StopClaiming: true}, true, nil
}

// QueuePauses implements store.Store.
func (s *Store) QueuePauses(ctx context.Context) ([]store.QueuePause, error) {
	return collect(ctx, s, "read paused queues", func(r pgx.Rows) (store.QueuePause, error) {
		var (
			p  store.QueuePause
			at pgtype.Timestamptz
		)
		err := r.Scan(&p.Queue, &at, &p.PausedBy)
		p.PausedAt = fromTime(at)
		return p, err
	}, "SELECT queue, paused_at, paused_by FROM queue_pauses ORDER BY queue")
}

// QueueHasJobs implements store.Store: the queue's queued and running
// jobs are a seek each (jobs_queued_queue, jobs_running_queue); only a
// queue with neither is looked for among the other jobs, which no index
// holds by queue. PauseQueue of an unknown queue is rare.
func (s *Store) QueueHasJobs(ctx context.Context, queue string) (bool, error) {
	var found bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM jobs WHERE state = 'queued' AND queue = $1)
		OR EXISTS (SELECT FROM jobs WHERE state = 'running' AND queue = $1)
		OR EXISTS (SELECT FROM jobs WHERE queue = $1)`, queue).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for jobs of queue %s: %w", queue, classify(err))
	}
	return found, nil
}
