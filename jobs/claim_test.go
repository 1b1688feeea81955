package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestClaimParksUntilAJobIsSubmitted(t *testing.T) {
	metrics := &recordingMetrics{}
	e, _ := newEngine(t, jobs.Config{Metrics: metrics})
	parked := async(func() (jobtype.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"mail"}}, soon())
	})
	waitParked(t, e, 1)

	submit(t, e, jobs.SubmitRequest{Kind: "report"}) // not a kind it runs
	notYet(t, parked, 50*time.Millisecond)

	want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	j, err := await(t, parked)
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if metrics.count("claim") != 1 {
		t.Errorf("claim wake-ups recorded: %d, want 1", metrics.count("claim"))
	}
}

func TestClaimParksUntilRunAtArrives(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	runAt := time.Now().Add(150 * time.Millisecond)
	want := submit(t, e, jobs.SubmitRequest{RunAt: runAt})
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, soon())
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if now := time.Now(); now.Before(runAt.Truncate(time.Microsecond)) {
		t.Errorf("claimed at %v, before run_at %v", now, runAt)
	}
}

func TestClaimWakesWhenAHeldJobStarts(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	held := submit(t, e, jobs.SubmitRequest{Hold: true})
	parked := async(func() (jobtype.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, soon())
	})
	waitParked(t, e, 1)
	if _, err := e.Start(context.Background(), held.ID); err != nil {
		t.Fatal(err)
	}
	if j, err := await(t, parked); err != nil || j.ID != held.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, held.ID)
	}
}

func TestClaimEndsWithErrNoJob(t *testing.T) {
	tests := []struct {
		name string
		end  func(e *jobs.Engine, cancel context.CancelFunc)
		dl   time.Duration
	}{
		{"at its deadline", func(*jobs.Engine, context.CancelFunc) {}, 50 * time.Millisecond},
		{"when the caller goes away", func(_ *jobs.Engine, cancel context.CancelFunc) { cancel() }, time.Hour},
		{"on shutdown", func(e *jobs.Engine, _ context.CancelFunc) { e.Shutdown() }, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			parked := async(func() (jobtype.Job, error) {
				return e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(tt.dl))
			})
			if tt.dl == time.Hour { // parked before it is ended; the other runs out on its own
				waitParked(t, e, 1)
			}
			tt.end(e, cancel)
			if _, err := await(t, parked); !errors.Is(err, jobtype.ErrNoJob) {
				t.Fatalf("got %v, want ErrNoJob", err)
			}
		})
	}
}

func TestClaimAfterShutdownDoesNotPark(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	e.Shutdown()
	if _, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(time.Hour)); !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("got %v, want ErrNoJob at once", err)
	}
	// A ready job is still handed out: shutdown stops parking, not work.
	want := submit(t, e, jobs.SubmitRequest{})
	if j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(time.Hour)); err != nil || j.ID != want.ID {
		t.Fatalf("claim of a ready job after shutdown: %s, %v", j.ID, err)
	}
}

func TestTwoClaimersNeverShareAJob(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	const workers, jobCount = 8, 40
	// The workers park until the test has seen every job claimed and
	// cancels them: no claim deadline that a slow disk could outlast.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type claim struct{ job, worker string }
	claims := make(chan claim, 2*jobCount)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for {
				j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: worker}, soon())
				if errors.Is(err, jobtype.ErrNoJob) {
					return
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				claims <- claim{j.ID, worker}
			}
		})
	}
	for range jobCount {
		submit(t, e, jobs.SubmitRequest{})
	}
	claimed := map[string]string{}
	for len(claimed) < jobCount {
		select {
		case c := <-claims:
			if prev, ok := claimed[c.job]; ok {
				t.Errorf("job claimed twice: %s by %s and %s", c.job, prev, c.worker)
			}
			claimed[c.job] = c.worker
		case <-time.After(10 * time.Second):
			t.Fatalf("%d jobs claimed within 10s, want %d", len(claimed), jobCount)
		}
	}
	cancel()
	wg.Wait()
	close(claims)
	for c := range claims {
		t.Errorf("job claimed twice: %s by %s and %s", c.job, claimed[c.job], c.worker)
	}
}

// nextReadyHook runs hook once right after the first NextReady has read
// the store: after a claim found nothing and before it parks. Only the
// wake the job's commit gives can tell the claimer about what hook does.
type nextReadyHook struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *nextReadyHook) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	runAt, ok, err := s.Store.NextReady(ctx, f)
	s.once.Do(s.hook)
	return runAt, ok, err
}

func TestClaimSeesAJobQueuedBetweenItsLookAndItsPark(t *testing.T) {
	hs := &nextReadyHook{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{})
	var want jobtype.Job
	hs.hook = func() { want = submit(t, e, jobs.SubmitRequest{}) }
	start := time.Now()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(5*time.Second))
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("claim took %v: it slept through the submit", time.Since(start))
	}
}

// afterClaim runs hook once, right after the first ClaimJobs returned.
type afterClaim struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *afterClaim) ClaimJobs(ctx context.Context, f store.ClaimFilter, claim store.Claim) ([]store.Claimed, error) {
	claimed, err := s.Store.ClaimJobs(ctx, f, claim)
	s.once.Do(s.hook)
	return claimed, err
}

// countingClaims counts the store's claim writes.
type countingClaims struct {
	store.Store
	writes atomic.Int64
}

func (s *countingClaims) ClaimJobs(ctx context.Context, f store.ClaimFilter, claim store.Claim) ([]store.Claimed, error) {
	s.writes.Add(1)
	return s.Store.ClaimJobs(ctx, f, claim)
}

// A claim that may not wait (its deadline has passed, as for a claim over
// the server's parked-call limit) reads before it writes: with nothing
// ready it ends with no write at all, so that a flood of them does not
// queue writes in front of everyone else's; with a job ready it claims
// it.
func TestAClaimThatMayNotWaitWritesOnlyForAReadyJob(t *testing.T) {
	cs := &countingClaims{Store: openStore(t)}
	e := newEngineOver(t, cs, jobs.Config{})
	for range 100 {
		if _, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w"}, 10, time.Now()); !errors.Is(err, jobtype.ErrNoJob) {
			t.Fatalf("claim with nothing ready: %v, want ErrNoJob", err)
		}
	}
	if n := cs.writes.Load(); n != 0 {
		t.Fatalf("100 claims that may not wait, with nothing ready, made %d claim writes; want none", n)
	}
	want := submit(t, e, jobs.SubmitRequest{})
	js, err := e.ClaimJobs(t.Context(), jobs.ClaimRequest{WorkerID: "w"}, 10, time.Now())
	if err != nil || len(js) != 1 || js[0].ID != want.ID {
		t.Fatalf("claim that may not wait, a job ready: %v, %v; want %s", js, err, want.ID)
	}
}

func TestClaimSeesAJobThatBecomesReadyBetweenItsLookAndItsPark(t *testing.T) {
	clock := newFakeClock()
	hs := &afterClaim{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{Now: clock.Now})
	want := submit(t, e, jobs.SubmitRequest{RunAt: clock.Now().Add(time.Millisecond)})
	// The claim finds nothing ready; before it asks when to look again,
	// the job's RunAt passes.
	hs.hook = func() { clock.Advance(time.Millisecond) }
	start := time.Now()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(5*time.Second))
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("claim took %v: it parked until its deadline with a ready job", time.Since(start))
	}
}

// readHookKey carries a *readHook in the context of the one claim whose
// reads it sees.
type readHookKey struct{}

// readHook runs before every NextReady of the claim whose context holds
// it, with the read's number (1 is the first look's); an error is
// returned instead of reading.
type readHook struct {
	n      atomic.Int64
	before func(n int64) error
}

// hookedStore runs the readHook of a claim's context.
// hookedStore runs a context's readHook before each look of a claim:
// each ClaimJobs and each NextReady. A claimer's first look is a claim
// write and a read (hook calls 1 and 2), and the look of a claimer woken
// for a job is its claim write (3).
type hookedStore struct{ store.Store }

func (s hookedStore) ClaimJobs(ctx context.Context, f store.ClaimFilter, claim store.Claim) ([]store.Claimed, error) {
	if h, ok := ctx.Value(readHookKey{}).(*readHook); ok {
		if err := h.before(h.n.Add(1)); err != nil {
			return nil, err
		}
	}
	return s.Store.ClaimJobs(ctx, f, claim)
}

func (s hookedStore) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	if h, ok := ctx.Value(readHookKey{}).(*readHook); ok {
		if err := h.before(h.n.Add(1)); err != nil {
			return time.Time{}, false, err
		}
	}
	return s.Store.NextReady(ctx, f)
}

// parkInOrder starts a claim for each context, each parked before the
// next starts, so that they are registered in that order. The first has
// deadline, the others none.
func parkInOrder(t *testing.T, e *jobs.Engine, r jobs.ClaimRequest, deadline time.Time, ctxs ...context.Context) []<-chan outcome[jobtype.Job] {
	t.Helper()
	var out []<-chan outcome[jobtype.Job]
	for i, ctx := range ctxs {
		r := r
		r.WorkerID = fmt.Sprintf("w%d", i)
		dl := deadline
		if i > 0 {
			dl = time.Time{}
		}
		out = append(out, async(func() (jobtype.Job, error) { return e.Claim(ctx, r, dl) }))
		waitParked(t, e, i+1)
	}
	return out
}

func TestAJobWokenForIsClaimedWhenItsClaimerCannotClaimIt(t *testing.T) {
	const (
		first  = "first"
		second = "second"
	)
	tests := []struct {
		name string
		// woken runs before the look of the first claimer woken.
		woken func(e *jobs.Engine, cancel context.CancelFunc, deadline time.Time) error
		// by names who claims the job ("" either), and fails says
		// whether the first claimer returns without one.
		by    string
		fails bool
	}{
		{"its caller goes away first: the wake passes to the next",
			func(_ *jobs.Engine, cancel context.CancelFunc, _ time.Time) error { cancel(); return nil }, second, true},
		{"its store fails: the wake passes to the next",
			func(*jobs.Engine, context.CancelFunc, time.Time) error { return jobtype.ErrUnavailable }, second, true},
		{"its deadline passes first: it still looks once and claims",
			func(_ *jobs.Engine, _ context.CancelFunc, deadline time.Time) error {
				time.Sleep(time.Until(deadline) + 10*time.Millisecond)
				return nil
			}, first, false},
		{"shutdown comes first: it still looks once, and one of them claims",
			func(e *jobs.Engine, _ context.CancelFunc, _ time.Time) error { e.Shutdown(); return nil }, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngineOver(t, hookedStore{openStore(t)}, jobs.Config{})
			deadline := time.Now().Add(time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The first claimer's context: its third look is the one
			// after the wake.
			var cancelFirst context.CancelFunc
			hook := &readHook{before: func(n int64) error {
				if n == 3 {
					return tt.woken(e, cancelFirst, deadline)
				}
				return nil
			}}
			firstCtx, cancelFirst := context.WithCancel(context.WithValue(ctx, readHookKey{}, hook))
			defer cancelFirst()
			claims := parkInOrder(t, e, jobs.ClaimRequest{Kinds: []string{"mail"}}, deadline, firstCtx, ctx)

			want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
			j1, err1 := await(t, claims[0])
			switch {
			case tt.fails && err1 == nil:
				t.Fatalf("first claimer claimed %s, want it to return without a job", j1.ID)
			case !tt.fails && err1 != nil && !errors.Is(err1, jobtype.ErrNoJob):
				t.Fatalf("first claimer: %v", err1)
			}
			var j2 jobtype.Job
			if j1.ID != want.ID {
				var err2 error
				j2, err2 = await(t, claims[1])
				if err2 != nil && !errors.Is(err2, jobtype.ErrNoJob) {
					t.Fatalf("second claimer: %v", err2)
				}
			}
			by := map[string]string{j1.ID: first, j2.ID: second}[want.ID]
			switch {
			case by == "":
				t.Fatalf("nobody claimed %s (first %q, second %q)", want.ID, j1.ID, j2.ID)
			case tt.by != "" && by != tt.by:
				t.Errorf("claimed by the %s claimer, want the %s", by, tt.by)
			}
		})
	}
}

func TestAClaimerWokenForAJobThatClaimsAnOlderOnePassesTheWakeOn(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, openStore(t), jobs.Config{Now: clock.Now})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// older is due in an hour by the engine's clock, which the real
	// timer would wait for; the clock jumps past it instead, so no wake
	// comes for it and it is ready, older than any new job.
	older := submit(t, e, jobs.SubmitRequest{Kind: "mail", RunAt: clock.Now().Add(time.Hour)})
	claims := parkInOrder(t, e, jobs.ClaimRequest{Kinds: []string{"mail"}}, time.Time{}, ctx, ctx)
	clock.Advance(2 * time.Hour)
	wakes := e.ClaimWakes()

	newer := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	j1, err := await(t, claims[0])
	if err != nil || j1.ID != older.ID {
		t.Fatalf("first claimer: %s, %v; want the older job %s", j1.ID, err, older.ID)
	}
	j2, err := await(t, claims[1])
	if err != nil || j2.ID != newer.ID {
		t.Fatalf("second claimer: %s, %v; want the job the first was woken for, %s", j2.ID, err, newer.ID)
	}
	if n := e.ClaimWakes() - wakes; n != 2 {
		t.Errorf("wakes: %d, want 2 (the first claimer's, passed to the second)", n)
	}
}

func TestAClaimerWokenForAJobAnotherTookParksAgain(t *testing.T) {
	st := &countingStore{Store: hookedStore{openStore(t)}}
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := jobs.ClaimRequest{Kinds: []string{"mail"}}
	// Before the woken claimer looks, a new claim's first look takes
	// the job.
	var took jobtype.Job
	hook := &readHook{before: func(n int64) error {
		if n == 3 {
			took, _ = e.Claim(ctx, jobs.ClaimRequest{WorkerID: "newcomer", Kinds: r.Kinds}, time.Time{})
		}
		return nil
	}}
	claims := parkInOrder(t, e, r, time.Time{}, context.WithValue(ctx, readHookKey{}, hook), ctx)
	wakes, writes := e.ClaimWakes(), st.claims.Load()

	want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	waitParked(t, e, 2)
	if hook.n.Load() != 4 || took.ID != want.ID {
		t.Fatalf("the newcomer took %q, want %s", took.ID, want.ID)
	}
	if n := e.ClaimWakes() - wakes; n != 1 {
		t.Errorf("wakes: %d, want 1: finding nothing passes nothing on", n)
	}
	// The newcomer's, and the woken claimer's, which found nothing and
	// read before it parked.
	if n := st.claims.Load() - writes; n != 2 {
		t.Errorf("claim writes: %d, want 2: the newcomer's and the woken claimer's", n)
	}
	for _, c := range claims {
		notYet(t, c, 10*time.Millisecond)
	}
}

func TestAJobEndingInAPoolWakesTheClaimersOfTheQueuesSharingIt(t *testing.T) {
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{Rules: jobtype.Rules{
		Pools: map[string]int{"db": 1},
		Queues: map[string]jobtype.QueueRules{
			"readme":    {Uses: []string{"db"}},
			"index":     {Uses: []string{"db"}},
			"serial":    {Serial: true},
			"unlimited": {},
		},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := running(t, e, jobs.SubmitRequest{Queue: "readme"})

	// One claimer per queue but readme's; each parks.
	claims := map[string]<-chan outcome[jobtype.Job]{}
	for i, q := range []string{"index", "serial", "unlimited"} {
		claims[q] = async(func() (jobtype.Job, error) {
			return e.Claim(ctx, jobs.ClaimRequest{WorkerID: q, Queues: []string{q}}, time.Time{})
		})
		waitParked(t, e, i+1)
	}

	// A new job in index wakes its claimer, which finds the pool full
	// and parks without writing.
	reads, writes, wakes := st.reads.Load(), st.claims.Load(), e.ClaimWakes()
	want := submit(t, e, jobs.SubmitRequest{Queue: "index"})
	if n := e.ClaimWakes() - wakes; n != 1 {
		t.Errorf("wakes by a job behind the pool: %d, want 1", n)
	}
	waitFor(t, "reads", &st.reads, reads+1)
	waitParked(t, e, 3)
	if n := st.claims.Load() - writes; n != 0 {
		t.Errorf("claim writes by a claimer blocked by the pool: %d, want 0", n)
	}

	// The pool's unit comes back: the claimers of readme and index may
	// use it, and only they are woken.
	wakes = e.ClaimWakes()
	if _, err := e.Complete(context.Background(), holder.ID, holder.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if n := e.ClaimWakes() - wakes; n != 1 {
		t.Errorf("wakes by the pool's unit coming back: %d, want 1 (index's claimer)", n)
	}
	if j, err := await(t, claims["index"]); err != nil || j.ID != want.ID {
		t.Fatalf("index's claimer: %s, %v; want %s", j.ID, err, want.ID)
	}
	waitParked(t, e, 2)
}

func TestARulesReloadWakesEveryParkedClaimer(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, kind := range []string{"a", "b", "c"} {
		go e.Claim(ctx, jobs.ClaimRequest{WorkerID: kind, Kinds: []string{kind}}, time.Time{})
		waitParked(t, e, i+1)
	}
	wakes := e.ClaimWakes()
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"q": {MaxRunning: 2}}}); err != nil {
		t.Fatal(err)
	}
	if n := e.ClaimWakes() - wakes; n != 3 {
		t.Errorf("wakes: %d, want 3", n)
	}
	waitParked(t, e, 3)
}

func TestAJobPublishedByAnotherReplicaWakesAParkedClaimer(t *testing.T) {
	st := openStore(t)
	here, there := newEngineOver(t, st, jobs.Config{}), newEngineOver(t, st, jobs.Config{})
	parked := async(func() (jobtype.Job, error) {
		return here.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, soon())
	})
	waitParked(t, here, 1)

	want := submit(t, there, jobs.SubmitRequest{})
	notYet(t, parked, 50*time.Millisecond) // nothing told this replica yet
	here.Publish(want)
	if j, err := await(t, parked); err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
}

func TestAWorkerLimitedToATenantNeverGetsAnotherTenantsJob(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {Serial: true}}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acme := jobs.ClaimRequest{WorkerID: "acme-worker", Tenants: []string{"acme"}}
	claimNow := func(r jobs.ClaimRequest) (jobtype.Job, error) { return e.Claim(ctx, r, time.Now()) }

	// A queue without rules: acme's worker takes acme's job past an
	// older one of globex, and nothing else.
	theirs := submit(t, e, jobs.SubmitRequest{Tenant: "globex"})
	mine := submit(t, e, jobs.SubmitRequest{Tenant: "acme"})
	if j, err := claimNow(acme); err != nil || j.ID != mine.ID {
		t.Fatalf("acme's worker claimed %s, %v; want acme's %s", j.ID, err, mine.ID)
	}
	if j, err := claimNow(acme); !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("acme's worker claimed %s, %v; want ErrNoJob with only globex's job queued", j.ID, err)
	}
	if got := get(t, e, theirs.ID); got.State != jobtype.Queued {
		t.Fatalf("globex's job is %s, want still queued", got.State)
	}

	// A serial queue is serial per tenant: globex's older head does not
	// hold acme's worker back, and stays queued for globex.
	head := submit(t, e, jobs.SubmitRequest{Tenant: "globex", Queue: "index"})
	next := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Queue: "index"})
	acme.Queues = []string{"index"}
	if j, err := claimNow(acme); err != nil || j.ID != next.ID {
		t.Fatalf("acme's worker claimed %s, %v; want acme's own head %s past globex's", j.ID, err, next.ID)
	}
	if got := get(t, e, head.ID); got.State != jobtype.Queued {
		t.Fatalf("globex's head is %s, want still queued", got.State)
	}
	if j, err := claimNow(jobs.ClaimRequest{WorkerID: "globex-worker", Tenants: []string{"globex"}, Queues: []string{"index"}}); err != nil || j.ID != head.ID {
		t.Fatalf("globex's worker claimed %s, %v; want its head %s while acme's runs", j.ID, err, head.ID)
	}
}

func TestAClaimNamingTooManyTenantsOrABadOneIsRefused(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	many := make([]string, jobtype.MaxFilterItems+1)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	tests := []struct {
		name    string
		tenants []string
		field   string
	}{
		{"more tenants than a filter may list", many, "tenants"},
		{"a tenant that is no name", []string{"acme", "a,b"}, "tenants[1]"},
		{"an empty tenant", []string{""}, "tenants[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Tenants: tt.tenants}, time.Now())
			if !isInvalid(err, tt.field) {
				t.Fatalf("claim: %v; want an InvalidError for %q", err, tt.field)
			}
		})
	}
}
