package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// openBenchStore is openStore for benchmarks.
func openBenchStore(b *testing.B) store.Store {
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// countingStore counts the claim writes and the NextReady reads that
// reach the store.
type countingStore struct {
	store.Store
	claims, reads atomic.Int64
}

func (s *countingStore) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	defer s.reads.Add(1)
	return s.Store.NextReady(ctx, f)
}

func (s *countingStore) ClaimJobs(ctx context.Context, f store.ClaimFilter, claim store.Claim) ([]store.Claimed, error) {
	s.claims.Add(1)
	return s.Store.ClaimJobs(ctx, f, claim)
}

// parkClaimers starts n claimers for r that claim until ctx ends, and
// returns once all are parked. stop waits for them.
func parkClaimers(tb testing.TB, e *jobs.Engine, ctx context.Context, n int, r jobs.ClaimRequest) (stop func()) {
	tb.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := r
			r.WorkerID = fmt.Sprintf("parked-%d", i)
			for ctx.Err() == nil {
				if _, err := e.Claim(ctx, r, time.Time{}); err != nil && !errors.Is(err, jobtype.ErrNoJob) && ctx.Err() == nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	waitParked(tb, e, n)
	return wg.Wait
}

// parkOnce starts n claims for r, each claiming at most one job, and
// returns once all are parked (with those parked before). Each claim's
// outcome goes to the channel. Worker ids are r.WorkerID (default
// "parked") and a number.
func parkOnce(tb testing.TB, e *jobs.Engine, ctx context.Context, n int, r jobs.ClaimRequest) <-chan outcome[jobtype.Job] {
	tb.Helper()
	parked := e.ParkedClaimers()
	prefix := r.WorkerID
	if prefix == "" {
		prefix = "parked"
	}
	out := make(chan outcome[jobtype.Job], n)
	for i := range n {
		go func() {
			r := r
			r.WorkerID = fmt.Sprintf("%s-%d", prefix, i)
			j, err := e.Claim(ctx, r, time.Time{})
			out <- outcome[jobtype.Job]{j, err}
		}()
	}
	waitParked(tb, e, parked+n)
	return out
}

// waitParked waits until exactly n claimers are parked.
func waitParked(tb testing.TB, e *jobs.Engine, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.ParkedClaimers() != n {
		if time.Now().After(deadline) {
			tb.Fatalf("%d claimers parked within 10s, want %d", e.ParkedClaimers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor waits until n reaches want and fails if it passes it.
func waitFor(t *testing.T, what string, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d within 10s, want %d", what, n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := n.Load(); got != want {
		t.Fatalf("%s: %d, want %d", what, got, want)
	}
}

// claimedWithin returns the job a claim of out claimed within 10s.
func claimedWithin(t *testing.T, out <-chan outcome[jobtype.Job]) jobtype.Job {
	t.Helper()
	select {
	case o := <-out:
		if o.err != nil {
			t.Fatalf("claim: %v", o.err)
		}
		return o.v
	case <-time.After(10 * time.Second):
		t.Fatal("no parked claimer claimed a job within 10s")
		panic("unreachable")
	}
}

// claimedWhenDue fails the test if a job due at runAt was claimed at at,
// before it was due or long after. The upper bound is loose on purpose:
// on a shared machine under -race the timer, the read and the claim took
// over a second (1.29s seen with -count=5), and it is the counts of reads
// and wakes, not the lateness, that show no claimer polled.
func claimedWhenDue(t *testing.T, at, runAt time.Time) {
	t.Helper()
	if at.Before(runAt.Truncate(time.Microsecond)) || at.After(runAt.Add(5*time.Second)) {
		t.Errorf("claimed %v after run_at, want at or after it, within 5s", at.Sub(runAt))
	}
}

func TestParkedClaimersThatCannotUseAJobAreNotWoken(t *testing.T) {
	const parked = 10
	tests := []struct {
		name string
		job  jobs.SubmitRequest
	}{
		{"a job of another kind", jobs.SubmitRequest{Tenant: "acme", Kind: "report", Queue: "mail"}},
		{"a job in another queue", jobs.SubmitRequest{Tenant: "acme", Kind: "mail", Queue: "bulk"}},
		{"a job of another tenant", jobs.SubmitRequest{Tenant: "globex", Kind: "mail", Queue: "mail"}},
		{"a job of theirs that runs later", jobs.SubmitRequest{Tenant: "acme", Kind: "mail", Queue: "mail", RunAt: time.Now().Add(time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &countingStore{Store: openStore(t)}
			e := newEngineOver(t, st, jobs.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Tenants: []string{"acme"}, Kinds: []string{"mail"}, Queues: []string{"mail"}})
			// Each claimer's first look wrote, then read when to look
			// again.
			reads, writes, wakes := st.reads.Load(), st.claims.Load(), e.ClaimWakes()
			if reads != parked || writes != parked {
				t.Fatalf("first looks: %d reads, %d writes; want %d of each", reads, writes, parked)
			}

			// A wake is given while the commit is published, before
			// Submit returns.
			for range 2 {
				submit(t, e, tt.job)
			}
			if n := e.ClaimWakes(); n != wakes {
				t.Errorf("wakes: %d, want none", n-wakes)
			}

			// They are still parked: the one job they may run wakes
			// one of them, which claims it without reading first.
			want := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "mail", Queue: "mail"})
			if j := claimedWithin(t, claimed); j.ID != want.ID {
				t.Errorf("claimed %s, want %s", j.ID, want.ID)
			}
			checkOneClaimWrite(t, st.claims.Load()-writes, st.reads.Load()-reads)
		})
	}
}

// extraWakes is how many parked claimers besides the one its commit wakes
// a new job may wake: on PostgreSQL the listener's catch-up (every
// second) can list the commit before its notification comes, as another
// replica's change, and the engine then wakes a claimer for it of its
// own, which claims without reading first, finds the job taken (or
// takes it) and parks again; on a loaded machine that happens (see
// TestAJobRetriedAfterABackoffWakesOneParkedClaimerWhenDue). Never a herd.
func extraWakes() int64 {
	if testdb.Backend() == "postgres" {
		return 1
	}
	return 0
}

// checkOneClaimWrite checks the claim writes and reads the parked
// claimers made for one new job: one write, by the claimer woken for it,
// without reading first; on PostgreSQL up to extraWakes more, each of
// which may read once after finding nothing.
func checkOneClaimWrite(t *testing.T, writes, reads int64) {
	t.Helper()
	if writes < 1 || writes > 1+extraWakes() {
		t.Errorf("claim writes: %d, want 1 (at most %d on %s)", writes, 1+extraWakes(), testdb.Backend())
	}
	if reads > writes-1 {
		t.Errorf("reads: %d after %d claim writes, want 0: the claimer woken for the job claims it without reading first", reads, writes)
	}
}

func TestANewJobWakesOneOfFiftyParkedClaimersOfItsKind(t *testing.T) {
	const parked = 50
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
	reads, writes, wakes := st.reads.Load(), st.claims.Load(), e.ClaimWakes()

	want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	if j := claimedWithin(t, claimed); j.ID != want.ID {
		t.Fatalf("claimed %s, want %s", j.ID, want.ID)
	}
	if got := get(t, e, want.ID); got.State != jobtype.Running {
		t.Errorf("job is %s, want running", got.State)
	}
	if n := e.ClaimWakes() - wakes; n < 1 || n > 1+extraWakes() {
		t.Errorf("wakes: %d, want 1 (at most %d on %s)", n, 1+extraWakes(), testdb.Backend())
	}
	checkOneClaimWrite(t, st.claims.Load()-writes, st.reads.Load()-reads)
	waitParked(t, e, parked-1)
}

// Run with -race -count=20: a lost wake shows as a claimer parked while a
// job waits, which fails the test at its 10s bound.
func TestJobsSubmittedQuicklyToParkedClaimersAreAllClaimed(t *testing.T) {
	const parked = 50
	for _, jobCount := range []int{parked, 2 * parked} {
		t.Run(fmt.Sprintf("%d jobs, claimers that claim once", jobCount), func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
			submitConcurrently(t, e, jobCount, jobs.SubmitRequest{Kind: "mail"})

			// Every claimer gets a job: none parks while one waits.
			seen := map[string]bool{}
			for range parked {
				j := claimedWithin(t, claimed)
				if seen[j.ID] {
					t.Errorf("job %s claimed twice", j.ID)
				}
				seen[j.ID] = true
			}
			if n := e.ParkedClaimers(); n != 0 {
				t.Errorf("%d claimers parked after claiming", n)
			}
		})
	}
	t.Run(fmt.Sprintf("%d jobs, claimers that claim again", 2*parked), func(t *testing.T) {
		e, st := newEngine(t, jobs.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		stop := parkClaimers(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
		defer func() { cancel(); stop() }()
		submitConcurrently(t, e, 2*parked, jobs.SubmitRequest{Kind: "mail"})
		deadline := time.Now().Add(10 * time.Second)
		for {
			jobsLeft, _, err := st.ListJobs(context.Background(), store.ListFilter{States: []jobtype.State{jobtype.Queued}, Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(jobsLeft) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still queued after 10s with %d claimers parked", jobsLeft[0].ID, e.ParkedClaimers())
			}
			time.Sleep(time.Millisecond)
		}
		waitParked(t, e, parked)
	})
}

// submitConcurrently submits n jobs like r from four goroutines.
func submitConcurrently(t *testing.T, e *jobs.Engine, n int, r jobs.SubmitRequest) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				if _, err := e.Submit(context.Background(), r); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func TestAJobDueLaterWakesOneParkedClaimerWithoutPolling(t *testing.T) {
	const parked = 10
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
	reads, wakes := st.reads.Load(), e.ClaimWakes()

	runAt := time.Now().Add(1500 * time.Millisecond)
	want := submit(t, e, jobs.SubmitRequest{Kind: "mail", RunAt: runAt})
	j := claimedWithin(t, claimed)
	at := time.Now()
	if j.ID != want.ID {
		t.Fatalf("claimed %s, want %s", j.ID, want.ID)
	}
	claimedWhenDue(t, at, runAt)
	// One read: the woken claimer's, at run_at. None polled before.
	if n := st.reads.Load() - reads; n != 0 {
		t.Errorf("reads: %d, want 0: the claimer woken for the job claims it without reading first", n)
	}
	if n := e.ClaimWakes() - wakes; n != 1 {
		t.Errorf("wakes: %d, want 1", n)
	}
}

func TestAJobQueuedBeforeTheEngineStartedWakesAClaimerWhenDue(t *testing.T) {
	const parked = 10
	st := &countingStore{Store: openStore(t)}
	before := newEngineOver(t, st, jobs.Config{})
	// Due late enough that a loaded machine parks all the claimers of
	// the new engine before it: one parked late would find it due and
	// claim it with a read, which is not what this test is about.
	runAt := time.Now().Add(5 * time.Second)
	want := submit(t, before, jobs.SubmitRequest{Kind: "mail", RunAt: runAt})
	before.Shutdown()

	// A new engine never saw the job committed: it reads the jobs queued
	// to run later once, at the first claim, and wakes one claimer when
	// this one is due.
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
	reads, wakes := st.reads.Load(), e.ClaimWakes()

	j := claimedWithin(t, claimed)
	at := time.Now()
	if j.ID != want.ID {
		t.Fatalf("claimed %s, want %s", j.ID, want.ID)
	}
	claimedWhenDue(t, at, runAt)
	if n := st.reads.Load() - reads; n != 0 {
		t.Errorf("reads: %d, want 0: the claimer woken for the job claims it without reading first", n)
	}
	if n := e.ClaimWakes() - wakes; n != 1 {
		t.Errorf("wakes: %d, want 1", n)
	}
	waitParked(t, e, parked-1)
}

func TestAJobWakesOnlyAParkedClaimerThatMayTakeItsTenant(t *testing.T) {
	const parked = 5
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// acme's claimers park first: were tenants not part of whom a job
	// wakes, globex's job would wake one of them.
	acme := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{WorkerID: "acme", Tenants: []string{"acme"}})
	globex := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{WorkerID: "globex", Tenants: []string{"globex"}})

	for i, tenant := range []string{"globex", "acme"} {
		claimed := map[string]<-chan outcome[jobtype.Job]{"acme": acme, "globex": globex}[tenant]
		reads, wakes := st.reads.Load(), e.ClaimWakes()
		want := submit(t, e, jobs.SubmitRequest{Tenant: tenant})
		if n := e.ClaimWakes() - wakes; n != 1 {
			t.Errorf("wakes by %s's job: %d, want 1", tenant, n)
		}
		j := claimedWithin(t, claimed)
		if j.ID != want.ID || !strings.HasPrefix(j.WorkerID, tenant+"-") {
			t.Fatalf("%s's claimer %s claimed %s, want %s", tenant, j.WorkerID, j.ID, want.ID)
		}
		if n := st.reads.Load() - reads; n != 0 {
			t.Errorf("reads after %s's job: %d, want 0: the claimer woken for the job claims it without reading first", tenant, n)
		}
		waitParked(t, e, 2*parked-1-i)
	}
	// Every claimer left is still parked, and none holds a job.
	for _, c := range []<-chan outcome[jobtype.Job]{acme, globex} {
		select {
		case o := <-c:
			t.Fatalf("a claim returned %s, %v; want it parked", o.v.ID, o.err)
		default:
		}
	}
}

func TestAJobOfAnotherTenantDueLaterWakesNoParkedClaimer(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "queued while the engine runs"
		if restart {
			name = "queued before the engine started"
		}
		t.Run(name, func(t *testing.T) {
			const parked = 5
			st := &countingStore{Store: openStore(t)}
			e := newEngineOver(t, st, jobs.Config{})
			// globex's job is due first, acme's a moment later: acme's
			// claimers must sleep through the first and wake once for
			// the second.
			due := time.Now().Add(1500 * time.Millisecond)
			submitBoth := func() jobtype.Job {
				submit(t, e, jobs.SubmitRequest{Tenant: "globex", Kind: "mail", RunAt: due})
				return submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "mail", RunAt: due.Add(300 * time.Millisecond)})
			}
			var want jobtype.Job
			if restart {
				want = submitBoth()
				e.Shutdown()
				e = newEngineOver(t, st, jobs.Config{})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Tenants: []string{"acme"}, Kinds: []string{"mail"}})
			if !restart {
				want = submitBoth()
			}
			reads, wakes := st.reads.Load(), e.ClaimWakes()

			j := claimedWithin(t, claimed)
			if j.ID != want.ID {
				t.Fatalf("claimed %s, want acme's %s", j.ID, want.ID)
			}
			if n := e.ClaimWakes() - wakes; n != 1 {
				t.Errorf("wakes: %d, want 1, by acme's job when due", n)
			}
			if n := st.reads.Load() - reads; n != 0 {
				t.Errorf("reads: %d, want 0: the claimer woken for the job claims it without reading first", n)
			}
			waitParked(t, e, parked-1)
		})
	}
}

// BenchmarkSubmitWithParkedClaimers submits a job and claims it while
// workers of another kind are parked: what those workers cost everyone
// else. claimwrites/op counts every ClaimJobs that reached the store.
func BenchmarkSubmitWithParkedClaimers(b *testing.B) {
	for _, parked := range []int{0, 50} {
		b.Run(fmt.Sprintf("parked=%d", parked), func(b *testing.B) {
			st := &countingStore{Store: openBenchStore(b)}
			e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
			defer e.Shutdown()
			ctx, cancel := context.WithCancel(context.Background())
			stop := parkClaimers(b, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"other"}})
			defer func() { cancel(); stop() }()

			work := jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"work"}}
			st.claims.Store(0)
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "work"}); err != nil {
					b.Fatal(err)
				}
				if _, err := e.Claim(ctx, work, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(st.claims.Load())/float64(b.N), "claimwrites/op")
		})
	}
}

// BenchmarkNewJobWithParkedClaimersOfItsKind submits a job of the kind 50
// parked claimers run, waits for one of them to claim it and for every
// claimer to be parked again (the counters stop moving), and reports what
// the job cost: wakeups/op counts the claimers woken, reads/op the
// NextReady reads, claimwrites/op the ClaimJobs writes. reads/op and
// claimwrites/op include the winner's next Claim, whose first look writes
// once and reads once before it parks. ns/op includes the settling wait
// and means nothing here.
//
//	go test ./jobs/ -run '^$' -bench BenchmarkNewJobWithParkedClaimersOfItsKind -benchtime 200x
func BenchmarkNewJobWithParkedClaimersOfItsKind(b *testing.B) {
	const parked = 50
	st := &countingStore{Store: openBenchStore(b)}
	e := jobs.New(st, jobs.Config{Logger: slog.New(slog.DiscardHandler)})
	defer e.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	claimed := make(chan string, parked)
	r := jobs.ClaimRequest{Kinds: []string{"work"}}
	var wg sync.WaitGroup
	for i := range parked {
		wg.Go(func() {
			r := r
			r.WorkerID = fmt.Sprintf("parked-%d", i)
			for ctx.Err() == nil {
				j, err := e.Claim(ctx, r, time.Time{})
				switch {
				case err == nil:
					claimed <- j.ID
				case !errors.Is(err, jobtype.ErrNoJob) && ctx.Err() == nil:
					b.Error(err)
					return
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	settle(st)

	reads0, claims0, wakes0 := st.reads.Load(), st.claims.Load(), e.ClaimWakes()
	for b.Loop() {
		j, err := e.Submit(ctx, jobs.SubmitRequest{Kind: "work"})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case id := <-claimed:
			if id != j.ID {
				b.Fatalf("claimed %s, want %s", id, j.ID)
			}
		case <-time.After(10 * time.Second):
			b.Fatal("no parked claimer claimed the job within 10s")
		}
		settle(st)
	}
	b.ReportMetric(float64(e.ClaimWakes()-wakes0)/float64(b.N), "wakeups/op")
	b.ReportMetric(float64(st.reads.Load()-reads0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(st.claims.Load()-claims0)/float64(b.N), "claimwrites/op")
}

// settle waits until the store's counters have not moved for 10ms: the
// claimers have done what a change made them do and are parked. Only
// benchmarks use it; tests wait for conditions.
func settle(st *countingStore) {
	last := st.reads.Load() + st.claims.Load()
	quiet := time.Now()
	for time.Since(quiet) < 10*time.Millisecond {
		time.Sleep(time.Millisecond)
		if n := st.reads.Load() + st.claims.Load(); n != last {
			last, quiet = n, time.Now()
		}
	}
}

func TestAJobRetriedAfterABackoffWakesOneParkedClaimerWhenDue(t *testing.T) {
	const parked = 5
	st := &countingStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{RetryInitialBackoff: 400 * time.Millisecond, RetryMaxBackoff: 400 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := submit(t, e, jobs.SubmitRequest{Kind: "mail", MaxAttempts: 2})
	j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"mail"}}, time.Time{})
	if err != nil || j.ID != first.ID {
		t.Fatalf("claim: %s, %v", j.ID, err)
	}
	claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
	reads, wakes := st.reads.Load(), e.ClaimWakes()

	retried, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Flaky"}, true)
	if err != nil || retried.State != jobtype.Queued {
		t.Fatalf("fail: %s, %v; want queued again", retried.State, err)
	}
	// Full jitter may draw a delay shorter than the commit took: the
	// job was then ready when published and rightly woke a claimer at
	// once. A retry still to come now was surely to come then.
	if retried.RunAt.After(time.Now()) {
		if n := e.ClaimWakes() - wakes; n != 0 {
			t.Errorf("wakes when the job was queued to run later: %d, want 0", n)
		}
	}
	again := claimedWithin(t, claimed)
	at := time.Now()
	if again.ID != j.ID || again.Attempt != 2 {
		t.Fatalf("claimed %s attempt %d, want %s attempt 2", again.ID, again.Attempt, j.ID)
	}
	claimedWhenDue(t, at, retried.RunAt)
	if n := st.reads.Load() - reads; n != 0 {
		t.Errorf("reads: %d, want 0: the claimer woken for the job claims it without reading first", n)
	}
	// On PostgreSQL the listener's catch-up (every second) can list the
	// retry before its notification comes, as another replica's change;
	// the engine then holds a wake of its own for it, which the claim's
	// notification drops only if it comes first: on a loaded machine one
	// more claimer may wake, find nothing and park again. Never a herd.
	want := int64(1)
	if testdb.Backend() == "postgres" {
		want = 2
	}
	if n := e.ClaimWakes() - wakes; n < 1 || n > want {
		t.Errorf("wakes: %d, want 1 (at most %d on %s)", n, want, testdb.Backend())
	}
}

func TestJobsDueLaterBeyondWhatTheEngineKeepsAreAllClaimedWhenDue(t *testing.T) {
	const parked, jobCount = 5, 3
	e, _ := newEngine(t, jobs.Config{})
	e.SetMaxScheduled(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimed := parkOnce(t, e, ctx, parked, jobs.ClaimRequest{Kinds: []string{"mail"}})
	// All due at once: the one the engine keeps has its own wake, the
	// claimers' looks stand in for the other two, which are newer, so
	// the claimer woken for the first claims it and passes nothing on.
	runAt := time.Now().Add(300 * time.Millisecond)
	want := map[string]bool{}
	for range jobCount {
		want[submit(t, e, jobs.SubmitRequest{Kind: "mail", RunAt: runAt}).ID] = true
	}
	for range jobCount {
		j := claimedWithin(t, claimed)
		if !want[j.ID] {
			t.Errorf("claimed %s, not one of the jobs or twice", j.ID)
		}
		delete(want, j.ID)
	}
	waitParked(t, e, parked-jobCount)
}
