package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// endedBacklog stores n jobs that ended at now, behind the engine's back,
// as a server that kept them under a long retention would have.
func endedBacklog(t *testing.T, st store.Store, n int, now time.Time) {
	t.Helper()
	var batch []jobtype.Job
	for i := range n {
		batch = append(batch, jobtype.Job{ID: fmt.Sprintf("j_ended%05d", i), Tenant: "acme", Kind: "k", Queue: "default",
			State: jobtype.Succeeded, Version: 3, Attempt: 1, MaxAttempts: 1,
			CreatedAt: now, UpdatedAt: now, RunAt: now, StartedAt: now, FinishedAt: now})
		if len(batch) == 250 || i == n-1 {
			if _, err := st.CreateJobs(t.Context(), batch); err != nil {
				t.Fatalf("store the ended jobs: %v", err)
			}
			batch = batch[:0]
		}
	}
}

// ended reports how many of the backlog's jobs are left.
func ended(t *testing.T, st store.Store) int64 {
	t.Helper()
	counts, err := st.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return counts[jobtype.Succeeded]
}

// TestALeaseExpiresAtTheNextSweepWhileRetentionDeletesABacklog: a
// retention shortened over a large backlog used to have one sweep delete
// all of it before the next sweep could run, so a lease that ran out
// meanwhile ended only when the deletion did (an outside probe: 45 s
// for a million jobs on SQLite). Each sweep now deletes a part of the
// backlog, and the next sweep expires the lease while most of it is
// still there.
func TestALeaseExpiresAtTheNextSweepWhileRetentionDeletesABacklog(t *testing.T) {
	const backlog, batch = 1000, 100
	clock := newFakeClock()
	st := openStore(t)
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, Retention: 24 * time.Hour, LeaseTimeout: 2 * time.Second})
	// One batch a sweep, whatever the machine's speed.
	e.SetRetentionPace(batch, time.Nanosecond)
	ctx := context.Background()
	endedBacklog(t, st, backlog, clock.Now())
	clock.Advance(25 * time.Hour) // the backlog is past retention

	j := running(t, e, jobs.SubmitRequest{MaxAttempts: 1})
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ended(t, st); got != backlog-batch {
		t.Fatalf("after the first sweep %d of %d ended jobs are left, want %d: one batch deleted, the rest left for later sweeps",
			got, backlog, backlog-batch)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Running {
		t.Fatalf("job %s before its lease ran out: %s, want RUNNING", j.ID, got.State)
	}

	clock.Advance(3 * time.Second) // the lease has run out
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Lost {
		t.Errorf("job %s at the sweep after its lease ran out: %s, want LOST", j.ID, got.State)
	}
	if got := ended(t, st); got != backlog-2*batch {
		t.Errorf("after the second sweep %d ended jobs are left, want %d", got, backlog-2*batch)
	}

	// The rest goes a batch a sweep, until none is left.
	for sweeps := 2; ended(t, st) > 0; sweeps++ {
		if sweeps > backlog/batch {
			t.Fatalf("%d ended jobs left after %d sweeps of %d each", ended(t, st), sweeps, batch)
		}
		if err := e.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestASweepDeletesBatchAfterBatchWhileItsBudgetLasts: the bound of a
// sweep is its time budget, not one batch, so a backlog on a fast store
// goes in as few sweeps as the budget allows.
func TestASweepDeletesBatchAfterBatchWhileItsBudgetLasts(t *testing.T) {
	const backlog = 1000
	clock := newFakeClock()
	st := openStore(t)
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, Retention: 24 * time.Hour})
	e.SetRetentionPace(100, time.Hour)
	endedBacklog(t, st, backlog, clock.Now())
	clock.Advance(25 * time.Hour)
	if err := e.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ended(t, st); got != 0 {
		t.Errorf("after a sweep with an hour's budget %d of %d ended jobs are left, want none", got, backlog)
	}
}
