package jobs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Operators' actions on one replica reach what is parked on another.

// A job retried on one replica is claimed by a worker parked on another,
// and a wait there follows its new run to the end.
func TestARetryOnOneReplicaWakesAClaimParkedOnAnother(t *testing.T) {
	a, b := replicas(t)
	j := running(t, a, jobs.SubmitRequest{MaxAttempts: 1})
	failed, err := a.Fail(context.Background(), j.ID, j.LeaseID, jobtype.JobError{Type: "Boom"}, false)
	if err != nil || failed.State != jobtype.Failed {
		t.Fatalf("fail: %v, %v", failed.State, err)
	}
	claimed := async(func() (jobtype.Job, error) {
		return b.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w-b", Kinds: []string{j.Kind}}, soon())
	})
	waitParked(t, b, 1)
	if _, err := a.Retry(jobs.WithActor(context.Background(), "ops (admin)"), j.ID); err != nil {
		t.Fatalf("retry: %v", err)
	}
	got, err := await(t, claimed)
	if err != nil || got.ID != j.ID || got.State != jobtype.Running {
		t.Fatalf("the claim parked on the other replica = %s %s, %v; want the retried job", got.ID, got.State, err)
	}
	// A wait there, issued now, follows the new run to its end.
	waited := async(func() (jobtype.Job, error) { return b.Wait(context.Background(), j.ID, soon()) })
	if _, err := b.Complete(context.Background(), got.ID, got.LeaseID, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if w, err := await(t, waited); err != nil || w.State != jobtype.Succeeded || len(w.History) == 0 {
		t.Fatalf("the wait on the other replica = %s with history %v, %v; want SUCCEEDED after the retried run", w.State, w.History, err)
	}
}

// A job deleted on one replica is not found on another, by reads and by
// waits alike, even where that replica had just answered a wait for it.
func TestAJobDeletedOnOneReplicaIsNotFoundOnAnother(t *testing.T) {
	a, b := replicas(t)
	j := running(t, a, jobs.SubmitRequest{})
	if _, err := a.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Wait(context.Background(), j.ID, soon()); err != nil || got.State != jobtype.Succeeded {
		t.Fatalf("wait on the other replica before the delete: %s, %v", got.State, err)
	}
	if err := a.Delete(context.Background(), j.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := b.Get(context.Background(), j.ID); !errors.Is(err, jobtype.ErrNotFound) {
		t.Fatalf("get on the other replica: %v; want not found", err)
	}
	// The other replica hears of the delete through the store; until then
	// a wait may still find the job, never after.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.Wait(context.Background(), j.ID, soon())
		if errors.Is(err, jobtype.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a wait on the other replica 10s after the delete: %v; want not found", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A tenant feed on one replica tells its reader of a job deleted on
// another, so that a page open there drops the row.
func TestATenantFeedOnOneReplicaHearsOfAJobDeletedOnAnother(t *testing.T) {
	a, b := replicas(t)
	j := submit(t, a, jobs.SubmitRequest{Tenant: "acme"})
	if _, err := a.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan []string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: func(_ []jobtype.Job, ids []string, token string) error {
		if token != "" {
			deleted <- ids
		}
		return nil
	}})
	<-deleted // the recent jobs
	if err := a.Delete(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ids := <-deleted:
			if slices.Contains(ids, j.ID) {
				return
			}
		case <-timeout:
			t.Fatal("the feed on the other replica did not announce the deletion within 10s")
		}
	}
}
