package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
)

// TestClaimsVacuumTheJobsTableWhereAutovacuumDoesNot: with autovacuum
// off for the jobs table, the claims' vacuumer removes the entries the
// claimed jobs left at the head of the index a claim seeks, so a claim's
// seek reads a few pages again, as it did before any claim, instead of
// stepping over every claimed job's entry.
func TestClaimsVacuumTheJobsTableWhereAutovacuumDoesNot(t *testing.T) {
	url := pgtest.URL(t)
	fillQueued(t, openURL(t, url), 12_000) // and turns autovacuum off for jobs
	s := openURL(t, url)
	if !s.vacuum.off {
		t.Fatal("the store reads autovacuum as on for a jobs table with autovacuum_enabled = false")
	}
	s.vacuum.every = 10_000
	ctx := context.Background()
	now := t0.Add(24 * time.Hour * 365)
	f := store.ClaimFilter{Kinds: []string{"email"}, Now: now}
	leases := make([]string, 100)
	for i := range leases {
		leases[i] = fmt.Sprint("l", i)
	}
	fresh := seekBuffers(t, s)
	// 9,900 jobs claimed, and their index entries dead at the head.
	for range 99 {
		if _, err := s.ClaimJobs(ctx, f, store.Claim{WorkerID: "w", LeaseIDs: leases, Now: now, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	before := seekBuffers(t, s)
	if s.vacuum.done.Load() != 0 {
		t.Fatalf("vacuumed after 9,900 claimed jobs, want after 10,000")
	}
	if _, err := s.ClaimJobs(ctx, f, store.Claim{WorkerID: "w", LeaseIDs: leases, Now: now, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.vacuum.done.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no vacuum a minute after 10,000 jobs were claimed")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
