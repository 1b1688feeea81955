package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var rateCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a rate-limited queue gives at most its limit of claims in any window, to claims of one and of many; other queues are unaffected", testRateClaims},
	{"rate windows count the claims in the window and, at the limit, say when it has room", testRateWindows},
	{"next ready passes over a queue held by its rate until its window has room", testRateNextReady},
	{"concurrent claims never take a queue past its rate", testRateConcurrent},
	{"a rate kept per tenant gives each tenant its own window", testRatePerTenant},
}

// rateLimits holds queue "rated" to 2 claims per 10 s.
var rateLimits = map[string]store.QueueLimit{"rated": {Rate: jobtype.Rate{Limit: 2, Per: 10 * time.Second}}}

// rateJobs creates n ready jobs in queue "rated" (rated-0, ...) and two in
// "open", all of kind email.
func rateJobs(t *testing.T, s store.Store, n int) {
	t.Helper()
	for i := range n {
		j := newJob(fmt.Sprintf("rated-%d", i), at(i))
		j.Queue = "rated"
		create(t, s, j)
	}
	for i := range 2 {
		j := newJob(fmt.Sprintf("open-%d", i), at(50+i))
		j.Queue = "open"
		create(t, s, j)
	}
}

// claimAt claims up to n jobs of f at now and returns their ids.
func claimAt(t *testing.T, s store.Store, f store.ClaimFilter, now time.Time, n int) []string {
	t.Helper()
	f.Now, f.Limits = now, rateLimits
	c := store.Claim{WorkerID: "worker-1", Now: now, Lease: time.Hour}
	for i := range n {
		c.LeaseIDs = append(c.LeaseIDs, fmt.Sprintf("lease-%d-%d", now.UnixMicro(), i))
	}
	claimed, err := s.ClaimJobs(t.Context(), f, c)
	if errors.Is(err, jobtype.ErrNoJob) {
		return nil
	}
	if err != nil {
		t.Fatalf("claim at %v: %v", now, err)
	}
	var ids []string
	for _, cl := range claimed {
		ids = append(ids, cl.Job.ID)
	}
	return ids
}

func countQueue(ids []string, prefix string) int {
	n := 0
	for _, id := range ids {
		if len(id) > len(prefix) && id[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

func testRateClaims(t *testing.T, s store.Store) {
	rateJobs(t, s, 8)
	// One claim of many: two of rated, and both of open beside them.
	got := claimAt(t, s, store.ClaimFilter{}, at(100), 10)
	if countQueue(got, "rated-") != 2 || countQueue(got, "open-") != 2 {
		t.Fatalf("a claim of 10 took %v, want 2 of rated (its limit) and both of open", got)
	}
	// The window (90 s, 100 s] is full until 110 s, whatever the filter.
	for _, f := range []store.ClaimFilter{{}, {Queues: []string{"rated"}}, {Kinds: []string{"email"}}} {
		if got := claimAt(t, s, f, at(105), 1); got != nil {
			t.Fatalf("a claim with filter %+v at 105 s took %v, want nothing: rated has had 2 claims in its 10 s window", f, got)
		}
	}
	// At 110 s the first two are 10 s old: room for two more, one claim
	// of one at a time.
	for i, want := range []int{1, 1, 0} {
		got := claimAt(t, s, store.ClaimFilter{Queues: []string{"rated"}}, at(110).Add(time.Duration(i)*time.Millisecond), 1)
		if len(got) != want {
			t.Fatalf("claim %d of one at 110 s took %v, want %d job(s)", i+1, got, want)
		}
	}
	// A window is sliding: at 119.9 s the claims of 110 s still count.
	if got := claimAt(t, s, store.ClaimFilter{}, at(119).Add(900*time.Millisecond), 10); got != nil {
		t.Fatalf("a claim at 119.9 s took %v, want nothing", got)
	}
	if got := claimAt(t, s, store.ClaimFilter{}, at(121), 10); len(got) != 2 {
		t.Fatalf("a claim of 10 at 121 s took %v, want 2", got)
	}
}

func testRateWindows(t *testing.T, s store.Store) {
	rateJobs(t, s, 4)
	rates := map[string]jobtype.Rate{"rated": rateLimits["rated"].Rate, "never": {Limit: 5, Per: time.Second}}
	windows := func(now time.Time) map[string]store.RateWindow {
		t.Helper()
		w, err := s.RateWindows(t.Context(), now, rates)
		if err != nil {
			t.Fatalf("rate windows: %v", err)
		}
		return w
	}
	if w := windows(at(99)); w["rated"] != (store.RateWindow{}) || w["never"] != (store.RateWindow{}) {
		t.Fatalf("before any claim: %+v, want zero windows", w)
	}
	claimAt(t, s, store.ClaimFilter{Queues: []string{"rated"}}, at(100), 1)
	if w := windows(at(101)); w["rated"] != (store.RateWindow{Started: 1}) {
		t.Fatalf("after one claim: %+v, want 1 started, not held", w["rated"])
	}
	claimAt(t, s, store.ClaimFilter{Queues: []string{"rated"}}, at(103), 1)
	w := windows(at(104))
	if w["rated"].Started != 2 || !w["rated"].HeldUntil.Equal(at(110)) {
		t.Fatalf("at the limit: %+v, want 2 started, held until %v (the first claim 10 s old)", w["rated"], at(110))
	}
	if w := windows(at(111)); w["rated"] != (store.RateWindow{Started: 1}) {
		t.Fatalf("after the first left the window: %+v, want 1 started, not held", w["rated"])
	}
}

func testRateNextReady(t *testing.T, s store.Store) {
	rateJobs(t, s, 4)
	claimAt(t, s, store.ClaimFilter{Queues: []string{"rated"}}, at(100), 2)
	f := store.ClaimFilter{Queues: []string{"rated"}, Now: at(105), Limits: rateLimits}
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Fatalf("next ready while held = %v, %v, %v; want nothing", runAt, ok, err)
	}
	f.Now = at(111)
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || !ok || !runAt.Equal(at(2)) {
		t.Fatalf("next ready with room again = %v, %v, %v; want %v (rated-2)", runAt, ok, err, at(2))
	}
}

func testRateConcurrent(t *testing.T, s store.Store) {
	rateJobs(t, s, 20)
	limits := map[string]store.QueueLimit{"rated": {Rate: jobtype.Rate{Limit: 5, Per: time.Hour}}}
	var mu sync.Mutex
	taken := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				c := store.Claim{WorkerID: "w", Now: at(100), Lease: time.Hour, LeaseIDs: []string{fmt.Sprintf("l-%d-%d-a", g, i), fmt.Sprintf("l-%d-%d-b", g, i)}}
				claimed, err := s.ClaimJobs(t.Context(), store.ClaimFilter{Queues: []string{"rated"}, Now: at(100), Limits: limits}, c)
				if errors.Is(err, jobtype.ErrNoJob) {
					continue
				}
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				taken += len(claimed)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if taken != 5 {
		t.Fatalf("8 claimers took %d jobs of a queue limited to 5 an hour, want exactly 5", taken)
	}
}

// testRatePerTenant: a rate kept per tenant gives each tenant its own
// window: one tenant at its limit holds back neither the other nor
// next ready's answer for the other, and the windows say when the first
// held tenant has room.
func testRatePerTenant(t *testing.T, s store.Store) {
	perTenant := jobtype.Rate{Limit: 2, Per: 10 * time.Second, PerTenant: true}
	for _, tn := range []string{"a", "b"} {
		createOf(t, s, tn, "api", tn, 5, 0)
	}
	f := store.ClaimFilter{Now: at(100), Limits: map[string]store.QueueLimit{"api": {Rate: perTenant}}}
	claim := func(now time.Time, n int) []string {
		t.Helper()
		f.Now = now
		return claimedIDs(claimJobs(t, s, f, store.Claim{WorkerID: "w", LeaseIDs: leaseIDs(fmt.Sprint("l", now.UnixMicro()), n), Now: now, Lease: time.Hour}))
	}
	if got := byTenant(claim(at(100), 10)); got["a"] != 2 || got["b"] != 2 {
		t.Fatalf("a claim of 10 took %v, want 2 of each tenant (the limit each)", got)
	}
	if got := claim(at(105), 10); len(got) != 0 {
		t.Fatalf("a claim at 105 s took %v, want nothing: both tenants have had 2 claims in the window", got)
	}
	f.Now = at(105)
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Errorf("next ready with both tenants held = %v, %v, %v; want none", runAt, ok, err)
	}
	w, err := s.RateWindows(t.Context(), at(105), map[string]jobtype.Rate{"api": perTenant})
	if err != nil {
		t.Fatal(err)
	}
	if got := w["api"]; got.Started != 2 || !got.HeldUntil.Equal(at(110)) {
		t.Errorf("windows at 105 s: %+v, want 2 started, held until %v", got, at(110))
	}
	// b alone claims at 111 s: a is not held by b's claims.
	createOf(t, s, "c", "api", "c", 1, 0)
	if got := byTenant(claim(at(111), 10)); got["a"] != 2 || got["b"] != 2 || got["c"] != 1 {
		t.Fatalf("a claim of 10 at 111 s took %v, want 2 of a, 2 of b and c's 1", got)
	}
}
