package sqlite

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMigrationKeepsJobsAndTheirIndexes opens a file left at schema
// version 14 (before the batch column rebuilt the table) that holds jobs,
// logs and a running attempt, and checks that the migration keeps every
// one of them, and every index and trigger of the table.
func TestMigrationKeepsJobsAndTheirIndexes(t *testing.T) {
	path := tempPath(t)
	db := rawDB(t, path)
	for i, m := range migrations[:14] {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
	}
	if _, err := db.Exec("PRAGMA user_version = 14"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt,
		max_attempts, unique_key, created_at, started_at, updated_at, finished_at, run_at, worker_id, lease_id,
		lease_expires_at, change_seq, priority, history, payload)
		VALUES ('old-1', 'acme', 'email', 'default', 'running', 2, 10, 'half', 1, 3, 'k', 1, 2, 3, 0, 1, 'w', 'l', 9, 4, 3,
		'[{"attempt":1,"state":"queued"}]', '{"to":"a"}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO job_log_heads (job_id, first_seq, last_seq, bytes) VALUES ('old-1', 1, 1, 5);
		INSERT INTO job_logs (job_id, seq, at, stream, attempt, text) VALUES ('old-1', 1, 2, 1, 1, 'hello')`); err != nil {
		t.Fatal(err)
	}
	count := func(what string) int {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE tbl_name = 'jobs' AND type = ?", what).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	indexes, triggers := count("index"), count("trigger")
	db.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}

	s := openTemp(t, path)
	defer s.Close()
	j, err := s.GetJob(t.Context(), "old-1")
	if err != nil {
		t.Fatalf("get the job stored before the migration: %v", err)
	}
	if got := fmt.Sprintf("%s %s %d %q %d %s %d %q", j.State, j.Payload, j.Priority, j.UniqueKey, j.Version, j.WorkerID, len(j.History), j.Batch); got !=
		`running {"to":"a"} 3 "k" 2 w 1 ""` {
		t.Errorf("job after the migration: %s", got)
	}
	db = rawDB(t, path)
	// Every index and trigger is back, with jobs_batch,
	// jobs_dependency_ended and jobs_schedule_run_retried beside them,
	// and the indexes of the steps after 15, less those they dropped.
	later := 0
	for _, m := range migrations[15:] {
		later += strings.Count(m, " ON jobs (") - strings.Count(m, "DROP INDEX ")
	}
	if got := count("index"); got != indexes+1+later {
		t.Errorf("%d indexes on jobs after the migration, want %d", got, indexes+1+later)
	}
	if got := count("trigger"); got != triggers+2 {
		t.Errorf("%d triggers on jobs after the migration, want %d", got, triggers+2)
	}
	var seq int64
	if err := db.QueryRow("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").Scan(&seq); err != nil || seq < 1 {
		t.Errorf("the AUTOINCREMENT high-water mark after the migration: %d, %v", seq, err)
	}
}
