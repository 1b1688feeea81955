package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func maxQueued(tenants map[string]int) jobtype.Rules {
	r := jobtype.Rules{Tenants: map[string]jobtype.TenantRules{}}
	for name, n := range tenants {
		r.Tenants[name] = jobtype.TenantRules{MaxQueued: n}
	}
	return r
}

// wantQuota fails unless err is the QuotaError saying msg.
func wantQuota(t *testing.T, err error, msg string) {
	t.Helper()
	var qe *jobtype.QuotaError
	if !errors.As(err, &qe) || err.Error() != msg {
		t.Fatalf("err = %v, want the QuotaError %q", err, msg)
	}
}

// notYetRunningJobs lists tenant's jobs not yet running.
func notYetRunningJobs(t *testing.T, e *jobs.Engine, tenant string) []jobtype.Job {
	t.Helper()
	list, _, err := e.List(context.Background(), jobs.ListRequest{Tenant: tenant, States: jobtype.QueuedStates, Limit: jobs.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestASubmissionPastItsTenantsMaxQueuedIsRefusedWhole(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: maxQueued(map[string]int{"acme": 3})})
	ctx := context.Background()
	submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "held", Hold: true})
	first := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "first"})
	submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "after", After: []string{first.ID}})

	// Held, queued and waiting jobs all count.
	_, err := e.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "more"})
	wantQuota(t, err, `tenant "acme" has 3 jobs not yet running, its max_queued is 3: wait for some to start or end`)
	// Other tenants are not bounded by acme's.
	for range 5 {
		submit(t, e, jobs.SubmitRequest{Tenant: "globex", Kind: "more"})
	}

	// The first job starts: one place is free, for one job, not two.
	if _, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"first"}}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.SubmitMany(ctx, []jobs.SubmitRequest{{Tenant: "acme", Kind: "batch"}, {Tenant: "acme", Kind: "batch"}})
	wantQuota(t, err, `tenant "acme" has 2 jobs not yet running, its max_queued is 3: 2 more would pass it; submit at most 1, or wait for some to start or end`)
	if got := len(notYetRunningJobs(t, e, "acme")); got != 2 {
		t.Fatalf("after the refused batch acme has %d jobs not yet running, want 2: the batch was half created", got)
	}
	if _, err := e.SubmitMany(ctx, []jobs.SubmitRequest{{Tenant: "acme", Kind: "batch"}}); err != nil {
		t.Fatalf("a batch that fits: %v", err)
	}

	// A reload applies to the next submission: no bound, then a lower one.
	if err := e.SetRules(jobtype.Rules{}); err != nil {
		t.Fatal(err)
	}
	submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "unbounded"})
	if err := e.SetRules(maxQueued(map[string]int{"acme": 2})); err != nil {
		t.Fatal(err)
	}
	_, err = e.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "more"})
	wantQuota(t, err, `tenant "acme" has more than 2 jobs not yet running, its max_queued is 2: wait for some to start or end`)
}

func TestARetryCountsAgainstMaxQueued(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: maxQueued(map[string]int{"acme": 1})})
	ctx := context.Background()
	r := running(t, e, jobs.SubmitRequest{Tenant: "acme"})
	failed, err := e.Fail(ctx, r.ID, r.LeaseID, jobtype.JobError{Type: "Boom", Message: "no"}, false)
	if err != nil || failed.State != jobtype.Failed {
		t.Fatalf("fail: %v, %v", failed, err)
	}
	waiting := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "waiting"})

	_, err = e.Retry(ctx, failed.ID)
	wantQuota(t, err, `tenant "acme" has 1 job not yet running, its max_queued is 1: wait for some to start or end`)
	if j := get(t, e, failed.ID); j.State != jobtype.Failed || j.Version != failed.Version {
		t.Fatalf("after the refused retry the job is %s at version %d, want FAILED at %d", j.State, j.Version, failed.Version)
	}
	// The bulk retry stops at the quota with the same refusal.
	_, err = e.Bulk(ctx, e.RetryAction(), jobs.BulkFilter{Tenant: "acme", States: []jobtype.State{jobtype.Failed}}, "", 0)
	wantQuota(t, err, `tenant "acme" has 1 job not yet running, its max_queued is 1: wait for some to start or end`)

	if _, err := e.Cancel(ctx, waiting.ID); err != nil {
		t.Fatal(err)
	}
	retried, err := e.Retry(ctx, failed.ID)
	if err != nil || retried.State != jobtype.Queued {
		t.Fatalf("the retry once there is room: %v, %v; want QUEUED", retried, err)
	}
}

// The bound is on what callers ask for: what the engine queues on its
// own (a failed attempt's retry, a schedule's run) is never refused, and
// counts.
func TestWhatTheEngineQueuesOnItsOwnPassesMaxQueuedAndCounts(t *testing.T) {
	nightly := jobtype.Schedule{Name: "nightly", Kind: "report", Tenant: "acme", Every: time.Hour}
	rules := maxQueued(map[string]int{"acme": 1})
	rules.Schedules = []jobtype.Schedule{nightly}
	e, _ := newEngine(t, jobs.Config{Rules: maxQueued(map[string]int{"acme": 1})})
	ctx := context.Background()
	r := running(t, e, jobs.SubmitRequest{Tenant: "acme", MaxAttempts: 3})
	submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "waiting"}) // at the bound

	again, err := e.Fail(ctx, r.ID, r.LeaseID, jobtype.JobError{Type: "Flaky", Message: "try again"}, true)
	if err != nil || again.State != jobtype.Queued {
		t.Fatalf("a retryable failure at the bound: %v, %v; want the job QUEUED for its next attempt", again, err)
	}
	if err := e.SetRules(rules); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	if got := runs(t, e, "acme", "report"); len(got) != 1 || got[0].State != jobtype.Queued {
		t.Fatalf("the schedule's run past the bound: %v; want it queued", got)
	}
	if got := len(notYetRunningJobs(t, e, "acme")); got != 3 {
		t.Fatalf("acme has %d jobs not yet running, want 3", got)
	}
	_, err = e.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "more"})
	wantQuota(t, err, `tenant "acme" has more than 1 job not yet running, its max_queued is 1: wait for some to start or end`)
}
