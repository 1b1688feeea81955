package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// submitBacklog submits n jobs of tenant to queue, in batches.
func submitBacklog(t *testing.T, e *jobs.Engine, tenant, queue string, n int) {
	t.Helper()
	for n > 0 {
		rs := make([]jobs.SubmitRequest, min(n, jobtype.MaxBatchJobs))
		for i := range rs {
			rs[i] = jobs.SubmitRequest{Tenant: tenant, Queue: queue, Kind: "bulk"}
		}
		if _, err := e.SubmitMany(context.Background(), rs); err != nil {
			t.Fatalf("submit %d jobs of %s: %v", len(rs), tenant, err)
		}
		n -= len(rs)
	}
}

// Two tenants with backlogs in one queue, weights 3:1 set by SetRules:
// the claims split 3:1, one claim at a time or several at once, in a
// queue without rules and in one with them (the store's two ways to
// claim); once the lighter tenant's backlog is gone, the heavier one
// gets every claim.
func TestClaimsInAQueueSplitByTheTenantsWeights(t *testing.T) {
	const claims = 1000
	for _, tt := range []struct {
		name  string
		queue string
		batch int
	}{
		{"one at a time, a queue without rules", "default", 1},
		{"ten at a time, a queue with max_running", "bounded", 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			if err := e.SetRules(jobtype.Rules{
				Queues:  map[string]jobtype.QueueRules{"bounded": {MaxRunning: 100_000}},
				Tenants: map[string]jobtype.TenantRules{"acme": {Weight: 3}, "globex": {MaxQueued: 10_000}},
			}); err != nil {
				t.Fatal(err)
			}
			// More than either's share of the claims counted, so both
			// have ready jobs throughout; globex's are the older.
			submitBacklog(t, e, "globex", tt.queue, 400)
			submitBacklog(t, e, "acme", tt.queue, 900)

			ctx := context.Background()
			got := map[string]int{}
			claim := func() int {
				js, err := e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: "w", Queues: []string{tt.queue}}, tt.batch, time.Now())
				if err != nil {
					t.Fatalf("claim after %d claims: %v", got["acme"]+got["globex"], err)
				}
				for _, j := range js {
					got[j.Tenant]++
				}
				return len(js)
			}
			for n := 0; n < claims; {
				n += claim()
			}
			acme, globex := got["acme"], got["globex"]
			if globex == 0 {
				t.Fatalf("of %d claims acme got %d, globex none", claims, acme)
			}
			if ratio := float64(acme) / float64(globex); ratio < 3*0.95 || ratio > 3*1.05 {
				t.Errorf("of %d claims acme got %d and globex %d: %.3f to 1, want 3 to 1 within 5%%", claims, acme, globex, ratio)
			}

			// Work-conserving: the rest of both backlogs is claimed,
			// whatever the weights, and then nothing is left.
			for got["acme"]+got["globex"] < 1300 {
				claim()
			}
			if got["acme"] != 900 || got["globex"] != 400 {
				t.Errorf("after every job was claimed acme got %d and globex %d, want all of 900 and 400", got["acme"], got["globex"])
			}
			if js, err := e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: "w", Queues: []string{tt.queue}}, 1, time.Now()); !errors.Is(err, jobtype.ErrNoJob) {
				t.Errorf("a claim with both backlogs taken got %d jobs, %v; want ErrNoJob", len(js), err)
			}
		})
	}
}

// The probe of issue 22, at the engine: tenant acme submits to a serial
// queue, before anyone else, a job of a kind no worker runs. Serial per
// tenant, it holds only acme's own later jobs: the other tenants' jobs
// are claimed, each tenant's in its order, one at a time per tenant; and
// with max_running 1 one at a time across tenants, acme's job still
// holding nobody.
func TestASerialQueuesHeadThatNoWorkerRunsHoldsNoOtherTenant(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"index": {Serial: true, BlockOnFailure: true},
		"one":   {Serial: true, BlockOnFailure: true, MaxRunning: 1},
	}}})
	ctx := context.Background()
	for _, queue := range []string{"index", "one"} {
		t.Run(queue, func(t *testing.T) {
			blocker := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Queue: queue, Kind: "nobody-runs"})
			acmeNext := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Queue: queue, Kind: "reindex"})
			var globex, initech []jobtype.Job
			for range 2 {
				globex = append(globex, submit(t, e, jobs.SubmitRequest{Tenant: "globex", Queue: queue, Kind: "reindex"}))
				initech = append(initech, submit(t, e, jobs.SubmitRequest{Tenant: "initech", Queue: queue, Kind: "reindex"}))
			}
			worker := jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"reindex"}, Queues: []string{queue}}
			claimNow := func(r jobs.ClaimRequest) (jobtype.Job, error) { return e.Claim(ctx, r, time.Now()) }
			complete := func(j jobtype.Job) {
				t.Helper()
				if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
					t.Fatal(err)
				}
			}

			// A worker of any tenant, and one of globex's alone (as a
			// worker token scoped to a tenant claims), both get work.
			first, err := claimNow(worker)
			if err != nil || first.Tenant == "acme" {
				t.Fatalf("the worker claimed %s of %q, %v; want globex's or initech's head past acme's", first.ID, first.Tenant, err)
			}
			want := map[string]jobtype.Job{"globex": globex[0], "initech": initech[0]}[first.Tenant]
			if first.ID != want.ID {
				t.Fatalf("the worker claimed %s of %s, want that tenant's head %s", first.ID, first.Tenant, want.ID)
			}
			other := map[string]string{"globex": "initech", "initech": "globex"}[first.Tenant]
			second, err := claimNow(worker)
			switch {
			case queue == "one" && !errors.Is(err, jobtype.ErrNoJob):
				t.Fatalf("with max_running 1 a second claim got %s of %q, %v; want nothing while %s runs", second.ID, second.Tenant, err, first.ID)
			case queue == "index" && (err != nil || second.Tenant != other):
				t.Fatalf("the second claim got %s of %q, %v; want %s's head: each tenant's runs one at a time, the tenants at once", second.ID, second.Tenant, err, other)
			}
			complete(first)
			if queue == "one" {
				if second, err = claimNow(worker); err != nil || second.Tenant != other {
					t.Fatalf("once %s ended the claim got %s of %q, %v; want %s's head, its turn", first.ID, second.ID, second.Tenant, err, other)
				}
			}
			complete(second)

			// globex's worker, scoped to globex, takes its second job.
			j, err := claimNow(jobs.ClaimRequest{WorkerID: "globex-worker", Tenants: []string{"globex"}, Kinds: []string{"reindex"}, Queues: []string{queue}})
			if err != nil || j.ID != globex[1].ID {
				t.Fatalf("globex's worker claimed %s, %v; want globex's second job %s", j.ID, err, globex[1].ID)
			}
			complete(j)
			if j, err = claimNow(worker); err != nil || j.ID != initech[1].ID {
				t.Fatalf("the worker claimed %s, %v; want initech's second job %s", j.ID, err, initech[1].ID)
			}
			complete(j)

			// acme's own later job waits behind its head, which waits for
			// a worker of its kind.
			if j, err := claimNow(worker); !errors.Is(err, jobtype.ErrNoJob) {
				t.Fatalf("the worker claimed %s of %q, %v; want nothing: acme's next job waits behind acme's head", j.ID, j.Tenant, err)
			}
			for _, id := range []string{blocker.ID, acmeNext.ID} {
				if got := get(t, e, id); got.State != jobtype.Queued {
					t.Errorf("acme's job %s is %s, want still queued", id, got.State)
				}
			}
			if _, err := e.Cancel(ctx, blocker.ID); err != nil {
				t.Fatal(err)
			}
			if j, err := claimNow(worker); err != nil || j.ID != acmeNext.ID {
				t.Fatalf("after acme's head was cancelled the worker claimed %s, %v; want acme's next %s", j.ID, err, acmeNext.ID)
			} else {
				complete(j)
			}
		})
	}
}
