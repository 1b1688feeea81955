package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// concurrentCases hold a backend that gathers concurrent writes into
// shared transactions (group commit) to what one transaction per write
// gives: a write that fails its own checks changes nothing and fails
// nothing else, and every outcome is one that serial execution, in some
// order, could give.
var concurrentCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"concurrent writes that fail their own checks change nothing and fail none of the good ones", testConcurrentMixedWrites},
	{"a concurrent write whose caller leaves either committed and returned nil or changed nothing", testConcurrentCallersLeaving},
}

func testConcurrentMixedWrites(t *testing.T, s store.Store) {
	const (
		goodCreates = 20 // half with unique keys of their own
		conflicts   = 10 // creates with the unique key "held" holds
		duplicates  = 10 // creates with an id that exists
		increments  = 30 // of one job's percent
		refused     = 10 // updates whose func changes the job, then refuses
		unknown     = 10 // updates of ids that do not exist
		claimable   = 10 // jobs to claim
		claimers    = 15 // claims of them: 5 find nothing
		idleClaims  = 5  // claims of a kind nobody submitted
		leavers     = 10 // updates whose caller leaves before the commit
	)
	create(t, s, keyed("held", at(0), "k", jobtype.Queued))
	create(t, s, newJob("counter", at(0)))
	setup := 2
	for i := range refused {
		create(t, s, newJob(fmt.Sprintf("guarded-%02d", i), at(0)))
		create(t, s, newJob(fmt.Sprintf("live-%02d", i), at(0)))
		setup += 2
	}
	for i := range claimable {
		j := newJob(fmt.Sprintf("claim-%02d", i), at(i))
		j.Kind = "claimable"
		create(t, s, j)
		setup++
	}
	before := map[string]jobtype.Job{}
	for _, id := range []string{"held", "counter"} {
		before[id] = get(t, s, id)
	}
	for i := range refused {
		for _, id := range []string{fmt.Sprintf("guarded-%02d", i), fmt.Sprintf("live-%02d", i)} {
			before[id] = get(t, s, id)
		}
	}

	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		mu    sync.Mutex
		fails []string
	)
	failf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fails = append(fails, fmt.Sprintf(format, args...))
	}
	run := func(n int, f func(i int)) {
		for i := range n {
			wg.Go(func() {
				<-start
				f(i)
			})
		}
	}

	run(goodCreates, func(i int) {
		j := newJob(fmt.Sprintf("new-%02d", i), at(i))
		if i%2 == 0 {
			j.UniqueKey = fmt.Sprintf("own-%02d", i)
		}
		if _, err := s.CreateJob(t.Context(), j); err != nil {
			failf("create %s: %v", j.ID, err)
		}
	})
	run(conflicts, func(i int) {
		_, err := s.CreateJob(t.Context(), keyed(fmt.Sprintf("dup-%02d", i), at(i), "k", jobtype.Queued))
		var ce *jobtype.ConflictError
		if !errors.As(err, &ce) || ce.ActiveID != "held" || ce.UniqueKey != "k" {
			failf("create dup-%02d with a held key: err = %v, want a ConflictError naming held", i, err)
		}
	})
	run(duplicates, func(i int) {
		if _, err := s.CreateJob(t.Context(), newJob("counter", at(i))); err == nil {
			failf("create %d of an id that exists succeeded", i)
		}
	})
	versions := make([]int64, increments)
	run(increments, func(i int) {
		got, err := s.UpdateJob(t.Context(), "counter", func(j *jobtype.Job) error { j.Percent++; return nil })
		if err != nil {
			failf("increment %d: %v", i, err)
		}
		versions[i] = got.Version
	})
	refusal := &refusal{"not in this state"}
	run(refused, func(i int) {
		_, err := s.UpdateJob(t.Context(), fmt.Sprintf("guarded-%02d", i), func(j *jobtype.Job) error {
			j.State, j.Percent, j.Step = jobtype.Failed, 50, "half way"
			return refusal
		})
		if err != refusal {
			failf("refused update of guarded-%02d: err = %#v, want the func's own error", i, err)
		}
	})
	run(unknown, func(i int) {
		_, err := s.UpdateJob(t.Context(), fmt.Sprintf("missing-%02d", i), func(*jobtype.Job) error {
			failf("update of missing-%02d called its func", i)
			return nil
		})
		if !errors.Is(err, jobtype.ErrNotFound) {
			failf("update of missing-%02d: err = %v, want ErrNotFound", i, err)
		}
	})
	claimed := make([]string, claimers)
	run(claimers, func(i int) {
		j, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Kinds: []string{"claimable"}, Now: at(100)}, toRunning)
		switch {
		case errors.Is(err, jobtype.ErrNoJob):
		case err != nil:
			failf("claim %d: %v", i, err)
		case j.State != jobtype.Running || j.Version != 2:
			failf("claim %d got %s at version %d, want running at 2", i, j.State, j.Version)
		default:
			claimed[i] = j.ID
		}
	})
	run(idleClaims, func(i int) {
		if _, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Kinds: []string{"nobody"}, Now: at(100)}, toRunning); !errors.Is(err, jobtype.ErrNoJob) {
			failf("claim %d of a kind nobody submitted: err = %v, want ErrNoJob", i, err)
		}
	})
	run(leavers, func(i int) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, err := s.UpdateJob(ctx, fmt.Sprintf("live-%02d", i), func(j *jobtype.Job) error {
			j.Percent = 70
			cancel() // the caller hangs up while its write runs
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			failf("update of live-%02d whose caller left: err = %v, want context.Canceled", i, err)
		}
	})
	close(start)
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}

	// Every good write is committed and visible.
	for i := range goodCreates {
		get(t, s, fmt.Sprintf("new-%02d", i))
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+2) {
			t.Errorf("increment versions = %v, want 2..%d each once", versions, increments+1)
			break
		}
	}
	if got := get(t, s, "counter"); got.Percent != increments || got.Version != increments+1 {
		t.Errorf("counter after %d increments: percent %d version %d, want %d and %d",
			increments, got.Percent, got.Version, increments, increments+1)
	}
	var took []string
	for _, id := range claimed {
		if id != "" {
			took = append(took, id)
		}
	}
	slices.Sort(took)
	if len(took) != claimable || len(slices.Compact(slices.Clone(took))) != claimable {
		t.Errorf("claimed %v, want each of the %d claimable jobs once", took, claimable)
	}
	for _, id := range took {
		if got := get(t, s, id); got.State != jobtype.Running || got.Version != 2 {
			t.Errorf("%s after its claim: %s at version %d, want running at 2", id, got.State, got.Version)
		}
	}

	// Every failed write changed nothing.
	for id, want := range before {
		if id == "counter" {
			continue
		}
		sameJob(t, id+" after writes that failed", get(t, s, id), want)
	}
	for i := range conflicts {
		mustBeGone(t, s, fmt.Sprintf("dup-%02d", i))
	}
	counts, err := s.CountByState(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	if want := int64(setup + goodCreates); total != want || counts[jobtype.Running] != claimable {
		t.Errorf("counts %v: %d jobs, %d running; want %d jobs, %d running", counts, total, counts[jobtype.Running], want, claimable)
	}
}

// testConcurrentCallersLeaving cancels callers at every moment of their
// writes (queued, running, committing): whatever the moment, a write that
// returned nil is stored and one that returned an error is not.
func testConcurrentCallersLeaving(t *testing.T, s store.Store) {
	const writers, rounds = 16, 4
	for r := range rounds {
		var (
			wg   sync.WaitGroup
			errs = make([]error, writers)
		)
		for i := range writers {
			ctx, cancel := context.WithCancel(t.Context())
			wg.Go(func() {
				_, errs[i] = s.CreateJob(ctx, newJob(fmt.Sprintf("job-%d-%02d", r, i), at(i)))
			})
			if i%2 == 0 {
				go cancel() // at some moment of its write, or before it
			} else {
				defer cancel()
			}
		}
		wg.Wait()
		for i, err := range errs {
			id := fmt.Sprintf("job-%d-%02d", r, i)
			_, getErr := s.GetJob(t.Context(), id)
			switch {
			case err == nil && getErr != nil:
				t.Errorf("%s was acknowledged but reads back %v", id, getErr)
			case err != nil && !errors.Is(getErr, jobtype.ErrNotFound):
				t.Errorf("%s failed (%v) but reads back %v, want ErrNotFound", id, err, getErr)
			case err != nil && i%2 == 1:
				t.Errorf("%s, whose caller stayed, failed: %v", id, err)
			}
		}
	}
}
