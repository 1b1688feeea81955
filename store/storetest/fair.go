package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var fairCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a tenant that submits one job behind another's backlog is served within as many claims as there are tenants", testFairStarvation},
	{"under contention tenants of weights 3 and 1 get three claims to one, each in its own order", testFairWeights},
	{"claims of several jobs at once keep the weighted shares", testFairWeightsBatch},
	{"claims that move on to another contested queue take that queue's shares", testFairNextQueue},
	{"a tenant alone gets every claim, and one whose jobs the worker cannot take holds nobody back", testFairWorkConserving},
	{"a worker of some kinds takes turns among the tenants with jobs of those kinds, each in its own order", testFairKinds},
	{"a queue with a running limit still shares its room among tenants", testFairRuled},
	{"a serial queue is serial per tenant: one tenant's head, even one no worker runs, never blocks another's", testFairSerialPerTenant},
	{"a serial queue with max_running 1 runs one job at a time across tenants, each tenant in its own order", testFairSerialAcrossTenants},
	{"concurrent claimers keep the weighted shares", testFairConcurrent},
}

var sharedFairCases = []struct {
	name string
	run  func(t *testing.T, a, b store.Store)
}{
	{"claims through two stores keep one queue's weighted shares", testFairShared},
}

// backlog creates n QUEUED jobs of tenant in queue, of kind "email",
// named prefix-0000 on, in that creation order.
func backlog(t *testing.T, s store.Store, tenant, queue, prefix string, n int) {
	t.Helper()
	const chunk = 500
	for start := 0; start < n; start += chunk {
		var jobs []jobtype.Job
		for i := start; i < min(start+chunk, n); i++ {
			j := fresh(fmt.Sprintf("%s-%04d", prefix, i), queue, 0)
			j.Tenant = tenant
			jobs = append(jobs, j)
		}
		if _, err := s.CreateJobs(t.Context(), jobs); err != nil {
			t.Fatalf("create %s's backlog: %v", tenant, err)
		}
	}
}

// tenantOf is the tenant of a job backlog named: the prefix's first
// letter.
func tenantOf(id string) string { return id[:1] }

// shares counts the claimed ids by tenant, and fails unless each
// tenant's were claimed in their creation order.
func shares(t *testing.T, ids []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	last := map[string]string{}
	for _, id := range ids {
		tn := tenantOf(id)
		if id <= last[tn] {
			t.Errorf("%s claimed after %s: a tenant's jobs must go in its own order", id, last[tn])
		}
		last[tn] = id
		out[tn]++
	}
	return out
}

// within fails unless got is want within tolerance (a fraction of it).
func within(t *testing.T, what string, got, want int, tolerance float64) {
	t.Helper()
	if d := float64(got - want); d > tolerance*float64(want) || -d > tolerance*float64(want) {
		t.Errorf("%s = %d, want %d within %.0f%%", what, got, want, tolerance*100)
	}
}

func testFairStarvation(t *testing.T, s store.Store) {
	for i, weights := range []map[string]int{nil, {"a": 3}, {"b": 3}} {
		t.Run(fmt.Sprint(weights), func(t *testing.T) {
			queue := fmt.Sprint("bulk", i)
			backlog(t, s, "a", queue, fmt.Sprint("a", i), 1000)
			f := store.ClaimFilter{Now: at(100), Weights: weights, Queues: []string{queue}}
			for range 5 {
				if id := claimOne(t, s, f); tenantOf(id) != "a" {
					t.Fatalf("claimed %q while a alone had jobs", id)
				}
			}
			for round := range 4 {
				// a keeps submitting; b submits one.
				more := fresh(fmt.Sprintf("a%d-more-%d", i, round), queue, 50)
				more.Tenant = "a"
				create(t, s, more)
				mine := fresh(fmt.Sprintf("b%d-%d", i, round), queue, 60)
				mine.Tenant = "b"
				create(t, s, mine)
				for claims := 1; ; claims++ {
					id := claimOne(t, s, f)
					if id == mine.ID {
						break
					}
					if claims == 2 {
						t.Fatalf("round %d: %s not claimed within 2 claims (2 tenants with ready jobs); claimed %s", round, mine.ID, id)
					}
				}
				// a alone for a while, then b again.
				for range 3 {
					claimOne(t, s, f)
				}
			}
		})
	}
}

func testFairWeights(t *testing.T, s store.Store) {
	backlog(t, s, "a", "bulk", "a", 600)
	backlog(t, s, "b", "bulk", "b", 600)
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"a": 3}}
	var ids []string
	for range 400 {
		ids = append(ids, claimOne(t, s, f))
	}
	got := shares(t, ids)
	within(t, "a's claims of 400", got["a"], 300, 0.01)
	within(t, "b's claims of 400", got["b"], 100, 0.03)
}

func testFairWeightsBatch(t *testing.T, s store.Store) {
	backlog(t, s, "a", "bulk", "a", 600)
	backlog(t, s, "b", "bulk", "b", 600)
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"a": 3}}
	var ids []string
	for i := range 50 {
		ids = append(ids, claimedIDs(claimJobs(t, s, f, batchClaim(fmt.Sprintf("batch%d", i), 8)))...)
	}
	if len(ids) != 400 {
		t.Fatalf("claimed %d jobs in 50 claims of 8, want 400", len(ids))
	}
	got := shares(t, ids)
	within(t, "a's claims of 400", got["a"], 300, 0.01)
	within(t, "b's claims of 400", got["b"], 100, 0.03)
}

func testFairNextQueue(t *testing.T, s store.Store) {
	backlog(t, s, "a", "first", "a", 40)
	backlog(t, s, "b", "first", "b", 40)
	backlog(t, s, "c", "next", "c", 600)
	backlog(t, s, "d", "next", "d", 600)
	// The worker names no queue: its claims drain the older queue,
	// contested by a and b, then move on to the next, where c weighs 3.
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"c": 3}}
	var first, next []string
	for i := 0; len(next) < 400; i++ {
		for _, c := range claimJobs(t, s, f, batchClaim(fmt.Sprintf("batch%d", i), 8)) {
			if c.Job.Queue == "first" {
				first = append(first, c.Job.ID)
			} else {
				next = append(next, c.Job.ID)
			}
		}
	}
	if got := shares(t, first); got["a"] != 40 || got["b"] != 40 {
		t.Fatalf("the first queue's claims: %v, want all 80 jobs", got)
	}
	got := shares(t, next[:400])
	within(t, "c's claims of the next queue's first 400", got["c"], 300, 0.02)
	within(t, "d's claims of the next queue's first 400", got["d"], 100, 0.06)
}

func testFairWorkConserving(t *testing.T, s store.Store) {
	backlog(t, s, "a", "bulk", "a", 20)
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"b": 100}}
	if got := claimAll(t, s, f); len(got) != 20 || len(shares(t, got)) != 1 {
		t.Fatalf("a alone: claimed %v, want a's 20 jobs in order", got)
	}
	// a's jobs are of a kind this worker does not run: b's are taken
	// however far ahead b's pass runs.
	backlog(t, s, "a", "bulk", "a2", 20)
	for i := range 10 {
		j := fresh(fmt.Sprintf("b-%02d", i), "bulk", 0)
		j.Tenant, j.Kind = "b", "resize"
		create(t, s, j)
	}
	f = store.ClaimFilter{Now: at(100), Kinds: []string{"resize"}}
	if got := claimAll(t, s, f); len(got) != 10 || shares(t, got)["b"] != 10 {
		t.Fatalf("a resize worker claimed %v, want b's 10 jobs", got)
	}
}

func testFairKinds(t *testing.T, s store.Store) {
	// a's backlog is of a kind the worker does not run; b's and c's jobs
	// are of its kinds, c's of two of them in turn.
	backlog(t, s, "a", "bulk", "a", 200)
	for i := range 10 {
		j := fresh(fmt.Sprintf("b-%02d", i), "bulk", 10+i)
		j.Tenant, j.Kind = "b", "resize"
		create(t, s, j)
		j = fresh(fmt.Sprintf("c-%02d", i), "bulk", 10+i)
		j.Tenant, j.Kind = "c", []string{"resize", "thumbs"}[i%2]
		create(t, s, j)
	}
	f := store.ClaimFilter{Now: at(100), Kinds: []string{"resize", "thumbs"}, Queues: []string{"bulk"}}
	var cs []string
	for round := range 5 {
		c := store.Claim{WorkerID: "w", Now: at(100), Lease: time.Minute}
		for i := range 4 {
			c.LeaseIDs = append(c.LeaseIDs, fmt.Sprintf("l-%d-%d", round, i))
		}
		claimed, err := s.ClaimJobs(t.Context(), f, c)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, cl := range claimed {
			ids = append(ids, cl.Job.ID)
			if cl.Job.Tenant == "c" {
				cs = append(cs, cl.Job.ID)
			}
		}
		if got := shares(t, ids); len(ids) != 4 || got["b"] != 2 || got["c"] != 2 {
			t.Fatalf("claim %d took %v, want two of b's and two of c's", round, ids)
		}
	}
	if want := []string{"c-00", "c-01", "c-02", "c-03", "c-04", "c-05", "c-06", "c-07", "c-08", "c-09"}; !slices.Equal(cs, want) {
		t.Errorf("c's jobs were claimed in the order %v, want %v", cs, want)
	}
}

func testFairRuled(t *testing.T, s store.Store) {
	backlog(t, s, "a", "db", "a", 100)
	backlog(t, s, "b", "db", "b", 100)
	f := store.ClaimFilter{Now: at(100), Limits: map[string]store.QueueLimit{"db": {MaxRunning: 4}}}
	var ids []string
	for range 10 {
		var round []string
		for {
			id := claimOne(t, s, f)
			if id == "" {
				break
			}
			round = append(round, id)
		}
		if len(round) != 4 {
			t.Fatalf("claimed %v with room for 4", round)
		}
		for _, id := range round {
			finish(t, s, id)
		}
		ids = append(ids, round...)
	}
	got := shares(t, ids)
	if got["a"] != 20 || got["b"] != 20 {
		t.Errorf("shares of 40 claims in a queue of max_running 4 = %v, want 20 each", got)
	}
}

// fairSerial creates, in a serial queue, a's head of a kind no worker
// runs, then a's and b's jobs of kind email.
func fairSerial(t *testing.T, s store.Store, queue string) {
	t.Helper()
	for i, j := range []struct{ id, tenant, kind string }{
		{"a-0", "a", "nobody-runs-this"},
		{"a-1", "a", "email"},
		{"b-0", "b", "email"},
		{"b-1", "b", "email"},
		{"c-0", "c", "email"},
	} {
		job := fresh(j.id, queue, i)
		job.Tenant, job.Kind = j.tenant, j.kind
		create(t, s, job)
	}
}

func testFairSerialPerTenant(t *testing.T, s store.Store) {
	fairSerial(t, s, "index")
	f := store.ClaimFilter{Now: at(100), Kinds: []string{"email"}, Limits: map[string]store.QueueLimit{"index": {Serial: true}}}
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"b-0", "c-0"}) {
		t.Fatalf("claimed %v, want b's and c's heads (a's head is of a kind no worker runs; one at a time per tenant)", got)
	}
	finish(t, s, "b-0")
	if got := claimAll(t, s, f); !slices.Equal(got, []string{"b-1"}) {
		t.Fatalf("after b-0 ended claimed %v, want b-1", got)
	}
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Errorf("next ready with every tenant's head running or not runnable = %v, %v, %v; want none", runAt, ok, err)
	}
}

func testFairSerialAcrossTenants(t *testing.T, s store.Store) {
	fairSerial(t, s, "index")
	f := store.ClaimFilter{Now: at(100), Kinds: []string{"email"}, Limits: map[string]store.QueueLimit{"index": {Serial: true, MaxRunning: 1}}}
	var order []string
	for range 3 {
		got := claimAll(t, s, f)
		if len(got) != 1 {
			t.Fatalf("claimed %v with max_running 1, want one job", got)
		}
		order = append(order, got[0])
		finish(t, s, got[0])
	}
	if !slices.Equal(order, []string{"b-0", "c-0", "b-1"}) {
		t.Errorf("claimed in turn %v, want b-0, c-0, b-1 (a blocked by its own head, b and c taking turns)", order)
	}
}

func testFairConcurrent(t *testing.T, s store.Store) {
	backlog(t, s, "a", "bulk", "a", 1500)
	backlog(t, s, "b", "bulk", "b", 1500)
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"a": 3}}
	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				c := store.Claim{WorkerID: fmt.Sprint("worker-", w), LeaseIDs: leaseIDs(fmt.Sprintf("w%d-%d", w, i), 2), Now: at(100), Lease: time.Minute}
				got, err := s.ClaimJobs(t.Context(), f, c)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				ids = append(ids, claimedIDs(got)...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got := map[string]int{}
	for _, id := range ids {
		got[tenantOf(id)]++
	}
	if len(ids) != 800 {
		t.Fatalf("8 claimers claimed %d jobs in 400 claims of 2, want 800", len(ids))
	}
	within(t, "a's claims of 800", got["a"], 600, 0.05)
	within(t, "b's claims of 800", got["b"], 200, 0.05)
}

func testFairShared(t *testing.T, a, b store.Store) {
	backlog(t, a, "a", "bulk", "a", 600)
	backlog(t, a, "b", "bulk", "b", 600)
	f := store.ClaimFilter{Now: at(100), Weights: map[string]int{"a": 3}}
	var ids []string
	for i := range 400 {
		s := a
		if i%2 == 1 {
			s = b
		}
		ids = append(ids, claimOne(t, s, f))
	}
	got := shares(t, ids)
	within(t, "a's claims of 400", got["a"], 300, 0.01)
	within(t, "b's claims of 400", got["b"], 100, 0.03)
}

var capCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a tenant's bound on its running jobs holds across queues, and other tenants' jobs are claimed past it", testTenantCap},
	{"a queue's per-tenant bound gives each tenant its own slots, and a serial queue's heads wait for a capped tenant", testQueuePerTenantCap},
	{"concurrent claimers never pass a tenant's bound or a queue's per-tenant bound", testCapsConcurrent},
}

// createOf creates jobs of tenant in queue named prefix-0 on.
func createOf(t *testing.T, s store.Store, tenant, queue, prefix string, n, sec int) {
	t.Helper()
	for i := range n {
		j := fresh(fmt.Sprintf("%s-%d", prefix, i), queue, sec)
		j.Tenant = tenant
		create(t, s, j)
	}
}

// byTenant counts ids by tenantOf.
func byTenant(ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[tenantOf(id)]++
	}
	return out
}

func testTenantCap(t *testing.T, s store.Store) {
	createOf(t, s, "a", "q1", "a1", 5, 0)
	createOf(t, s, "a", "q2", "a2", 5, 1)
	createOf(t, s, "b", "q1", "b1", 3, 2)
	f := store.ClaimFilter{Now: at(100), TenantMaxRunning: map[string]int{"a": 2}}
	got := claimedIDs(claimJobs(t, s, f, batchClaim("first", 10)))
	if n := byTenant(got); n["a"] != 2 || n["b"] != 3 {
		t.Fatalf("a claim of 10 took %v, want 2 of a's (its bound) and b's 3", got)
	}
	if id := claimOne(t, s, f); id != "" {
		t.Fatalf("claimed %s with a at its bound and b's jobs all running", id)
	}
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Errorf("next ready with a at its bound = %v, %v, %v; want none", runAt, ok, err)
	}
	var aRunning string
	for _, id := range got {
		if tenantOf(id) == "a" {
			aRunning = id
		}
	}
	finish(t, s, aRunning)
	if id := claimOne(t, s, f); tenantOf(id) != "a" {
		t.Fatalf("after one of a's jobs ended claimed %q, want a's next", id)
	}
	// Without the bound, a's jobs are claimed again.
	if got := claimAll(t, s, store.ClaimFilter{Now: at(100)}); len(got) != 7 {
		t.Errorf("without the bound claimed %v, want a's other 7", got)
	}
}

func testQueuePerTenantCap(t *testing.T, s store.Store) {
	for _, tn := range []string{"a", "b", "c"} {
		createOf(t, s, tn, "db", tn, 10, 0)
	}
	limits := map[string]store.QueueLimit{"db": {MaxRunning: 4, MaxRunningPerTenant: 1}}
	f := store.ClaimFilter{Now: at(100), Kinds: []string{"email"}, Limits: limits}
	got := claimAll(t, s, f)
	if n := byTenant(got); len(got) != 3 || n["a"] != 1 || n["b"] != 1 || n["c"] != 1 {
		t.Fatalf("claimed %v from a queue of 1 per tenant, want one job of each of a, b and c", got)
	}
	if runAt, ok, err := s.NextReady(t.Context(), f); err != nil || ok {
		t.Errorf("next ready with every tenant at the queue's bound = %v, %v, %v; want none", runAt, ok, err)
	}
	finish(t, s, got[0])
	if id := claimOne(t, s, f); tenantOf(id) != tenantOf(got[0]) {
		t.Fatalf("after %s ended claimed %q, want its tenant's next", got[0], id)
	}
	// 2 per tenant within 4: the queue's bound holds too.
	limits["db"] = store.QueueLimit{MaxRunning: 4, MaxRunningPerTenant: 2}
	if got := claimAll(t, s, f); len(got) != 1 {
		t.Fatalf("claimed %v with 3 of 4 running, want 1", got)
	}
	// A serial queue: a tenant at its bound has no head.
	createOf(t, s, "a", "index", "a-index", 2, 5)
	createOf(t, s, "d", "index", "d-index", 1, 6)
	serial := store.ClaimFilter{Now: at(100), Limits: map[string]store.QueueLimit{"index": {Serial: true}},
		TenantMaxRunning: map[string]int{"a": 1}, Queues: []string{"index"}}
	if got := claimAll(t, s, serial); !slices.Equal(got, []string{"d-index-0"}) {
		t.Errorf("serial queue with a at its bound claimed %v, want d's head only", got)
	}
}

func testCapsConcurrent(t *testing.T, s store.Store) {
	createOf(t, s, "a", "q1", "a1", 20, 0)
	createOf(t, s, "a", "db", "adb", 20, 0)
	createOf(t, s, "b", "db", "bdb", 20, 0)
	createOf(t, s, "b", "q1", "b1", 20, 0)
	f := store.ClaimFilter{Now: at(100), TenantMaxRunning: map[string]int{"a": 3},
		Limits: map[string]store.QueueLimit{"db": {MaxRunningPerTenant: 2}}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				c := store.Claim{WorkerID: fmt.Sprint("worker-", w), LeaseIDs: leaseIDs(fmt.Sprintf("w%d-%d", w, i), 2), Now: at(100), Lease: time.Minute}
				if _, err := s.ClaimJobs(t.Context(), f, c); err != nil && !errors.Is(err, jobtype.ErrNoJob) {
					t.Errorf("claim: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	running := listAll(t, s, store.ListFilter{States: []jobtype.State{jobtype.Running}}, 500)
	count := map[string]int{}
	for _, id := range running {
		count[tenantOf(id)]++
		if strings.HasPrefix(id[1:], "db-") {
			count[tenantOf(id)+" in db"]++
		}
	}
	if count["a"] != 3 || count["b in db"] != 2 || count["b"] != 22 {
		t.Errorf("running after 8 concurrent claimers: %v; want a 3 (its bound), b 2 in db (the queue's per-tenant bound) and 22 in all", count)
	}
}
