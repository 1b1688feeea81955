package storetest

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// historyCases are the shared cases of attempt history and DeleteJob.
var historyCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"the end of each attempt appends its entry, with the claim's time as its start, and the history keeps the last MaxHistory", testAttemptHistory},
	{"delete removes a terminal job, leaves an active one and says not found for an unknown one", testDeleteJob},
	{"deletions are listed after a change cursor, by tenant and a page at a time, until retention forgets them", testJobsDeleted},
}

// startFromStore takes the start of the attempt a write just ended from
// got into want's last history entry: the model reads its jobs with
// GetJob, which leaves AttemptStartedAt out, so only the store knows it
// (testAttemptHistory checks it exactly, through a claim). It checks
// that the start, when known, is not after the end.
func startFromStore(t *testing.T, what string, want *jobtype.Job, got jobtype.Job) {
	t.Helper()
	n := len(want.History)
	if n == 0 || len(got.History) != n {
		return
	}
	e := &want.History[n-1]
	e.StartedAt = got.History[n-1].StartedAt
	if !e.StartedAt.IsZero() && e.StartedAt.After(e.FinishedAt) {
		t.Errorf("%s: the ended attempt started at %v, after its end at %v", what, e.StartedAt, e.FinishedAt)
	}
}

// testAttemptHistory: every way an attempt ends through WriteLeases
// appends its entry (attempt, worker, start as the claim's time, end,
// outcome, error) in the write that ends it, and the history keeps the
// last jobtype.MaxHistory entries.
func testAttemptHistory(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := newJob("h", at(0))
	j.Attempt, j.MaxAttempts = 0, 3
	create(t, s, j)

	claim := func(sec int, lease string) jobtype.Job {
		t.Helper()
		c, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: at(sec)},
			store.Claim{WorkerID: "worker-" + lease, LeaseID: lease, Now: at(sec), Lease: time.Minute})
		if err != nil {
			t.Fatalf("claim at %d s: %v", sec, err)
		}
		if c.AttemptStartedAt != (time.Time{}) {
			t.Errorf("a claimed job carries AttemptStartedAt %v; stores return it zero", c.AttemptStartedAt)
		}
		return c
	}
	write := func(w store.LeaseWrite, sec int) jobtype.Job {
		t.Helper()
		r := leaseRules
		r.Now = at(sec)
		res, err := s.WriteLeases(ctx, []store.LeaseWrite{w}, r)
		if err != nil || !res[0].Held {
			t.Fatalf("write at %d s: held %v, err %v", sec, err == nil && res[0].Held, err)
		}
		return res[0].Job
	}

	claim(10, "l1")
	write(store.LeaseWrite{Op: store.Heartbeat, JobID: "h", LeaseID: "l1", Percent: 50}, 15)
	write(store.LeaseWrite{Op: store.Fail, JobID: "h", LeaseID: "l1", Error: boom, Retry: true}, 20)
	claim(30, "l2")
	got := write(store.LeaseWrite{Op: store.Complete, JobID: "h", LeaseID: "l2"}, 40)

	want := []jobtype.HistoryEntry{
		{Attempt: 1, WorkerID: "worker-l1", StartedAt: at(10), FinishedAt: at(20), State: jobtype.Queued, Error: boom},
		{Attempt: 2, WorkerID: "worker-l2", StartedAt: at(30), FinishedAt: at(40), State: jobtype.Succeeded},
	}
	for _, g := range []struct {
		what string
		job  jobtype.Job
	}{{"as WriteLeases returned it", got}, {"as stored", get(t, s, "h")}} {
		if !reflect.DeepEqual(g.job.History, want) {
			t.Errorf("history %s:\n got %+v\nwant %+v", g.what, g.job.History, want)
		}
	}

	// The bound: a job that already has MaxHistory entries keeps the
	// last MaxHistory once another attempt ends.
	full := newJob("full", at(0))
	full.MaxAttempts = 100
	for i := range jobtype.MaxHistory {
		full.History = append(full.History, jobtype.HistoryEntry{Attempt: int32(i + 1), State: jobtype.Queued, FinishedAt: at(i)})
	}
	full.Attempt = jobtype.MaxHistory
	create(t, s, full)
	claimed, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: at(50)},
		store.Claim{WorkerID: "w", LeaseID: "lf", Now: at(50), Lease: time.Minute})
	if err != nil || claimed.ID != "full" {
		t.Fatalf("claim full: %v (%s)", err, claimed.ID)
	}
	got = write(store.LeaseWrite{Op: store.Fail, JobID: "full", LeaseID: "lf", Error: boom}, 60)
	if n := len(got.History); n != jobtype.MaxHistory {
		t.Fatalf("history of %d entries, want %d", n, jobtype.MaxHistory)
	}
	if first, last := got.History[0], got.History[jobtype.MaxHistory-1]; first.Attempt != 2 || last.Attempt != jobtype.MaxHistory+1 ||
		last.State != jobtype.Failed || !last.StartedAt.Equal(at(50)) {
		t.Errorf("history runs from attempt %d to %+v; want 2 to attempt %d FAILED, started at %v",
			first.Attempt, last, jobtype.MaxHistory+1, at(50))
	}
	if !reflect.DeepEqual(get(t, s, "full").History, got.History) {
		t.Errorf("stored history differs from the returned one")
	}
}

// testDeleteJob: DeleteJob removes a terminal job and returns it as it
// was, leaves an active one as it is, and says ErrNotFound for a job
// that does not exist (or was deleted).
func testDeleteJob(t *testing.T, s store.Store) {
	ctx := t.Context()
	done := newJob("done", at(0))
	done.State, done.FinishedAt = jobtype.Failed, at(1)
	create(t, s, done)
	busy := running("busy", "default", 0)
	create(t, s, busy)

	j, deleted, err := s.DeleteJob(ctx, "done")
	if err != nil || !deleted || j.ID != "done" || j.State != jobtype.Failed {
		t.Fatalf("delete a FAILED job: %s %s deleted %v, err %v; want it deleted", j.ID, j.State, deleted, err)
	}
	if _, err := s.GetJob(ctx, "done"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("get a deleted job: %v, want ErrNotFound", err)
	}
	if _, _, err := s.DeleteJob(ctx, "done"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("delete it again: %v, want ErrNotFound", err)
	}
	j, deleted, err = s.DeleteJob(ctx, "busy")
	if err != nil || deleted || j.State != jobtype.Running {
		t.Errorf("delete a RUNNING job: %s deleted %v, err %v; want it left as it is", j.State, deleted, err)
	}
	if _, err := s.GetJob(ctx, "busy"); err != nil {
		t.Errorf("the RUNNING job after a refused delete: %v", err)
	}
	if _, _, err := s.DeleteJob(ctx, "never"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("delete an unknown job: %v, want ErrNotFound", err)
	}
}

// testJobsDeleted: JobsDeleted lists what DeleteJob deleted after a
// change cursor, in order, for one tenant (and one batch), a page at a
// time; a refused delete is not listed; DeleteFinishedBefore forgets the records made
// before its time and keeps later ones.
func testJobsDeleted(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, id := range []string{"d1", "d2", "d3", "o1", "x1", "y1"} {
		j := newJob(id, at(i))
		j.State, j.FinishedAt = jobtype.Succeeded, at(i+1)
		switch id {
		case "o1":
			j.Tenant = "other"
		case "x1", "y1":
			j.Batch = id[:1]
		}
		create(t, s, j)
	}
	create(t, s, running("busy", "default", 0))
	cursor := func() string {
		t.Helper()
		c, err := s.ChangeCursor(ctx)
		if err != nil {
			t.Fatalf("change cursor: %v", err)
		}
		return c
	}
	del := func(id string) {
		t.Helper()
		if _, _, err := s.DeleteJob(ctx, id); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
	}
	// inBatch pages through the deletions of tenant's jobs of batch ("":
	// all) after since, limit a page.
	inBatch := func(tenant, batch, since string, limit int) []string {
		t.Helper()
		var ids []string
		f := store.DeletedFilter{Tenant: tenant, Batch: batch, Since: since, Limit: limit}
		for pages := 0; ; pages++ {
			page, next, err := s.JobsDeleted(ctx, f)
			if err != nil {
				t.Fatalf("jobs deleted of %s: %v", tenant, err)
			}
			if len(page) > limit {
				t.Fatalf("a page of %d ids, limit %d", len(page), limit)
			}
			ids = append(ids, page...)
			if next == "" {
				return ids
			}
			if pages > 10 {
				t.Fatalf("more than 10 pages of %d: %v", limit, ids)
			}
			f.PageToken = next
		}
	}
	all := func(tenant, since string, limit int) []string {
		t.Helper()
		return inBatch(tenant, "", since, limit)
	}

	before := cursor()
	del("d1")
	del("d2")
	del("o1")
	del("busy") // refused: RUNNING
	mid := cursor()
	del("d3")
	del("x1")
	del("y1")

	for _, limit := range []int{1, 2, 10} {
		if got, want := all("acme", before, limit), []string{"d1", "d2", "d3", "x1", "y1"}; !slices.Equal(got, want) {
			t.Errorf("deletions of acme after the first cursor, %d a page: %v, want %v", limit, got, want)
		}
		if got, want := inBatch("acme", "x", before, limit), []string{"x1"}; !slices.Equal(got, want) {
			t.Errorf("deletions of acme's batch x, %d a page: %v, want %v", limit, got, want)
		}
	}
	if got, want := all("other", before, 10), []string{"o1"}; !slices.Equal(got, want) {
		t.Errorf("deletions of tenant other: %v, want %v", got, want)
	}
	// A cursor may list again a deletion in flight when it was taken
	// (another transaction of the database may hold PostgreSQL's
	// snapshot back), but never miss one committed after it.
	if got := all("acme", mid, 10); !slices.Contains(got, "d3") || !slices.IsSorted(got) {
		t.Errorf("deletions of acme after the second cursor: %v, want d3 (and perhaps d1, d2 before it)", got)
	}
	if _, _, err := s.JobsDeleted(ctx, store.DeletedFilter{Tenant: "acme", Since: "nonsense", Limit: 10}); !errors.Is(err, jobtype.ErrInvalidPageToken) {
		t.Errorf("jobs deleted after a cursor the store did not issue: %v, want ErrInvalidPageToken", err)
	}
	if _, _, err := s.JobsDeleted(ctx, store.DeletedFilter{Tenant: "acme", Since: before, PageToken: "nonsense", Limit: 10}); !errors.Is(err, jobtype.ErrInvalidPageToken) {
		t.Errorf("jobs deleted with a page token the store did not issue: %v, want ErrInvalidPageToken", err)
	}

	if _, err := s.DeleteFinishedBefore(ctx, time.Now().Add(-time.Hour), deleteAll); err != nil {
		t.Fatalf("delete finished before an hour ago: %v", err)
	}
	if got := all("acme", before, 10); len(got) != 5 {
		t.Errorf("deletions after retention of what ended over an hour ago: %v, want all five kept", got)
	}
	if _, err := s.DeleteFinishedBefore(ctx, time.Now().Add(time.Hour), deleteAll); err != nil {
		t.Fatalf("delete finished before an hour from now: %v", err)
	}
	if got := all("acme", before, 10); len(got) != 0 {
		t.Errorf("deletions after retention passed them: %v, want none", got)
	}
}
