package sqlite

import (
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// TimedOut reads only the RUNNING jobs of the queue (by index) and each
// one's attempt by seq: never a scan of jobs.
func TestTimedOutReadsRunningAttemptsNotTheJobsTable(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	joined := strings.Join(explain(t, s.read, timedOutQuery, int64(0), "q"), "\n")
	if !strings.Contains(joined, "SEARCH j USING INDEX jobs_state_queue_run_at (state=? AND queue=?)") ||
		!strings.Contains(joined, "SEARCH a USING INTEGER PRIMARY KEY") || strings.Contains(joined, "SCAN") {
		t.Errorf("plan:\n%s\nwant the queue's running jobs by index, each attempt by seq, no scan", joined)
	}
}

// A job claimed (made RUNNING) gets the claim's time as its attempt's
// start, and loses it when the attempt ends; a new claim starts over.
func TestTimedOutSeesEachAttemptFromItsClaim(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	ctx := t.Context()
	if _, err := s.CreateJob(ctx, jobtype.Job{ID: "job-1", Tenant: "t", Kind: "k", Queue: "q", State: jobtype.Queued,
		Version: 1, MaxAttempts: 2, CreatedAt: fromMicro(1), UpdatedAt: fromMicro(1), RunAt: fromMicro(1)}); err != nil {
		t.Fatal(err)
	}
	claimAt := func(at int64, lease string) {
		t.Helper()
		if _, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: fromMicro(at)}, store.Claim{LeaseID: lease, Now: fromMicro(at), Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	timedOut := func(before int64) []store.Attempt {
		t.Helper()
		a, err := s.TimedOut(ctx, "q", fromMicro(before))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	claimAt(10, "l1")
	if got := timedOut(10); len(got) != 0 {
		t.Errorf("started at 10, before 10: %v, want none", got)
	}
	if got := timedOut(11); len(got) != 1 || got[0] != (store.Attempt{JobID: "job-1", LeaseID: "l1"}) {
		t.Errorf("started at 10, before 11: %v, want job-1 under l1", got)
	}
	if got, err := s.TimedOut(ctx, "other", fromMicro(100)); err != nil || len(got) != 0 {
		t.Errorf("another queue: %v, %v; want none", got, err)
	}
	if _, err := s.UpdateJob(ctx, "job-1", func(j *jobtype.Job) error {
		j.State, j.LeaseID, j.UpdatedAt = jobtype.Queued, "", fromMicro(20)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := timedOut(100); len(got) != 0 {
		t.Errorf("queued again: %v, want none", got)
	}
	claimAt(50, "l2")
	if got := timedOut(50); len(got) != 0 {
		t.Errorf("claimed again at 50, before 50: %v, want none", got)
	}
	if got := timedOut(51); len(got) != 1 || got[0].LeaseID != "l2" {
		t.Errorf("claimed again at 50, before 51: %v, want job-1 under l2", got)
	}
}
