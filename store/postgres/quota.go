package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Quotas: a creation under a tenant's max_queued takes the tenant's lock
// and counts its jobs not yet running (checkQuota, jobs.go). The count
// reads an index entry a job, about 0.1 ms a thousand, with the lock
// held, so a tenant with 92,000 jobs waiting under a larger bound spent
// 9.7 ms a submission and, as its submissions take turns on the lock
// across the cluster, got about 44 through a second. So a count that
// finds many leaves a mark instead of being made again at every
// creation.
//
// A tenant's mark (quota_marks, migration 18) is a number of its jobs
// that is at least how many of them have not ended. An exact count sets
// it (the jobs not yet running, and the RUNNING ones, read in one
// statement, so that no job moving between the two is missed), and every
// write that adds an unfinished job of the tenant under its lock adds to
// it: a creation that passes on it (its jobs not yet running: the
// engine creates no job RUNNING), a retry of an ended job
// (bumpQuotaMark), a schedule's run. The last two need no count of
// their own unless the tenant is bounded, so they hold the lock shared:
// an exact count, which holds it alone, still comes before or after
// each of them, and a bulk retry's jobs share commits rather than take
// turns through them. Nothing takes from it: jobs that
// start stay in it, jobs that end are let be until the next exact count.
// So the mark plus a creation's jobs bounds the tenant's jobs not yet
// running after it, and a creation that fits under the bound with it
// fits under the exact count too: it passes, adding its jobs to the
// mark, in the statement that took the place of the count, without a
// round trip more. A creation that does not fit counts exactly, as
// without a mark, and only an exact count refuses, so a refusal names
// the tenant's real count. A tenant far below its bound thus counts
// once every so many jobs it submits, one near it at every submission.
//
// What the mark cannot see is a creation without the tenant's bound: on
// a replica whose configuration does not bound the tenant (replicas
// must share their tenants' bounds; a reload reaches them one by one),
// or by a release before this one during an upgrade. A process that
// has bounded a tenant and no longer does (a reload lifted it) deletes
// the tenant's mark with each of its creations (forgetQuotaMarks), and
// Open deletes every mark, so a restart or an upgrade's last replica
// starts every tenant from an exact count.

// markFrom is the smallest exact count that leaves a mark: below it the
// count costs less than keeping the mark.
const markFrom = 1000

// markedCount is a charge's check under its tenant's lock: the mark
// ($1's row of quota_marks) takes the charge ($2 more jobs) if it stays
// within the bound ($3), and then the statement answers passed; if not,
// with the exact count, queuedCount's walk stopped one past the bound,
// and the tenant's RUNNING jobs, read in the same snapshot: a range of
// jobs_running_tenant in tenant order, as queuedWalk is written, which
// no other index of the running jobs gives with sorts off (after an
// ANALYZE that saw none running, the planner took jobs_running_queue,
// every tenant's running jobs, for an equality). A scalar subquery of a CASE branch not taken is never run,
// so a creation that passes reads no index.
const markedCount = `WITH mark AS (UPDATE quota_marks SET unfinished = unfinished + $2
	WHERE tenant = $1 AND unfinished + $2 <= $3 RETURNING 1)
SELECT EXISTS (SELECT FROM mark),
	CASE WHEN EXISTS (SELECT FROM mark) THEN 0 ELSE (SELECT count(*) FROM (` + queuedWalk + ` LIMIT $3::bigint + 1) AS q) END,
	CASE WHEN EXISTS (SELECT FROM mark) THEN 0 ELSE (SELECT count(*) FROM (SELECT 1 FROM jobs
		WHERE tenant >= $1 AND tenant <= $1 AND state = 'running' ORDER BY tenant) AS r) END`

// quotaMark is what an exact count under a mark found, and the jobs the
// write that counted adds.
type quotaMark struct {
	tenant                  string
	queued, running, adding int
}

// writeQuotaMarks sets, in tx, the marks of the tenants whose exact count
// found markFrom or more jobs not yet running: the jobs counted, and the
// ones the write adds. A smaller count deletes the tenant's mark, which
// it did not fit under, so that the next creation counts as cheaply.
func writeQuotaMarks(ctx context.Context, tx pgx.Tx, marks []quotaMark) error {
	if len(marks) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, m := range marks {
		if m.queued >= markFrom {
			b.Queue(`INSERT INTO quota_marks (tenant, unfinished) VALUES ($1, $2)
				ON CONFLICT (tenant) DO UPDATE SET unfinished = excluded.unfinished`, m.tenant, m.queued+m.running+m.adding)
		} else {
			b.Queue(`DELETE FROM quota_marks WHERE tenant = $1`, m.tenant)
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("mark the jobs of tenants not yet running: %w", err)
	}
	return nil
}

// comesBack reports whether writing old as next takes an ended job back
// (a retry), which adds one to its tenant's unfinished jobs outside any
// creation.
func comesBack(old, next jobtype.Job) bool {
	return old.State.Terminal() && !next.State.Terminal()
}

// bumpQuotaMark adds n jobs to tenant's mark, if it has one.
const bumpQuotaMark = `UPDATE quota_marks SET unfinished = unfinished + $2 WHERE tenant = $1`

// boundedTenant notes that tenant's creations count under a bound here,
// so that a creation of its without one forgets its mark.
func (s *Store) boundedTenant(tenant string) { s.bounded.Store(tenant, true) }

// forgetQuotaMarks queues in b the deletion of the marks of the tenants
// of jobs that were bounded here before: jobs created without their
// bound now (a reload lifted it) are in no mark, and a mark left behind
// would let the bound, set again, pass on too few.
func (s *Store) forgetQuotaMarks(b *pgx.Batch, jobs []jobtype.Job, charged []string) {
	var done []string
	for _, j := range jobs {
		if _, ok := s.bounded.Load(j.Tenant); !ok || slices.Contains(charged, j.Tenant) || slices.Contains(done, j.Tenant) {
			continue
		}
		done = append(done, j.Tenant)
		b.Queue(`DELETE FROM quota_marks WHERE tenant = $1`, j.Tenant)
	}
}
