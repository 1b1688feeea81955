package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Rate limits. A rate-limited queue (store.QueueLimit.Rate) keeps a row
// in queue_starts for each job claimed from it, with the claim's time.
// The ruled pick offers the queue only while its rows in the window
// (now - Per, now] number fewer than Limit, and claimRuled writes each
// claim's row before it picks again, so one claim of many jobs stops at
// the limit too. The writer runs one claim at a time, so the count is
// exact. Rows that left the window more than store.StartsKept ago are
// deleted as claims record new ones.

// recordStart notes one claim of tenant's job from queue at now and
// drops the queue's rows that left its window more than
// store.StartsKept ago.
func recordStart(ctx context.Context, tx *sql.Tx, queue, tenant string, now time.Time, rate jobtype.Rate) error {
	at := toMicro(now)
	if _, err := tx.ExecContext(ctx, `DELETE FROM queue_starts WHERE queue = ? AND at <= ?`, queue, at-(rate.Per+store.StartsKept).Microseconds()); err != nil {
		return fmt.Errorf("claim job: rate of %s: %w", queue, classify(err))
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO queue_starts (queue, tenant, at) VALUES (?, ?, ?)`, queue, tenant, at); err != nil {
		return fmt.Errorf("claim job: rate of %s: %w", queue, classify(err))
	}
	return nil
}

// RateWindows implements store.Store: per queue, a count of its rows in
// the window (at most Limit of them read) and, at the limit, the time of
// the row whose leaving makes room.
func (s *Store) RateWindows(ctx context.Context, now time.Time, rates map[string]jobtype.Rate) (map[string]store.RateWindow, error) {
	out := make(map[string]store.RateWindow, len(rates))
	for queue, rate := range rates {
		if rate.IsZero() {
			continue
		}
		from := toMicro(now) - rate.Per.Microseconds()
		if rate.PerTenant {
			w, err := s.perTenantWindow(ctx, queue, from, rate)
			if err != nil {
				return nil, err
			}
			out[queue] = w
			continue
		}
		var w store.RateWindow
		err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM queue_starts
			WHERE queue = ? AND at > ? LIMIT ?)`, queue, from, rate.Limit).Scan(&w.Started)
		if err != nil {
			return nil, fmt.Errorf("rate of %s: %w", queue, classify(err))
		}
		if w.Started >= rate.Limit {
			// The window has Limit rows or more: room comes when the one
			// that leaves Limit-1 behind it is Per old.
			var started, inWindow int64
			err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM queue_starts WHERE queue = ? AND at > ?`, queue, from).Scan(&inWindow)
			if err == nil {
				err = s.read.QueryRowContext(ctx, `SELECT at FROM queue_starts WHERE queue = ? AND at > ?
					ORDER BY at LIMIT 1 OFFSET ?`, queue, from, inWindow-int64(rate.Limit)).Scan(&started)
			}
			if err != nil {
				return nil, fmt.Errorf("rate of %s: %w", queue, classify(err))
			}
			w.HeldUntil = fromMicro(started).Add(rate.Per)
		}
		out[queue] = w
	}
	return out, nil
}

// perTenantWindow is RateWindows' window of a queue whose rate is kept
// per tenant: its rows in the window, read in (queue, tenant, at) order
// (store.PerTenantWindow).
func (s *Store) perTenantWindow(ctx context.Context, queue string, from int64, rate jobtype.Rate) (store.RateWindow, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT tenant, at FROM queue_starts INDEXED BY queue_starts_queue_tenant_at
		WHERE queue = ? AND at > ? ORDER BY tenant, at`, queue, from)
	if err != nil {
		return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
	}
	defer rows.Close()
	starts := map[string][]time.Time{}
	for rows.Next() {
		var (
			tenant string
			at     int64
		)
		if err := rows.Scan(&tenant, &at); err != nil {
			return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
		}
		starts[tenant] = append(starts[tenant], fromMicro(at))
	}
	if err := rows.Err(); err != nil {
		return store.RateWindow{}, fmt.Errorf("rate of %s: %w", queue, classify(err))
	}
	return store.PerTenantWindow(starts, rate), nil
}
