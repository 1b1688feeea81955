package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Rate limits. A rate-limited queue (store.QueueLimit.Rate) keeps a row
// in queue_starts for each job claimed from it, with the claim's time.
// The ruled pick gives the queue room for its limit less its rows in the
// window (now - Per, now], and the claim statement writes a row for each
// job it takes and deletes the rows that have left the window
// (claimRated). Claims from such a queue hold its advisory lock
// (lockKeys) while they count and write, so replicas count one after the
// other and the limit holds across the cluster.

// RateWindows implements store.Store: per queue, a count of its rows in
// the window (at most Limit of them read) and, at the limit, the time of
// the row whose leaving makes room.
func (s *Store) RateWindows(ctx context.Context, now time.Time, rates map[string]jobtype.Rate) (map[string]store.RateWindow, error) {
	out := make(map[string]store.RateWindow, len(rates))
	for queue, rate := range rates {
		if rate.IsZero() {
			continue
		}
		from := micro(now).Add(-rate.Per)
		if rate.PerTenant {
			w, err := s.perTenantWindow(ctx, queue, from, rate)
			if err != nil {
				return nil, err
			}
			out[queue] = w
			continue
		}
		var w store.RateWindow
		var held *time.Time
		// The row that leaves Limit-1 after it: the (n-Limit+1)-th of
		// the n in the window, when n has reached Limit.
		err := s.pool.QueryRow(ctx, `WITH w AS (SELECT at FROM queue_starts
				WHERE queue = $1 AND at > $2 ORDER BY queue, at)
			SELECT least((SELECT count(*) FROM w), $3::int),
				(SELECT at FROM w ORDER BY at OFFSET greatest((SELECT count(*) FROM w) - $3::int, 0) LIMIT 1)`, queue, from, rate.Limit).Scan(&w.Started, &held)
		if err != nil {
			return nil, fmt.Errorf("rate of %s: %w", queue, classify(err))
		}
		if w.Started >= rate.Limit && held != nil {
			w.HeldUntil = held.Add(rate.Per)
		}
		out[queue] = w
	}
	return out, nil
}

// perTenantWindow is RateWindows' window of a queue whose rate is kept
// per tenant: its rows in the window, in (queue, tenant, at) order
// (store.PerTenantWindow).
func (s *Store) perTenantWindow(ctx context.Context, queue string, from time.Time, rate jobtype.Rate) (store.RateWindow, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant, at FROM queue_starts WHERE queue = $1 AND at > $2
		ORDER BY queue, tenant, at`, queue, from)
	if err != nil {
		return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
	}
	defer rows.Close()
	starts := map[string][]time.Time{}
	for rows.Next() {
		var (
			tenant string
			at     time.Time
		)
		if err := rows.Scan(&tenant, &at); err != nil {
			return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
		}
		starts[tenant] = append(starts[tenant], at.UTC())
	}
	if err := rows.Err(); err != nil {
		return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
	}
	return store.PerTenantWindow(starts, rate), nil
}
