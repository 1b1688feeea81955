package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestSubmitManyStoresEveryJobInOrderOrNone(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	reqs := make([]jobs.SubmitRequest, 5)
	for i := range reqs {
		reqs[i] = jobs.SubmitRequest{Tenant: "acme", Kind: "thumb", Batch: "thumbs", Payload: mustJSON(map[string]int{"i": i})}
	}
	got, err := e.SubmitMany(ctx, reqs)
	if err != nil {
		t.Fatalf("submit many: %v", err)
	}
	for i, j := range got {
		if j.Batch != "thumbs" || j.Tenant != "acme" || string(j.Payload) != fmt.Sprintf(`{"i":%d}`, i) || j.State != jobtype.Queued {
			t.Errorf("job %d = %+v; want job %d of the request, QUEUED in batch thumbs", i, j, i)
		}
		if stored := get(t, e, j.ID); stored.Version != 1 || stored.Batch != "thumbs" {
			t.Errorf("stored job %d = %+v", i, stored)
		}
	}

	held := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Kind: "nightly", UniqueKey: "nightly"})
	for _, tc := range []struct {
		name  string
		reqs  func([]jobs.SubmitRequest) []jobs.SubmitRequest
		check func(error) bool
		want  string
	}{
		{"a bad kind", func(r []jobs.SubmitRequest) []jobs.SubmitRequest { r[2].Kind = "has space"; return r },
			func(err error) bool { return isInvalid(err, "jobs[2].kind") }, "invalid jobs[2].kind"},
		{"another tenant", func(r []jobs.SubmitRequest) []jobs.SubmitRequest { r[3].Tenant = "globex"; return r },
			func(err error) bool { return isInvalid(err, "jobs[3].tenant") }, "invalid jobs[3].tenant"},
		{"one unique key twice", func(r []jobs.SubmitRequest) []jobs.SubmitRequest {
			r[1].UniqueKey, r[4].UniqueKey = "k", "k"
			return r
		}, func(err error) bool { return isInvalid(err, "jobs[4].unique_key") }, "invalid jobs[4].unique_key"},
		{"a unique key an active job holds", func(r []jobs.SubmitRequest) []jobs.SubmitRequest { r[4].UniqueKey = "nightly"; return r },
			func(err error) bool {
				var ce *jobtype.ConflictError
				return errors.As(err, &ce) && ce.ActiveID == held.ID
			}, "a conflict naming " + held.ID},
		{"too many", func(r []jobs.SubmitRequest) []jobs.SubmitRequest {
			return slices.Repeat(r[:1], jobtype.MaxBatchJobs+1)
		}, func(err error) bool { return isInvalid(err, "jobs") }, "invalid jobs"},
		{"none", func([]jobs.SubmitRequest) []jobs.SubmitRequest { return nil },
			func(err error) bool { return isInvalid(err, "jobs") }, "invalid jobs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]jobs.SubmitRequest, 5)
			for i := range reqs {
				reqs[i] = jobs.SubmitRequest{Tenant: "acme", Kind: "refused", Batch: "refused"}
			}
			_, err := e.SubmitMany(ctx, tc.reqs(reqs))
			if !tc.check(err) {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
			left, _, err := e.List(ctx, jobs.ListRequest{Tenant: "acme", Batch: "refused"})
			if err != nil || len(left) != 0 {
				t.Fatalf("after a refused submit the batch holds %d jobs (%v), want none", len(left), err)
			}
		})
	}
}

// readJobsHook calls afterRead once, after the first ReadJobs: the moment a
// WaitMany has subscribed and read, before it parks.
type readJobsHook struct {
	store.Store
	afterRead chan []string
}

func (s *readJobsHook) ReadJobs(ctx context.Context, ids []string, r store.JobRead) ([]jobtype.Job, error) {
	jobs, err := s.Store.ReadJobs(ctx, ids, r)
	select {
	case s.afterRead <- ids:
	default:
	}
	return jobs, err
}

func hookedEngine(t *testing.T) (*jobs.Engine, chan []string) {
	hs := &readJobsHook{Store: openStore(t), afterRead: make(chan []string, 1)}
	return newEngineOver(t, hs, jobs.Config{}), hs.afterRead
}

func endedIDs(r jobs.WaitManyResult) []string {
	var ids []string
	for _, j := range r.Ended {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestWaitManyReturnsWhenAllOrAnyHaveEnded(t *testing.T) {
	for _, mode := range []string{"all", "any"} {
		t.Run(mode, func(t *testing.T) {
			e, read := hookedEngine(t)
			ctx := context.Background()
			a := running(t, e, jobs.SubmitRequest{})
			b := running(t, e, jobs.SubmitRequest{})
			c := running(t, e, jobs.SubmitRequest{})
			ids := []string{c.ID, a.ID, b.ID, a.ID} // a repeated id counts once
			waited := async(func() (jobs.WaitManyResult, error) {
				return e.WaitMany(ctx, jobs.WaitManyRequest{IDs: ids, Any: mode == "any"}, soon())
			})
			<-read
			if _, err := e.Complete(ctx, a.ID, a.LeaseID, mustJSON("done a")); err != nil {
				t.Fatal(err)
			}
			if mode == "any" {
				got, err := await(t, waited)
				if err != nil || !slices.Equal(endedIDs(got), []string{a.ID}) || !slices.Equal(got.Unfinished, []string{c.ID, b.ID}) {
					t.Fatalf("wait for any = ended %v, unfinished %v, %v; want ended [a], unfinished [c b]", endedIDs(got), got.Unfinished, err)
				}
				return
			}
			notYet(t, waited, 50*time.Millisecond)
			if _, err := e.Fail(ctx, b.ID, b.LeaseID, jobtype.JobError{Type: "Boom"}, false); err != nil {
				t.Fatal(err)
			}
			notYet(t, waited, 50*time.Millisecond)
			if _, err := e.Cancel(ctx, c.ID); err != nil {
				t.Fatal(err)
			}
			got, err := await(t, waited)
			if err != nil || !slices.Equal(endedIDs(got), []string{c.ID, a.ID, b.ID}) || len(got.Unfinished) != 0 {
				t.Fatalf("wait for all = ended %v, unfinished %v, %v; want all three in the order asked", endedIDs(got), got.Unfinished, err)
			}
			states := []jobtype.State{got.Ended[0].State, got.Ended[1].State, got.Ended[2].State}
			if !slices.Equal(states, []jobtype.State{jobtype.Cancelled, jobtype.Succeeded, jobtype.Failed}) {
				t.Errorf("states = %v", states)
			}
			if got.Ended[1].Result != nil {
				t.Errorf("a summary wait returned a result: %s", got.Ended[1].Result)
			}
			// The wait lets go of its subscriptions after it answers.
			waitUntil(t, "no job watched after the wait returned", func() bool { return e.WatchedJobs() == 0 })
		})
	}
}

func TestWaitManyAtItsDeadlineReturnsWhatHasEnded(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	a := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Complete(ctx, a.ID, a.LeaseID, mustJSON(map[string]int{"rows": 3})); err != nil {
		t.Fatal(err)
	}
	b := running(t, e, jobs.SubmitRequest{})
	got, err := e.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{a.ID, b.ID}, Full: true}, time.Now().Add(30*time.Millisecond))
	if err != nil || !slices.Equal(endedIDs(got), []string{a.ID}) || !slices.Equal(got.Unfinished, []string{b.ID}) {
		t.Fatalf("wait at its deadline = ended %v, unfinished %v, %v", endedIDs(got), got.Unfinished, err)
	}
	if string(got.Ended[0].Result) != `{"rows":3}` {
		t.Errorf("a full wait returned result %s", got.Ended[0].Result)
	}
	// Every job ended already: at once, whatever the deadline.
	if _, err := e.Complete(ctx, b.ID, b.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err = e.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{a.ID, b.ID}}, time.Now().Add(time.Minute))
	if err != nil || len(got.Ended) != 2 || time.Since(start) > 10*time.Second {
		t.Fatalf("wait for ended jobs = %v, %v after %v", endedIDs(got), err, time.Since(start))
	}
}

func TestWaitManyRefusesWhatItCannotWaitFor(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	mine := running(t, e, jobs.SubmitRequest{Tenant: "acme"})
	theirs := running(t, e, jobs.SubmitRequest{Tenant: "globex"})
	held := submit(t, e, jobs.SubmitRequest{Tenant: "acme", Hold: true})
	tooMany := make([]string, jobtype.MaxBatchJobs+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("j_%d", i)
	}
	for _, tc := range []struct {
		name string
		r    jobs.WaitManyRequest
		want func(error) bool
	}{
		{"an unknown id", jobs.WaitManyRequest{IDs: []string{mine.ID, "j_nope"}}, notFound("j_nope")},
		{"another tenant's job", jobs.WaitManyRequest{IDs: []string{mine.ID, theirs.ID}, Tenant: "acme", Confined: true}, notFound(theirs.ID)},
		{"a held job", jobs.WaitManyRequest{IDs: []string{held.ID}}, func(err error) bool { return errors.Is(err, jobs.ErrNotStarted) }},
		{"no ids and no batch", jobs.WaitManyRequest{}, func(err error) bool { return isInvalid(err, "job_ids") }},
		{"ids and a batch", jobs.WaitManyRequest{IDs: []string{mine.ID}, Batch: "b"}, func(err error) bool { return isInvalid(err, "batch") }},
		{"too many ids", jobs.WaitManyRequest{IDs: tooMany}, func(err error) bool { return isInvalid(err, "job_ids") }},
		{"a bad id", jobs.WaitManyRequest{IDs: []string{mine.ID, "has space"}}, func(err error) bool { return isInvalid(err, "job_ids[1]") }},
		{"a batch nobody used", jobs.WaitManyRequest{Batch: "none-such"}, func(err error) bool { return errors.Is(err, jobtype.ErrNotFound) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.WaitMany(ctx, tc.r, soon()); !tc.want(err) {
				t.Fatalf("err = %v", err)
			}
			if n := e.WatchedJobs(); n != 0 {
				t.Errorf("%d jobs still watched after a refusal", n)
			}
		})
	}
}

func notFound(id string) func(error) bool {
	return func(err error) bool {
		var ref *jobs.JobRefError
		return errors.As(err, &ref) && ref.ID == id && errors.Is(err, jobtype.ErrNotFound) && strings.Contains(err.Error(), id)
	}
}

func TestWaitManyForABatchWaitsForItsJobsInSubmissionOrder(t *testing.T) {
	e, read := hookedEngine(t)
	ctx := context.Background()
	reqs := make([]jobs.SubmitRequest, 40)
	for i := range reqs {
		reqs[i] = jobs.SubmitRequest{Tenant: "acme", Kind: "thumb", Batch: "thumbs"}
	}
	batch, err := e.SubmitMany(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	submit(t, e, jobs.SubmitRequest{Tenant: "globex", Kind: "thumb", Batch: "thumbs"}) // another tenant's batch of that name
	waited := async(func() (jobs.WaitManyResult, error) {
		return e.WaitMany(ctx, jobs.WaitManyRequest{Batch: "thumbs", Tenant: "acme"}, soon())
	})
	<-read
	claimed, err := e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"thumb"}, Tenants: []string{"acme"}}, 100, time.Time{})
	if err != nil || len(claimed) != len(batch) {
		t.Fatalf("claimed %d of %d: %v", len(claimed), len(batch), err)
	}
	for _, j := range claimed {
		if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := await(t, waited)
	want := make([]string, len(batch))
	for i, j := range batch {
		want[i] = j.ID
	}
	if err != nil || !slices.Equal(endedIDs(got), want) {
		t.Fatalf("wait for the batch = %v, %v; want its %d jobs in submission order", endedIDs(got), err, len(want))
	}
}

// A WaitMany parked on one replica wakes when the jobs end on another.
func TestWaitManyOnOneReplicaSeesJobsEndOnAnother(t *testing.T) {
	a, b := replicas(t)
	ctx := context.Background()
	x := running(t, a, jobs.SubmitRequest{})
	y := running(t, a, jobs.SubmitRequest{})
	waited := async(func() (jobs.WaitManyResult, error) {
		return b.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{x.ID, y.ID}}, soon())
	})
	for _, j := range []jobtype.Job{x, y} {
		if _, err := a.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := await(t, waited)
	if err != nil || len(got.Ended) != 2 || len(got.Unfinished) != 0 {
		t.Fatalf("wait on the other replica = ended %v, unfinished %v, %v", endedIDs(got), got.Unfinished, err)
	}
}

// A job that ends and is retried while a wait for all waits is waited for
// again: the wait answers once it has ended again, with its last end,
// not when the others end (issue: it answered with the retried job
// among the unfinished, as if at its cap).
func TestWaitManyForAllWaitsAgainForAJobRetriedMeanwhile(t *testing.T) {
	e, read := hookedEngine(t)
	ctx := context.Background()
	a := running(t, e, jobs.SubmitRequest{})
	b := running(t, e, jobs.SubmitRequest{})
	waited := async(func() (jobs.WaitManyResult, error) {
		return e.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{a.ID, b.ID}}, soon())
	})
	<-read
	if _, err := e.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Retry(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	notYet(t, waited, 100*time.Millisecond)
	last, err := e.Cancel(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := await(t, waited)
	if err != nil || !slices.Equal(endedIDs(got), []string{a.ID, b.ID}) || len(got.Unfinished) != 0 {
		t.Fatalf("wait for all = ended %v, unfinished %v, %v; want both ended", endedIDs(got), got.Unfinished, err)
	}
	if got.Ended[0].Version != last.Version {
		t.Errorf("the retried job answered at version %d, want its last end's %d", got.Ended[0].Version, last.Version)
	}
}

// A WaitMany for any of 500 jobs that one commit ends together (their
// dependency failed, so each is cancelled in the commit that ends it)
// answers with all 500 ended, on the replica that ended them and on
// another: not with the few the engine had published when the first
// woke it (an outside probe's wait on another replica listed 943 of
// 1,000 such jobs as unfinished). On PostgreSQL a server may hear the
// cascade's notifications in more than one batch (those that follow
// within the listener's 200 µs), and a busy machine spreads them so:
// there the answer may hold part of them, and the next call, for the
// rest, answers at once with all of them ended.
func TestWaitManyForAnyAnswersWithEveryJobACommitEnded(t *testing.T) {
	const n = 500
	sa, sb := openSharedStores(t)
	hooked := &readJobsHook{Store: sb, afterRead: make(chan []string, 1)}
	a, b := newEngineOver(t, sa, jobs.Config{}), newEngineOver(t, hooked, jobs.Config{})
	ctx := context.Background()
	for _, where := range []struct {
		name string
		e    *jobs.Engine
	}{{"the replica that ended them", a}, {"another replica", b}} {
		t.Run(where.name, func(t *testing.T) {
			dep := running(t, a, jobs.SubmitRequest{})
			reqs := make([]jobs.SubmitRequest, n)
			for i := range reqs {
				reqs[i] = jobs.SubmitRequest{Kind: "after.any", After: []string{dep.ID}}
			}
			after, err := a.SubmitMany(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, n)
			for i, j := range after {
				ids[i] = j.ID
			}
			read := make(chan []string, 1)
			if where.e == b {
				read = hooked.afterRead
			}
			waited := async(func() (jobs.WaitManyResult, error) {
				return where.e.WaitMany(ctx, jobs.WaitManyRequest{IDs: ids, Any: true}, soon())
			})
			if where.e == b {
				for got := range read { // the wait's read of its jobs, after it subscribed
					if len(got) == n {
						break
					}
				}
			} else {
				waitUntil(t, "the wait subscribed to its jobs", func() bool { return a.WatchedJobs() >= n })
			}
			if _, err := a.Fail(ctx, dep.ID, dep.LeaseID, jobtype.JobError{Type: "Boom"}, false); err != nil {
				t.Fatal(err)
			}
			got, err := await(t, waited)
			if err == nil && len(got.Unfinished) > 0 && len(got.Ended) > 0 && testdb.Backend() == "postgres" {
				t.Logf("the answer held %d of %d: the cascade was heard in parts", len(got.Ended), n)
				rest, err := where.e.WaitMany(ctx, jobs.WaitManyRequest{IDs: got.Unfinished, Any: true}, soon())
				if err != nil || len(rest.Unfinished) != 0 || len(rest.Ended)+len(got.Ended) != n {
					t.Fatalf("the next call for the %d unfinished = %d ended, %d unfinished, %v; want all ended", len(got.Unfinished), len(rest.Ended), len(rest.Unfinished), err)
				}
				return
			}
			if err != nil || len(got.Ended) != n || len(got.Unfinished) != 0 {
				t.Fatalf("wait for any = %d ended, %d unfinished, %v; want all %d ended", len(got.Ended), len(got.Unfinished), err, n)
			}
		})
	}
}

// statesHook calls onStates once, after the first read of states only
// (an ANY wait's look at its jobs on its way in) and before the wait's
// read of the jobs that read found ended.
type statesHook struct {
	store.Store
	onStates func()
}

func (s *statesHook) ReadJobs(ctx context.Context, ids []string, r store.JobRead) ([]jobtype.Job, error) {
	jobs, err := s.Store.ReadJobs(ctx, ids, r)
	if r.States && s.onStates != nil {
		s.onStates()
		s.onStates = nil
	}
	return jobs, err
}

func TestWaitManyForAnyAnswersOnItsWayInWithTheEndedJobsAsItsViewSays(t *testing.T) {
	hooked := &statesHook{Store: openStore(t)}
	e := newEngineOver(t, hooked, jobs.Config{})
	ctx := context.Background()
	a := running(t, e, jobs.SubmitRequest{Kind: "any.a", Payload: mustJSON("in a")})
	if _, err := e.Complete(ctx, a.ID, a.LeaseID, mustJSON("out a")); err != nil {
		t.Fatal(err)
	}
	b := running(t, e, jobs.SubmitRequest{Kind: "any.b", Payload: mustJSON("in b")})
	if _, err := e.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	c := running(t, e, jobs.SubmitRequest{Kind: "any.c", Payload: mustJSON("in c")})
	ids := []string{c.ID, b.ID, a.ID}

	for _, full := range []bool{true, false} {
		got, err := e.WaitMany(ctx, jobs.WaitManyRequest{IDs: ids, Any: true, Full: full}, soon())
		if err != nil || !slices.Equal(endedIDs(got), []string{b.ID, a.ID}) || !slices.Equal(got.Unfinished, []string{c.ID}) {
			t.Fatalf("full %v: wait for any = ended %v, unfinished %v, %v; want ended [b a], unfinished [c]", full, endedIDs(got), got.Unfinished, err)
		}
		ea, eb := got.Ended[1], got.Ended[0]
		if ea.Kind != "any.a" || ea.State != jobtype.Succeeded || eb.Kind != "any.b" || eb.State != jobtype.Cancelled || ea.FinishedAt.IsZero() {
			t.Errorf("full %v: ended jobs %+v and %+v, want a SUCCEEDED and b CANCELLED, whole", full, *ea, *eb)
		}
		if full && (string(ea.Payload) != `"in a"` || string(ea.Result) != `"out a"`) {
			t.Errorf("full wait: a's payload %s, result %s; want both", ea.Payload, ea.Result)
		}
		if !full && (ea.Payload != nil || ea.Result != nil) {
			t.Errorf("summary wait: a's payload %s, result %s; want neither", ea.Payload, ea.Result)
		}
	}

	// A job that ended is deleted between the look at the states and
	// the read of the ended jobs: it counts as ended, and is left out.
	hooked.onStates = func() {
		if err := e.Delete(ctx, b.ID); err != nil {
			t.Error(err)
		}
	}
	got, err := e.WaitMany(ctx, jobs.WaitManyRequest{IDs: ids, Any: true}, soon())
	if err != nil || !slices.Equal(endedIDs(got), []string{a.ID}) || !slices.Equal(got.Unfinished, []string{c.ID}) {
		t.Fatalf("wait for any with b deleted meanwhile = ended %v, unfinished %v, %v; want ended [a], unfinished [c]", endedIDs(got), got.Unfinished, err)
	}
}
