package jobs_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// runningOf returns tenant's RUNNING jobs, as a user listing them sees
// them.
func runningOf(t *testing.T, e *jobs.Engine, tenant string) []jobtype.Job {
	t.Helper()
	list, _, err := e.List(context.Background(), jobs.ListRequest{Tenant: tenant, States: []jobtype.State{jobtype.Running}, Limit: jobs.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// claimUpTo claims up to n jobs for r without parking; ErrNoJob is no
// jobs.
func claimUpTo(t *testing.T, e *jobs.Engine, r jobs.ClaimRequest, n int) []jobtype.Job {
	t.Helper()
	js, err := e.ClaimJobs(context.Background(), r, n, time.Now())
	if err != nil && !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("claim: %v", err)
	}
	return js
}

// tenantsOf counts jobs by tenant.
func tenantsOf(js []jobtype.Job) map[string]int {
	n := map[string]int{}
	for _, j := range js {
		n[j.Tenant]++
	}
	return n
}

// acme may run 2 jobs at once, in all queues together. Its 10 jobs in
// two queues give it 2 running, while globex's are claimed past them; a
// new job of acme's wakes a parked claim, which reads and does not
// write; one of acme's running jobs ending wakes every claim that may
// take acme's jobs (not one limited to globex), and the parked claim
// gets acme's next job, with no poll: it has no deadline, which would
// make it look once more.
func TestATenantsMaxRunningHoldsAcrossQueuesAndAJobOfItsEndingWakesAParkedClaim(t *testing.T) {
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{Rules: jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"acme": {MaxRunning: 2}}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submitBacklog(t, e, "acme", "q1", 5)
	submitBacklog(t, e, "acme", "q2", 5)
	submitBacklog(t, e, "globex", "q1", 3)

	anyWorker := jobs.ClaimRequest{WorkerID: "w"}
	if got := tenantsOf(claimUpTo(t, e, anyWorker, 10)); got["acme"] != 2 || got["globex"] != 3 {
		t.Fatalf("a claim of 10 took %v, want acme's 2 (its max_running) and globex's 3", got)
	}
	if js := claimUpTo(t, e, anyWorker, 1); len(js) != 0 {
		t.Fatalf("with acme at its bound and globex's jobs running a claim took %s of %s", js[0].ID, js[0].Tenant)
	}
	acmeRunning := runningOf(t, e, "acme")
	if len(acmeRunning) != 2 || len(runningOf(t, e, "globex")) != 3 {
		t.Fatalf("running: acme %d, globex %d; want 2 and 3", len(acmeRunning), len(runningOf(t, e, "globex")))
	}

	// A worker of globex's alone, then one of any tenant: both park.
	globexOnly := async(func() (jobtype.Job, error) {
		return e.Claim(ctx, jobs.ClaimRequest{WorkerID: "globex-worker", Tenants: []string{"globex"}}, time.Time{})
	})
	waitParked(t, e, 1)
	parked := async(func() (jobtype.Job, error) { return e.Claim(ctx, anyWorker, time.Time{}) })
	waitParked(t, e, 2)

	// A new job of acme's wakes one claim that may take it; acme is at
	// its bound, so the claim reads, finds nothing and parks again
	// without a claim's write.
	reads, writes := st.reads.Load(), st.claims.Load()
	submit(t, e, jobs.SubmitRequest{Tenant: "acme", Queue: "q2", Kind: "bulk"})
	waitFor(t, "reads", &st.reads, reads+1)
	waitParked(t, e, 2)
	if n := st.claims.Load() - writes; n != 0 {
		t.Errorf("claim writes by a claim woken for a job of a tenant at its bound: %d, want 0", n)
	}

	// One of acme's running jobs ends: the claim of any tenant is woken
	// (globex's is not) and takes acme's next job. On PostgreSQL the
	// listener's catch-up may hear a commit before its notification and
	// wake a claim for it too (extraWakes), which finds nothing and
	// parks again: the loaded run saw 2.
	wakes := e.ClaimWakes()
	if _, err := e.Complete(ctx, acmeRunning[0].ID, acmeRunning[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if n := e.ClaimWakes() - wakes; n < 1 || n > 1+extraWakes() {
		t.Errorf("wakes by acme's job ending: %d, want 1 (the claim that may take acme's jobs), and on PostgreSQL at most %d more", n, extraWakes())
	}
	j, err := await(t, parked)
	if err != nil || j.Tenant != "acme" {
		t.Fatalf("the parked claim got %s of %q, %v; want acme's next job", j.ID, j.Tenant, err)
	}
	if n := len(runningOf(t, e, "acme")); n != 2 {
		t.Errorf("acme has %d running, want 2", n)
	}

	// globex's worker still waits, and gets globex's next job.
	waitParked(t, e, 1)
	want := submit(t, e, jobs.SubmitRequest{Tenant: "globex", Queue: "q2", Kind: "bulk"})
	if j, err := await(t, globexOnly); err != nil || j.ID != want.ID {
		t.Fatalf("globex's worker got %s, %v; want %s", j.ID, err, want.ID)
	}
}

// The bound holds across replicas, and a claim parked behind it on one
// replica is woken by acme's job ending on another, through the store's
// listener alone.
func TestATenantsJobEndingOnOneReplicaWakesAClaimParkedBehindItsBoundOnAnother(t *testing.T) {
	sa, sb := openSharedStores(t)
	cfg := jobs.Config{Rules: jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"acme": {MaxRunning: 2}}}}
	a, b := newEngineOver(t, sa, cfg), newEngineOver(t, sb, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	submitBacklog(t, a, "acme", "q1", 2)
	submitBacklog(t, a, "acme", "q2", 2)
	first := claimUpTo(t, a, jobs.ClaimRequest{WorkerID: "w-a"}, 10)
	if len(first) != 2 {
		t.Fatalf("replica a claimed %d jobs, want 2 (acme's max_running)", len(first))
	}
	parked := async(func() (jobtype.Job, error) {
		return b.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-b"}, time.Time{})
	})
	waitParked(t, b, 1)
	if _, err := a.Complete(ctx, first[0].ID, first[0].LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	j, err := await(t, parked)
	if err != nil || j.Tenant != "acme" || j.ID == first[1].ID {
		t.Fatalf("the claim parked on replica b got %s of %q, %v; want acme's third job", j.ID, j.Tenant, err)
	}
	if n := len(runningOf(t, a, "acme")); n != 2 {
		t.Errorf("acme has %d running, want 2", n)
	}
}

// A queue of max_running_per_tenant 1: acme's backlog takes one slot, the
// other tenants theirs; a slot freed wakes the parked claim, which takes
// the next job of the tenant that freed it. With max_running 4 the
// fourth slot goes to a fourth tenant; the rule alone (no max_running)
// bounds each tenant just the same.
func TestAQueuesMaxRunningPerTenantGivesEachTenantItsOwnSlot(t *testing.T) {
	for _, tt := range []struct {
		name  string
		rules jobtype.QueueRules
	}{
		{"with max_running 4", jobtype.QueueRules{MaxRunning: 4, MaxRunningPerTenant: 1}},
		{"without max_running", jobtype.QueueRules{MaxRunningPerTenant: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"reports": tt.rules}}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			submitBacklog(t, e, "acme", "reports", 10)
			submitBacklog(t, e, "globex", "reports", 2)
			submitBacklog(t, e, "initech", "reports", 2)

			worker := jobs.ClaimRequest{WorkerID: "w", Queues: []string{"reports"}}
			if got := tenantsOf(claimUpTo(t, e, worker, 10)); len(got) != 3 || got["acme"] != 1 || got["globex"] != 1 || got["initech"] != 1 {
				t.Fatalf("a claim of 10 took %v, want one job of each of acme, globex and initech", got)
			}
			if js := claimUpTo(t, e, worker, 1); len(js) != 0 {
				t.Fatalf("with every tenant at the queue's bound a claim took %s of %s", js[0].ID, js[0].Tenant)
			}
			stats, err := e.QueueStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range stats {
				if q.Name == "reports" && (q.Running != 3 || q.MaxRunning != tt.rules.MaxRunning || q.MaxRunningPerTenant != 1) {
					t.Errorf("reports' stats: %d running, max_running %d, max_running_per_tenant %d; want 3, %d, 1", q.Running, q.MaxRunning, q.MaxRunningPerTenant, tt.rules.MaxRunning)
				}
			}

			parked := async(func() (jobtype.Job, error) { return e.Claim(ctx, worker, time.Time{}) })
			waitParked(t, e, 1)
			done := runningOf(t, e, "globex")[0]
			if _, err := e.Complete(ctx, done.ID, done.LeaseID, nil); err != nil {
				t.Fatal(err)
			}
			j, err := await(t, parked)
			if err != nil || j.Tenant != "globex" {
				t.Fatalf("the parked claim got %s of %q, %v; want globex's second job", j.ID, j.Tenant, err)
			}
			for _, tenant := range []string{"acme", "globex", "initech"} {
				if n := len(runningOf(t, e, tenant)); n != 1 {
					t.Errorf("%s has %d running in reports, want 1", tenant, n)
				}
			}

			// A fourth tenant takes a slot of its own.
			want := submit(t, e, jobs.SubmitRequest{Tenant: "umbrella", Queue: "reports", Kind: "bulk"})
			if js := claimUpTo(t, e, worker, 10); len(js) != 1 || js[0].ID != want.ID {
				t.Fatalf("with umbrella's job queued a claim took %v, want only %s", tenantsOf(js), want.ID)
			}
		})
	}
}

// SetRules refuses the bounds the configuration file refuses, and keeps
// the rules before.
func TestTheEngineRefusesRunningBoundsThatBoundNothingOrAreNegative(t *testing.T) {
	before := jobtype.Rules{
		Queues:  map[string]jobtype.QueueRules{"reports": {MaxRunning: 4, MaxRunningPerTenant: 2}},
		Tenants: map[string]jobtype.TenantRules{"acme": {MaxRunning: 3}},
	}
	e, _ := newEngine(t, jobs.Config{Rules: before})
	for _, tt := range []struct {
		name  string
		rules jobtype.Rules
		says  string
	}{
		{"a negative max_running_per_tenant", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"reports": {MaxRunningPerTenant: -1}}},
			"queue reports: max_running_per_tenant: must not be negative, got -1"},
		{"a max_running_per_tenant above max_running", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"reports": {MaxRunning: 4, MaxRunningPerTenant: 5}}},
			"queue reports: max_running_per_tenant: 5 is above the queue's max_running 4, so it would bound nothing: at most 4"},
		{"a serial queue of 2 per tenant", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"reports": {Serial: true, MaxRunningPerTenant: 2}}},
			"queue reports: max_running_per_tenant: a serial queue runs one job of each tenant at a time already"},
		{"a tenant's negative max_running", jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"acme": {MaxRunning: -1}}},
			"tenant acme: max_running: must not be negative, got -1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := e.SetRules(tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("SetRules: %v, want it refused saying %q", err, tt.says)
			}
			if got := e.Rules(); !reflect.DeepEqual(got.Queues, before.Queues) || !reflect.DeepEqual(got.Tenants, before.Tenants) {
				t.Errorf("after the refusal the rules are %+v, want those before", got)
			}
		})
	}
}
