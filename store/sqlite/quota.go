package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Quotas: a submission under a tenant's max_queued counts the tenant's
// jobs not yet running, in the write that inserts (CreateJobsWithin).
// The count costs the writer about 0.1 µs a job counted, and the writer
// is every write's: a tenant with a million jobs waiting under a larger
// bound held every other write of the server 100 ms at each of its
// submissions. So a count that finds many leaves a mark instead of
// being made again at every submission.
//
// A mark (quota_marks, migration 25) says: when it was made, the tenant
// had at most unfinished jobs not ended, and the last job stored had
// seq after_seq. A job of the tenant that is not yet running now was
// either one of those (its seq is at most after_seq) or stored since
// (its seq is greater: seq is AUTOINCREMENT, never reused, and the mark
// is written in the transaction that read it, so a rolled-back batch
// takes its mark with it). The one way for a job to come back from its
// end is a retry, and every write that takes an ended job back deletes
// its tenant's mark (forgetQuotaMark). So unfinished plus the jobs not
// yet running stored since bounds the count from above, and a
// submission that fits under the bound with it fits under the exact
// count too: it is let through after a seek of the jobs stored since
// (checkQuotaMarked), and the mark moves up to now (those stored since
// and not yet ended are added, after_seq becomes the last seq). Only a
// submission that does not fit counts exactly, as without a mark, and
// only an exact count refuses, so the refusal's count is the tenant's
// real one. A mark only grows between exact counts (the jobs that ended
// since are still in it), so a tenant far below its bound counts again
// once every so many jobs it submits, and one near its bound at every
// submission, as it did before.

// markFrom is the smallest exact count that leaves a mark: below it the
// count costs less than keeping the mark.
const markFrom = 1000

const (
	// readMark reads a tenant's mark.
	readMark = `SELECT unfinished, after_seq FROM quota_marks WHERE tenant = ?`
	// queuedSince counts, up to a limit, a tenant's jobs not yet running
	// stored after a seq: queuedCount's seeks of jobs_tenant_queued,
	// each starting past the seq (the index's entries are in seq order
	// within a tenant and state).
	queuedSince = `SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_tenant_queued
	WHERE tenant = ? AND (state = 'pending' OR state = 'waiting' OR state = 'queued') AND seq > ? LIMIT ?)`
	// runningSince counts a tenant's RUNNING jobs stored after a seq
	// (jobs_running_tenant; seq 0 counts them all).
	runningSince = `SELECT count(*) FROM jobs INDEXED BY jobs_running_tenant
	WHERE tenant = ? AND state = 'running' AND seq > ?`
	// lastSeq is the seq of the last job stored, 0 before the first.
	lastSeq = `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0)`
	// writeMark stores a tenant's mark.
	writeMark = `INSERT INTO quota_marks (tenant, unfinished, after_seq) VALUES (?, ?, ?)
	ON CONFLICT (tenant) DO UPDATE SET unfinished = excluded.unfinished, after_seq = excluded.after_seq`
)

// checkQuota counts, in tx, the jobs not yet running of each tenant of
// charges, up to its bound plus one, and returns the refusal of the
// first that has no room for its charge (store.QuotaCharge.Refusal).
// marked: a charge may pass on its tenant's mark (checkQuotaMarked), as
// a submission's may; a retry's counts exactly.
func (s *Store) checkQuota(ctx context.Context, tx *sql.Tx, charges []store.QuotaCharge, marked bool) error {
	for _, c := range charges {
		had := false
		if marked {
			var ok bool
			var err error
			if ok, had, err = checkQuotaMarked(ctx, tx, c); err != nil {
				return fmt.Errorf("count the jobs of tenant %s not yet running: %w", c.Tenant, classify(err))
			}
			if ok {
				continue
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, queuedCount, c.Tenant, c.MaxQueued+1).Scan(&n); err != nil {
			return fmt.Errorf("count the jobs of tenant %s not yet running: %w", c.Tenant, classify(err))
		}
		if err := c.Refusal(n); err != nil {
			return err
		}
		if marked && (n >= markFrom || had) {
			if err := markQuota(ctx, tx, c.Tenant, int64(n), 0); err != nil {
				return fmt.Errorf("mark the jobs of tenant %s not yet running: %w", c.Tenant, classify(err))
			}
		}
	}
	return nil
}

// checkQuotaMarked reports whether c fits under its bound by its
// tenant's mark and the jobs stored since it; if so, it moves the mark
// up to now. ok is false without a mark (had false), or when c does not
// fit by it.
func checkQuotaMarked(ctx context.Context, tx *sql.Tx, c store.QuotaCharge) (ok, had bool, err error) {
	var unfinished, after int64
	err = tx.QueryRowContext(ctx, readMark, c.Tenant).Scan(&unfinished, &after)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	room := int64(c.MaxQueued) - unfinished - int64(c.Adding)
	if room < 0 {
		return false, true, nil
	}
	var queued int64
	if err := tx.QueryRowContext(ctx, queuedSince, c.Tenant, after, room+1).Scan(&queued); err != nil {
		return false, true, err
	}
	if queued > room {
		return false, true, nil
	}
	return true, true, markQuota(ctx, tx, c.Tenant, unfinished+queued, after)
}

// markQuota writes tenant's mark: unfinished, plus its RUNNING jobs
// stored after seq after, at the last seq.
func markQuota(ctx context.Context, tx *sql.Tx, tenant string, unfinished, after int64) error {
	var running, last int64
	if err := tx.QueryRowContext(ctx, runningSince, tenant, after).Scan(&running); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, lastSeq).Scan(&last); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, writeMark, tenant, unfinished+running, last)
	return err
}

// forgetQuotaMark deletes the mark of next's tenant if the write of old
// as next takes an ended job back (a retry): such a job is in no mark's
// count. It runs before the write, as deleting a mark is never wrong.
func forgetQuotaMark(ctx context.Context, tx *sql.Tx, old, next jobtype.Job) error {
	if !old.State.Terminal() || next.State.Terminal() {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM quota_marks WHERE tenant = ?", next.Tenant); err != nil {
		return fmt.Errorf("update job %s: forget its tenant's quota mark: %w", old.ID, classify(err))
	}
	return nil
}
