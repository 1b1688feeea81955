package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var tenantDepthCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"tenant depths split each queue's unfinished jobs by tenant and find each tenant's oldest ready one", testTenantDepths},
	{"tenant depths follow a job from queued to running to ended", testTenantDepthsFollowAJob},
	{"tenant depths of a store with no unfinished job are empty", testTenantDepthsEmpty},
}

func testTenantDepths(t *testing.T, s store.Store) {
	fixture := []struct {
		queue, tenant string
		state         jobtype.State
		runAt         int
	}{
		// Created in this order, so creation order is neither RunAt nor
		// name order. "Zeta" sorts before "acme" byte by byte (as Go
		// compares strings), after it in most collations.
		{"bulk", "acme", jobtype.Queued, 3},
		{"bulk", "globex", jobtype.Queued, 1},
		{"bulk", "acme", jobtype.Queued, 50},
		{"bulk", "acme", jobtype.Running, 0},
		{"bulk", "globex", jobtype.Succeeded, 0},
		{"bulk", "Zeta", jobtype.Running, 0},
		{"bulk", "acme", jobtype.Queued, 2},
		{"alpha", "globex", jobtype.Running, 0},
		{"alpha", "globex", jobtype.Pending, 0},
		{"alpha", "initech", jobtype.Waiting, 0},
		{"mail", "acme", jobtype.Queued, 20},
		{"done", "acme", jobtype.Succeeded, 0},
		{"done", "acme", jobtype.Failed, 0},
		{"done", "globex", jobtype.Cancelled, 0},
		{"done", "globex", jobtype.Lost, 0},
	}
	for i, f := range fixture {
		j := newJob(fmt.Sprintf("job-%02d", i), at(i-100))
		j.Queue, j.Tenant, j.State, j.RunAt = f.queue, f.tenant, f.state, at(f.runAt)
		create(t, s, j)
	}
	type d = store.TenantDepth
	tests := []struct {
		name string
		now  time.Time
		want []store.TenantDepth
	}{
		{"pairs are sorted by queue then tenant, and pending, waiting or ended jobs count nowhere", at(10), []d{
			{Queue: "alpha", Tenant: "globex", Running: 1},
			{Queue: "bulk", Tenant: "Zeta", Running: 1},
			{Queue: "bulk", Tenant: "acme", Queued: 3, Running: 1, OldestReadyRunAt: at(2)},
			{Queue: "bulk", Tenant: "globex", Queued: 1, OldestReadyRunAt: at(1)},
			{Queue: "mail", Tenant: "acme", Queued: 1},
		}},
		{"jobs scheduled for later count as queued but are not waiting", at(0), []d{
			{Queue: "alpha", Tenant: "globex", Running: 1},
			{Queue: "bulk", Tenant: "Zeta", Running: 1},
			{Queue: "bulk", Tenant: "acme", Queued: 3, Running: 1},
			{Queue: "bulk", Tenant: "globex", Queued: 1},
			{Queue: "mail", Tenant: "acme", Queued: 1},
		}},
		{"a job due exactly now is waiting", at(1), []d{
			{Queue: "alpha", Tenant: "globex", Running: 1},
			{Queue: "bulk", Tenant: "Zeta", Running: 1},
			{Queue: "bulk", Tenant: "acme", Queued: 3, Running: 1},
			{Queue: "bulk", Tenant: "globex", Queued: 1, OldestReadyRunAt: at(1)},
			{Queue: "mail", Tenant: "acme", Queued: 1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tenantDepths(t, s, tc.now)
			if !sameTenantDepths(got, tc.want) {
				t.Errorf("tenant depths at %v:\n got %+v\nwant %+v", tc.now, got, tc.want)
			}
			// Summed over tenants they are QueueStats.
			stats, err := s.QueueStats(t.Context(), tc.now)
			if err != nil {
				t.Fatal(err)
			}
			var summed []store.QueueStats
			for _, p := range got {
				if len(summed) == 0 || summed[len(summed)-1].Name != p.Queue {
					summed = append(summed, store.QueueStats{Name: p.Queue})
				}
				q := &summed[len(summed)-1]
				q.Queued += p.Queued
				q.Running += p.Running
				if !p.OldestReadyRunAt.IsZero() && (q.OldestReadyRunAt.IsZero() || p.OldestReadyRunAt.Before(q.OldestReadyRunAt)) {
					q.OldestReadyRunAt = p.OldestReadyRunAt
				}
			}
			if !sameQueueStats(summed, stats) {
				t.Errorf("tenant depths summed by queue = %+v, want queue stats %+v", summed, stats)
			}
		})
	}
}

func testTenantDepthsFollowAJob(t *testing.T, s store.Store) {
	j := newJob("job-1", at(0))
	j.Queue, j.Tenant = "mail", "acme"
	create(t, s, j)
	other := newJob("job-2", at(1))
	other.Queue, other.Tenant = "mail", "globex"
	create(t, s, other)

	steps := []struct {
		name   string
		change func(*jobtype.Job)
		want   []store.TenantDepth
	}{
		{"claimed", func(j *jobtype.Job) { j.State = jobtype.Running }, []store.TenantDepth{
			{Queue: "mail", Tenant: "acme", Running: 1},
			{Queue: "mail", Tenant: "globex", Queued: 1, OldestReadyRunAt: at(1)},
		}},
		{"put back for a retry later", func(j *jobtype.Job) { j.State, j.RunAt = jobtype.Queued, at(30) }, []store.TenantDepth{
			{Queue: "mail", Tenant: "acme", Queued: 1},
			{Queue: "mail", Tenant: "globex", Queued: 1, OldestReadyRunAt: at(1)},
		}},
		{"ended", func(j *jobtype.Job) { j.State = jobtype.Succeeded }, []store.TenantDepth{
			{Queue: "mail", Tenant: "globex", Queued: 1, OldestReadyRunAt: at(1)},
		}},
	}
	for _, step := range steps {
		if _, err := s.UpdateJob(t.Context(), j.ID, func(j *jobtype.Job) error { step.change(j); return nil }); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := tenantDepths(t, s, at(10)); !sameTenantDepths(got, step.want) {
			t.Errorf("after the job is %s: tenant depths\n got %+v\nwant %+v", step.name, got, step.want)
		}
	}
}

func testTenantDepthsEmpty(t *testing.T, s store.Store) {
	j := newJob("ended", at(0))
	j.State = jobtype.Succeeded
	create(t, s, j)
	if got := tenantDepths(t, s, at(10)); len(got) != 0 {
		t.Errorf("tenant depths = %+v, want none", got)
	}
}

func tenantDepths(t *testing.T, s store.Store, now time.Time) []store.TenantDepth {
	t.Helper()
	got, err := s.TenantDepths(t.Context(), now)
	if err != nil {
		t.Fatalf("tenant depths: %v", err)
	}
	return got
}

// sameTenantDepths compares times by instant, and the zero time only
// with the zero time.
func sameTenantDepths(got, want []store.TenantDepth) bool {
	return slices.EqualFunc(got, want, func(a, b store.TenantDepth) bool {
		return a.Queue == b.Queue && a.Tenant == b.Tenant && a.Queued == b.Queued && a.Running == b.Running &&
			a.OldestReadyRunAt.Equal(b.OldestReadyRunAt) &&
			a.OldestReadyRunAt.IsZero() == b.OldestReadyRunAt.IsZero()
	})
}
