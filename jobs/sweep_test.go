package jobs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestAnExpiredLeaseMakesTheJobLostAndWakesItsWaiter(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{Now: clock.Now, LeaseTimeout: 30 * time.Second})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	parked := waitedRead(t, e, ctx, j.ID, time.Now().Add(time.Hour))

	clock.Advance(20 * time.Second)
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 10, ""); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second) // 40s after the claim, 20s after the heartbeat
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	notYet(t, parked, 20*time.Millisecond)

	clock.Advance(11 * time.Second) // 31s without a heartbeat
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := await(t, parked)
	if err != nil || got.State != jobtype.Lost {
		t.Fatalf("wait: %s, %v; want lost", got.State, err)
	}
	want := jobtype.JobError{Type: "LeaseExpired", Message: "no heartbeat for 30s"}
	if got.Error == nil || *got.Error != want || got.FinishedAt.IsZero() || got.LeaseID != "" {
		t.Errorf("lost job %+v; want error %+v, finished, no lease", got, want)
	}
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 20, ""); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("heartbeat of the lost job: %v, want ErrStaleLease", err)
	}
}

func TestAnExpiredLeaseWithAttemptsLeftQueuesTheJobAgain(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 30 * time.Second})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{MaxAttempts: 2})
	clock.Advance(31 * time.Second)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := get(t, e, j.ID)
	if got.State != jobtype.Queued || got.Attempt != 1 || got.Error == nil || got.Error.Type != "LeaseExpired" || got.LeaseID != "" {
		t.Fatalf("after expiry: %+v; want queued, attempt 1, error LeaseExpired", got)
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("the old worker's complete: %v, want ErrStaleLease", err)
	}
	clock.Advance(time.Minute) // past the retry backoff
	again, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w2"}, time.Now())
	if err != nil || again.Attempt != 2 || again.WorkerID != "w2" {
		t.Fatalf("re-claim: %+v, %v; want attempt 2 by w2", again, err)
	}
	clock.Advance(31 * time.Second)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Lost {
		t.Fatalf("after the last attempt expired: %s, want lost", got.State)
	}
}

func TestRetentionDeletesOldEndedJobs(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Retention: 24 * time.Hour})
	ctx := context.Background()
	old := submit(t, e, jobs.SubmitRequest{})
	e.Cancel(ctx, old.ID)
	active := submit(t, e, jobs.SubmitRequest{Hold: true})
	clock.Advance(23 * time.Hour)
	recent := submit(t, e, jobs.SubmitRequest{})
	e.Cancel(ctx, recent.ID)
	clock.Advance(2 * time.Hour)
	if err := e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, old.ID); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("job ended 25h ago: %v, want ErrNotFound", err)
	}
	if _, err := e.Wait(ctx, old.ID, time.Now()); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("wait for the deleted job: %v, want ErrNotFound", err)
	}
	for _, id := range []string{active.ID, recent.ID} {
		if _, err := e.Get(ctx, id); err != nil {
			t.Errorf("job %s: %v, want it kept", id, err)
		}
	}
}

func TestRunSweepsEveryInterval(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Second, SweepInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ran := async(func() (struct{}, error) { return struct{}{}, e.Run(ctx) })
	j := running(t, e, jobs.SubmitRequest{})
	clock.Advance(2 * time.Second)
	got, err := e.Wait(context.Background(), j.ID, time.Now().Add(5*time.Second))
	if err != nil || got.State != jobtype.Lost {
		t.Fatalf("wait: %s, %v; want lost by the running sweeper", got.State, err)
	}
	cancel()
	if _, err := await(t, ran); err != nil {
		t.Fatalf("run: %v, want nil when its context ends", err)
	}
}

func TestReplicasSweepingAtOnceExpireALeaseOnce(t *testing.T) {
	clock := newFakeClock()
	st := openStore(t)
	const replicas = 4
	var engines []*jobs.Engine
	for range replicas {
		engines = append(engines, newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: time.Second}))
	}
	ctx := context.Background()
	j := running(t, engines[0], jobs.SubmitRequest{MaxAttempts: 2})
	clock.Advance(2 * time.Second)

	var wg sync.WaitGroup
	for _, e := range engines {
		wg.Go(func() {
			if err := e.Sweep(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := get(t, engines[0], j.ID)
	if got.State != jobtype.Queued || got.Version != j.Version+1 {
		t.Fatalf("after %d concurrent sweeps: %s v%d; want queued once, at v%d", replicas, got.State, got.Version, j.Version+1)
	}
}
