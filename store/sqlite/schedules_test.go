package sqlite

import (
	"strings"
	"testing"
)

// TestScheduleQueriesSeekTheJobsByID: a tick reads every schedule (a
// small table) and each latest run's job by its id, never scanning the
// jobs; the trigger that records a run's end finds its schedule by the
// job id in schedules_job, so ending any job costs one index seek more.
func TestScheduleQueriesSeekTheJobsByID(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	for _, q := range []struct{ name, query, want string }{
		{"the tick's read", scheduleStates, "SEARCH j USING INDEX sqlite_autoindex_jobs_1 (id=?)"},
		{"the trigger's update", `UPDATE schedules SET ended_at = 1, ended_state = 'succeeded' WHERE job_id = 'j' AND ended_at IS NULL`,
			"SEARCH schedules USING INDEX schedules_job (job_id=?)"},
	} {
		plan := explain(t, s.read, q.query)
		joined := strings.Join(plan, "\n")
		if !strings.Contains(joined, q.want) || strings.Contains(joined, "SCAN j\n") || strings.HasSuffix(joined, "SCAN j") {
			t.Errorf("%s: plan\n%s\nwant %q and no scan of the jobs", q.name, joined, q.want)
		}
	}
}
