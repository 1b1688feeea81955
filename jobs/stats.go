package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// CountByState returns how many stored jobs are in each state (absent:
// none), for metrics and queue summaries.
func (e *Engine) CountByState(ctx context.Context) (map[store.State]int64, error) {
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
}

// Waiting reports whether a ready job waits in the queue.
func (q QueueStats) Waiting() bool { return !q.OldestReadyRunAt.IsZero() }

// QueueStats returns every queue that has a QUEUED or RUNNING job, and
// the default queue always (with zero counts when it is idle), sorted by
// name. Queues are only names on jobs until queue configuration exists;
// configured queues will then be listed even when idle.
func (e *Engine) QueueStats(ctx context.Context) ([]QueueStats, error) {
	now := e.now()
	stored, err := e.store.QueueStats(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
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
		seenDefault = seenDefault || s.Name == DefaultQueue
		stats = append(stats, q)
	}
	if !seenDefault {
		stats = append(stats, QueueStats{QueueStats: store.QueueStats{Name: DefaultQueue}})
		slices.SortFunc(stats, func(a, b QueueStats) int { return strings.Compare(a.Name, b.Name) })
	}
	return stats, nil
}
