package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Paused queues (PauseQueue, ResumeQueue). A paused queue hands out no
// claims on any replica until it is resumed; jobs are still accepted
// into it and its running jobs finish. The pause lives in the store, and
// the store's claim statement itself passes over paused queues, so no
// replica hands out a job of a queue paused before the claim began,
// whether or not it has heard of the pause yet, and the engine keeps no
// copy that could go stale.
//
// A claim parked on a paused queue stays parked (a job queued there
// wakes one claimer, whose look finds nothing and answers the wake), and
// a resume wakes every claim that may take from the queue: on this
// engine at once, on other replicas when they hear the resume
// (store.Change with QueueChange, heard in listen.go). A replica whose
// listener may have missed it wakes every claim anyway (resync).
//
// While paused a queue does not alert for not draining: its work waits
// by an operator's choice. It counts as drained while paused, so its
// alert_after runs from the resume (alerts.go).

// ErrUnknownQueue is Pause's and Resume's answer for a queue that no
// rule declares, no job is in and no pause names: most likely a typo.
var ErrUnknownQueue = errors.New("unknown queue")

// QueuePause is a paused queue: since when and by whom.
type QueuePause = store.QueuePause

// Pause pauses queue for by (who asks, as the caller words it: see
// QueuePause.PausedBy), and returns the pause as stored. Pausing a
// paused queue changes nothing and returns the first pause. An empty or
// malformed name is an *jobtype.InvalidError; a queue that no rule
// declares and no job is in is ErrUnknownQueue. Each pause that changes
// something is logged once at info.
func (e *Engine) Pause(ctx context.Context, queue, by string) (QueuePause, error) {
	if err := e.knownQueue(ctx, queue); err != nil {
		return QueuePause{}, err
	}
	at := e.now().UTC().Truncate(time.Microsecond) // as every store keeps it
	p, err := e.store.PauseQueue(ctx, store.QueuePause{Queue: queue, PausedAt: at, PausedBy: by})
	if err != nil {
		return QueuePause{}, fmt.Errorf("pause queue %s: %w", queue, err)
	}
	if p.PausedAt.Equal(at) && p.PausedBy == by { // this call paused it
		e.log.Info("queue paused", "queue", queue, "by", by, "paused_at", p.PausedAt)
	}
	return p, nil
}

// Resume lets queue hand out claims again and wakes the claims parked
// for it, on every replica; it reports whether the queue was paused. A
// queue not paused is left as it is (no error), unless it is unknown as
// for Pause (ErrUnknownQueue). Each resume of a paused queue is logged
// once at info.
func (e *Engine) Resume(ctx context.Context, queue, by string) (resumed bool, err error) {
	if err := jobtype.CheckName("queue", queue); err != nil {
		return false, err
	}
	resumed, err = e.store.ResumeQueue(ctx, queue)
	if err != nil {
		return false, fmt.Errorf("resume queue %s: %w", queue, err)
	}
	if !resumed {
		// Checked after, not before: a paused queue is known, and the
		// resume of one must not be refused for want of jobs or rules.
		return false, e.knownQueue(ctx, queue)
	}
	e.log.Info("queue resumed", "queue", queue, "by", by)
	e.wakeResumed(queue)
	if e.rules.Load().Queues[queue].AlertAfter > 0 {
		// It counted as drained while paused, as of the last sweep that
		// saw it paused: up to a sweep before now. Its alert_after
		// counts from the resume, on every replica (they read drains
		// from the store). The resume stands if this write fails; the
		// alert may then come up to a sweep early.
		if err := e.store.MarkDrained(ctx, []string{queue}, e.now()); err != nil {
			e.log.Warn("record a resumed queue as drained", "queue", queue, "err", err)
		}
	}
	return true, nil
}

// Paused returns every paused queue, sorted by name.
func (e *Engine) Paused(ctx context.Context) ([]QueuePause, error) {
	ps, err := e.store.QueuePauses(ctx)
	if err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	return ps, nil
}

// knownQueue checks queue's name and that the rules name it (declared,
// a schedule's, or the default queue), it holds a job, or it is paused.
func (e *Engine) knownQueue(ctx context.Context, queue string) error {
	if err := jobtype.CheckName("queue", queue); err != nil {
		return err
	}
	if slices.Contains(e.rules.Load().namedQueues(), queue) {
		return nil
	}
	has, err := e.store.QueueHasJobs(ctx, queue)
	if err != nil {
		return fmt.Errorf("look up queue %s: %w", queue, err)
	}
	if has {
		return nil
	}
	ps, err := e.Paused(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Queue == queue {
			return nil
		}
	}
	return unknownQueueError{queue}
}

// wakeResumed wakes every claim that may take from queue: each looks
// again, and those that find a job take it.
func (e *Engine) wakeResumed(queue string) {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	queues := []string{queue}
	e.wakeAllLocked(func(c *claimer) bool { return c.takesFrom(queues) })
}

// heardQueueChange handles another replica's pause or resume: a resume
// wakes the claims here that may take from the queue; a pause needs
// nothing, as the claims check it in the store.
func (e *Engine) heardQueueChange(c store.Change) {
	if c.Local || c.Paused {
		return
	}
	e.wakeResumed(c.Queue)
}

// unknownQueueError is ErrUnknownQueue for queue, saying why once.
type unknownQueueError struct{ queue string }

func (e unknownQueueError) Error() string {
	return fmt.Sprintf("queue %q: no rule declares it and no job is in it", e.queue)
}

func (e unknownQueueError) Is(target error) bool { return target == ErrUnknownQueue }
