package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// deleteAll is a limit of DeleteFinishedBefore that no test reaches, for
// the cases that delete everything due at once.
const deleteAll = 1 << 30

// retentionCases pin the limit of DeleteFinishedBefore: the engine's
// sweep deletes a backlog a part at a time, so that a large one never
// holds up the sweep's other duties, and relies on each call stopping at
// its limit and on the next one going on from there.
var retentionCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"delete finished before deletes at most its limit of jobs, and the next call goes on with the rest", testDeleteFinishedBeforeLimit},
	{"delete finished before forgets at most its limit of records of deletions, and the next call goes on with the rest", testDeleteFinishedBeforeLimitsRecords},
}

func testDeleteFinishedBeforeLimit(t *testing.T, s store.Store) {
	ctx := t.Context()
	var due []string
	for i := range 7 {
		j := newJob(fmt.Sprintf("old%d", i), at(i))
		j.State, j.FinishedAt = jobtype.Succeeded, at(i+1)
		create(t, s, j)
		due = append(due, j.ID)
	}
	recent := newJob("recent", at(0))
	recent.State, recent.FinishedAt = jobtype.Failed, at(50)
	create(t, s, recent)
	create(t, s, newJob("queued", at(0)))

	// 7 due, 3 at a time: a call that deletes fewer than its limit says
	// that nothing more is due.
	for call, want := range []int{3, 3, 1, 0} {
		n, err := s.DeleteFinishedBefore(ctx, at(10), 3)
		if err != nil {
			t.Fatalf("call %d: %v", call+1, err)
		}
		if n != want {
			t.Fatalf("call %d deleted %d jobs, want %d", call+1, n, want)
		}
		if call == 0 {
			counts, err := s.CountByState(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := counts[jobtype.Succeeded]; got != 4 {
				t.Fatalf("after one call of limit 3, %d of the 7 due are left, want 4", got)
			}
		}
	}
	for _, id := range due {
		mustBeGone(t, s, id)
	}
	get(t, s, recent.ID)
	get(t, s, "queued")
}

func testDeleteFinishedBeforeLimitsRecords(t *testing.T, s store.Store) {
	ctx := t.Context()
	since, err := s.ChangeCursor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		// Ended far later than the cut below, so no job is due: only
		// the records of their deletions, made now, are.
		j := newJob(fmt.Sprintf("gone%d", i), at(i))
		j.State, j.FinishedAt = jobtype.Cancelled, at(i+1)
		create(t, s, j)
		if _, _, err := s.DeleteJob(ctx, j.ID); err != nil {
			t.Fatalf("delete %s: %v", j.ID, err)
		}
	}
	recorded := func() int {
		t.Helper()
		ids, _, err := s.JobsDeleted(ctx, store.DeletedFilter{Tenant: "acme", Since: since, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	if got := recorded(); got != 5 {
		t.Fatalf("%d deletions recorded, want 5", got)
	}
	cut := time.Now().Add(time.Hour)
	for call, want := range []int{3, 1, 0} {
		if n, err := s.DeleteFinishedBefore(ctx, cut, 2); err != nil || n != 0 {
			t.Fatalf("call %d: %d jobs, %v; want none due", call+1, n, err)
		}
		if got := recorded(); got != want {
			t.Fatalf("after call %d of limit 2, %d records of deletions are left, want %d", call+1, got, want)
		}
	}
}
