package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// readCounting counts a store's NextReady and RateWindows: the reads a
// parked claim makes each time it looks.
type readCounting struct {
	store.Store
	reads atomic.Int64
}

func (s *readCounting) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	s.reads.Add(1)
	return s.Store.NextReady(ctx, f)
}

func (s *readCounting) RateWindows(ctx context.Context, now time.Time, rates map[string]jobtype.Rate) (map[string]store.RateWindow, error) {
	s.reads.Add(1)
	return s.Store.RateWindows(ctx, now, rates)
}

// A claim parked on a queue held by its rate is woken when the window
// has room, by the engine's timer, not by looking again and again: six
// jobs of a queue allowing 2 claims per 400 ms are claimed two by two, no
// window of 400 ms ever holding more than 2 claims, with a few reads per
// window.
func TestAClaimHeldByARateWakesWhenTheWindowHasRoom(t *testing.T) {
	st := &readCounting{Store: openStore(t)}
	const per = 400 * time.Millisecond
	e := newEngineOver(t, st, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"rated": {Rate: jobtype.Rate{Limit: 2, Per: per}},
	}}})
	for range 6 {
		submit(t, e, jobs.SubmitRequest{Queue: "rated"})
	}
	var starts []time.Time
	for range 3 {
		js, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w", Queues: []string{"rated"}}, 10, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(js) != 2 {
			t.Fatalf("a claim of 10 from a queue allowing 2 per %v took %d jobs", per, len(js))
		}
		for _, j := range js {
			starts = append(starts, j.StartedAt)
		}
	}
	for i := 2; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-2]); gap < per {
			t.Errorf("claims %d and %d were %v apart: 3 claims in one window of %v", i-1, i+1, gap, per)
		}
	}
	// Two parks, each: a look on the way in (NextReady, RateWindows), one
	// when the timer fires, one more for a lost race. A poll would read
	// hundreds of times in 800 ms.
	t.Logf("%d reads of the store by the parked claims", st.reads.Load())
	if reads := st.reads.Load(); reads > 20 {
		t.Errorf("the parked claims read the store %d times in two waits of %v: it polls", reads, per)
	}
}

// A rate kept per tenant: a tenant at its limit holds back only its own
// jobs, and a claim parked on it wakes when its window has room, by the
// engine's timer: tenant a's 4 jobs go two per window while b's 2 are
// claimed beside a's first two.
func TestARatePerTenantHoldsEachTenantApart(t *testing.T) {
	st := &readCounting{Store: openStore(t)}
	const per = 400 * time.Millisecond
	e := newEngineOver(t, st, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"api": {Rate: jobtype.Rate{Limit: 2, Per: per, PerTenant: true}},
	}}})
	for range 4 {
		submit(t, e, jobs.SubmitRequest{Tenant: "a", Queue: "api"})
	}
	for range 2 {
		submit(t, e, jobs.SubmitRequest{Tenant: "b", Queue: "api"})
	}
	claim := func() []jobtype.Job {
		t.Helper()
		js, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w", Queues: []string{"api"}}, 10, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return js
	}
	first := claim()
	count := map[string]int{}
	for _, j := range first {
		count[j.Tenant]++
	}
	if count["a"] != 2 || count["b"] != 2 {
		t.Fatalf("the first claim of 10 took %v by tenant, want 2 of a and 2 of b (2 each per window)", count)
	}
	second := claim()
	if len(second) != 2 || second[0].Tenant != "a" || second[1].Tenant != "a" {
		t.Fatalf("the second claim took %d jobs, want a's other 2", len(second))
	}
	if gap := second[0].StartedAt.Sub(first[0].StartedAt); gap < per {
		t.Errorf("a's third job started %v after its first: 3 in one window of %v", gap, per)
	}
	if reads := st.reads.Load(); reads > 20 {
		t.Errorf("the parked claim read the store %d times in a wait of %v: it polls", reads, per)
	}
}
