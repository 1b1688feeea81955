package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A chain of 100 jobs, each after the one before, runs one link at a
// time: each link is claimed by a worker parked for it the moment the
// link before it succeeds, with no polling, and a wait for the last link
// returns once the whole chain has run.
func TestAChainOfAHundredRunsOneLinkAtATime(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	const links = 100
	ids := make([]string, links)
	for i := range ids {
		r := jobs.SubmitRequest{Kind: "link", Payload: mustJSON(i)}
		if i > 0 {
			r.After = []string{ids[i-1]}
		}
		j := submit(t, e, r)
		ids[i] = j.ID
		if want := map[bool]jobtype.State{true: jobtype.Queued, false: jobtype.Waiting}[i == 0]; j.State != want {
			t.Fatalf("link %d submitted %s, want %s", i, j.State, want)
		}
	}
	last := async(func() (jobtype.Job, error) { return e.Wait(ctx, ids[links-1], time.Now().Add(time.Minute)) })
	for i := range links {
		// The claim parks (ClaimJobs with a deadline) until the link is
		// released; only link i may be QUEUED now.
		got, err := e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"link"}}, 10, time.Now().Add(30*time.Second))
		if err != nil || len(got) != 1 || got[0].ID != ids[i] {
			t.Fatalf("claim %d = %v, %v; want link %d alone", i, got, err, i)
		}
		if _, err := e.Complete(ctx, got[0].ID, got[0].LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if j, err := await(t, last); err != nil || j.State != jobtype.Succeeded {
		t.Fatalf("wait for the last link = %s, %v", j.State, err)
	}
}

// Retries never join WAITING chains longer than the bound: a failed
// chain of 150 retried from its end (as a bulk retry, newest first,
// does) takes 100 retries, and the 101st, which would hang 101 jobs
// after one another, is refused; a job submitted after its end counts
// the whole chain; and cancelling its first link cancels the rest, as
// for any chain the bound allows.
func TestARetryNeverJoinsAChainLongerThanTheBound(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	const links = jobtype.MaxDependencyDepth + 50
	ids := cancelledChain(t, e, links, "")
	for i := links - 1; i >= 0; i-- {
		j, err := e.Retry(ctx, ids[i])
		if n := links - i; n <= jobtype.MaxDependencyDepth {
			if err != nil || j.State != jobtype.Waiting {
				t.Fatalf("retry %d, of link %d: %s, %v; want WAITING", n, i, j.State, err)
			}
			continue
		}
		if !isInvalid(err, "after") {
			t.Fatalf("retry %d, of link %d: %s, %v; want it refused, after a chain of %d", links-i, i, j.State, err, jobtype.MaxDependencyDepth)
		}
		if got := get(t, e, ids[i]); got.State != jobtype.Cancelled {
			t.Fatalf("link %d, its retry refused, is %s; want CANCELLED as before", i, got.State)
		}
		break
	}
	if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "chained", After: []string{ids[links-1]}}); !isInvalid(err, "after") {
		t.Fatalf("submit after the end of a retried chain of %d: %v; want it refused", jobtype.MaxDependencyDepth, err)
	}

	// Cancelling the chain's first link cancels the 99 after it, each
	// cancelling the next, within the bound the cascade can take.
	first := links - jobtype.MaxDependencyDepth
	if _, err := e.Cancel(ctx, ids[first]); err != nil {
		t.Fatalf("cancel of the chain's first link: %v", err)
	}
	for i := first + 1; i < links; i++ {
		if j := get(t, e, ids[i]); j.State != jobtype.Cancelled || j.Error == nil || j.Error.Type != jobtype.DependencyFailedError {
			t.Fatalf("link %d, after a cancelled link, is %s (%+v); want CANCELLED by it", i, j.State, j.Error)
		}
	}
}

// cancelledChain submits a chain of links jobs of batch, each after the
// one before and the first after a job that failed: each is CANCELLED as
// it is submitted. It returns their ids, first to last.
func cancelledChain(t *testing.T, e *jobs.Engine, links int, batch string) []string {
	t.Helper()
	head := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Fail(context.Background(), head.ID, head.LeaseID, jobtype.JobError{Type: "Boom"}, false); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, links)
	for i := range ids {
		after := head.ID
		if i > 0 {
			after = ids[i-1]
		}
		j := submit(t, e, jobs.SubmitRequest{Kind: "chained", Batch: batch, After: []string{after}})
		if j.State != jobtype.Cancelled {
			t.Fatalf("link %d, after a failed job, submitted %s; want CANCELLED", i, j.State)
		}
		ids[i] = j.ID
	}
	return ids
}

// A bulk retry of a failed chain of 150, which retries its jobs newest
// first, several at once, leaves no WAITING chain longer than the bound,
// however its retries interleave: each counts the WAITING jobs above and
// below it as they are once the retries before it have committed.
func TestABulkRetryOfALongChainKeepsItsChainsWithinTheBound(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	const links = jobtype.MaxDependencyDepth + 50
	ids := cancelledChain(t, e, links, "chain")
	r, err := e.Bulk(ctx, e.RetryAction(), jobs.BulkFilter{Batch: "chain", States: []jobtype.State{jobtype.Cancelled}}, "", 0)
	if !isInvalid(err, "after") || r.Changed < jobtype.MaxDependencyDepth {
		t.Fatalf("bulk retry: %+v, %v; want at least %d retried, then the chain's bound", r, err, jobtype.MaxDependencyDepth)
	}
	// Link i waits for link i-1: a run of WAITING links is a chain.
	run, longest := 0, 0
	for _, id := range ids {
		if get(t, e, id).State == jobtype.Waiting {
			run++
		} else {
			run = 0
		}
		longest = max(longest, run)
	}
	if longest > jobtype.MaxDependencyDepth {
		t.Fatalf("the bulk retry made a WAITING chain of %d; at most %d", longest, jobtype.MaxDependencyDepth)
	}
	// run is now the chain that ends at the last link.
	if run == jobtype.MaxDependencyDepth {
		if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "chained", After: []string{ids[links-1]}}); !isInvalid(err, "after") {
			t.Fatalf("submit after the end of a WAITING chain of %d: %v; want it refused", run, err)
		}
	}
}

// A waiter and a watcher of a WAITING job see it move: QUEUED when its
// dependency succeeds, and CANCELLED, with the dependency named, when
// one fails.
func TestWaitersSeeAWaitingJobReleasedOrCancelled(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	a := running(t, e, jobs.SubmitRequest{})
	b := running(t, e, jobs.SubmitRequest{})
	queued := submit(t, e, jobs.SubmitRequest{Kind: "after-a", After: []string{a.ID}})
	doomed := submit(t, e, jobs.SubmitRequest{Kind: "after-b", After: []string{b.ID}})
	if queued.State != jobtype.Waiting || len(queued.After) != 1 || queued.OnDependencyFailure != jobtype.CancelOnDependencyFailure {
		t.Fatalf("submitted %+v, want WAITING after a, cancel on failure", queued)
	}
	watched := make(chan jobtype.Job, 8)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go e.Watch(watchCtx, queued.ID, jobs.WatchOptions{Deadline: time.Now().Add(time.Minute), Send: func(s *jobs.Snapshot) error {
		if s != nil {
			watched <- s.Job
		}
		return nil
	}})
	if first := <-watched; first.State != jobtype.Waiting {
		t.Fatalf("watch began with %s", first.State)
	}
	waited := async(func() (jobtype.Job, error) { return e.Wait(ctx, doomed.ID, time.Now().Add(time.Minute)) })

	if _, err := e.Complete(ctx, a.ID, a.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case j := <-watched:
		if j.State != jobtype.Queued || j.Version != 2 {
			t.Fatalf("the watch saw %s at version %d, want QUEUED at 2", j.State, j.Version)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch did not see the job released")
	}
	if _, err := e.Fail(ctx, b.ID, b.LeaseID, jobtype.JobError{Type: "Boom"}, false); err != nil {
		t.Fatal(err)
	}
	j, err := await(t, waited)
	if err != nil || j.State != jobtype.Cancelled || j.Error == nil || j.Error.Type != jobtype.DependencyFailedError {
		t.Fatalf("the wait = %s with %+v, %v; want CANCELLED by the failed dependency", j.State, j.Error, err)
	}
}

// A repeated id in after counts once: 1,001 copies of one job are one
// dependency, not more than the 1,000 allowed.
func TestSubmitAfterCountsARepeatedIDOnce(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	dep := running(t, e, jobs.SubmitRequest{})
	after := make([]string, jobtype.MaxBatchJobs+1)
	for i := range after {
		after[i] = dep.ID
	}
	j, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "after.repeated", After: after})
	if err != nil || len(j.After) != 1 || j.State != jobtype.Waiting {
		t.Fatalf("submit after one job 1,001 times: %v (after %v, %v); want it WAITING on that one job", err, j.After, j.State)
	}
}

func TestSubmitAfterRefusesWhatCannotWait(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	mine := running(t, e, jobs.SubmitRequest{Tenant: "acme"})
	theirs := running(t, e, jobs.SubmitRequest{Tenant: "globex"})
	tooMany := make([]string, jobtype.MaxBatchJobs+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("j_%d", i)
	}
	for _, tc := range []struct {
		name string
		r    jobs.SubmitRequest
		want func(error) bool
	}{
		{"an unknown job", jobs.SubmitRequest{Tenant: "acme", After: []string{mine.ID, "j_nope"}}, missing("j_nope")},
		{"another tenant's job", jobs.SubmitRequest{Tenant: "acme", After: []string{theirs.ID}}, missing(theirs.ID)},
		{"a bad id", jobs.SubmitRequest{After: []string{"has space"}}, func(err error) bool { return isInvalid(err, "after[0]") }},
		{"too many", jobs.SubmitRequest{After: tooMany}, func(err error) bool { return isInvalid(err, "after") }},
		{"a policy without after", jobs.SubmitRequest{OnDependencyFailure: jobtype.RunOnDependencyFailure},
			func(err error) bool { return isInvalid(err, "on_dependency_failure") }},
		{"with hold", jobs.SubmitRequest{Tenant: "acme", After: []string{mine.ID}, Hold: true}, func(err error) bool { return isInvalid(err, "after") }},
		{"a policy that is none", jobs.SubmitRequest{Tenant: "acme", After: []string{mine.ID}, OnDependencyFailure: "maybe"},
			func(err error) bool { return isInvalid(err, "on_dependency_failure") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Kind = "refused"
			if _, err := e.Submit(ctx, tc.r); !tc.want(err) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	list, _, err := e.List(ctx, jobs.ListRequest{Tenant: "acme", Kind: "refused"})
	if err != nil || len(list) != 0 {
		t.Fatalf("refused submits stored %d jobs (%v)", len(list), err)
	}
}

func missing(id string) func(error) bool {
	return func(err error) bool {
		var me *jobtype.MissingError
		return errors.As(err, &me) && me.ID == id && me.Field == "after"
	}
}

// A dependency ended on one replica releases the job there, and a claim
// parked on another replica takes it.
func TestADependencyEndedOnOneReplicaReleasesAClaimParkedOnAnother(t *testing.T) {
	a, b := replicas(t)
	ctx := context.Background()
	dep := running(t, a, jobs.SubmitRequest{})
	after := submit(t, a, jobs.SubmitRequest{Kind: "released-elsewhere", After: []string{dep.ID}})
	claimed := async(func() (jobtype.Job, error) {
		return b.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-b", Kinds: []string{"released-elsewhere"}}, soon())
	})
	waitParked(t, b, 1)
	waited := async(func() (jobtype.Job, error) { return b.Wait(ctx, after.ID, soon()) })
	if _, err := a.Complete(ctx, dep.ID, dep.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	got, err := await(t, claimed)
	if err != nil || got.ID != after.ID {
		t.Fatalf("the claim parked on the other replica = %s, %v; want the released job", got.ID, err)
	}
	if _, err := b.Complete(ctx, got.ID, got.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if j, err := await(t, waited); err != nil || j.State != jobtype.Succeeded {
		t.Fatalf("the wait on the other replica = %s, %v", j.State, err)
	}
}

// SubmitMany names the request whose dependency is missing, as it names
// its other refusals.
func TestSubmitManyNamesTheJobWhoseDependencyIsMissing(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	dep := running(t, e, jobs.SubmitRequest{})
	_, err := e.SubmitMany(context.Background(), []jobs.SubmitRequest{
		{Kind: "k", After: []string{dep.ID}}, {Kind: "k"}, {Kind: "k", After: []string{dep.ID, "j_nope"}}})
	var me *jobtype.MissingError
	if !errors.As(err, &me) || me.Field != "jobs[2].after" || me.ID != "j_nope" {
		t.Fatalf("err = %v, want jobs[2].after: job j_nope not found", err)
	}
}
