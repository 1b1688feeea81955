package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestReleasePutsTheJobBackAsIfNeverClaimed(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	runAt := clock.Now().Add(-time.Minute) // an old place in the queue, kept
	submitted := submit(t, e, jobs.SubmitRequest{Kind: "mail", RunAt: runAt})
	claimed, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "gone", Kinds: []string{"mail"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	got, err := e.Release(context.Background(), claimed.ID, claimed.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range []jobtype.Job{got, get(t, e, claimed.ID)} {
		if j.State != jobtype.Queued || j.Attempt != 0 || j.WorkerID != "" || j.LeaseID != "" ||
			!j.LeaseExpiresAt.IsZero() || !j.StartedAt.IsZero() {
			t.Errorf("released %+v; want queued, attempt 0, no worker, lease or start", j)
		}
		if !j.RunAt.Equal(submitted.RunAt) || j.Version != claimed.Version+1 || !j.UpdatedAt.Equal(clock.Now()) {
			t.Errorf("run_at %v version %d updated %v; want run_at kept at %v, version %d, updated now",
				j.RunAt, j.Version, j.UpdatedAt, submitted.RunAt, claimed.Version+1)
		}
	}

	again, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2"}, time.Now())
	if err != nil || again.ID != claimed.ID || again.Attempt != 1 || again.WorkerID != "w2" || again.LeaseID == claimed.LeaseID {
		t.Fatalf("claim after release: %+v, %v; want the job's first attempt under a new lease for w2", again, err)
	}
}

func TestReleaseAfterARetryKeepsTheAttemptsMade(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, RetryInitialBackoff: time.Second, RetryMaxBackoff: time.Second})
	first := running(t, e, jobs.SubmitRequest{MaxAttempts: 3})
	if _, err := e.Fail(context.Background(), first.ID, first.LeaseID, jobtype.JobError{Type: "Timeout"}, true); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	second, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{first.Kind}}, time.Now())
	if err != nil || second.Attempt != 2 {
		t.Fatalf("second claim: attempt %d, %v; want 2", second.Attempt, err)
	}
	got, err := e.Release(context.Background(), second.ID, second.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != jobtype.Queued || got.Attempt != 1 || !got.StartedAt.Equal(first.StartedAt) ||
		got.Error == nil || got.Error.Type != "Timeout" || !got.RunAt.Equal(second.RunAt) || got.WorkerID != first.WorkerID {
		t.Errorf("released %+v; want queued with the first attempt, its start, its worker (%s) and its error kept, run_at unchanged", got, first.WorkerID)
	}
}

func TestReleaseWithALeaseThatDoesNotHoldTheJobChangesNothing(t *testing.T) {
	tests := []struct {
		name  string
		after func(t *testing.T, e *jobs.Engine, j jobtype.Job) (leaseID string)
	}{
		{"another lease id", func(*testing.T, *jobs.Engine, jobtype.Job) string { return "not-the-lease" }},
		{"the job was completed", func(t *testing.T, e *jobs.Engine, j jobtype.Job) string {
			if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
				t.Fatal(err)
			}
			return j.LeaseID
		}},
		{"the job was cancelled", func(t *testing.T, e *jobs.Engine, j jobtype.Job) string {
			if _, err := e.Cancel(context.Background(), j.ID); err != nil {
				t.Fatal(err)
			}
			return j.LeaseID
		}},
		{"the job was released already", func(t *testing.T, e *jobs.Engine, j jobtype.Job) string {
			if _, err := e.Release(context.Background(), j.ID, j.LeaseID); err != nil {
				t.Fatal(err)
			}
			return j.LeaseID
		}},
		{"the job was released and claimed again", func(t *testing.T, e *jobs.Engine, j jobtype.Job) string {
			if _, err := e.Release(context.Background(), j.ID, j.LeaseID); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{j.Kind}}, soon()); err != nil {
				t.Fatal(err)
			}
			return j.LeaseID
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			j := running(t, e, jobs.SubmitRequest{})
			leaseID := tt.after(t, e, j)
			before := get(t, e, j.ID)
			if _, err := e.Release(context.Background(), j.ID, leaseID); !errors.Is(err, jobs.ErrStaleLease) {
				t.Fatalf("release: %v, want ErrStaleLease", err)
			}
			if after := get(t, e, j.ID); after.Version != before.Version || after.State != before.State {
				t.Errorf("after a refused release: %s version %d; want %s version %d unchanged",
					after.State, after.Version, before.State, before.Version)
			}
		})
	}
}

func TestReleaseRefusesBadIDs(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	if _, err := e.Release(context.Background(), "", "lease"); !isInvalid(err, "job_id") {
		t.Errorf("release without job id: %v", err)
	}
	j := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Release(context.Background(), j.ID, ""); !isInvalid(err, "lease_id") {
		t.Errorf("release without lease id: %v", err)
	}
	if _, err := e.Release(context.Background(), "no-such-job", "lease"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("release of an unknown job: %v, want ErrNotFound", err)
	}
}

func TestAReleasedJobWakesAParkedClaimerAndItsWatchers(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	parked := async(func() (jobtype.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{j.Kind}}, soon())
	})
	waitParked(t, e, 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan jobtype.Job, 16)
	watching := async(func() (struct{}, error) {
		return struct{}{}, e.Watch(ctx, j.ID, jobs.WatchOptions{AfterVersion: j.Version, Send: func(s *jobs.Snapshot) error {
			if s != nil {
				seen <- s.Job
			}
			return nil
		}})
	})
	defer func() { cancel(); await(t, watching) }()

	released, err := e.Release(context.Background(), j.ID, j.LeaseID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := await(t, parked)
	if err != nil || got.ID != j.ID || got.WorkerID != "w2" {
		t.Fatalf("parked claim: %+v, %v; want the released job for w2", got, err)
	}
	select {
	case w := <-seen:
		if w.Version < released.Version {
			t.Errorf("watcher saw version %d, want at least the release's %d", w.Version, released.Version)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watcher saw nothing of the release")
	}
}
