package sqlite

import (
	"context"
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

// pauseWriter stops the writer before it takes its next batch, so that
// the writes made meanwhile queue up; resume lets it take them, all in
// one batch (up to maxBatchWrites).
func pauseWriter(t *testing.T, s *Store) (resume func()) {
	t.Helper()
	gate := make(chan struct{})
	hold := func() { <-gate }
	s.w.beforeTake.Store(&hold)
	var once sync.Once
	resume = func() {
		once.Do(func() {
			s.w.beforeTake.Store(nil)
			close(gate)
		})
	}
	t.Cleanup(resume)
	return resume
}

// waitQueued waits until n writes are queued.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.w.queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued after 30s, want %d", s.w.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

type counts struct{ commits, writes int64 }

func (s *Store) counts() counts {
	return counts{s.w.commits.Load(), s.w.batched.Load()}
}

func (c counts) since(before counts) counts {
	return counts{c.commits - before.commits, c.writes - before.writes}
}

func TestConcurrentWritesShareCommits(t *testing.T) {
	t.Run("writes queued together commit in one transaction", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		s.w.batchTime = time.Hour
		resume := pauseWriter(t, s)
		const n = 100
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { _, errs[i] = s.CreateJob(context.Background(), testJob(fmt.Sprintf("job-%03d", i))) })
		}
		waitQueued(t, s, n)
		before := s.counts()
		resume()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}
		if got := s.counts().since(before); got != (counts{1, n}) {
			t.Errorf("%d writes queued together: %d commits of %d writes, want 1 of %d", n, got.commits, got.writes, n)
		}
		jobs, _, err := s.ListJobs(t.Context(), store.ListFilter{})
		if err != nil || len(jobs) != n {
			t.Errorf("listed %d jobs, %v; want %d", len(jobs), err, n)
		}
	})

	t.Run("many writers at once commit far fewer times than they write", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		const writers, each = 32, 20
		before := s.counts()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if _, err := s.CreateJob(context.Background(), testJob(fmt.Sprintf("job-%02d-%02d", w, i))); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		got := s.counts().since(before)
		t.Logf("%d writers × %d writes: %d commits, %.1f writes per commit", writers, each, got.commits,
			float64(got.writes)/float64(got.commits))
		if got.writes != writers*each || got.commits*4 > got.writes {
			t.Errorf("%d writes in %d commits, want all %d in at most a quarter as many commits",
				got.writes, got.commits, writers*each)
		}
	})

	t.Run("a lone write commits at once, in a transaction of its own", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		var took []time.Duration
		for i := range 10 {
			before := s.counts()
			start := time.Now()
			if _, err := s.CreateJob(t.Context(), testJob(fmt.Sprintf("job-%d", i))); err != nil {
				t.Fatal(err)
			}
			took = append(took, time.Since(start))
			if got := s.counts().since(before); got != (counts{1, 1}) {
				t.Errorf("write %d alone: %d commits of %d writes, want its own commit", i, got.commits, got.writes)
			}
		}
		slices.Sort(took)
		t.Logf("a lone write took %v (median of %d; nothing waits for company)", took[len(took)/2], len(took))
	})

	t.Run("a batch is bounded in size", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		s.w.batchTime = time.Hour
		resume := pauseWriter(t, s)
		const n = maxBatchWrites + 10
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if _, err := s.CreateJob(context.Background(), testJob(fmt.Sprintf("job-%03d", i))); err != nil {
					t.Error(err)
				}
			})
		}
		waitQueued(t, s, n)
		before := s.counts()
		resume()
		wg.Wait()
		if got := s.counts().since(before); got != (counts{2, n}) {
			t.Errorf("%d writes queued: %d commits of %d writes, want 2 (at most %d per commit)", n, got.commits, got.writes, maxBatchWrites)
		}
	})

	t.Run("a batch is bounded in time: past it, the writes left start the next", func(t *testing.T) {
		s := openTemp(t, tempPath(t))
		defer s.Close()
		s.w.batchTime = time.Nanosecond // every write runs past it
		resume := pauseWriter(t, s)
		const n = 5
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if _, err := s.CreateJob(context.Background(), testJob(fmt.Sprintf("job-%d", i))); err != nil {
					t.Error(err)
				}
			})
		}
		waitQueued(t, s, n)
		before := s.counts()
		resume()
		wg.Wait()
		if got := s.counts().since(before); got != (counts{n, n}) {
			t.Errorf("%d writes, each past the bound: %d commits of %d writes, want one each", n, got.commits, got.writes)
		}
	})
}

// TestOneFailingWriteFailsNothingElseInItsBatch puts good writes and
// writes that fail in every way a write can into one batch.
func TestOneFailingWriteFailsNothingElseInItsBatch(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	s.w.batchTime = time.Hour
	held := testJob("held")
	held.UniqueKey = "nightly"
	for _, j := range []jobtype.Job{held, testJob("counter"), testJob("refused")} {
		if _, err := s.CreateJob(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}

	resume := pauseWriter(t, s)
	refusal := errors.New("not in this state")
	leaver, leave := context.WithCancel(context.Background())
	defer leave()
	type outcome struct {
		err      error
		panicked any
	}
	writes := []struct {
		name string
		do   func() error
	}{
		{"good create", func() error { _, err := s.CreateJob(t.Context(), testJob("good-1")); return err }},
		{"create with a unique key held", func() error {
			j := testJob("dup-key")
			j.UniqueKey = "nightly"
			_, err := s.CreateJob(t.Context(), j)
			return err
		}},
		{"increment", func() error {
			_, err := s.UpdateJob(t.Context(), "counter", func(j *jobtype.Job) error { j.Percent++; return nil })
			return err
		}},
		{"create with an id that exists", func() error { _, err := s.CreateJob(t.Context(), testJob("counter")); return err }},
		{"update refused by its func after changing the job", func() error {
			_, err := s.UpdateJob(t.Context(), "refused", func(j *jobtype.Job) error {
				j.State, j.Percent = jobtype.Failed, 99
				return refusal
			})
			return err
		}},
		{"update of an unknown job", func() error {
			_, err := s.UpdateJob(t.Context(), "nosuchjob", func(*jobtype.Job) error { return nil })
			return err
		}},
		{"claim with nothing to claim", func() error {
			_, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Kinds: []string{"none"}, Now: time.Now()}, store.Claim{})
			return err
		}},
		{"update that panics after changing the job", func() error {
			_, err := s.UpdateJob(t.Context(), "refused", func(j *jobtype.Job) error {
				j.Percent = 77
				panic("boom")
			})
			return err
		}},
		{"update whose caller leaves before the commit", func() error {
			_, err := s.UpdateJob(leaver, "refused", func(j *jobtype.Job) error {
				j.Percent = 55
				leave()
				return nil
			})
			return err
		}},
		{"increment again", func() error {
			_, err := s.UpdateJob(t.Context(), "counter", func(j *jobtype.Job) error { j.Percent++; return nil })
			return err
		}},
		{"good create after the failures", func() error { _, err := s.CreateJob(t.Context(), testJob("good-2")); return err }},
	}
	outcomes := make([]outcome, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		// One at a time into the queue, so the batch runs them in this
		// order.
		wg.Go(func() {
			defer func() { outcomes[i].panicked = recover() }()
			outcomes[i].err = w.do()
		})
		waitQueued(t, s, i+1)
	}
	before := s.counts()
	resume()
	wg.Wait()
	if got := s.counts().since(before); got != (counts{1, 4}) {
		t.Errorf("%d commits of %d writes, want the 4 good ones in 1", got.commits, got.writes)
	}

	for i, w := range writes {
		o := outcomes[i]
		var conflict *jobtype.ConflictError
		ok := false
		switch w.name {
		case "good create", "increment", "increment again", "good create after the failures":
			ok = o.err == nil && o.panicked == nil
		case "create with a unique key held":
			ok = errors.As(o.err, &conflict) && conflict.ActiveID == "held"
		case "create with an id that exists":
			ok = o.err != nil && !errors.Is(o.err, jobtype.ErrUnavailable)
		case "update refused by its func after changing the job":
			ok = o.err == refusal // the func's own error, unwrapped
		case "update of an unknown job":
			ok = errors.Is(o.err, jobtype.ErrNotFound)
		case "claim with nothing to claim":
			ok = errors.Is(o.err, jobtype.ErrNoJob)
		case "update that panics after changing the job":
			ok = o.panicked == "boom" // panics again in its caller, with its value
		case "update whose caller leaves before the commit":
			ok = errors.Is(o.err, context.Canceled)
		}
		if !ok {
			t.Errorf("%s: err %v, panic %v", w.name, o.err, o.panicked)
		}
	}
	for _, id := range []string{"good-1", "good-2"} {
		if _, err := s.GetJob(t.Context(), id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if _, err := s.GetJob(t.Context(), "dup-key"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("dup-key: %v, want ErrNotFound", err)
	}
	if got, err := s.GetJob(t.Context(), "counter"); err != nil || got.Percent != 2 || got.Version != 3 {
		t.Errorf("counter = percent %d version %d, %v; want 2 at version 3", got.Percent, got.Version, err)
	}
	if got, err := s.GetJob(t.Context(), "refused"); err != nil || got.Percent != 0 || got.State != jobtype.Queued || got.Version != 1 {
		t.Errorf("refused = %s percent %d version %d, %v; want it untouched", got.State, got.Percent, got.Version, err)
	}
	// The writer outlived the panic.
	if _, err := s.CreateJob(t.Context(), testJob("after")); err != nil {
		t.Errorf("a write after the batch: %v", err)
	}
}

func TestAWriteWhoseCallerLeavesWhileQueuedIsAnsweredAtOnceAndNeverRuns(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	resume := pauseWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := s.UpdateJob(ctx, "nosuchjob", func(*jobtype.Job) error { ran <- struct{}{}; return nil })
		errc <- err
	}()
	created := make(chan error, 1)
	go func() {
		j := testJob("left")
		_, err := s.CreateJob(ctx, j)
		created <- err
	}()
	waitQueued(t, s, 2)
	cancel()
	// The writer is still paused: the answers come from the queue.
	for _, c := range []chan error{errc, created} {
		if err := <-c; !errors.Is(err, context.Canceled) || errors.Is(err, jobtype.ErrUnavailable) {
			t.Errorf("err = %v, want context.Canceled only", err)
		}
	}
	before := s.counts()
	resume()
	if _, err := s.CreateJob(t.Context(), testJob("next")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Error("the write of a caller that left ran anyway")
	default:
	}
	if _, err := s.GetJob(t.Context(), "left"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("left: %v, want ErrNotFound", err)
	}
	if got := s.counts().since(before); got != (counts{1, 1}) {
		t.Errorf("%d commits of %d writes after the callers left, want only the next write's", got.commits, got.writes)
	}
}

func TestCloseWithWritesQueued(t *testing.T) {
	path := tempPath(t)
	s := openTemp(t, path)
	resume := pauseWriter(t, s)
	const n = 3
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := s.CreateJob(context.Background(), testJob(fmt.Sprintf("queued-%d", i)))
			errs <- err
		}()
	}
	waitQueued(t, s, n)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.w.isClosed() {
		time.Sleep(time.Millisecond)
	}
	resume()
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	for range n {
		if err := <-errs; !errors.Is(err, jobtype.ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
			t.Errorf("a write queued at Close: %v, want ErrUnavailable, closed", err)
		}
	}
	if _, err := s.CreateJob(t.Context(), testJob("after")); !errors.Is(err, jobtype.ErrUnavailable) {
		t.Errorf("a write after Close: %v, want ErrUnavailable", err)
	}

	s = openTemp(t, path)
	defer s.Close()
	jobs, _, err := s.ListJobs(t.Context(), store.ListFilter{})
	if err != nil || len(jobs) != 0 {
		t.Errorf("after reopening: %d jobs, %v; want none of the refused writes", len(jobs), err)
	}
}

// TestAWriteThatFillsTheDiskInABatch: SQLite may undo only the failed
// statement or the whole transaction; either way a write acknowledged
// with nil is stored and one that failed is not.
func TestAWriteThatFillsTheDiskInABatch(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	s.w.batchTime = time.Hour
	if _, err := s.CreateJob(t.Context(), testJob("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.write.Exec("VACUUM"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.write.Exec("PRAGMA max_page_count = 1"); err != nil { // no page more than it has
		t.Fatal(err)
	}
	resume := pauseWriter(t, s)
	ids := []string{"small-1", "large", "small-2", "large-update", "small-3"}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			big := `"` + strings.Repeat("x", 64<<10) + `"`
			switch id {
			case "large":
				j := testJob(id)
				j.Payload = []byte(big)
				_, errs[i] = s.CreateJob(context.Background(), j)
			case "large-update":
				_, errs[i] = s.UpdateJob(context.Background(), "before", func(j *jobtype.Job) error {
					j.Result = []byte(big)
					return nil
				})
			default:
				_, errs[i] = s.CreateJob(context.Background(), testJob(id))
			}
		})
		waitQueued(t, s, i+1)
	}
	resume()
	wg.Wait()
	if _, err := s.write.Exec("PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		t.Logf("%s: %v", id, errs[i])
		if errs[i] != nil && !errors.Is(errs[i], jobtype.ErrUnavailable) {
			t.Errorf("%s: %v, want nil or ErrUnavailable", id, errs[i])
		}
		if id == "large-update" {
			got, err := s.GetJob(t.Context(), "before")
			if err != nil || (errs[i] == nil) != (got.Result != nil) {
				t.Errorf("before: result of %d bytes, %v; its update answered %v", len(got.Result), err, errs[i])
			}
			continue
		}
		_, err := s.GetJob(t.Context(), id)
		if (errs[i] == nil) != (err == nil) {
			t.Errorf("%s: the write answered %v, the read %v", id, errs[i], err)
		}
	}
	if errs[1] == nil || errs[3] == nil {
		t.Errorf("the large writes succeeded on a full disk: %v, %v", errs[1], errs[3])
	}
}
