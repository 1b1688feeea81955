package sqlite

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/storetest"
)

func tempPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "jobs.db")
}

func openTemp(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t, tempPath(t)) })
}

// Two Stores of this process on one file share their listener feed and
// change sequence, as two replicas on PostgreSQL do.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		path := tempPath(t)
		return openTemp(t, path), openTemp(t, path)
	})
}

func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRow("PRAGMA " + name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

// rawDB opens the file without the store, as another process would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", dsn(path, "_txlock=immediate"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func testJob(id string) store.Job {
	now := time.Date(2030, 5, 6, 7, 8, 9, 123456000, time.UTC)
	return store.Job{
		ID: id, Tenant: "acme", Kind: "email", Queue: "default", State: store.Queued,
		Version: 1, MaxAttempts: 1, Payload: json.RawMessage(`{"to":"a@example.com"}`),
		CreatedAt: now, UpdatedAt: now, RunAt: now,
	}
}

func TestOpen(t *testing.T) {
	t.Run("a new file is created at the latest schema, durable settings on", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		for name, want := range map[string]string{
			"user_version": strconv.Itoa(len(migrations)),
			"journal_mode": "wal",
			"synchronous":  "2", // FULL: the WAL is fsynced at every commit
			"foreign_keys": "1",
			"busy_timeout": strconv.Itoa(int(busyStep.Milliseconds())),
		} {
			if got := pragma(t, s.write, name); got != want {
				t.Errorf("PRAGMA %s = %s, want %s", name, got, want)
			}
		}
		if _, err := s.read.Exec("DELETE FROM jobs"); err == nil {
			t.Error("a read connection could write")
		}
	})

	t.Run("reopening a file keeps its jobs and its schema version", func(t *testing.T) {
		path := tempPath(t)
		s := openTemp(t, path)
		want, err := s.CreateJob(t.Context(), testJob("job-1"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTemp(t, path)
		defer s.Close()
		got, err := s.GetJob(t.Context(), "job-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != want.ID || string(got.Payload) != string(want.Payload) || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("after reopen: %+v, want %+v", got, want)
		}
		if v := pragma(t, s.write, "user_version"); v != strconv.Itoa(len(migrations)) {
			t.Errorf("user_version = %s, want %d", v, len(migrations))
		}
	})

	t.Run("a file from a newer jobwatch is refused and left as it was", func(t *testing.T) {
		path := tempPath(t)
		openTemp(t, path).Close()
		db := rawDB(t, path)
		newer := len(migrations) + 1
		if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", newer)); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if !errors.Is(err, ErrSchemaTooNew) {
			t.Fatalf("err = %v, want ErrSchemaTooNew", err)
		}
		if !strings.Contains(err.Error(), strconv.Itoa(newer)) {
			t.Errorf("error %q does not name the file's version %d", err, newer)
		}
		if v := pragma(t, db, "user_version"); v != strconv.Itoa(newer) {
			t.Errorf("user_version = %s, want %d", v, newer)
		}
	})

	t.Run("a failing migration step leaves the file at its old version", func(t *testing.T) {
		path := tempPath(t)
		openTemp(t, path).Close()
		saved := migrations
		t.Cleanup(func() { migrations = saved })
		migrations = append(append([]string(nil), saved...),
			"CREATE TABLE half (a INTEGER); SELECT no_such_column FROM jobs;")
		if _, err := Open(path); err == nil {
			t.Fatal("open with a broken migration succeeded")
		}
		db := rawDB(t, path)
		if v := pragma(t, db, "user_version"); v != strconv.Itoa(len(saved)) {
			t.Errorf("user_version = %s, want %d", v, len(saved))
		}
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'").Scan(&n); err != nil || n != 0 {
			t.Errorf("the broken step's table exists (%d, %v): the migration was not atomic", n, err)
		}
	})

	t.Run("a path that cannot be opened is unavailable", func(t *testing.T) {
		_, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir", "jobs.db"))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("err = %v, want ErrUnavailable", err)
		}
	})

	t.Run("a path that is not a file is refused", func(t *testing.T) {
		for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
			if s, err := Open(p); err == nil {
				s.Close()
				t.Errorf("Open(%q) succeeded", p)
			}
		}
	})

	t.Run("a file name with URI characters is a plain file name", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "jobs?mode=memory#x%20.db")
		s := openTemp(t, path)
		if _, err := s.CreateJob(t.Context(), testJob("job-1")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the file was not created under its own name: %v", err)
		}
	})
}

func TestAnotherProcessHoldingTheWriteLock(t *testing.T) {
	path := tempPath(t)
	s, err := OpenWith(path, Config{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateJob(t.Context(), testJob("job-1")); err != nil {
		t.Fatal(err)
	}

	other := rawDB(t, path)
	lock, err := other.Begin() // BEGIN IMMEDIATE: holds the write lock
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a write fails as unavailable and writes nothing", func(t *testing.T) {
		_, err := s.CreateJob(t.Context(), testJob("job-2"))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if _, err := s.GetJob(t.Context(), "job-2"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get job-2: %v, want ErrNotFound", err)
		}
	})
	t.Run("reads go on", func(t *testing.T) {
		if _, err := s.GetJob(t.Context(), "job-1"); err != nil {
			t.Errorf("get job-1: %v", err)
		}
	})
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	t.Run("the write succeeds once the lock is released", func(t *testing.T) {
		if _, err := s.CreateJob(t.Context(), testJob("job-2")); err != nil {
			t.Errorf("create job-2: %v", err)
		}
	})
}

// The kill -9 test runs this test binary again as a child that writes
// until it is killed.
const childEnv = "JOBWATCH_SQLITE_DURABILITY_CHILD"

// durableJob is the i-th job the child writes; the parent rebuilds it to
// compare.
func durableJob(i int) store.Job {
	j := testJob(fmt.Sprintf("job-%06d", i))
	j.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"payload of job %d"}`, i, i))
	j.CreatedAt = j.CreatedAt.Add(time.Duration(i) * time.Microsecond)
	return j
}

// durableWriters is how many goroutines of the child write at once, so
// that its writes share commits (group commit) as a server's do.
const durableWriters = 8

// TestDurabilityChild is not a test on its own: it is the child process of
// TestEveryAcknowledgedWriteSurvivesKill9. durableWriters goroutines each
// create jobs (writer w the jobs w, w+durableWriters, ...); for each job a
// goroutine creates it, prints "created <i>", sets its progress and
// prints "progress <i> <version>": a line is printed only after the write
// returned nil. Every 20 jobs it prints "commits <commits> <writes>", the
// writer's counts so far.
func TestDurabilityChild(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("runs only as the child of TestEveryAcknowledgedWriteSurvivesKill9")
	}
	s, err := Open(path)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	deadline := time.Now().Add(time.Minute) // in case the parent is gone
	for w := range durableWriters {
		go func() {
			for i := w; time.Now().Before(deadline); i += durableWriters {
				if _, err := s.CreateJob(t.Context(), durableJob(i)); err != nil {
					fmt.Printf("error %v\n", err)
					os.Exit(1)
				}
				fmt.Printf("created %d\n", i)
				j, err := s.UpdateJob(t.Context(), durableJob(i).ID, func(j *store.Job) error {
					j.State, j.Percent, j.Step = store.Running, int32(i%100), fmt.Sprintf("step %d", i)
					return nil
				})
				if err != nil {
					fmt.Printf("error %v\n", err)
					os.Exit(1)
				}
				fmt.Printf("progress %d %d\n", i, j.Version)
				if i%20 == 0 {
					c := s.counts()
					fmt.Printf("commits %d %d\n", c.commits, c.writes)
				}
			}
		}()
	}
	time.Sleep(time.Until(deadline))
	os.Exit(1)
}

func TestEveryAcknowledgedWriteSurvivesKill9(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("this is the child")
	}
	path := tempPath(t)
	openTemp(t, path).Close() // the schema exists before the child starts

	cmd := exec.Command(os.Args[0], "-test.run=^TestDurabilityChild$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	const killAfter = 150 // acknowledged creates before the kill
	created := map[int]bool{}
	progress := map[int]int64{}
	var commits, writes int64
	killed := false
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		switch {
		case len(f) == 2 && f[0] == "created":
			i, _ := strconv.Atoi(f[1])
			created[i] = true
		case len(f) == 3 && f[0] == "progress":
			i, _ := strconv.Atoi(f[1])
			v, _ := strconv.ParseInt(f[2], 10, 64)
			progress[i] = v
		case len(f) == 3 && f[0] == "commits":
			commits, _ = strconv.ParseInt(f[1], 10, 64)
			writes, _ = strconv.ParseInt(f[2], 10, 64)
		default:
			t.Errorf("child said %q", lines.Text())
		}
		if !killed && len(created) >= killAfter {
			// SIGKILL: no deferred call, no Close, no flush runs in the child.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before it was killed: %v", err)
	}
	t.Logf("child killed after %d acknowledged creates and %d acknowledged updates; it had made %d writes in %d commits",
		len(created), len(progress), writes, commits)
	if writes <= commits {
		t.Errorf("the child's %d writers made %d writes in %d commits: no commit was shared, so batches were not tested",
			durableWriters, writes, commits)
	}

	s := openTemp(t, path)
	defer s.Close()
	for i := range created {
		want := durableJob(i)
		got, err := s.GetJob(t.Context(), want.ID)
		if err != nil {
			t.Errorf("acknowledged job %s: %v", want.ID, err)
			continue
		}
		if string(got.Payload) != string(want.Payload) || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("job %s: payload %s created %v, want %s %v", want.ID, got.Payload, got.CreatedAt, want.Payload, want.CreatedAt)
		}
		if v, ok := progress[i]; ok {
			if got.Version != v || got.Percent != int32(i%100) || got.State != store.Running {
				t.Errorf("job %s: version %d percent %d state %s, want the acknowledged %d, %d, running",
					want.ID, got.Version, got.Percent, got.State, v, i%100)
			}
		}
	}
	// The file is still a working store after the crash.
	if _, err := s.CreateJob(t.Context(), testJob("after-crash")); err != nil {
		t.Errorf("create after the crash: %v", err)
	}
}

// explain returns the EXPLAIN QUERY PLAN lines of query.
func explain(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// ListQueues may be polled by every open page, so its query must not
// read the table or sort: only the covering index, in index order.
func TestQueueStatsReadsOnlyAnIndex(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	plan := explain(t, s.read, queueStatsQuery, int64(0))
	joined := strings.Join(plan, "\n")
	if len(plan) != 1 || !strings.Contains(joined, "USING COVERING INDEX jobs_state_queue_run_at (state=?)") {
		t.Errorf("plan:\n%s\nwant one search of the covering index jobs_state_queue_run_at", joined)
	}
	if strings.Contains(joined, "TEMP B-TREE") {
		t.Errorf("plan sorts in a temp B-tree:\n%s", joined)
	}
}

func TestAFileAtSchemaVersion1IsUpgradedAndKeepsItsJobs(t *testing.T) {
	path := tempPath(t)
	db := rawDB(t, path)
	if _, err := db.Exec(migrations[0] + "PRAGMA user_version = 1;"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts, unique_key, created_at, started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at) VALUES ('job-1', 'acme', 'email', 'mail', 'queued', 1, 0, '', 1, 1, '', 5, 0, 5, 0, 5, '', '', 0)"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openTemp(t, path)
	defer s.Close()
	if v := pragma(t, s.write, "user_version"); v != strconv.Itoa(len(migrations)) {
		t.Errorf("user_version = %s, want %d", v, len(migrations))
	}
	stats, err := s.QueueStats(t.Context(), fromMicro(10))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.QueueStats{{Name: "mail", Queued: 1, OldestReadyRunAt: fromMicro(5)}}
	if len(stats) != 1 || stats[0] != want[0] {
		t.Errorf("queue stats = %+v, want %+v", stats, want)
	}
}

func TestUpgradingMovesPayloadAndResultLastAndKeepsJobsAndSeq(t *testing.T) {
	path := tempPath(t)
	db := rawDB(t, path)
	if _, err := db.Exec(migrations[0] + migrations[1] + "PRAGMA user_version = 2;"); err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, payload, result, attempt, max_attempts, unique_key, created_at, started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at) VALUES (?, 'acme', 'email', 'mail', 'succeeded', 3, 100, 'done', ?, '{\"sent\":1}', 1, 1, '', 5, 6, 7, 7, 5, 'w', '', 0)"
	if _, err := db.Exec(insert, "job-1", `{"to":"a@example.org"}`); err != nil {
		t.Fatal(err)
	}
	// The newest job was deleted (retention): its seq must never be
	// handed out again, also across the table's rebuild.
	if _, err := db.Exec(insert, "job-2", `{}`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DELETE FROM jobs WHERE id = 'job-2'"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openTemp(t, path)
	defer s.Close()
	j, err := s.GetJob(t.Context(), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(j.Payload) != `{"to":"a@example.org"}` || string(j.Result) != `{"sent":1}` || j.Version != 3 || j.Step != "done" {
		t.Errorf("job after the upgrade = %+v, want its payload, result, version and step kept", j)
	}
	var cols []string
	rows, err := s.read.Query("SELECT name FROM pragma_table_info('jobs') ORDER BY cid")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	// A summary list stops reading a row before payload and result, so it
	// never walks their overflow pages.
	if n := len(cols); n < 2 || cols[n-2] != "result" || cols[n-1] != "payload" {
		t.Errorf("columns = %v, want result and payload last", cols)
	}
	created, err := s.CreateJob(t.Context(), store.Job{ID: "job-3", Tenant: "acme", Kind: "email", Queue: "mail",
		State: store.Queued, Version: 1, CreatedAt: fromMicro(8), UpdatedAt: fromMicro(8), RunAt: fromMicro(8)})
	if err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := s.read.QueryRow("SELECT seq FROM jobs WHERE id = ?", created.ID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != 3 {
		t.Errorf("seq of the first job after the upgrade = %d, want 3 (after the deleted job-2's 2)", seq)
	}
}

// Every claim and every parked claimer's look runs pickQuery, so it must
// find each queue's head and count running jobs by index seeks, never
// scan the table or sort the queued jobs.
func TestClaimPlanSeeksEveryQueueHead(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	limits := map[string]store.QueueLimit{
		"index":  {MaxRunning: 1, Serial: true, HoldRetry: true},
		"readme": {MaxRunning: 8, Pools: []string{"db"}},
	}
	pools := map[string]int{"db": 4}
	tests := []struct {
		name   string
		filter store.ClaimFilter
	}{
		{"any job", store.ClaimFilter{}},
		{"some kinds", store.ClaimFilter{Kinds: []string{"a", "b"}}},
		{"one queue", store.ClaimFilter{Queues: []string{"q"}}},
		{"queues with rules and a pool", store.ClaimFilter{Limits: limits, Pools: pools}},
		{"rules, kinds and queues", store.ClaimFilter{Kinds: []string{"a"}, Queues: []string{"index", "readme"}, Limits: limits, Pools: pools}},
		{"some tenants", store.ClaimFilter{Tenants: []string{"acme", "globex"}}},
		{"a tenant and a queue", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}}},
		{"rules and tenants", store.ClaimFilter{Tenants: []string{"acme"}, Limits: limits, Pools: pools}},
		{"rules, tenants, kinds and queues", store.ClaimFilter{Tenants: []string{"acme"}, Kinds: []string{"a"}, Queues: []string{"index", "readme"}, Limits: limits, Pools: pools}},
	}
	for _, tt := range tests {
		for _, ready := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, ready %v", tt.name, ready), func(t *testing.T) {
				pick, args := pickQuery(tt.filter, ready)
				plan := explain(t, s.read, fmt.Sprintf(pick, "j.seq"), args...)
				joined := strings.Join(plan, "\n")
				for _, line := range plan {
					// Scans of the rules (json_each) and of the CTEs
					// (one row per queue) are fine; of the jobs, never.
					if f := strings.Fields(line); len(f) > 1 && f[0] == "SCAN" && (f[1] == "jobs" || f[1] == "j" || f[1] == "r") {
						t.Errorf("plan scans the jobs: %q\n%s", line, joined)
					}
				}
				if tt.filter.Limits != nil && !strings.Contains(joined, "INDEX jobs_queued_retry") {
					t.Errorf("plan:\n%s\nwant a held serial queue's retry found in jobs_queued_retry", joined)
				}
				switch {
				case tt.filter.Limits == nil:
					// No rules: one walk of an index in claim order.
					if len(plan) != 1 || !strings.Contains(joined, "INDEX jobs_state_") || strings.Contains(joined, "TEMP B-TREE") {
						t.Errorf("plan:\n%s\nwant one search of an index in claim order", joined)
					}
				case !strings.Contains(joined, "INDEX jobs_state_queue_run_at (state=? AND queue=?"):
					t.Errorf("plan:\n%s\nwant each queue's head sought in jobs_state_queue_run_at", joined)
				}
			})
		}
	}
}

// The engine reads the jobs due later once at start: a seek into the
// queued jobs in RunAt order, never a scan or a sort of them.
func TestScheduledJobsPlanSeeksTheIndex(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	plan := explain(t, s.read, scheduledJobsQuery, int64(0), 10)
	joined := strings.Join(plan, "\n")
	if len(plan) != 1 || !strings.Contains(joined, "SEARCH jobs USING INDEX jobs_state_run_at (state=? AND run_at>?)") {
		t.Errorf("plan:\n%s\nwant one search of jobs_state_run_at", joined)
	}
}

// TestRetentionDeletesABacklogInSeveralTransactions: a backlog larger
// than one batch is deleted whole, batch by batch, and only what ended
// before the cutoff.
func TestRetentionDeletesABacklogInSeveralTransactions(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	s.deleteBatch = 2
	ctx := t.Context()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	add := func(id string, state store.State, finished time.Time) {
		j := store.Job{ID: id, Tenant: "acme", Kind: "k", Queue: "default", State: state, Version: 1,
			MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0, RunAt: t0, FinishedAt: finished}
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		add(fmt.Sprintf("j_old%d", i), store.Succeeded, t0.Add(time.Hour))
	}
	add("j_recent", store.Failed, t0.Add(3*time.Hour))
	add("j_active", store.Queued, time.Time{})

	n, err := s.DeleteFinishedBefore(ctx, t0.Add(2*time.Hour))
	if err != nil || n != 5 {
		t.Fatalf("deleted %d, %v; want the 5 old jobs", n, err)
	}
	jobs, _, err := s.ListJobs(ctx, store.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, j := range jobs {
		left = append(left, j.ID)
	}
	if len(left) != 2 || !slices.Contains(left, "j_recent") || !slices.Contains(left, "j_active") {
		t.Fatalf("left %v, want j_recent and j_active", left)
	}
}
