package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// priorityCases pin claim order with priorities: the most urgent ready
// job (Priority 0 first) before the oldest, within a queue and across
// queues, whatever the worker's filter and the queues' rules, except in
// a serial queue, which stays first-in first-out.
var priorityCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"claims take the most urgent ready job first, then RunAt, then creation, one or many at a time", testPriorityOrder},
	{"a more urgent job of another queue goes first, whatever the filter and the rules", testPriorityAcrossQueues},
	{"an urgent job due later holds back no ready one, and next ready is the earliest RunAt", testPriorityNotReady},
	{"a serial queue takes its jobs in order whatever their priority", testPrioritySerial},
	{"a job stored without a priority has priority 0, the most urgent", testPriorityDefault},
	{"a job keeps its priority through claim, release and retry", testPriorityKept},
}

// prioritized is a fresh job of queue, created at sec, of priority p.
func prioritized(id, queue string, sec int, p int32) jobtype.Job {
	j := fresh(id, queue, sec)
	j.Priority = p
	return j
}

// priorityFilters are the filters a claim of the queue "default" may
// come with: each takes another path through a backend's pick.
func priorityFilters() []struct {
	name string
	f    store.ClaimFilter
} {
	limits := map[string]store.QueueLimit{"default": {MaxRunning: 100, Pools: []string{"p"}}}
	return []struct {
		name string
		f    store.ClaimFilter
	}{
		{"no filter", store.ClaimFilter{}},
		{"one queue", store.ClaimFilter{Queues: []string{"default"}}},
		{"queues", store.ClaimFilter{Queues: []string{"default", "other"}}},
		{"one kind", store.ClaimFilter{Kinds: []string{"email"}}},
		{"kinds", store.ClaimFilter{Kinds: []string{"email", "report"}}},
		{"kinds and queues", store.ClaimFilter{Kinds: []string{"email", "report"}, Queues: []string{"default", "other"}}},
		{"tenants", store.ClaimFilter{Tenants: []string{"acme"}}},
		{"rules", store.ClaimFilter{Limits: limits, Pools: map[string]int{"p": 100}}},
		{"rules and kinds", store.ClaimFilter{Kinds: []string{"email", "report"}, Limits: limits, Pools: map[string]int{"p": 100}}},
	}
}

func testPriorityOrder(t *testing.T, s store.Store) {
	// Created in this order; RunAt is the second number.
	for _, j := range []struct {
		id        string
		runAt     int
		priority  int32
		createdAt int
	}{
		{"p5-old", 1, 5, 0},
		{"p1-late", 9, 1, 1},
		{"p1-early", 2, 1, 2},
		{"p9", 0, 9, 3},
		{"p0", 8, 0, 4},
		{"p1-early-too", 2, 1, 5},
	} {
		job := prioritized(j.id, "default", j.createdAt, j.priority)
		job.RunAt = at(j.runAt)
		create(t, s, job)
	}
	want := []string{"p0", "p1-early", "p1-early-too", "p1-late", "p5-old", "p9"}
	for _, tt := range priorityFilters() {
		f := tt.f
		f.Now = at(100)
		t.Run(tt.name+", one at a time", func(t *testing.T) {
			got := claimAll(t, s, f)
			if !slices.Equal(got, want) {
				t.Errorf("claim order = %v, want %v", got, want)
			}
			requeueAll(t, s, want)
		})
		if f.Limits != nil {
			continue // claims under rules take one job at a time
		}
		t.Run(tt.name+", four at once", func(t *testing.T) {
			var got []string
			for _, c := range claimJobs(t, s, f, batchClaim("b", 4)) {
				got = append(got, c.Job.ID)
			}
			if !slices.Equal(got, want[:4]) {
				t.Errorf("a claim of four took %v, want %v in this order", got, want[:4])
			}
			requeueAll(t, s, want)
		})
	}
}

// requeueAll puts the jobs ids back in the queue as they were, for the
// next claim.
func requeueAll(t *testing.T, s store.Store, ids []string) {
	t.Helper()
	for _, id := range ids {
		if _, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
			j.State, j.LeaseID, j.WorkerID, j.LeaseExpiresAt, j.Attempt = jobtype.Queued, "", "", time.Time{}, 0
			return nil
		}); err != nil {
			t.Fatalf("requeue %s: %v", id, err)
		}
	}
}

func testPriorityAcrossQueues(t *testing.T, s store.Store) {
	create(t, s, prioritized("default-p3", "default", 0, 3))
	create(t, s, prioritized("other-p1", "other", 5, 1))
	create(t, s, prioritized("default-p1", "default", 6, 1))
	create(t, s, prioritized("other-p7", "other", 1, 7))
	want := []string{"other-p1", "default-p1", "default-p3", "other-p7"}
	limits := map[string]store.QueueLimit{"default": {MaxRunning: 100}}
	for _, f := range []struct {
		name string
		f    store.ClaimFilter
	}{
		{"no filter", store.ClaimFilter{}},
		{"queues", store.ClaimFilter{Queues: []string{"default", "other"}}},
		{"kinds", store.ClaimFilter{Kinds: []string{"email", "report"}}},
		{"a queue with rules", store.ClaimFilter{Limits: limits}},
		{"a queue with rules, and kinds", store.ClaimFilter{Kinds: []string{"email"}, Limits: limits}},
	} {
		t.Run(f.name, func(t *testing.T) {
			f.f.Now = at(100)
			got := claimAll(t, s, f.f)
			if !slices.Equal(got, want) {
				t.Errorf("claim order = %v, want %v", got, want)
			}
			requeueAll(t, s, want)
		})
	}
}

func testPriorityNotReady(t *testing.T, s store.Store) {
	urgent := prioritized("urgent-later", "default", 0, 0)
	urgent.RunAt = at(50)
	create(t, s, urgent)
	create(t, s, prioritized("p2-ready", "default", 1, 2))
	create(t, s, prioritized("p9-ready", "default", 3, 9))
	for _, tt := range priorityFilters() {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			f.Now = at(10)
			runAt, ok, err := s.NextReady(t.Context(), f)
			if err != nil || !ok || !runAt.Equal(at(1)) {
				t.Errorf("next ready = %v, %v, %v; want %v, the earliest RunAt, whatever its priority", runAt, ok, err, at(1))
			}
			if got := claimOne(t, s, f); got != "p2-ready" {
				t.Errorf("claimed %q, want p2-ready: the more urgent job is not due yet", got)
			}
			if got := claimOne(t, s, f); got != "p9-ready" {
				t.Errorf("then claimed %q, want p9-ready", got)
			}
			if got := claimOne(t, s, f); got != "" {
				t.Errorf("then claimed %q, want nothing before RunAt", got)
			}
			runAt, ok, err = s.NextReady(t.Context(), f)
			if err != nil || !ok || !runAt.Equal(at(50)) {
				t.Errorf("next ready = %v, %v, %v; want %v", runAt, ok, err, at(50))
			}
			f.Now = at(50)
			if got := claimOne(t, s, f); got != "urgent-later" {
				t.Errorf("claimed %q at its RunAt, want urgent-later", got)
			}
			requeueAll(t, s, []string{"urgent-later", "p2-ready", "p9-ready"})
		})
	}
}

func testPrioritySerial(t *testing.T, s store.Store) {
	for i, p := range []int32{9, 0, 5, 0} {
		create(t, s, prioritized(fmt.Sprintf("job-%d", i+1), "index", i, p))
	}
	f := store.ClaimFilter{Now: at(100), Limits: serialLimits}
	var order []string
	for range 10 {
		id := claimOne(t, s, f)
		if id == "" {
			break
		}
		order = append(order, id)
		finish(t, s, id)
	}
	if want := []string{"job-1", "job-2", "job-3", "job-4"}; !slices.Equal(order, want) {
		t.Errorf("serial order = %v, want %v (first in, first out, whatever the priority)", order, want)
	}
}

func testPriorityDefault(t *testing.T, s store.Store) {
	create(t, s, prioritized("p1-older", "default", 0, 1))
	create(t, s, fresh("unset", "default", 1))
	if got := get(t, s, "unset"); got.Priority != 0 {
		t.Errorf("priority of a job stored without one = %d, want 0", got.Priority)
	}
	got := claimAll(t, s, store.ClaimFilter{Now: at(100)})
	if want := []string{"unset", "p1-older"}; !slices.Equal(got, want) {
		t.Errorf("claim order = %v, want %v", got, want)
	}
}

func testPriorityKept(t *testing.T, s store.Store) {
	create(t, s, prioritized("job", "default", 0, 4))
	check := func(when string) {
		t.Helper()
		if got := get(t, s, "job"); got.Priority != 4 {
			t.Errorf("priority %s = %d, want 4", when, got.Priority)
		}
	}
	claimed, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(100)}, toRunning)
	if err != nil {
		t.Fatal(err)
	}
	if claimed.Priority != 4 {
		t.Errorf("priority of the claimed job = %d, want 4", claimed.Priority)
	}
	check("after a claim")
	requeueAll(t, s, []string{"job"})
	check("after a release")
	claimed, _, err = store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(100)}, toRunning)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.WriteLeases(t.Context(), []store.LeaseWrite{fail(claimed, true, 0)}, leaseRules)
	if err != nil || len(res) != 1 || !res[0].Held {
		t.Fatalf("fail for a retry: %v, %v", res, err)
	}
	if got := get(t, s, "job"); got.State != jobtype.Queued {
		t.Fatalf("state after a failed attempt with retries left = %s, want queued", got.State)
	}
	check("after a failed attempt, queued for a retry")
}
