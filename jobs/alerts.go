package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Alerting: a queue whose rules give an alert_after (QueueRules.AlertAfter)
// is alerting while it has unfinished work (QUEUED, also scheduled or
// backing off, or RUNNING) and has not drained for longer than that.
//
// When a queue last drained is sampled by the sweep, once per
// Config.SweepInterval: a queue that drains and fills again between two
// sweeps is not seen drained. A watched queue never seen drained (new in
// the file, or busy since before this version) counts from when this
// engine first watched it, not from the beginning of time, so that
// declaring alert_after on a busy queue does not raise an alert at once.
//
// What the sweep saw is kept in the store (MarkDrained), so it outlives a
// restart and is shared by replicas, but not written at every sweep: an
// idle server would then commit a write transaction (an fsync on SQLite)
// every second for nothing. The drain time only matters once the queue is
// busy again (an idle queue shows "drained now" and never alerts), so:
//
//   - The engine remembers in memory the last sweep that found each
//     watched queue empty and that the store has not been told (alertState.idle).
//     ListQueues reads the later of that and the stored time, so what a
//     user sees of this replica is the same as if it had been written.
//   - The first sweep that finds the queue busy again writes that time:
//     exact, once per busy period.
//   - While the queue stays empty, the sweep writes "empty now" only when
//     the stored time is older than drainRefresh (a tenth of alert_after,
//     at most a minute), and as Run ends (a stop or restart) it writes what
//     it remembers. So only a crash loses anything, and then only up to
//     drainRefresh: a queue that fills right after a crash, before a new
//     sweep saw it empty, may start alerting that much early.
//   - Replicas each remember their own sightings and write the same way;
//     the store keeps the later of two times, so they never move a drain
//     back, and a refresh one replica wrote spares the others theirs.
//
// Each replica logs a queue starting and stopping to alert as it sees
// it, but the webhook hears each change once between them: the store
// records whether the queue is alerting, and only the replica whose
// record changed it posts (announce). A replica that starts during an
// episode, or sees it a sweep late, finds it recorded and stays quiet.

// drainRefresh is how stale the stored drain of an empty queue may grow
// before the sweep writes it again (see above).
func drainRefresh(alertAfter time.Duration) time.Duration {
	return min(time.Minute, alertAfter/10)
}

// alertState is what the engine remembers between sweeps: since when it
// has watched each queue, which queues alerted at the last sweep, so
// that each change is logged once, and the drains the store has not been
// told. Whether a queue alerts is decided from the store and these
// drains each time, never from the rest.
type alertState struct {
	mu       sync.Mutex
	watching map[string]time.Time // queue -> when this engine first watched it
	on       map[string]bool      // queues alerting at the last sweep
	idle     map[string]time.Time // queue -> last sweep that found it empty, not yet stored
	// paused are the queues paused at the last judgeAlerts (pause.go),
	// which count as empty: their work waits by an operator's choice.
	paused map[string]bool
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

// idleSeen returns the last sweep that found queue empty and that the
// store has not been told; zero if none.
func (a *alertState) idleSeen(queue string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.idle[queue]
}

// stored forgets the sightings of queues that the store now has at t.
func (a *alertState) stored(queues []string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, q := range queues {
		if a.idle[q].Equal(t) {
			delete(a.idle, q)
		}
	}
}

// judgeAlerts fills the drain and alert fields of stats as of now. It
// returns the drains as stored (nil when no queue is watched).
func (e *Engine) judgeAlerts(ctx context.Context, now time.Time, rules *ruleSet, stats []QueueStats) (map[string]time.Time, error) {
	var (
		drained map[string]time.Time
		paused  map[string]bool
	)
	for i := range stats {
		q := &stats[i]
		q.AlertAfter = rules.Queues[q.Name].AlertAfter
		if q.AlertAfter <= 0 {
			continue
		}
		if drained == nil {
			var err error
			if drained, err = e.store.LastDrained(ctx); err != nil {
				return nil, fmt.Errorf("read when queues drained: %w", err)
			}
			if paused, err = e.pausedSet(ctx); err != nil {
				return nil, err
			}
		}
		if q.Queued+q.Running == 0 || paused[q.Name] {
			q.LastDrainedAt = now // it is drained now, or paused: as good as drained
			continue
		}
		q.LastDrainedAt = drained[q.Name]
		if seen := e.alerts.idleSeen(q.Name); seen.After(q.LastDrainedAt) {
			q.LastDrainedAt = seen
		}
		busySince := q.LastDrainedAt
		if busySince.IsZero() {
			busySince = e.alerts.watchedSince(q.Name, now)
		}
		if now.Sub(busySince) > q.AlertAfter {
			q.Alerting = true
			q.AlertingSince = busySince.Add(q.AlertAfter)
		}
	}
	return drained, nil
}

// pausedSet reads the paused queues, and remembers them for
// recordDrains.
func (e *Engine) pausedSet(ctx context.Context) (map[string]bool, error) {
	ps, err := e.Paused(ctx)
	if err != nil {
		return nil, err
	}
	paused := make(map[string]bool, len(ps))
	for _, p := range ps {
		paused[p.Queue] = true
	}
	e.alerts.mu.Lock()
	e.alerts.paused = paused
	e.alerts.mu.Unlock()
	return paused, nil
}

// watchQueues is the sweep's look at the queues: one read of their stats,
// when a depth sample is due (depth.go) or a queue is watched for
// alerting. It takes the depth sample, records drains as the store needs
// them, and logs each queue entering or leaving the alerting state, once.
//
// Between depth samples a watched queue needs only to be known empty or
// not, so the sweep first asks just that (watchBusy), at a cost that does
// not grow with the queues' depth: counting a million queued jobs every
// second took a quarter of a core (docs/BENCHMARKS.md). It reads the
// counts only when a queue starts or stops alerting, for the log line
// and the webhook.
func (e *Engine) watchQueues(ctx context.Context) error {
	now := e.now()
	watching, depthDue := e.watchingAny(), e.depthDue(now)
	if !watching && !depthDue {
		return nil
	}
	if !depthDue {
		settled, err := e.watchBusy(ctx, now)
		if err != nil {
			return fmt.Errorf("watch queues: %w", err)
		}
		if settled {
			return nil
		}
	}
	stats, drained, err := e.queueStats(ctx, now)
	if err != nil {
		return fmt.Errorf("watch queues: %w", err)
	}
	e.recordDepth(now, stats)
	if !watching {
		return nil
	}
	if err := e.recordDrains(ctx, now, stats, drained); err != nil {
		return fmt.Errorf("watch queues: %w", err)
	}
	alerting := map[string]QueueStats{}
	for _, q := range stats {
		if q.Alerting {
			alerting[q.Name] = q
		}
	}

	e.alerts.mu.Lock()
	defer e.alerts.mu.Unlock()
	webhook := e.rules.Load().AlertWebhook
	byName := map[string]QueueStats{}
	for _, q := range stats {
		byName[q.Name] = q
	}
	var errs []error
	for name, q := range alerting {
		if e.alerts.on[name] {
			continue
		}
		changed, err := e.announce(ctx, webhook, q, now)
		if err != nil {
			errs = append(errs, err)
			delete(alerting, name) // not recorded: try again at the next sweep
			continue
		}
		if changed {
			attrs := []any{"queue", name, "alert_after", q.AlertAfter, "queued", q.Queued, "running", q.Running}
			if !q.LastDrainedAt.IsZero() { // never seen drained: left out, as in the webhook's body
				attrs = append(attrs, "last_drained_at", q.LastDrainedAt)
			}
			e.log.Warn("queue alerting: unfinished work has not drained for longer than alert_after", attrs...)
		}
	}
	for name := range e.alerts.on {
		if _, still := alerting[name]; !still {
			q := byName[name]
			q.Name, q.Alerting = name, false
			changed, err := e.announce(ctx, webhook, q, now)
			if err != nil {
				errs = append(errs, err)
				alerting[name] = q // not recorded: try again at the next sweep
				continue
			}
			if changed {
				e.log.Info("queue no longer alerting", "queue", name)
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
	for name := range e.alerts.idle {
		if e.rules.Load().Queues[name].AlertAfter <= 0 {
			delete(e.alerts.idle, name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("watch queues: %w", err)
	}
	return nil
}

// watchBusy judges the watched queues from whether each holds unfinished
// work (store.Store.BusyQueues) and, if none starts or stops alerting,
// records their drains and reports settled. Otherwise it changes nothing
// and the caller reads the full stats.
func (e *Engine) watchBusy(ctx context.Context, now time.Time) (settled bool, err error) {
	rules := e.rules.Load()
	var watched []string
	for name, q := range rules.Queues {
		if q.AlertAfter > 0 {
			watched = append(watched, name)
		}
	}
	busy, err := e.store.BusyQueues(ctx, watched)
	if err != nil {
		return false, fmt.Errorf("read which queues are busy: %w", err)
	}
	stats := make([]QueueStats, len(watched))
	for i, name := range watched {
		stats[i].Name = name
		if slices.Contains(busy, name) {
			// "Some": judgeAlerts and recordDrains ask only whether a
			// queue is empty.
			stats[i].Queued = 1
		}
	}
	drained, err := e.judgeAlerts(ctx, now, rules, stats)
	if err != nil {
		return false, err
	}
	e.alerts.mu.Lock()
	changed := false
	on := 0
	for _, q := range stats {
		changed = changed || q.Alerting != e.alerts.on[q.Name]
		if q.Alerting {
			on++
		}
	}
	changed = changed || on != len(e.alerts.on) // an alert to end: its queue is no longer watched
	e.alerts.mu.Unlock()
	if changed {
		return false, nil
	}
	return true, e.recordDrains(ctx, now, stats, drained)
}

// announce records q's change of alerting in the store and, if this
// call is the one that changed it (changed), posts it to the webhook.
// Replicas each see a queue start or stop alerting, in their own sweeps;
// the store tells exactly one of them that the record changed, so the
// webhook hears each episode's start and end once (see
// store.Store.SetAlerting), and the cluster's log says it once: the
// caller logs only a change.
func (e *Engine) announce(ctx context.Context, webhook string, q QueueStats, now time.Time) (changed bool, err error) {
	changed, err = e.store.SetAlerting(ctx, q.Name, q.Alerting, now)
	if err != nil {
		return false, fmt.Errorf("record queue %s alerting: %w", q.Name, err)
	}
	switch {
	case !changed || webhook == "":
	case e.cfg.Alerts == nil:
		e.log.Warn("alert_webhook is set but this engine has no jobs.Config.Alerts to send with: the change is not posted",
			"queue", q.Name, "alerting", q.Alerting)
	default:
		e.cfg.Alerts.SendAlert(webhook, alertChange(q, now))
	}
	return changed, nil
}

// recordDrains remembers the watched queues that stats show empty at now
// and writes to the store what it must know (see the top of this file):
// the last empty sighting of a queue busy again, and "empty now" for the
// empty queues once a stored drain is older than its drainRefresh.
// drained is the store's drains, as read for stats.
func (e *Engine) recordDrains(ctx context.Context, now time.Time, stats []QueueStats, drained map[string]time.Time) error {
	writes := map[time.Time][]string{}
	var empty []string
	refresh := false
	e.alerts.mu.Lock()
	for _, q := range stats {
		switch {
		case q.AlertAfter <= 0:
		case q.Queued+q.Running == 0 || e.alerts.paused[q.Name]:
			if e.alerts.idle == nil {
				e.alerts.idle = map[string]time.Time{}
			}
			e.alerts.idle[q.Name] = now
			empty = append(empty, q.Name)
			refresh = refresh || now.Sub(drained[q.Name]) >= drainRefresh(q.AlertAfter)
		default:
			seen, ok := e.alerts.idle[q.Name]
			switch {
			case !ok:
			case seen.After(drained[q.Name]):
				writes[seen] = append(writes[seen], q.Name)
			default: // another replica stored a later drain
				delete(e.alerts.idle, q.Name)
			}
		}
	}
	e.alerts.mu.Unlock()
	if refresh {
		writes[now] = append(writes[now], empty...)
	}
	return e.writeDrains(ctx, writes)
}

// writeDrains stores each group of queues as drained at its time, and
// forgets the sightings stored.
func (e *Engine) writeDrains(ctx context.Context, writes map[time.Time][]string) error {
	for t, queues := range writes {
		if err := e.store.MarkDrained(ctx, queues, t); err != nil {
			return fmt.Errorf("record drained queues: %w", err)
		}
		e.alerts.stored(queues, t)
	}
	return nil
}

// storeIdleSightings writes every drain this engine saw and the store has
// not been told: Run calls it as it ends, so that a stop loses nothing
// of when queues last drained.
func (e *Engine) storeIdleSightings() {
	writes := map[time.Time][]string{}
	e.alerts.mu.Lock()
	for q, t := range e.alerts.idle {
		writes[t] = append(writes[t], q)
	}
	e.alerts.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.writeDrains(ctx, writes); err != nil {
		e.log.Warn("could not record when queues last drained before stopping", "err", err)
	}
}

// AlertSender delivers a queue's alert changes to the webhook of the
// rules (Rules.AlertWebhook); Config.Alerts holds it. Package alerthook's
// *Hook is one: a JSON POST per change, retried, in order.
type AlertSender interface {
	// SendAlert hands over one change for webhook and returns at once:
	// the sweep calls it and must never wait for the receiver.
	SendAlert(webhook string, c AlertChange)
}

// AlertChange is a queue starting or ending an alert, as the sweep saw
// it. Each episode's start and end reach an AlertSender once across
// replicas (see announce).
type AlertChange struct {
	Queue    string
	Alerting bool      // true: starting; false: ending
	At       time.Time // when the sweep saw the change
	// LastDrainedAt is when the queue last drained; zero: never seen.
	LastDrainedAt time.Time
	// AlertAfter is the queue's alert_after; 0 when it was removed
	// (which ends the alert).
	AlertAfter      time.Duration
	Queued, Running int64
}

// alertChange is q's change, seen at now.
func alertChange(q QueueStats, now time.Time) AlertChange {
	return AlertChange{Queue: q.Name, Alerting: q.Alerting, At: now, LastDrainedAt: q.LastDrainedAt,
		AlertAfter: max(q.AlertAfter, 0), Queued: q.Queued, Running: q.Running}
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
