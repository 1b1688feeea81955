package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var quotaCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a create under a quota stores up to the tenant's bound and refuses the next with a QuotaError, storing nothing", testQuotaCreate},
	{"only jobs not yet running count, and a job that starts or ends frees its place", testQuotaCounts},
	{"a batch that would pass the quota is refused whole, and one that fits is stored", testQuotaBatch},
	{"a quota below what is queued refuses, and its count stops at the bound plus one", testQuotaLowered},
	{"a retry under a quota counts: refused at the bound, the job left as it was", testQuotaRetry},
	{"concurrent creates under one quota never pass it", testQuotaConcurrent},
	{"concurrent batches under one quota never pass it and are each stored whole or not at all", testQuotaConcurrentBatches},
	{"concurrent creates under one quota never pass it behind a thousand queued", testQuotaConcurrentDeep},
	{"whatever a tenant's jobs do between creates, a create under a quota passes exactly when the count leaves room", testQuotaModel},
	{"retries of ended jobs beside creates under a quota are all counted", testQuotaRetriesBesideCreates},
	{"at the bound, a unique key an active job holds is a conflict naming it, not a quota refusal", testQuotaConflictFirst},
}

var sharedQuotaCases = []struct {
	name string
	run  func(t *testing.T, a, b store.Store)
}{
	{"creates through two stores under one quota never pass it", testQuotaShared},
	{"creates through two stores under one quota never pass it behind a thousand queued", testQuotaSharedDeep},
	{"retries of ended jobs beside creates under a quota, through two stores, are all counted", testQuotaSharedRetriesBesideCreates},
}

func quotaOf(tenant string, maxQueued int) store.Quota {
	return store.Quota{MaxQueued: map[string]int{tenant: maxQueued}}
}

// WantQuotaError fails unless err is (or wraps) the *jobtype.QuotaError
// want, with want's message.
func WantQuotaError(t *testing.T, err error, want jobtype.QuotaError) {
	t.Helper()
	var qe *jobtype.QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("err = %v, want a *jobtype.QuotaError", err)
	}
	if *qe != want {
		t.Errorf("QuotaError %+v, want %+v", *qe, want)
	}
	if err.Error() != want.Error() {
		t.Errorf("the refusal says %q, want %q", err.Error(), want.Error())
	}
}

// notYetRunning counts tenant's jobs not yet running, as listed.
func notYetRunning(t *testing.T, s store.Store, tenant string) int {
	t.Helper()
	return len(listAll(t, s, store.ListFilter{Tenant: tenant, States: jobtype.QueuedStates}, 500))
}

func createWithin(t *testing.T, s store.Store, q store.Quota, jobs ...jobtype.Job) []jobtype.Job {
	t.Helper()
	got, err := s.CreateJobsWithin(t.Context(), jobs, q)
	if err != nil {
		t.Fatalf("create %v under %v: %v", ids(jobs), q.MaxQueued, err)
	}
	for i := range jobs {
		sameJob(t, "created "+jobs[i].ID, got[i], jobs[i])
	}
	return got
}

func testQuotaCreate(t *testing.T, s store.Store) {
	q := quotaOf("acme", 3)
	for i := range 3 {
		createWithin(t, s, q, newJob(fmt.Sprintf("q-%d", i), at(i)))
	}
	_, err := s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("q-3", at(3))}, q)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 3, Queued: 3, Adding: 1})
	if got, want := err.Error(), `tenant "acme" has 3 jobs not yet running, its max_queued is 3: wait for some to start or end`; got != want {
		t.Errorf("the refusal says %q, want %q", got, want)
	}
	mustBeGone(t, s, "q-3")

	// Another tenant is counted apart, bounded or not.
	other := newJob("globex-1", at(4))
	other.Tenant = "globex"
	createWithin(t, s, store.Quota{MaxQueued: map[string]int{"acme": 3, "globex": 1}}, other)
	other2 := newJob("globex-2", at(5))
	other2.Tenant = "globex"
	createWithin(t, s, q, other2)

	// Without a bound for the tenant it is CreateJobs.
	createWithin(t, s, store.Quota{}, newJob("q-4", at(6)))
	createWithin(t, s, store.Quota{MaxQueued: map[string]int{"acme": 0}}, newJob("q-5", at(7)))
	if n := notYetRunning(t, s, "acme"); n != 5 {
		t.Errorf("acme has %d jobs not yet running, want 5", n)
	}
}

func testQuotaCounts(t *testing.T, s store.Store) {
	q := quotaOf("acme", 3)
	for i := range 5 {
		j := newJob(fmt.Sprintf("globex-%d", i), at(i))
		j.Tenant = "globex"
		create(t, s, j)
	}
	running := newJob("running", at(0))
	running.State, running.StartedAt, running.WorkerID, running.LeaseID, running.LeaseExpiresAt = jobtype.Running, at(0), "w", "l", at(600)
	create(t, s, running)
	done := newJob("done", at(0))
	done.State, done.FinishedAt = jobtype.Succeeded, at(1)
	create(t, s, done)
	held := newJob("held", at(1))
	held.State = jobtype.Pending
	create(t, s, held)
	create(t, s, newJob("queued", at(2)))
	create(t, s, waiting("waiting", "queued"))

	// held, queued and waiting: the bound.
	_, err := s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("more-1", at(3))}, q)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 3, Queued: 3, Adding: 1})
	mustBeGone(t, s, "more-1")

	// A job created running or ended is not charged, even at the bound.
	alsoRunning := running
	alsoRunning.ID, alsoRunning.LeaseID = "running-2", "l2"
	createWithin(t, s, q, alsoRunning)

	// The queued job starts: its place is free.
	if id := claimOne(t, s, store.ClaimFilter{Tenants: []string{"acme"}, Now: at(100)}); id != "queued" {
		t.Fatalf("claimed %q, want queued", id)
	}
	createWithin(t, s, q, newJob("more-1", at(3)))
	_, err = s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("more-2", at(4))}, q)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 3, Queued: 3, Adding: 1})

	// The held job is cancelled: its place is free.
	endAs(t, s, "held", jobtype.Cancelled, 5)
	createWithin(t, s, q, newJob("more-2", at(4)))
	if n := notYetRunning(t, s, "acme"); n != 3 {
		t.Errorf("acme has %d jobs not yet running, want 3", n)
	}
}

func testQuotaBatch(t *testing.T, s store.Store) {
	q := quotaOf("acme", 5)
	for i := range 3 {
		create(t, s, newJob(fmt.Sprintf("q-%d", i), at(i)))
	}
	batch := batchJobs("b", "thumbs", 3)
	_, err := s.CreateJobsWithin(t.Context(), batch, q)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 5, Queued: 3, Adding: 3})
	if got, want := err.Error(), `tenant "acme" has 3 jobs not yet running, its max_queued is 5: 3 more would pass it; submit at most 2, or wait for some to start or end`; got != want {
		t.Errorf("the refusal says %q, want %q", got, want)
	}
	for _, j := range batch {
		mustBeGone(t, s, j.ID)
	}

	// Two fit; a job created ended beside them is not charged.
	fits := batchJobs("c", "thumbs", 3)
	fits[2].State, fits[2].FinishedAt = jobtype.Cancelled, at(1)
	createWithin(t, s, q, fits...)
	if n := notYetRunning(t, s, "acme"); n != 5 {
		t.Errorf("acme has %d jobs not yet running, want 5", n)
	}

	// A batch of two tenants is refused for the one with no room.
	two := batchJobs("d", "", 3)
	two[1].Tenant, two[2].Tenant = "globex", "globex"
	_, err = s.CreateJobsWithin(t.Context(), two, store.Quota{MaxQueued: map[string]int{"acme": 6, "globex": 1}})
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "globex", MaxQueued: 1, Queued: 0, Adding: 2})
	for _, j := range two {
		mustBeGone(t, s, j.ID)
	}
}

func testQuotaLowered(t *testing.T, s store.Store) {
	for i := range 5 {
		create(t, s, newJob(fmt.Sprintf("q-%d", i), at(i)))
	}
	_, err := s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("q-5", at(5))}, quotaOf("acme", 2))
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 2, Queued: 3, Adding: 1})
	if got, want := err.Error(), `tenant "acme" has more than 2 jobs not yet running, its max_queued is 2: wait for some to start or end`; got != want {
		t.Errorf("the refusal says %q, want %q", got, want)
	}
	mustBeGone(t, s, "q-5")
}

// retryJob makes an ended job QUEUED again, as jobs.Engine.Retry does.
func retryJob(j *jobtype.Job) error {
	j.State, j.FinishedAt, j.RunAt, j.UpdatedAt = jobtype.Queued, time.Time{}, at(50), at(50)
	return nil
}

func testQuotaRetry(t *testing.T, s store.Store) {
	q := quotaOf("acme", 2)
	failed := newJob("failed", at(0))
	failed.State, failed.FinishedAt, failed.Error = jobtype.Failed, at(1), &jobtype.JobError{Type: "Boom", Message: "no"}
	failed = create(t, s, failed)
	create(t, s, newJob("q-0", at(2)))
	create(t, s, newJob("q-1", at(3)))

	_, err := s.UpdateJobWithin(t.Context(), "failed", q, retryJob)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 2, Queued: 2, Adding: 1})
	sameJob(t, "the job whose retry was refused", get(t, s, "failed"), failed)

	// A change that adds no job not yet running is written at the bound.
	step, err := s.UpdateJobWithin(t.Context(), "q-0", q, func(j *jobtype.Job) error {
		j.Step, j.UpdatedAt = "warming up", at(4)
		return nil
	})
	if err != nil || step.Step != "warming up" || step.Version != 2 {
		t.Fatalf("a change of a queued job at the bound: %+v, %v; want it written at version 2", step, err)
	}
	if _, err := s.UpdateJobWithin(t.Context(), "q-1", q, func(j *jobtype.Job) error {
		j.State, j.FinishedAt, j.UpdatedAt = jobtype.Cancelled, at(5), at(5)
		return nil
	}); err != nil {
		t.Fatalf("cancel a queued job under the quota: %v", err)
	}

	// q-1 ended: the retry fits.
	retried, err := s.UpdateJobWithin(t.Context(), "failed", q, retryJob)
	if err != nil || retried.State != jobtype.Queued || retried.Version != failed.Version+1 {
		t.Fatalf("the retry once there is room: %+v, %v; want QUEUED at version %d", retried, err, failed.Version+1)
	}
	sameJob(t, "the retried job as stored", get(t, s, "failed"), retried)

	// The update's own error comes back as it is, and an unknown job is
	// ErrNotFound, as from UpdateJob.
	refused := &refusal{"no"}
	if _, err := s.UpdateJobWithin(t.Context(), "q-0", q, func(*jobtype.Job) error { return refused }); err != refused {
		t.Errorf("the update's error came back as %v, want it untouched", err)
	}
	if _, err := s.UpdateJobWithin(t.Context(), "no-such-job", q, retryJob); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("update of an unknown job: %v, want ErrNotFound", err)
	}

	// Another tenant's retry is not counted against acme's bound.
	other := newJob("globex-failed", at(0))
	other.Tenant, other.State, other.FinishedAt = "globex", jobtype.Failed, at(1)
	create(t, s, other)
	if _, err := s.UpdateJobWithin(t.Context(), "globex-failed", q, retryJob); err != nil {
		t.Errorf("a retry of an unbounded tenant's job: %v", err)
	}
}

// createConcurrently creates each of batches (each a call) through the
// store stores[i % len(stores)], all at once, and returns each call's
// error.
func createConcurrently(t *testing.T, stores []store.Store, q store.Quota, batches [][]jobtype.Job) []error {
	t.Helper()
	errs := make([]error, len(batches))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, b := range batches {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, errs[i] = s.CreateJobsWithin(t.Context(), b, q)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkConcurrentQuota checks the outcome of createConcurrently: every
// call stored all its jobs or, refused with a QuotaError, none; and
// stored jobs not yet running number want.
func checkConcurrentQuota(t *testing.T, s store.Store, batches [][]jobtype.Job, errs []error, want int) {
	t.Helper()
	checkConcurrentQuotaBehind(t, s, batches, errs, 0, want)
}

// checkConcurrentQuotaBehind is checkConcurrentQuota where before jobs
// not yet running were stored ahead of the batches.
func checkConcurrentQuotaBehind(t *testing.T, s store.Store, batches [][]jobtype.Job, errs []error, before, want int) {
	t.Helper()
	stored := 0
	for i, err := range errs {
		var qe *jobtype.QuotaError
		switch {
		case err == nil:
			for _, j := range batches[i] {
				get(t, s, j.ID)
			}
			stored += len(batches[i])
		case errors.As(err, &qe):
			for _, j := range batches[i] {
				mustBeGone(t, s, j.ID)
			}
		default:
			t.Errorf("call %d: %v, want success or a QuotaError", i, err)
		}
	}
	if n := notYetRunning(t, s, "acme") - before; stored != want || n != want {
		t.Errorf("%d jobs acknowledged, %d more stored not yet running; want exactly %d", stored, n, want)
	}
}

func testQuotaConcurrent(t *testing.T, s store.Store) {
	const calls, bound = 24, 7
	batches := make([][]jobtype.Job, calls)
	for i := range batches {
		batches[i] = []jobtype.Job{newJob(fmt.Sprintf("c-%02d", i), at(i))}
	}
	errs := createConcurrently(t, []store.Store{s}, quotaOf("acme", bound), batches)
	checkConcurrentQuota(t, s, batches, errs, bound)
}

func testQuotaConcurrentBatches(t *testing.T, s store.Store) {
	// Batches of 3 under a bound of 10: exactly three fit.
	const calls, size, bound = 10, 3, 10
	batches := make([][]jobtype.Job, calls)
	for i := range batches {
		batches[i] = batchJobs(fmt.Sprintf("b%02d", i), "", size)
	}
	errs := createConcurrently(t, []store.Store{s}, quotaOf("acme", bound), batches)
	checkConcurrentQuota(t, s, batches, errs, bound/size*size)
}

func testQuotaShared(t *testing.T, a, b store.Store) {
	const calls, bound = 24, 7
	batches := make([][]jobtype.Job, calls)
	for i := range batches {
		batches[i] = []jobtype.Job{newJob(fmt.Sprintf("s-%02d", i), at(i))}
	}
	errs := createConcurrently(t, []store.Store{a, b}, quotaOf("acme", bound), batches)
	checkConcurrentQuota(t, b, batches, errs, bound)
}

// fillQueued stores n QUEUED jobs of acme, without a quota, a thousand a
// call: enough for a store to keep its count of them (a quota mark)
// instead of counting at every create.
func fillQueued(t *testing.T, s store.Store, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 1000 {
		var jobs []jobtype.Job
		for i := start; i < min(n, start+1000); i++ {
			jobs = append(jobs, newJob(fmt.Sprintf("%s-%05d", prefix, i), at(0)))
		}
		if _, err := s.CreateJobs(t.Context(), jobs); err != nil {
			t.Fatalf("fill %d jobs: %v", n, err)
		}
	}
}

func testQuotaConcurrentDeep(t *testing.T, s store.Store) {
	quotaDeep(t, s, []store.Store{s})
}

func testQuotaSharedDeep(t *testing.T, a, b store.Store) {
	quotaDeep(t, a, []store.Store{a, b})
}

// quotaDeep fills 999 jobs of acme through first and creates one under a
// bound of 1,007 (a count that a store may keep, see fillQueued), then
// 24 more, concurrently, through stores: exactly 7 pass.
func quotaDeep(t *testing.T, first store.Store, stores []store.Store) {
	const calls, bound = 24, 1007
	fillQueued(t, first, "deep", 999)
	createWithin(t, first, quotaOf("acme", bound), newJob("first", at(0)))
	batches := make([][]jobtype.Job, calls)
	for i := range batches {
		batches[i] = []jobtype.Job{newJob(fmt.Sprintf("c-%02d", i), at(i))}
	}
	errs := createConcurrently(t, stores, quotaOf("acme", bound), batches)
	checkConcurrentQuotaBehind(t, stores[len(stores)-1], batches, errs, 1000, bound-1000)
}

// testQuotaModel runs a model of the quota's rule against a tenant with
// over a thousand jobs not yet running, which a store may keep a count
// of (a quota mark) rather than count them at every create: between
// two creates under a quota the tenant's jobs are claimed, ended, queued
// again for another attempt, retried after they ended, deleted, or
// created with no quota in force (as while a reload has lifted the
// tenant's bound), at random; and whatever the bound, near the count or
// far above it, each create passes exactly when the jobs not yet
// running, as listed, leave room for it, and a refusal says the count.
func testQuotaModel(t *testing.T, s store.Store) {
	ctx := t.Context()
	fillQueued(t, s, "fill", 1200)
	rng := rand.New(rand.NewPCG(1, 2))
	next := 0
	newJobs := func(n int) []jobtype.Job {
		var out []jobtype.Job
		for range n {
			next++
			out = append(out, newJob(fmt.Sprintf("n-%05d", next), at(0)))
		}
		return out
	}
	// some returns up to n of acme's jobs in state, at random.
	some := func(state jobtype.State, n int) []string {
		all := listAll(t, s, store.ListFilter{Tenant: "acme", States: []jobtype.State{state}}, 1000)
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		return all[:min(n, len(all))]
	}
	set := func(ids []string, to jobtype.State) {
		for _, id := range ids {
			if _, err := s.UpdateJob(ctx, id, func(j *jobtype.Job) error {
				j.State, j.FinishedAt = to, time.Time{}
				if to.Terminal() {
					j.FinishedAt = at(9)
				}
				return nil
			}); err != nil {
				t.Fatalf("set job %s %s: %v", id, to, err)
			}
		}
	}
	passed, refused := 0, 0
	for step := range 300 {
		switch rng.IntN(7) {
		case 0: // claimed
			leases := make([]string, 1+rng.IntN(40))
			for i := range leases {
				leases[i] = fmt.Sprintf("l-%d-%d", step, i)
			}
			if _, err := s.ClaimJobs(ctx, store.ClaimFilter{Now: at(5)},
				store.Claim{WorkerID: "w", LeaseIDs: leases, Now: at(5), Lease: time.Hour}); err != nil && !errors.Is(err, jobtype.ErrNoJob) {
				t.Fatalf("claim: %v", err)
			}
		case 1: // ended
			set(some(jobtype.Running, 1+rng.IntN(40)), jobtype.Succeeded)
		case 2: // queued again for another attempt
			set(some(jobtype.Running, 1+rng.IntN(20)), jobtype.Queued)
		case 3: // retried, with no quota in force
			set(some(jobtype.Succeeded, 1+rng.IntN(20)), jobtype.Queued)
		case 4: // deleted
			for _, id := range some(jobtype.Succeeded, 1+rng.IntN(10)) {
				if _, _, err := s.DeleteJob(ctx, id); err != nil {
					t.Fatalf("delete job %s: %v", id, err)
				}
			}
		case 5: // created with no quota in force
			if _, err := s.CreateJobs(ctx, newJobs(1+rng.IntN(20))); err != nil {
				t.Fatalf("create without a quota: %v", err)
			}
		}
		before := notYetRunning(t, s, "acme")
		adding := 1 + rng.IntN(5)
		bound := max(1, before+rng.IntN(41)-20)
		if rng.IntN(2) == 0 {
			bound = before + 20 + rng.IntN(500)
		}
		_, err := s.CreateJobsWithin(ctx, newJobs(adding), quotaOf("acme", bound))
		fits := before+adding <= bound
		switch {
		case fits && err != nil:
			t.Fatalf("step %d: %d not yet running, adding %d under %d: %v", step, before, adding, bound, err)
		case !fits && err == nil:
			t.Fatalf("step %d: %d not yet running, adding %d under %d: passed", step, before, adding, bound)
		case !fits:
			// The count stops one past the bound.
			WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: bound, Queued: min(before, bound+1), Adding: adding})
			refused++
		default:
			passed++
		}
	}
	if passed < 50 || refused < 50 {
		t.Errorf("%d creates passed, %d refused: the model did not try both ways", passed, refused)
	}
}

func testQuotaRetriesBesideCreates(t *testing.T, s store.Store) {
	quotaRetriesBesideCreates(t, s, []store.Store{s})
}

func testQuotaSharedRetriesBesideCreates(t *testing.T, a, b store.Store) {
	quotaRetriesBesideCreates(t, a, []store.Store{a, b})
}

// quotaRetriesBesideCreates gives acme a thousand jobs not yet running
// (a count that a store may keep, see fillQueued) and 30 FAILED ones,
// then, through stores, retries those without a quota (as a replica
// that does not bound acme does) while 30 creates under a bound far
// above run beside them. Then a create under a bound of exactly acme's
// jobs not yet running is refused, naming them, and one under a bound
// one more passes: what the store counts saw every retry.
func quotaRetriesBesideCreates(t *testing.T, first store.Store, stores []store.Store) {
	const n, high = 30, 5000
	fillQueued(t, first, "deep", 999)
	createWithin(t, first, quotaOf("acme", high), newJob("first", at(0)))
	for i := range n {
		j := newJob(fmt.Sprintf("failed-%02d", i), at(0))
		j.State, j.FinishedAt = jobtype.Failed, at(1)
		create(t, first, j)
	}
	start := make(chan struct{})
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		s := stores[i%len(stores)]
		wg.Go(func() {
			<-start
			_, err := s.UpdateJob(t.Context(), fmt.Sprintf("failed-%02d", i), func(j *jobtype.Job) error {
				j.State, j.FinishedAt = jobtype.Queued, time.Time{}
				return nil
			})
			errs <- err
		})
		wg.Go(func() {
			<-start
			_, err := s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob(fmt.Sprintf("c-%02d", i), at(i))}, quotaOf("acme", high))
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	count := notYetRunning(t, first, "acme")
	if want := 1000 + 2*n; count != want {
		t.Fatalf("%d jobs not yet running, want %d", count, want)
	}
	_, err := first.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("one-too-many", at(0))}, quotaOf("acme", count))
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: count, Queued: count, Adding: 1})
	createWithin(t, first, quotaOf("acme", count+1), newJob("room-for-one", at(0)))
}

// testQuotaConflictFirst: a caller whose submission's answer was lost
// submits again with the same unique key to learn the job's id
// (docs/CLIENTS.md); when that submission took the tenant to its bound,
// the second must still be told the key is held, and by which job, not
// that there is no room, which would say no job was made. So with a
// ConflictError of the job that holds it: a create, a batch, a retry.
func testQuotaConflictFirst(t *testing.T, s store.Store) {
	q := quotaOf("acme", 1)
	first := newJob("first", at(0))
	first.UniqueKey = "order-42"
	createWithin(t, s, q, first)
	again := newJob("again", at(1))
	again.UniqueKey = "order-42"
	_, err := s.CreateJobsWithin(t.Context(), []jobtype.Job{again}, q)
	var ce *jobtype.ConflictError
	if !errors.As(err, &ce) || ce.ActiveID != "first" || ce.UniqueKey != "order-42" {
		t.Fatalf("the same key again at the bound: %v; want the ConflictError naming first", err)
	}
	batch := []jobtype.Job{newJob("b-0", at(2)), newJob("b-1", at(2))}
	batch[1].UniqueKey = "order-42"
	if _, err := s.CreateJobsWithin(t.Context(), batch, q); !errors.As(err, &ce) || ce.ActiveID != "first" {
		t.Fatalf("a batch with the key at the bound: %v; want the ConflictError naming first", err)
	}
	_, err = s.CreateJobsWithin(t.Context(), []jobtype.Job{newJob("no-key", at(3))}, q)
	WantQuotaError(t, err, jobtype.QuotaError{Tenant: "acme", MaxQueued: 1, Queued: 1, Adding: 1})

	failed := newJob("failed", at(4))
	failed.UniqueKey, failed.State, failed.FinishedAt = "order-42", jobtype.Failed, at(5)
	create(t, s, failed)
	if _, err := s.UpdateJobWithin(t.Context(), "failed", q, retryJob); !errors.As(err, &ce) || ce.ActiveID != "first" {
		t.Fatalf("a retry of a job whose key an active job holds, at the bound: %v; want the ConflictError naming first", err)
	}
	for _, id := range []string{"again", "b-0", "b-1", "no-key"} {
		mustBeGone(t, s, id)
	}
}
