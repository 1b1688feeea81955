package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// CountByState returns how many stored jobs are in each state (absent:
// none), for metrics and queue summaries.
func (e *Engine) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	counts, err := e.store.CountByState(ctx)
	if err != nil {
		return nil, wrap("count", "", err)
	}
	return counts, nil
}

// QueueStats is one queue's unfinished work as of the engine's clock.
type QueueStats struct {
	store.QueueStats
	// OldestQueuedAge is how long the longest waiting ready job has been
	// ready: now minus OldestReadyRunAt. It is zero, and means nothing,
	// when OldestReadyRunAt is zero (nothing waits).
	OldestQueuedAge time.Duration
	// AlertAfter is the queue's alert_after (QueueRules); zero: the
	// queue is not watched, and the two fields below stay zero.
	AlertAfter time.Duration
	// LastDrainedAt is when the queue last had no unfinished work: now
	// when it has none, else as the sweep last recorded it; zero: never
	// seen drained.
	LastDrainedAt time.Time
	// Alerting: unfinished work has not drained for longer than
	// AlertAfter (see alerts.go).
	Alerting bool
	// AlertingSince is when the queue began alerting: when its work
	// started to wait (its last drain, or when this engine began to
	// watch it) plus AlertAfter. Zero unless Alerting.
	AlertingSince time.Time
	// Serial, MaxRunning and MaxRunningPerTenant are the queue's claim
	// rules (QueueRules); a queue the rules do not declare is parallel
	// and unbounded. A serial queue's MaxRunning is 0 (one job per
	// tenant at a time) or 1, its MaxRunningPerTenant 0 or 1, which mean
	// the same.
	Serial              bool
	MaxRunning          int
	MaxRunningPerTenant int
	// Pools are the pools the queue's running jobs hold units of, in the
	// order the rules name them.
	Pools []PoolUse
	// DepthHistory is the queue's depth over the last DepthWindow, oldest
	// first, one sample per Config.DepthInterval as the sweep took them
	// (see depth.go), and last its depth as of this answer. Only
	// Engine.QueueStats fills it.
	DepthHistory []DepthSample
}

// PoolUse is a pool as ListQueues shows it.
type PoolUse struct {
	Name  string
	Units int   // the pool's size
	InUse int64 // RUNNING jobs of every queue that uses the pool
}

// Waiting reports whether a ready job waits in the queue.
func (q QueueStats) Waiting() bool { return !q.OldestReadyRunAt.IsZero() }

// QueueStats returns every queue that has a QUEUED or RUNNING job, every
// queue the rules declare, and the default queue always (with zero counts
// when idle), sorted by name, with their alerting state and depth history.
func (e *Engine) QueueStats(ctx context.Context) ([]QueueStats, error) {
	now := e.now()
	stats, _, err := e.queueStats(ctx, now)
	if err != nil {
		return nil, err
	}
	for i := range stats {
		q := &stats[i]
		q.DepthHistory = e.depthHistoryOf(q.Name, DepthSample{At: now, Queued: q.Queued, Running: q.Running})
	}
	return stats, nil
}

// queueStats is QueueStats without the depth history, from one read of
// the store's queue stats; it also returns the drains as stored (nil
// when no queue is watched).
func (e *Engine) queueStats(ctx context.Context, now time.Time) ([]QueueStats, map[string]time.Time, error) {
	stored, err := e.store.QueueStats(ctx, now)
	if err != nil {
		return nil, nil, fmt.Errorf("queue stats: %w", err)
	}
	stats := make([]QueueStats, 0, len(stored)+1)
	seenDefault := false
	for _, s := range stored {
		q := QueueStats{QueueStats: s}
		if q.Waiting() {
			// The store compared RunAt with this same now, so the age is
			// never negative.
			q.OldestQueuedAge = now.Sub(s.OldestReadyRunAt)
		}
		seenDefault = seenDefault || s.Name == jobtype.DefaultQueue
		stats = append(stats, q)
	}
	listed := map[string]bool{}
	for _, q := range stats {
		listed[q.Name] = true
	}
	// One reading of the rules for the whole answer, so a reload part way
	// cannot list a queue under one config and judge it under another.
	rules := e.rules.Load()
	for _, name := range rules.namedQueues() {
		if !listed[name] {
			listed[name] = true
			stats = append(stats, QueueStats{QueueStats: store.QueueStats{Name: name}})
		}
	}
	slices.SortFunc(stats, func(a, b QueueStats) int { return strings.Compare(a.Name, b.Name) })
	addClaimRules(stats, rules)
	drained, err := e.judgeAlerts(ctx, now, rules, stats)
	if err != nil {
		return nil, nil, fmt.Errorf("queue stats: %w", err)
	}
	return stats, drained, nil
}

// addClaimRules fills in each queue's mode, limits and pools from rules. A
// pool's use is counted from the same stats, so it agrees with their
// Running: every queue that uses a pool is declared, hence listed.
func addClaimRules(stats []QueueStats, rules *ruleSet) {
	inUse := map[string]int64{}
	for _, q := range stats {
		for _, pool := range rules.Queues[q.Name].Uses {
			inUse[pool] += q.Running
		}
	}
	for i := range stats {
		qr := rules.Queues[stats[i].Name]
		stats[i].Serial = qr.Serial
		stats[i].MaxRunning = qr.MaxRunning
		stats[i].MaxRunningPerTenant = qr.MaxRunningPerTenant
		for _, pool := range qr.Uses {
			stats[i].Pools = append(stats[i].Pools, PoolUse{Name: pool, Units: rules.Pools[pool], InUse: inUse[pool]})
		}
	}
}
