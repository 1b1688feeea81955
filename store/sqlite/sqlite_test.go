package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
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

func testJob(id string) jobtype.Job {
	now := time.Date(2030, 5, 6, 7, 8, 9, 123456000, time.UTC)
	return jobtype.Job{
		ID: id, Tenant: "acme", Kind: "email", Queue: "default", State: jobtype.Queued,
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
		if !errors.Is(err, jobtype.ErrUnavailable) {
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
		if !errors.Is(err, jobtype.ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
		if _, err := s.GetJob(t.Context(), "job-2"); !errors.Is(err, jobtype.ErrNotFound) {
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
func durableJob(i int) jobtype.Job {
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
				j, err := s.UpdateJob(t.Context(), durableJob(i).ID, func(j *jobtype.Job) error {
					j.State, j.Percent, j.Step = jobtype.Running, int32(i%100), fmt.Sprintf("step %d", i)
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
	// A clean stop leaves nothing to warn of.
	var clean bytes.Buffer
	first, err := OpenWith(path, Config{Logger: slog.New(slog.NewTextHandler(&clean, nil))})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	if strings.Contains(clean.String(), "did not stop cleanly") {
		t.Errorf("a start after a clean stop logged %q", clean.String())
	}

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

	// The restart says so, with how many jobs the killed server left
	// RUNNING (every acknowledged update, at least, made one so).
	var logs bytes.Buffer
	s, err := OpenWith(path, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	counts, err := s.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	running := counts[jobtype.Running]
	if running < int64(len(progress)) {
		t.Errorf("%d jobs RUNNING after the restart, want at least the %d acknowledged as such", running, len(progress))
	}
	want := "level=WARN msg=\"the last server on this file did not stop cleanly (kill -9, a crash or a power cut; "
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), fmt.Sprintf(" running_jobs=%d\n", running)) {
		t.Errorf("the restart after kill -9 logged %q, want a warning that the last server did not stop cleanly, with running_jobs=%d", logs.String(), running)
	}
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
			if got.Version != v || got.Percent != int32(i%100) || got.State != jobtype.Running {
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

// BusyQueues seeks each queue it is asked of in an index of jobs by
// state and queue, reading no table row: its cost is the number of
// queues asked, not their depth.
func TestBusyQueuesSeeksEachQueue(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	plan := explain(t, s.read, busyQueuesQuery, `["a","b"]`)
	joined := strings.Join(plan, "\n")
	if !strings.Contains(joined, "SEARCH jobs EXISTS USING COVERING INDEX jobs_state_queue_run_at (state=? AND queue=?)") {
		t.Errorf("plan:\n%s\nwant a search of the covering index jobs_state_queue_run_at by state and queue", joined)
	}
	if strings.Contains(joined, "SCAN jobs") || strings.Contains(joined, "TEMP B-TREE") {
		t.Errorf("plan scans jobs or sorts:\n%s", joined)
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

	logs := &syncBuffer{}
	s, err := OpenWith(path, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := pragma(t, s.write, "user_version"); v != strconv.Itoa(len(migrations)) {
		t.Errorf("user_version = %s, want %d", v, len(migrations))
	}
	// The upgrade is in the log, from which version to which.
	if want := fmt.Sprintf("migrated the database's schema\" from_version=1 to_version=%d", len(migrations)); !strings.Contains(logs.String(), want) {
		t.Errorf("the log says %q; want it to say %q", logs.String(), want)
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
	created, err := s.CreateJob(t.Context(), jobtype.Job{ID: "job-3", Tenant: "acme", Kind: "email", Queue: "mail",
		State: jobtype.Queued, Version: 1, CreatedAt: fromMicro(8), UpdatedAt: fromMicro(8), RunAt: fromMicro(8)})
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

// Every claim and every parked claimer's look runs the pick, so it must
// find each group's first jobs and count running jobs by index seeks,
// never scan the table or sort the queued jobs, whatever the worker's
// filter, the rules and the statistics: on an empty file, on a deep one
// (SQLite never analyzes by itself, so its planner has no statistics),
// after ANALYZE, and with statistics of a small table on a deep one (an
// operator's ANALYZE long ago).
func TestClaimPlanSeeksEveryQueueHead(t *testing.T) {
	limits := map[string]store.QueueLimit{
		"index":  {MaxRunning: 1, Serial: true, HoldRetry: true},
		"readme": {MaxRunning: 8, Pools: []string{"db"}},
	}
	pools := map[string]int{"db": 4}
	perTenant := maps.Clone(limits)
	perTenant["q"] = store.QueueLimit{MaxRunning: 8, MaxRunningPerTenant: 2}
	tests := []struct {
		name   string
		filter store.ClaimFilter
		// index is the index a job is sought in, by its leading
		// columns; "" for none in particular.
		index string
	}{
		{"any job", store.ClaimFilter{}, "jobs_queued_priority (priority=?"},
		{"some kinds", store.ClaimFilter{Kinds: []string{"a", "b"}}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
		{"one queue", store.ClaimFilter{Queues: []string{"q"}}, "jobs_queued_queue (queue=? AND priority=?"},
		{"some queues", store.ClaimFilter{Queues: []string{"q", "index"}}, "jobs_queued_queue (queue=? AND priority=?"},
		{"kinds and queues", store.ClaimFilter{Kinds: []string{"a"}, Queues: []string{"q", "index"}}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
		{"queues with rules and a pool", store.ClaimFilter{Limits: limits, Pools: pools}, "jobs_queued_queue (queue=? AND priority=?"},
		{"rules and kinds", store.ClaimFilter{Kinds: []string{"a", "b"}, Limits: limits, Pools: pools}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
		{"rules, kinds and queues", store.ClaimFilter{Kinds: []string{"a"}, Queues: []string{"index", "readme"}, Limits: limits, Pools: pools}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
		{"some tenants", store.ClaimFilter{Tenants: []string{"acme", "globex"}}, "jobs_queued_priority (priority=?"},
		{"a tenant and a queue", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}}, "jobs_queued_queue_tenant (queue=? AND tenant=? AND priority=?"},
		{"a tenant's bound on its running jobs", store.ClaimFilter{TenantMaxRunning: map[string]int{"acme": 2}}, "jobs_queued_queue_tenant (queue=? AND tenant=? AND priority=?"},
		{"rules with a per-tenant bound and kinds", store.ClaimFilter{Kinds: []string{"a", "b"}, Limits: perTenant, Pools: pools}, "jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=? AND priority=?"},
		{"a tenant's bound on its running jobs and kinds", store.ClaimFilter{Kinds: []string{"a"}, TenantMaxRunning: map[string]int{"acme": 2}}, "jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=? AND priority=?"},
		{"a rate per tenant", store.ClaimFilter{Limits: map[string]store.QueueLimit{"q": {Rate: jobtype.Rate{Limit: 5, Per: time.Second, PerTenant: true}}}}, "jobs_queued_queue_tenant (queue=? AND tenant=? AND priority=?"},
		{"a tenant, a queue and kinds", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"q"}, Kinds: []string{"a", "b"}}, "jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=? AND priority=?"},
		{"rules, a tenant, a queue and kinds", store.ClaimFilter{Tenants: []string{"acme"}, Queues: []string{"readme"}, Kinds: []string{"a"}, Limits: limits, Pools: pools}, "jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=? AND priority=?"},
		{"a tenant and kinds", store.ClaimFilter{Tenants: []string{"acme"}, Kinds: []string{"a"}}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
		{"rules and tenants", store.ClaimFilter{Tenants: []string{"acme"}, Limits: limits, Pools: pools}, "jobs_queued_queue (queue=? AND priority=?"},
		{"rules, tenants, kinds and queues", store.ClaimFilter{Tenants: []string{"acme"}, Kinds: []string{"a"}, Queues: []string{"index", "readme"}, Limits: limits, Pools: pools}, "jobs_queued_kind (kind=? AND queue=? AND priority=?"},
	}
	check := func(t *testing.T, db *sql.DB) {
		for _, kinds := range []bool{false, true} {
			name, ready := "the tenants with ready jobs in a queue", "INDEX jobs_unfinished_queue_tenant (queue=? AND tenant=? AND state=? AND run_at<?)"
			args := []any{sql.Named("queue", `["q"]`), sql.Named("now", 5)}
			if kinds {
				name, ready = "the tenants with ready jobs of some kinds in a queue", "INDEX jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=?)"
				args = append(args, sql.Named("kinds", `["a","b"]`))
			}
			t.Run(name, func(t *testing.T) {
				plan := strings.Join(explain(t, db, readyTenantsQuery(0, kinds), args...), "\n")
				for _, want := range []string{"INDEX jobs_unfinished_queue_tenant (queue=? AND tenant>?)", ready} {
					if !strings.Contains(plan, want) {
						t.Errorf("plan:\n%s\nwant %s", plan, want)
					}
				}
				if strings.Contains(plan, "SCAN jobs") {
					t.Errorf("plan scans the jobs:\n%s", plan)
				}
			})
		}
		t.Run("fair claiming's turns taken at once", func(t *testing.T) {
			query, args := turnsPickQuery(store.ClaimFilter{Kinds: []string{"a", "b"}, Now: time.Unix(5, 0)}, "q", map[string]int{"acme": 3, "globex": 2})
			plan := strings.Join(explain(t, db, query, args...), "\n")
			if want := "INDEX jobs_queued_queue_tenant_kind (queue=? AND tenant=? AND kind=? AND priority=?"; !strings.Contains(plan, want) {
				t.Errorf("plan:\n%s\nwant %s", plan, want)
			}
			if strings.Contains(plan, "SCAN jobs") {
				t.Errorf("plan scans the jobs:\n%s", plan)
			}
		})
		for _, tt := range tests {
			for _, ready := range []bool{true, false} {
				for _, n := range []int{1, 100} {
					if n > 1 && (tt.filter.Ruled() || !ready) {
						continue // only unruled claims pick many at once
					}
					t.Run(fmt.Sprintf("%s, ready %v, %d jobs", tt.name, ready, n), func(t *testing.T) {
						query, args := pickQuery(tt.filter, ready, "seq")
						if n > 1 {
							query, args = unruledPickQuery(tt.filter, ready, n, columns)
						}
						index := tt.index
						if f := tt.filter; !ready && !f.Ruled() && len(f.Kinds) == 0 && len(f.Queues) == 0 {
							index = "jobs_state_run_at (state=?" // the earliest RunAt of any job
						}
						checkPickPlan(t, explain(t, db, query, args...), tt.filter, index)
					})
				}
			}
		}
	}
	path := tempPath(t)
	s := openTemp(t, path)
	defer s.Close()
	t.Run("an empty file", func(t *testing.T) { check(t, s.read) })

	// The statistics of a small table, kept while the table grows.
	fillPlanTable(t, s, 0, 100)
	if _, err := s.write.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
	fillPlanTable(t, s, 100, 30_000)
	t.Run("a deep file, statistics of a small one", func(t *testing.T) { check(t, s.read) })
	if _, err := s.write.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
	t.Run("a deep file, analyzed", func(t *testing.T) { check(t, s.read) })
	if _, err := s.write.Exec("DROP TABLE sqlite_stat1"); err != nil {
		t.Fatal(err)
	}
	// A new connection, whose planner has never seen the statistics.
	s.Close()
	s = openTemp(t, path)
	t.Run("a deep file, no statistics", func(t *testing.T) { check(t, s.read) })
}

// checkPickPlan fails t unless plan (of a pick under f) seeks every job
// it reads, in index (as its detail reads, e.g. "jobs_queued_kind
// (kind=? AND queue=?"), and sorts at most the groups' first jobs.
func checkPickPlan(t *testing.T, plan []string, f store.ClaimFilter, index string) {
	t.Helper()
	joined := strings.Join(plan, "\n")
	for _, line := range plan {
		// Scans of the rules and filters (json_each) and of the CTEs (one
		// row per queue, group or job picked) are fine; of the jobs, by
		// any of their names, never.
		if f := strings.Fields(line); len(f) > 1 && f[0] == "SCAN" && slices.Contains([]string{"jobs", "j", "r", "h"}, f[1]) {
			t.Errorf("plan scans the jobs: %q\n%s", line, joined)
		}
	}
	if !strings.Contains(joined, "INDEX "+index) {
		t.Errorf("plan:\n%s\nwant jobs sought in %s", joined, index)
	}
	if f.Limits != nil && !strings.Contains(joined, "INDEX jobs_queued_retry") {
		t.Errorf("plan:\n%s\nwant a held serial queue's retry found in jobs_queued_retry", joined)
	}
	// A serial queue's tenants, and each one's head, are sought in
	// jobs_unfinished_queue_tenant.
	if f.Limits != nil && (!strings.Contains(joined, "INDEX jobs_unfinished_queue_tenant (queue=? AND tenant>?)") ||
		!strings.Contains(joined, "INDEX jobs_unfinished_queue_tenant (queue=? AND tenant=? AND state=?)")) {
		t.Errorf("plan:\n%s\nwant a serial queue's tenants and heads sought in jobs_unfinished_queue_tenant", joined)
	}
	// Each group's priorities are walked one at a time: the next one with
	// queued jobs is a seek past the last (see priorityWalk); but for
	// NextReady's look at the earliest RunAt of any job, which seeks the
	// first of jobs_state_run_at.
	if !strings.Contains(joined, "priority>?)") && !strings.Contains(joined, "INDEX jobs_state_run_at (state=?") {
		t.Errorf("plan:\n%s\nwant the next priority sought in %s", joined, index)
	}
}

// fillPlanTable adds jobs from..to-1 of TestClaimPlanSeeksEveryQueueHead's
// deep file: mostly queued, over three queues, three kinds, two tenants
// and every priority, some running, retrying or ended, with one
// statement.
func fillPlanTable(t *testing.T, s *Store, from, to int) {
	t.Helper()
	zero := toMicro(time.Time{})
	err := s.writeTx(t.Context(), "fill", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
			payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
			started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, priority)
			WITH RECURSIVE n(i) AS (SELECT :from UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :to)
			SELECT 'job-' || i, CASE i % 2 WHEN 0 THEN 'acme' ELSE 'globex' END,
				CASE i % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'c' END,
				CASE i % 5 WHEN 0 THEN 'index' WHEN 1 THEN 'readme' ELSE 'q' END,
				CASE WHEN i % 100 = 7 THEN 'running' WHEN i % 100 = 8 THEN 'succeeded' ELSE 'queued' END,
				1, 0, '', '{}', NULL, NULL, NULL, CASE WHEN i % 100 = 9 THEN 1 ELSE 0 END, 3, '',
				i, :zero, i, :zero, i, '', '', :zero, i, i % 10
			FROM n`, sql.Named("from", from), sql.Named("to", to), sql.Named("zero", zero))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A list by state or queue reads what the filter matches when it matches
// few jobs, sorting them, and walks the jobs newest first when it matches
// many, so that neither a list of the queued jobs behind a deep backlog
// (which SQLite's own plan sorted whole) nor one of a queue or state
// with no job (which it walked the whole table for) reads every job; and
// either way it lists what SQLite's own plan lists, page by page.
func TestListingByStateOrQueueReadsWhatItNeeds(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	fillPlanTable(t, s, 0, 20_000) // 19,600 queued, 200 running, 200 succeeded
	succeeded, queued := []jobtype.State{jobtype.Succeeded}, []jobtype.State{jobtype.Queued}
	for _, c := range []struct {
		f    store.ListFilter
		want string // in the plan
	}{
		{store.ListFilter{States: succeeded}, "SEARCH jobs USING INDEX jobs_state_run_at (state=?)"},
		{store.ListFilter{Tenant: "acme", States: succeeded}, "SEARCH jobs USING INDEX jobs_state_run_at (state=?)"},
		{store.ListFilter{States: []jobtype.State{jobtype.Failed, jobtype.Lost}}, "SEARCH jobs USING INDEX jobs_state_run_at (state=?)"},
		{store.ListFilter{States: queued}, "SCAN jobs USING INDEX jobs_created"},
		{store.ListFilter{Tenant: "acme", States: queued}, "SEARCH jobs USING INDEX jobs_tenant_created (tenant=?)"},
		{store.ListFilter{Queue: "none"}, "SEARCH jobs USING INDEX jobs_state_queue_run_at (state=? AND queue=?)"},
		{store.ListFilter{Queues: []string{"index"}, States: succeeded}, "SEARCH jobs USING INDEX jobs_state_queue_run_at (state=? AND queue=?)"},
		{store.ListFilter{Queue: "q"}, "SCAN jobs USING INDEX jobs_created"},
	} {
		f := c.f
		f.Limit = 50
		r, err := s.listReadOf(t.Context(), f)
		if err != nil {
			t.Fatal(err)
		}
		query, args, _, err := listQuery(f, r)
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(explain(t, s.read, query, args...), "\n")
		if !strings.Contains(plan, c.want) || (r.newestFirst && strings.Contains(plan, "TEMP B-TREE")) {
			t.Errorf("listing %+v:\nplan:\n%s\nwant %s", c.f, plan, c.want)
		}
		// Three pages of 7 as ListJobs reads them, and as SQLite's own
		// plan reads them.
		f.Limit = 7
		for page := 0; page < 3; page++ {
			got, next, err := s.ListJobs(t.Context(), f)
			if err != nil {
				t.Fatal(err)
			}
			query, args, _, err := listQuery(f, listRead{})
			if err != nil {
				t.Fatal(err)
			}
			rows, err := s.read.Query(query, args...)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for rows.Next() && len(want) < f.Limit {
				var change int64
				j, _, err := scanJob(also(rows, &change))
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, j.ID)
			}
			rows.Close()
			var ids []string
			for _, j := range got {
				ids = append(ids, j.ID)
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("listing %+v, page %d: %v; SQLite's own plan lists %v", c.f, page, ids, want)
			}
			if next == "" {
				break
			}
			f.PageToken = next
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

// The lease and retention sweeps each seek an index that holds only the
// jobs they look for (RUNNING, ended), so that queued jobs cost them
// nothing, to read or to keep.
func TestSweepsSeekIndexesOfTheJobsTheyRead(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	for _, c := range []struct {
		query, want string
		args        []any
	}{
		{expiredLeasesQuery, "SEARCH jobs USING INDEX jobs_running_lease (lease_expires_at<?)", []any{int64(0)}},
		{finishedBeforeQuery, "SEARCH jobs USING INDEX jobs_finished (finished_at<?)", []any{int64(0), 10}},
		// Every RUNNING job, and none other; the list of leases is the
		// subquery's.
		{heldLeasesQuery, "SCAN jobs USING INDEX jobs_running_lease", []any{`["l"]`}},
	} {
		plan := explain(t, s.read, c.query, c.args...)
		// The first step reads jobs, by the index; no other does.
		if joined := strings.Join(plan, "\n"); !strings.Contains(plan[0], c.want) || strings.Count(joined, " jobs ") != 1 {
			t.Errorf("plan of %s:\n%s\nwant %s", c.query, joined, c.want)
		}
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
	add := func(id string, state jobtype.State, finished time.Time) {
		j := jobtype.Job{ID: id, Tenant: "acme", Kind: "k", Queue: "default", State: state, Version: 1,
			MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0, RunAt: t0, FinishedAt: finished}
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		add(fmt.Sprintf("j_old%d", i), jobtype.Succeeded, t0.Add(time.Hour))
	}
	add("j_recent", jobtype.Failed, t0.Add(3*time.Hour))
	add("j_active", jobtype.Queued, time.Time{})

	n, err := s.DeleteFinishedBefore(ctx, t0.Add(2*time.Hour), 100)
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

// WriteLeases reads its jobs by id and writes them by seq, in one
// statement each however many: seeks, never a scan of the jobs.
func TestLeaseWritesSeekTheirJobs(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	fillPlanTable(t, s, 0, 1000)
	old, next := testJob("job-1"), testJob("job-1")
	next.State, next.Version, next.LeaseID = jobtype.Succeeded, 2, "l"
	writes := []jobWrite{{seq: 1, old: old, next: next}, {seq: 2, old: old, next: next}, {seq: 3, old: old, next: next}}
	now := [][]any{values(next), values(next), values(next)}
	changed := []int{slices.Index(valueColumns, "state"), slices.Index(valueColumns, "version"), slices.Index(valueColumns, "lease_id")}
	update, updateArgs := updateRows(writes, now, changed, 7)
	for name, plan := range map[string][]string{
		"read":  explain(t, s.read, "SELECT "+columns+" FROM jobs WHERE id IN (?, ?, ?, ?)", "job-1", "job-2", "job-3", nil),
		"write": explain(t, s.read, update, updateArgs...),
	} {
		joined := strings.Join(plan, "\n")
		for _, line := range plan {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "SCAN" && f[1] == "jobs" {
				t.Errorf("%s plan scans the jobs:\n%s", name, joined)
			}
		}
		if !strings.Contains(joined, "SEARCH jobs USING") {
			t.Errorf("%s plan:\n%s\nwant each job sought", name, joined)
		}
	}
}

// TestJobWritesBuildNoTemporaryBTrees: no partial index's WHERE and no
// trigger's WHEN holds an IN list of more than two values, which SQLite
// answers by building a temporary B-tree of it: in an index's WHERE once
// for every statement that writes the index, in a trigger's WHEN once
// for every row it fires on, whether it then acts or not (migration
// 23). Each is checked on the schema a new file gets.
func TestJobWritesBuildNoTemporaryBTrees(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	rows, err := s.read.Query("SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND sql IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	list := regexp.MustCompile(`(?i)\bIN\s*\(([^()]*)\)`)
	// The part evaluated for every write: an index's WHERE, a trigger's
	// WHEN (its body runs only when that holds).
	evaluated := map[string]*regexp.Regexp{
		"index":   regexp.MustCompile(`(?is)\sWHERE\s(.*)$`),
		"trigger": regexp.MustCompile(`(?is)\sWHEN\s(.*?)\sBEGIN\s`),
	}
	checked := 0
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			t.Fatal(err)
		}
		part := ""
		if m := evaluated[typ].FindStringSubmatch(text); m != nil {
			part = m[1]
		}
		if part == "" {
			continue
		}
		checked++
		for _, m := range list.FindAllStringSubmatch(part, -1) {
			if n := strings.Count(m[1], ",") + 1; n > 2 && !strings.Contains(strings.ToUpper(m[1]), "SELECT") {
				t.Errorf("%s %s evaluates an IN list of %d values for every write: %s", typ, name, n, strings.TrimSpace(m[0]))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Errorf("only %d partial indexes and triggers with WHEN found; the query or the parsing is wrong", checked)
	}
}

// Listing the running jobs reads the index of running jobs, not the
// tenant's jobs newest first, which goes through every job of the tenant
// when few or none run (0.3 s behind a million queued), with a tenant and
// without, on a first page and on the next.
func TestListingTheRunningJobsSeeksTheirIndex(t *testing.T) {
	path := tempPath(t)
	s := openTemp(t, path)
	defer s.Close()
	fillPlanTable(t, s, 0, 2_000)
	if _, err := s.write.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
	running := []jobtype.State{jobtype.Running}
	for _, f := range []store.ListFilter{
		{Tenant: "acme", States: running, Limit: 50},
		{States: running, Limit: 50},
		{Tenant: "acme", States: running, Limit: 50, PageToken: store.EncodePageToken(tokenFormat, 1_000_000, 7)},
	} {
		query, args, _, err := listQuery(f, listRead{})
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(explain(t, s.read, query, args...), "\n"); !strings.Contains(plan, "INDEX jobs_running_tenant") || strings.Contains(plan, "SCAN jobs\n") {
			t.Errorf("listing %+v:\nplan:\n%s\nwant it to read jobs_running_tenant", f, plan)
		}
	}
}
