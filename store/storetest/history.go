package storetest

import (
	"errors"
	"reflect"
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
