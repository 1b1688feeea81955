package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/alerthook"
)

// Alerting: a queue whose rules give an alert_after (QueueRules.AlertAfter)
// is alerting while it has unfinished work (QUEUED, also scheduled or
// backing off, or RUNNING) and has not drained for longer than that.
//
// When a queue last drained is kept in the store (MarkDrained), so it
// outlives a restart and is shared by replicas: each sweep records "no
// unfinished work now" for every watched queue it finds empty. It is
// therefore sampled once per sweep (Config.SweepInterval): a queue that
// drains and fills again between two sweeps is not seen drained. A watched
// queue the store has never seen drained (new in the file, or busy since
// before this version) counts from when this engine first watched it,
// not from the beginning of time, so that declaring alert_after on a busy
// queue does not raise an alert at once.

// alertState is what the engine remembers between sweeps: since when it
// has watched each queue, and which queues alerted at the last sweep, so
// that each change is logged once. Whether a queue alerts is decided from
// the store each time, never from this.
type alertState struct {
	mu       sync.Mutex
	watching map[string]time.Time // queue -> when this engine first watched it
	on       map[string]bool      // queues alerting at the last sweep
}

// watchedSince returns since when the engine has watched queue, starting
// now if it had not.
func (a *alertState) watchedSince(queue string, now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watching == nil {
		a.watching = map[string]time.Time{}
	}
	since, ok := a.watching[queue]
	if !ok {
		a.watching[queue] = now
		since = now
	}
	return since
}

// judgeAlerts fills the drain and alert fields of stats as of now.
func (e *Engine) judgeAlerts(ctx context.Context, now time.Time, rules *Rules, stats []QueueStats) error {
	var drained map[string]time.Time
	for i := range stats {
		q := &stats[i]
		q.AlertAfter = rules.Queues[q.Name].AlertAfter
		if q.AlertAfter <= 0 {
			continue
		}
		if drained == nil {
			var err error
			if drained, err = e.store.LastDrained(ctx); err != nil {
				return fmt.Errorf("read when queues drained: %w", err)
			}
		}
		if q.Queued+q.Running == 0 {
			q.LastDrainedAt = now // it is drained now
			continue
		}
		q.LastDrainedAt = drained[q.Name]
		busySince := q.LastDrainedAt
		if busySince.IsZero() {
			busySince = e.alerts.watchedSince(q.Name, now)
		}
		q.Alerting = now.Sub(busySince) > q.AlertAfter
	}
	return nil
}

// watchQueues is the sweep's part in alerting: it records which watched
// queues are drained now and logs each queue entering or leaving the
// alerting state, once.
func (e *Engine) watchQueues(ctx context.Context) error {
	if !e.watchingAny() {
		return nil
	}
	now := e.now()
	stats, err := e.queueStats(ctx, now)
	if err != nil {
		return fmt.Errorf("watch queues: %w", err)
	}
	var drained []string
	alerting := map[string]QueueStats{}
	for _, q := range stats {
		switch {
		case q.AlertAfter <= 0:
		case q.Queued+q.Running == 0:
			drained = append(drained, q.Name)
		case q.Alerting:
			alerting[q.Name] = q
		}
	}
	if err := e.store.MarkDrained(ctx, drained, now); err != nil {
		return fmt.Errorf("watch queues: %w", err)
	}

	e.alerts.mu.Lock()
	defer e.alerts.mu.Unlock()
	webhook := e.rules.Load().AlertWebhook
	byName := map[string]QueueStats{}
	for _, q := range stats {
		byName[q.Name] = q
	}
	for name, q := range alerting {
		if e.alerts.on[name] {
			continue
		}
		e.log.Warn("queue alerting: unfinished work has not drained for longer than alert_after",
			"queue", name, "alert_after", q.AlertAfter, "last_drained_at", q.LastDrainedAt,
			"queued", q.Queued, "running", q.Running)
		if webhook != "" {
			e.hook.Send(webhook, alertEvent(q, now))
		}
	}
	for name := range e.alerts.on {
		if _, still := alerting[name]; !still {
			e.log.Info("queue no longer alerting", "queue", name)
			if webhook != "" {
				q := byName[name]
				q.Name, q.Alerting = name, false
				e.hook.Send(webhook, alertEvent(q, now))
			}
		}
	}
	e.alerts.on = map[string]bool{}
	for name := range alerting {
		e.alerts.on[name] = true
	}
	// A queue no longer watched starts over if it is watched again.
	for name := range e.alerts.watching {
		if e.rules.Load().Queues[name].AlertAfter <= 0 {
			delete(e.alerts.watching, name)
		}
	}
	return nil
}

// alertEvent is the webhook body for q's change, seen at now.
func alertEvent(q QueueStats, now time.Time) alerthook.Event {
	ev := alerthook.Event{Queue: q.Name, Alerting: q.Alerting, At: now, Queued: q.Queued, Running: q.Running}
	if q.AlertAfter > 0 {
		ev.AlertAfter = q.AlertAfter.String()
	}
	if !q.LastDrainedAt.IsZero() {
		at := q.LastDrainedAt
		ev.LastDrainedAt = &at
	}
	return ev
}

// watchingAny reports whether the sweep has alerting work: a queue with
// an alert_after, or an alert to end (its alert_after just removed).
// Without one it reads nothing, so a server without alert_after pays
// nothing for alerting.
func (e *Engine) watchingAny() bool {
	for _, q := range e.rules.Load().Queues {
		if q.AlertAfter > 0 {
			return true
		}
	}
	e.alerts.mu.Lock()
	defer e.alerts.mu.Unlock()
	return len(e.alerts.on) > 0
}
