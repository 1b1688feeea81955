package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var depCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a job waits for its dependencies, and the last success queues it, announced as released", testDependenciesRelease},
	{"a failed dependency cancels the job, naming it, and the cancel runs down a chain", testDependencyFailureCascades},
	{"a job that runs on failure is queued once every dependency has ended, however", testDependencyFailureRun},
	{"dependencies that ended already settle the job at its creation", testDependenciesSettledAtCreation},
	{"a missing or another tenant's dependency refuses the job and stores nothing", testDependencyMissing},
	{"a chain of the deepest WAITING jobs allowed cancels whole; one deeper is refused", testDependencyDepth},
	{"a dependency ending while jobs after it are created never leaves one waiting", testDependencyRace},
	{"a retried job waits again for every dependency that has not succeeded", testDependencyRetryWaits},
	{"a dependency ending while a job after it is retried never leaves it waiting", testDependencyRetryRace},
	{"a job a retried job waits for is neither deleted nor removed by retention while it waits", testDependencyWaitedForIsKept},
	{"a failure cascading through a wide graph costs what its edges cost, not their square", testDependencyWideCascade},
	{"two dependencies ending at once, in two writes, queue the job after them", testDependenciesEndingAtOnce},
	{"two batches of completions whose jobs are dependencies of the same jobs both land", testDependencyBatchesCrossing},
}

var sharedDepCases = []struct {
	name string
	run  func(t *testing.T, a, b store.Store)
}{
	{"two dependencies ending at once through two stores queue the job after them", testDependenciesEndingAtOnceShared},
	{"two batches of completions through two stores whose jobs are dependencies of the same jobs both land", dependencyBatchesCrossing},
}

func testDependenciesEndingAtOnce(t *testing.T, s store.Store) {
	dependenciesEndingAtOnce(t, s, s)
}

func testDependenciesEndingAtOnceShared(t *testing.T, a, b store.Store) {
	dependenciesEndingAtOnce(t, a, b)
}

// dependenciesEndingAtOnce ends the two RUNNING dependencies of a
// WAITING job at once, one through a and one through b, in rounds: a
// success and a success, or (for a job that runs after failures too) a
// success and a cancel. Each write sees the other's dependency not yet
// ended when it starts; whichever commits last must queue the job.
func dependenciesEndingAtOnce(t *testing.T, a, b store.Store) {
	const rounds = 40
	for r := range rounds {
		p1, p2 := newJob(fmt.Sprintf("p1-%d", r), at(0)), newJob(fmt.Sprintf("p2-%d", r), at(0))
		p1.State, p2.State = jobtype.Running, jobtype.Running
		create(t, a, p1)
		create(t, a, p2)
		child := waiting(fmt.Sprintf("child-%d", r), p1.ID, p2.ID)
		second := jobtype.Succeeded
		if r%2 == 1 {
			child.OnDependencyFailure, second = jobtype.RunOnDependencyFailure, jobtype.Cancelled
		}
		create(t, a, child)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			endAs(t, a, p1.ID, jobtype.Succeeded, 1)
		})
		wg.Go(func() {
			<-start
			endAs(t, b, p2.ID, second, 1)
		})
		close(start)
		wg.Wait()
		if got := get(t, a, child.ID); got.State != jobtype.Queued {
			t.Fatalf("round %d: %s once both its dependencies had ended (SUCCEEDED and %s), want QUEUED",
				r, got.State, strings.ToUpper(string(second)))
		}
	}
}

func testDependencyBatchesCrossing(t *testing.T, s store.Store) {
	dependencyBatchesCrossing(t, s, s)
}

// dependencyBatchesCrossing completes four RUNNING jobs in two batches
// at once, as two workers' completers send them, one through a and one
// through b: x runs after a1 and b2, y after a2 and b1, and both after
// a job that stays RUNNING, so each completion's write holds x or y
// while it waits for the other's. Every completion must land, held, and
// leave x and y WAITING for the one job left.
//
// The rounds are few because PostgreSQL takes a second (its
// deadlock_timeout) to find each deadlock: about one round in six meets
// one, so most runs of a build that fails on them fail here.
func dependencyBatchesCrossing(t *testing.T, a, b store.Store) {
	const rounds = 12
	for r := range rounds {
		name := func(s string) string { return fmt.Sprintf("%s-%d", s, r) }
		for _, id := range []string{"a1", "a2", "b1", "b2", "z"} {
			create(t, a, running(name(id), "default", 0))
		}
		create(t, a, waiting(name("x"), name("a1"), name("b2"), name("z")))
		create(t, a, waiting(name("y"), name("a2"), name("b1"), name("z")))
		complete := func(ids ...string) []store.LeaseWrite {
			var ws []store.LeaseWrite
			for _, id := range ids {
				ws = append(ws, store.LeaseWrite{Op: store.Complete, JobID: name(id), LeaseID: "lease-" + name(id)})
			}
			return ws
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, w := range []struct {
			s  store.Store
			ws []store.LeaseWrite
		}{{a, complete("a1", "a2")}, {b, complete("b1", "b2")}} {
			wg.Go(func() {
				<-start
				res, err := w.s.WriteLeases(t.Context(), w.ws, leaseRules)
				if err != nil {
					t.Errorf("round %d: batch %d: %v", r, i, err)
					return
				}
				for k, got := range res {
					if !got.Held || got.Err != nil || got.Job.State != jobtype.Succeeded {
						t.Errorf("round %d: completion of %s: held %v, %s, err %v; want held, SUCCEEDED", r, w.ws[k].JobID, got.Held, got.Job.State, got.Err)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for _, id := range []string{"x", "y"} {
			if got := get(t, a, name(id)); got.State != jobtype.Waiting {
				t.Errorf("round %d: %s is %s, want WAITING for %s", r, got.ID, got.State, name("z"))
			}
		}
		if t.Failed() {
			return
		}
	}
}

// testDependencyWideCascade ends the root of a graph of levels of jobs,
// each WAITING for every job of the level before, as a caller within the
// limits may build it: the cancel runs down all of it in the one write,
// every job ends CANCELLED and each is announced. The bound only fails a
// build whose cascade costs the square of its jobs (it held SQLite's
// write lock for minutes on a graph of 3,000): this one takes well under
// a second.
func testDependencyWideCascade(t *testing.T, s store.Store) {
	const levels, width = 60, 20
	rel := listenReleased(t, s)
	root := newJob("root", at(0))
	root.State = jobtype.Running
	create(t, s, root)
	prev := []string{"root"}
	var all []string
	for l := range levels {
		var level []jobtype.Job
		var ids []string
		for w := range width {
			id := fmt.Sprintf("l%02d-%02d", l, w)
			level = append(level, waiting(id, prev...))
			ids = append(ids, id)
		}
		if _, err := s.CreateJobs(t.Context(), level); err != nil {
			t.Fatalf("create level %d: %v", l, err)
		}
		all, prev = append(all, ids...), ids
	}
	start := time.Now()
	endAs(t, s, "root", jobtype.Failed, 1)
	took := time.Since(start)
	t.Logf("the failure of the root cancelled %d jobs in %v", len(all), took)
	if took > 30*time.Second {
		t.Errorf("the cascade through %d jobs took %v; want it in proportion to its edges", len(all), took)
	}
	for _, id := range all {
		got := get(t, s, id)
		if got.State != jobtype.Cancelled || got.Error.Type != "DependencyFailed" {
			t.Fatalf("%s after the root failed: %s %v, want CANCELLED with DependencyFailed", id, got.State, got.Error)
		}
		rel.await(t, id, got.Version, jobtype.Cancelled)
	}
}

func testDependencyWaitedForIsKept(t *testing.T, s store.Store) {
	a := newJob("a", at(0))
	a.State = jobtype.Running
	create(t, s, a)
	create(t, s, waiting("b", "a"))
	endAs(t, s, "a", jobtype.Failed, 1) // cancels b
	if got := retry(t, s, "b", 2); got.State != jobtype.Waiting {
		t.Fatalf("retry of b = %s, want WAITING for a", got.State)
	}
	kept, deleted, err := s.DeleteJob(t.Context(), "a")
	var wf *jobtype.WaitedForError
	if deleted || !errors.As(err, &wf) || wf.ID != "a" || wf.Waiter != "b" {
		t.Fatalf("delete of a while b waits for it = %v, %v; want a WaitedForError naming b", deleted, err)
	}
	if kept.ID != "a" || kept.State != jobtype.Failed {
		t.Errorf("delete of a while b waits for it returned job %q in state %q, want a, FAILED (its refusal names the state)", kept.ID, kept.State)
	}
	if _, err := s.DeleteFinishedBefore(t.Context(), at(1000), deleteAll); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "a"); got.State != jobtype.Failed {
		t.Fatalf("a after retention while b waits for it: %s, want kept, FAILED", got.State)
	}

	// Once b no longer waits, a goes, and b retried again is not held
	// back by what its first wait left.
	endAs(t, s, "b", jobtype.Cancelled, 3)
	if _, deleted, err := s.DeleteJob(t.Context(), "a"); err != nil || !deleted {
		t.Fatalf("delete of a once b was cancelled = %v, %v; want deleted", deleted, err)
	}
	if got := retry(t, s, "b", 4); got.State != jobtype.Queued {
		t.Fatalf("retry of b after a was deleted = %s, want QUEUED", got.State)
	}
}

// retry makes ended job id WAITING again at at(sec), as jobs.Engine.Retry
// writes a job with dependencies, and returns it as the store settled it.
func retry(t *testing.T, s store.Store, id string, sec int) jobtype.Job {
	t.Helper()
	return update(t, s, id, func(j *jobtype.Job) {
		j.State, j.RunAt, j.UpdatedAt, j.FinishedAt = jobtype.Waiting, at(sec), at(sec), time.Time{}
		j.AddHistory(jobtype.HistoryEntry{Attempt: j.Attempt, FinishedAt: at(sec), State: jobtype.Waiting, By: "ops"})
	})
}

func testDependencyRetryWaits(t *testing.T, s store.Store) {
	rel := listenReleased(t, s)
	running, done, failed := newJob("running", at(0)), newJob("done", at(0)), newJob("failed", at(0))
	running.State, done.State, failed.State = jobtype.Running, jobtype.Running, jobtype.Running
	create(t, s, running)
	create(t, s, done)
	create(t, s, failed)
	create(t, s, waiting("cancelled-waiting", "running", "done"))
	create(t, s, waiting("dep-failed", "failed", "done"))
	run := waiting("runs-anyway", "failed", "running")
	run.OnDependencyFailure = jobtype.RunOnDependencyFailure
	create(t, s, run)
	create(t, s, waiting("after-gone", "done"))
	endAs(t, s, "cancelled-waiting", jobtype.Cancelled, 1) // an operator's cancel
	endAs(t, s, "runs-anyway", jobtype.Cancelled, 1)
	endAs(t, s, "done", jobtype.Succeeded, 2)
	endAs(t, s, "failed", jobtype.Failed, 3) // cancels dep-failed
	endAs(t, s, "after-gone", jobtype.Failed, 4)
	if _, deleted, err := s.DeleteJob(t.Context(), "done"); err != nil || !deleted {
		t.Fatalf("delete done = %v, %v", deleted, err)
	}

	for _, c := range []struct {
		id   string
		want jobtype.State
	}{
		{"cancelled-waiting", jobtype.Waiting}, // running has not ended
		{"dep-failed", jobtype.Waiting},        // failed must be retried too
		{"runs-anyway", jobtype.Waiting},       // failed has ended, running has not
		{"after-gone", jobtype.Queued},         // done is gone: it ended long ago
	} {
		got := retry(t, s, c.id, 10)
		if got.State != c.want || get(t, s, c.id).State != c.want {
			t.Errorf("retry of %s = %s, stored %s; want %s", c.id, got.State, get(t, s, c.id).State, c.want)
		}
		if h := got.History; len(h) == 0 || h[len(h)-1].State != c.want || h[len(h)-1].By != "ops" {
			t.Errorf("retry of %s: last history entry %+v, want the retry's, %s", c.id, h, c.want)
		}
		if c.want == jobtype.Queued && !got.RunAt.Equal(at(10)) {
			t.Errorf("retry of %s: run_at %v, want the retry's time %v", c.id, got.RunAt, at(10))
		}
	}

	// The running dependency succeeds: the jobs waiting for it alone go.
	endAs(t, s, "running", jobtype.Succeeded, 12)
	for _, id := range []string{"cancelled-waiting", "runs-anyway"} {
		got := get(t, s, id)
		if got.State != jobtype.Queued {
			t.Errorf("%s once running succeeded: %s, want QUEUED", id, got.State)
		}
		rel.await(t, id, got.Version, jobtype.Queued)
	}
	if got := get(t, s, "dep-failed"); got.State != jobtype.Waiting {
		t.Errorf("dep-failed while failed has not been retried: %s, want WAITING", got.State)
	}

	// The failed dependency is retried and fails again: the job after it
	// is cancelled again, naming it; retried both, it succeeds: released.
	update(t, s, "failed", func(j *jobtype.Job) { j.State, j.FinishedAt = jobtype.Running, time.Time{} })
	endAs(t, s, "failed", jobtype.Failed, 14)
	if got := get(t, s, "dep-failed"); got.State != jobtype.Cancelled || got.Error == nil ||
		got.Error.Message != store.DependencyFailedMessage("failed", jobtype.Failed) {
		t.Fatalf("dep-failed once failed failed again: %s with %+v, want CANCELLED naming it", got.State, got.Error)
	}
	retry(t, s, "dep-failed", 15)
	update(t, s, "failed", func(j *jobtype.Job) { j.State, j.FinishedAt = jobtype.Running, time.Time{} })
	endAs(t, s, "failed", jobtype.Succeeded, 16)
	got := get(t, s, "dep-failed")
	if got.State != jobtype.Queued {
		t.Fatalf("dep-failed once failed succeeded: %s, want QUEUED", got.State)
	}
	rel.await(t, "dep-failed", got.Version, jobtype.Queued)
}

func testDependencyRetryRace(t *testing.T, s store.Store) {
	const rounds, dependents = 10, 6
	for r := range rounds {
		dep := newJob(fmt.Sprintf("retry-dep-%d", r), at(0))
		dep.State = jobtype.Running
		create(t, s, dep)
		for i := range dependents {
			id := fmt.Sprintf("retried-%d-%d", r, i)
			create(t, s, waiting(id, dep.ID))
			endAs(t, s, id, jobtype.Cancelled, 1)
		}
		var wg sync.WaitGroup
		for i := range dependents {
			wg.Go(func() {
				_, err := s.UpdateJob(t.Context(), fmt.Sprintf("retried-%d-%d", r, i), func(j *jobtype.Job) error {
					j.State, j.RunAt, j.UpdatedAt, j.FinishedAt = jobtype.Waiting, at(2), at(2), time.Time{}
					return nil
				})
				if err != nil {
					t.Errorf("retry: %v", err)
				}
			})
		}
		wg.Go(func() { endAs(t, s, dep.ID, jobtype.Succeeded, 2) })
		wg.Wait()
		for i := range dependents {
			if got := get(t, s, fmt.Sprintf("retried-%d-%d", r, i)); got.State != jobtype.Queued {
				t.Fatalf("round %d, job %d: %s once its dependency had succeeded, want QUEUED", r, i, got.State)
			}
		}
	}
}

// waiting is a new job of tenant acme WAITING for after.
func waiting(id string, after ...string) jobtype.Job {
	j := newJob(id, at(0))
	j.State, j.After, j.OnDependencyFailure = jobtype.Waiting, after, jobtype.CancelOnDependencyFailure
	return j
}

// endAs ends job id in state, at at(sec).
func endAs(t *testing.T, s store.Store, id string, state jobtype.State, sec int) jobtype.Job {
	t.Helper()
	return update(t, s, id, func(j *jobtype.Job) {
		j.State, j.FinishedAt, j.UpdatedAt = state, at(sec), at(sec)
	})
}

// released collects the changes s announces that the writer's caller
// does not have: Released ones, and those it did not make (!Local).
type released struct {
	mu      sync.Mutex
	changes map[string]store.Change
}

func listenReleased(t *testing.T, s store.Store) *released {
	r := &released{changes: map[string]store.Change{}}
	err := s.Listen(t.Context(), func(cs []store.Change, _ bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range cs {
			// A change a catch-up lists (PostgreSQL's listener reads
			// the committed changes every second) can come before the
			// notification that would mark it Released, which is then
			// heard as a repeat: the engine acts on it as on another
			// replica's change, so it is announced too.
			if c.Released || !c.Local {
				r.changes[c.JobID] = c
			}
		}
	})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return r
}

// await waits until a Released change of id at version has come.
func (r *released) await(t *testing.T, id string, version int64, state jobtype.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		c, ok := r.changes[id]
		r.mu.Unlock()
		if ok && c.Version >= version {
			if c.State != state || c.Version != version {
				t.Errorf("released change of %s = %s at version %d, want %s at %d", id, c.State, c.Version, state, version)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no released change of %s at version %d within 30s", id, version)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testDependenciesRelease(t *testing.T, s store.Store) {
	rel := listenReleased(t, s)
	a, b := newJob("a", at(0)), newJob("b", at(0))
	a.State, b.State = jobtype.Running, jobtype.Running
	create(t, s, a)
	create(t, s, b)
	d := create(t, s, waiting("d", "a", "b", "a"))
	if d.State != jobtype.Waiting || len(d.After) != 3 {
		t.Fatalf("created %s after %v, want WAITING after a, b, a", d.State, d.After)
	}
	endAs(t, s, "a", jobtype.Succeeded, 5)
	if got := get(t, s, "d"); got.State != jobtype.Waiting || got.Version != 1 {
		t.Fatalf("after one of two dependencies: %s at version %d, want WAITING at 1", got.State, got.Version)
	}
	endAs(t, s, "b", jobtype.Succeeded, 7)
	got := get(t, s, "d")
	if got.State != jobtype.Queued || got.Version != 2 || !got.RunAt.Equal(at(7)) || !got.UpdatedAt.Equal(at(7)) {
		t.Fatalf("after both: %s at version %d, run_at %v, updated_at %v; want QUEUED at 2 from the last end, %v",
			got.State, got.Version, got.RunAt, got.UpdatedAt, at(7))
	}
	rel.await(t, "d", 2, jobtype.Queued)
	claimed, err := s.ClaimJobs(t.Context(), store.ClaimFilter{Now: at(8)}, store.Claim{WorkerID: "w", LeaseIDs: []string{"l"}, Now: at(8), Lease: time.Minute})
	if err != nil || len(claimed) != 1 || claimed[0].Job.ID != "d" {
		t.Fatalf("claim after the release = %v, %v; want d", claimed, err)
	}
}

func testDependencyFailureCascades(t *testing.T, s store.Store) {
	a := newJob("a", at(0))
	a.State = jobtype.Running
	create(t, s, a)
	create(t, s, waiting("b", "a"))
	create(t, s, waiting("c", "b"))
	run := waiting("r", "b")
	run.OnDependencyFailure = jobtype.RunOnDependencyFailure
	create(t, s, run)
	endAs(t, s, "a", jobtype.Failed, 3)
	for _, want := range []struct {
		id, message string
		state       jobtype.State
	}{
		{"b", store.DependencyFailedMessage("a", jobtype.Failed), jobtype.Cancelled},
		{"c", store.DependencyFailedMessage("b", jobtype.Cancelled), jobtype.Cancelled},
		{"r", "", jobtype.Queued},
	} {
		got := get(t, s, want.id)
		if got.State != want.state || got.Version != 2 {
			t.Errorf("%s = %s at version %d, want %s at 2", want.id, got.State, got.Version, want.state)
		}
		if want.message == "" {
			continue
		}
		if got.Error == nil || got.Error.Type != jobtype.DependencyFailedError || got.Error.Message != want.message || !got.FinishedAt.Equal(at(3)) {
			t.Errorf("%s ended with %+v at %v, want %s %q at %v", want.id, got.Error, got.FinishedAt, jobtype.DependencyFailedError, want.message, at(3))
		}
	}
}

func testDependencyFailureRun(t *testing.T, s store.Store) {
	for _, st := range []jobtype.State{jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		t.Run(string(st), func(t *testing.T) {
			a, b := newJob("a-"+string(st), at(0)), newJob("b-"+string(st), at(0))
			a.State, b.State = jobtype.Running, jobtype.Running
			create(t, s, a)
			create(t, s, b)
			d := waiting("d-"+string(st), a.ID, b.ID)
			d.OnDependencyFailure = jobtype.RunOnDependencyFailure
			create(t, s, d)
			endAs(t, s, a.ID, st, 2)
			if got := get(t, s, d.ID); got.State != jobtype.Waiting {
				t.Fatalf("after a dependency ended %s, one still running: %s, want WAITING", st, got.State)
			}
			endAs(t, s, b.ID, jobtype.Succeeded, 4)
			if got := get(t, s, d.ID); got.State != jobtype.Queued || got.Error != nil {
				t.Fatalf("after both ended: %s with error %v, want QUEUED", got.State, got.Error)
			}
		})
	}
}

func testDependenciesSettledAtCreation(t *testing.T, s store.Store) {
	done, failed := newJob("done", at(0)), newJob("failed", at(0))
	done.State, failed.State = jobtype.Succeeded, jobtype.Failed
	create(t, s, done)
	create(t, s, failed)

	queued := waiting("after-done", "done")
	queued.RunAt = at(-5) // before its creation: runs from its creation
	if got := create(t, s, queued); got.State != jobtype.Queued || !got.RunAt.Equal(at(0)) || got.Version != 1 {
		t.Errorf("after a succeeded job: %s at version %d, run_at %v; want QUEUED at 1 from %v", got.State, got.Version, got.RunAt, at(0))
	}
	got := create(t, s, waiting("after-failed", "done", "failed"))
	if got.State != jobtype.Cancelled || got.Error == nil || got.Error.Message != store.DependencyFailedMessage("failed", jobtype.Failed) {
		t.Errorf("after a failed job: %s with %+v, want CANCELLED naming it", got.State, got.Error)
	}
	if stored := get(t, s, "after-failed"); stored.State != jobtype.Cancelled {
		t.Errorf("stored as %s, want CANCELLED", stored.State)
	}
	run := waiting("run-after-failed", "failed")
	run.OnDependencyFailure = jobtype.RunOnDependencyFailure
	if got := create(t, s, run); got.State != jobtype.Queued {
		t.Errorf("running after a failed job: %s, want QUEUED", got.State)
	}
}

func testDependencyMissing(t *testing.T, s store.Store) {
	other := newJob("theirs", at(0))
	other.Tenant = "globex"
	create(t, s, other)
	mine := newJob("mine", at(0))
	mine.State = jobtype.Running
	create(t, s, mine)
	for _, missing := range []string{"nope", "theirs"} {
		_, err := s.CreateJobs(t.Context(), []jobtype.Job{waiting("ok-"+missing, "mine"), waiting("bad-"+missing, "mine", missing)})
		var me *jobtype.MissingError
		if !errors.As(err, &me) || me.ID != missing || !errors.Is(err, jobtype.ErrNotFound) {
			t.Errorf("after %s: err = %v, want a MissingError naming it", missing, err)
		}
		mustBeGone(t, s, "ok-"+missing)
		mustBeGone(t, s, "bad-"+missing)
	}
	// Nothing was recorded: mine's end releases nothing.
	endAs(t, s, "mine", jobtype.Succeeded, 1)
}

func testDependencyDepth(t *testing.T, s store.Store) {
	head := newJob("link-0", at(0))
	head.State = jobtype.Running
	create(t, s, head)
	for i := 1; i <= jobtype.MaxDependencyDepth; i++ {
		j := create(t, s, waiting(fmt.Sprintf("link-%d", i), fmt.Sprintf("link-%d", i-1)))
		if j.State != jobtype.Waiting {
			t.Fatalf("link %d: %s, want WAITING", i, j.State)
		}
	}
	_, err := s.CreateJob(t.Context(), waiting("one-too-deep", fmt.Sprintf("link-%d", jobtype.MaxDependencyDepth)))
	var inv *jobtype.InvalidError
	if !errors.As(err, &inv) || inv.Field != "after" {
		t.Fatalf("a link past the deepest chain: err = %v, want invalid after", err)
	}
	mustBeGone(t, s, "one-too-deep")
	endAs(t, s, "link-0", jobtype.Lost, 9)
	for i := 1; i <= jobtype.MaxDependencyDepth; i++ {
		if got := get(t, s, fmt.Sprintf("link-%d", i)); got.State != jobtype.Cancelled {
			t.Fatalf("link %d after the head was lost: %s, want CANCELLED", i, got.State)
		}
	}
}

func testDependencyRace(t *testing.T, s store.Store) {
	const rounds, dependents = 20, 8
	for r := range rounds {
		dep := newJob(fmt.Sprintf("dep-%d", r), at(0))
		dep.State = jobtype.Running
		create(t, s, dep)
		var wg sync.WaitGroup
		for i := range dependents {
			wg.Go(func() {
				if _, err := s.CreateJob(t.Context(), waiting(fmt.Sprintf("after-%d-%d", r, i), dep.ID)); err != nil {
					t.Errorf("create: %v", err)
				}
			})
		}
		wg.Go(func() { endAs(t, s, dep.ID, jobtype.Succeeded, 1) })
		wg.Wait()
		for i := range dependents {
			if got := get(t, s, fmt.Sprintf("after-%d-%d", r, i)); got.State != jobtype.Queued {
				t.Fatalf("round %d, job %d: %s once its dependency had succeeded, want QUEUED", r, i, got.State)
			}
		}
	}
}
