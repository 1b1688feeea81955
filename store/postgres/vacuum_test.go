package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// TestClaimsVacuumTheJobsTableWhereAutovacuumDoesNot: with autovacuum
// off for the jobs table, once its dead rows pass the vacuumer's bound,
// the next look the claims ask for vacuums it (and not before), removing
// the entries the claimed jobs left at the head of the index a claim
// seeks, so a claim's seek reads a few pages again, as it did before any
// claim, instead of stepping over every claimed job's entry.
func TestClaimsVacuumTheJobsTableWhereAutovacuumDoesNot(t *testing.T) {
	s := openWithoutAutovacuum(t, 14_000)
	s.vacuum.every, s.vacuum.dead = 5_000, 8_000
	ctx := context.Background()
	now := t0.Add(24 * time.Hour * 365)
	f := store.ClaimFilter{Kinds: []string{"email"}, Now: now}
	leases := make([]string, 100)
	for i := range leases {
		leases[i] = fmt.Sprint("l", i)
	}
	claim := func(n int) {
		t.Helper()
		for range n {
			if _, err := s.ClaimJobs(ctx, f, store.Claim{WorkerID: "w", LeaseIDs: leases, Now: now, Lease: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !done() {
			if time.Now().After(deadline) {
				t.Fatalf("a minute passed without %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fresh := seekBuffers(t, s)

	// 5,000 jobs claimed: the vacuumer looks, finds at most 5,000 dead
	// rows and leaves the table alone.
	claim(50)
	waitFor("a look at the dead rows after 5,000 claimed jobs", func() bool { return s.vacuum.checks.Load() == 1 })
	if n := s.vacuum.done.Load(); n != 0 {
		t.Fatalf("%d vacuums with at most 5,000 dead rows, want none below 8,000", n)
	}

	// 9,900 claimed, and their index entries dead at the head, counted
	// by PostgreSQL's statistics; no look is due yet.
	claim(49)
	waitFor("PostgreSQL's statistics counting 8,000 dead rows", func() bool {
		var dead int64
		if err := s.pool.QueryRow(ctx, deadRowsSQL).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		return dead >= 8_000
	})
	before := seekBuffers(t, s)
	if s.vacuum.checks.Load() != 1 || s.vacuum.done.Load() != 0 {
		t.Fatalf("looked %d times and vacuumed %d times after 9,900 claimed jobs, want a look after every 5,000", s.vacuum.checks.Load(), s.vacuum.done.Load())
	}

	// The 10,000th: the look finds 10,000 dead rows and vacuums.
	claim(1)
	waitFor("a vacuum after 10,000 jobs were claimed", func() bool { return s.vacuum.done.Load() == 1 })
	// A VACUUM removes only the rows no snapshot may still see, and the
	// test's server is shared: another suite's transaction, open from
	// before the claims, holds them (a loaded make test beside CI once
	// left 86 of 124 buffers after the vacuum). What the store controls
	// is that it vacuums; so while PostgreSQL still counts dead rows, ask
	// the store to look again (at any count) until its vacuum could
	// remove them, and hold only that vacuum's effect against it.
	s.vacuum.dead = 1
	waitFor("a vacuum that could remove the claimed jobs' rows", func() bool {
		var dead int64
		if err := s.pool.QueryRow(ctx, deadRowsSQL).Scan(&dead); err != nil {
			t.Fatal(err)
		}
		if dead < 100 {
			return true
		}
		t.Logf("after %d vacuums PostgreSQL still counts %d dead rows that some snapshot may see: vacuuming again", s.vacuum.done.Load(), dead)
		done := s.vacuum.done.Load()
		time.Sleep(200 * time.Millisecond)
		s.vacuum.now <- struct{}{}
		waitFor("the vacuum asked for", func() bool { return s.vacuum.done.Load() > done })
		return false
	})
	after := seekBuffers(t, s)
	t.Logf("the seek of the next queued job read %d buffers before any claim, %d before the vacuum, %d after", fresh, before, after)
	if before < fresh+30 {
		t.Fatalf("before the vacuum the seek read %d buffers, %d before any claim: the test no longer leaves dead entries to step over", before, fresh)
	}
	// What is left: the index's root, the first leaf, the row and the
	// visibility map, read a few times over as the vacuum left them.
	if after > before/2 {
		t.Errorf("after the vacuum the seek read %d buffers, want at most half the %d before it (%d before any claim)", after, before, fresh)
	}
	var dead int64
	if err := s.pool.QueryRow(ctx, deadRowsSQL).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead >= 8_000 {
		t.Errorf("PostgreSQL counts %d dead rows after the vacuum", dead)
	}
}

// openWithoutAutovacuum opens a store on a new schema whose jobs table
// fillQueued filled with queued jobs and left with autovacuum off, after
// the fill, so that its vacuumer runs.
func openWithoutAutovacuum(t *testing.T, queued int) *Store {
	t.Helper()
	url := pgtest.URL(t)
	fillQueued(t, openURL(t, url), queued)
	s := openURL(t, url)
	if !s.vacuum.off {
		t.Fatal("the store reads autovacuum as on for a jobs table with autovacuum_enabled = false")
	}
	return s
}

// seekBuffers is how many buffers the seek of the next queued email job
// reads in jobs_queued_kind, the index claims of that kind seek, with
// the claim's plan settings.
func seekBuffers(t *testing.T, s *Store) int {
	t.Helper()
	tx := claimTx(t, s)
	defer tx.Rollback(context.Background())
	plan, _ := explainWith(t, tx, "ANALYZE, BUFFERS, FORMAT JSON", `SELECT seq FROM jobs
		WHERE state = 'queued' AND kind = 'email' AND priority = 0 ORDER BY priority, run_at, seq LIMIT 1`)
	if !usesIndex(plan, "jobs_queued_kind") {
		t.Fatalf("the seek does not use jobs_queued_kind:\n%s", plan)
	}
	return int(plan.SharedHit + plan.SharedRead)
}

// With autovacuum off for the jobs table, the jobs created through the
// store make its vacuumer analyze the table once enough rows changed
// since the last ANALYZE, a fifth of the table or more, so that the
// planner does not go on planning for the table it last saw (a list of
// the queued jobs behind a million new ones sorted them all: one to two
// seconds).
func TestCreatedJobsAnalyzeTheJobsTableWhereAutovacuumDoesNot(t *testing.T) {
	s := openWithoutAutovacuum(t, 2_000)
	s.vacuum.every, s.vacuum.changed = 1_000, 3_000
	ctx := context.Background()
	known := func() (rows float64) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = 'jobs'::regclass").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		return rows
	}
	if rows := known(); rows > 2_500 {
		t.Fatalf("the planner knows of %.0f jobs before any was created through the store; the test needs it not to know the 2,000 queued", rows)
	}
	// Jobs are created 500 at a time until the vacuumer has analyzed
	// (the statistics it reads count the inserts a little later).
	deadline := time.Now().Add(time.Minute)
	for n := 0; s.vacuum.analyzed.Load() == 0; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("no ANALYZE after %d jobs created", n*500)
		}
		jobs := make([]jobtype.Job, 500)
		for i := range jobs {
			jobs[i] = job(fmt.Sprintf("new-%d-%d", n, i), "default", 0)
		}
		if _, err := s.CreateJobs(ctx, jobs); err != nil {
			t.Fatal(err)
		}
	}
	if s.vacuum.done.Load() != 0 {
		t.Errorf("%d vacuums of a table with no dead rows", s.vacuum.done.Load())
	}
	if rows := known(); rows < 5_000 {
		t.Errorf("after the ANALYZE the planner knows of %.0f jobs, want the 4,000 queued and more", rows)
	}
}

// Jobs deleted by retention are dead rows as claimed ones are: where
// autovacuum is off for the jobs table, a purge past the vacuumer's
// bound brings its look and a VACUUM, with no claim after it (an outside
// probe's quiet cluster kept 678,000 dead rows, 82% of the table, after
// a retention was shortened, until 10,000 more jobs had gone through).
func TestRetentionsDeletionsVacuumTheJobsTableWhereAutovacuumDoesNot(t *testing.T) {
	s := openWithoutAutovacuum(t, 0)
	s.vacuum.every, s.vacuum.dead = 1_000, 5_000
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for n := 0; s.vacuum.done.Load() == 0; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("no VACUUM after %d jobs deleted by retention", n*3_000)
		}
		// 3,000 ended jobs, written behind the store's back (as another
		// replica's would be), then deleted by the retention sweep.
		execer(t, s)(`INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step, attempt, max_attempts,
				unique_key, created_at, run_at, finished_at, worker_id, lease_id)
			SELECT 'ended-' || $2::int || '-' || i, 'acme', 'email', 'default', 'succeeded', 3, 100, '', 1, 1, '', $1::timestamptz,
				$1::timestamptz, $1::timestamptz, '', '' FROM generate_series(1, 3000) AS i`, t0, n)
		if got, err := s.DeleteFinishedBefore(ctx, t0.Add(time.Hour), 10_000); err != nil || got < 3_000 {
			t.Fatalf("retention deleted %d, %v; want the 3,000 ended", got, err)
		}
	}
	if s.vacuum.checks.Load() == 0 {
		t.Error("a VACUUM without a look at the dead rows")
	}
}
