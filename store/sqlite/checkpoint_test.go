package sqlite

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// The writer leaves the copying of the WAL into the database file to the
// checkpointer, which runs once every checkpointEvery commits and copies
// all of it when no reader holds an older snapshot; the writer's own
// checkpoint waits for walBackstopPages.
func TestCheckpointsRunBesideTheWriter(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	ctx := t.Context()
	type result struct{ walPages, copied int }
	results := make(chan result, 1)
	after := func(walPages, copied int) {
		select {
		case results <- result{walPages, copied}:
		default:
		}
	}
	s.ckpt.after.Store(&after)

	var backstop int
	if err := s.write.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&backstop); err != nil || backstop != walBackstopPages {
		t.Fatalf("the writer's wal_autocheckpoint is %d (%v), want %d", backstop, err, walBackstopPages)
	}
	add := func(i int) {
		t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		j := jobtype.Job{ID: fmt.Sprintf("j_%d", i), Tenant: "acme", Kind: "k", Queue: "default", State: jobtype.Queued,
			Version: 1, MaxAttempts: 1, CreatedAt: t0, UpdatedAt: t0, RunAt: t0}
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.w.commits.Load(); n != 0 {
		t.Fatalf("a new store has %d commits, want none", n)
	}
	for i := range checkpointEvery - 1 {
		add(i)
	}
	// The writer kicks the checkpointer before it answers the commit that
	// makes it due, so none can have run yet.
	select {
	case <-results:
		t.Fatalf("a checkpoint after %d commits, want none before the %dth", s.w.commits.Load(), checkpointEvery)
	default:
	}
	add(checkpointEvery)
	select {
	case r := <-results:
		if r.copied == 0 || r.copied != r.walPages {
			t.Errorf("the checkpoint copied %d of the WAL's %d pages, want all of them", r.copied, r.walPages)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no checkpoint within a minute of commit %d", s.w.commits.Load())
	}
}
