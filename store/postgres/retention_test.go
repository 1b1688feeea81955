package postgres

import (
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// The retention sweep's pick seeks jobs_finished, and never scans the
// table, when most of it is ended jobs a long retention keeps (the
// sweep runs every second on every replica, and finds nothing to delete
// most of the time): 200,000 of them, where the pick as one condition
// with an OR read none of jobs_finished (an outside probe's sweep took
// 107 to 255 ms at 690,000 rows), with statistics that know them
// (ANALYZE) and with statistics that have never seen them, with a plan
// for its arguments and a generic one.
func TestTheRetentionSweepSeeksTheEndedJobsIndex(t *testing.T) {
	s := openURL(t, pgtest.URL(t))
	exec := execer(t, s)
	exec("ALTER TABLE jobs SET (autovacuum_enabled = false)")
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, finished_at, worker_id, lease_id)
		SELECT 'done-'||i, 'acme', 'k', 'q', 'succeeded', 3, 100, '', 1, 1, '', $1::timestamptz,
			$1::timestamptz, $1::timestamptz + i * interval '1 ms', '', '' FROM generate_series(1, 200000) AS i`, t0)
	exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
			unique_key, created_at, run_at, worker_id, lease_id)
		SELECT 'queued-'||i, 'acme', 'k', 'q', 'queued', 1, 0, '', 0, 1, '', $1::timestamptz,
			$1::timestamptz, '', '' FROM generate_series(1, 1000) AS i`, t0)
	before := micro(t0.Add(-24 * time.Hour)) // nothing ended before it
	check := func(t *testing.T) {
		for _, generic := range []bool{false, true} {
			plan, _ := explainPrepared(t, s, retentionPick, []any{before, int64(deleteBatch)}, generic)
			seeks := 0
			var walk func(n planNode)
			walk = func(n planNode) {
				if n.RelationName == "jobs" && n.IndexName == "" {
					t.Errorf("generic plan %v: a %s of jobs, in plan:\n%+v", generic, n.NodeType, plan)
				}
				if n.IndexName == "jobs_finished" {
					seeks++
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(plan)
			if seeks < 2 {
				t.Errorf("generic plan %v seeks jobs_finished %d times, want each half to:\n%+v", generic, seeks, plan)
			}
		}
	}
	t.Run("stale statistics", check)
	exec("ANALYZE jobs")
	t.Run("after analyze", check)
}
