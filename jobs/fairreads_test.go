package jobs_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// heldReads is a store whose ListJobs wait for a word from the test, and
// which records whose read of jobs reached it, in order. It reads two
// at a time (ReadConns).
type heldReads struct {
	store.Store
	proceed chan struct{}

	mu      sync.Mutex
	entered []string // the tenant each ListJobs and ReadJob was for
}

func (s *heldReads) ReadConns() int { return 2 }

func (s *heldReads) enter(tenant string) {
	s.mu.Lock()
	s.entered = append(s.entered, tenant)
	s.mu.Unlock()
}

func (s *heldReads) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.entered...)
}

func (s *heldReads) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	s.enter(f.Tenant)
	select {
	case <-s.proceed:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	return s.Store.ListJobs(ctx, f)
}

func (s *heldReads) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	s.enter(r.Tenant)
	return s.Store.ReadJob(ctx, id, r)
}

// One reader's many reads take the store's places (here 2) and the
// rest wait their turn; a read of another reader arriving behind them
// takes the first place freed, ahead of the first reader's queue, and a
// read whose caller leaves while it waits gives up its turn and loses
// no place.
func TestAReadersManyReadsDoNotKeepAnothersFewWaiting(t *testing.T) {
	st := &heldReads{Store: openStore(t), proceed: make(chan struct{})}
	e := newEngineOver(t, st, jobs.Config{})
	b := submit(t, e, jobs.SubmitRequest{Tenant: "b"})

	acme := jobs.WithReader(context.Background(), "tenant/a")
	lists := make(chan error, 6)
	for range 5 {
		go func() {
			_, _, err := e.List(acme, jobs.ListRequest{Tenant: "a"})
			lists <- err
		}()
	}
	waitUntil(t, "two of a's reads in the store, three waiting", func() bool {
		return len(st.order()) == 2 && e.ReadsWaiting() == 3
	})
	// One more of a's, whose caller leaves while it waits.
	leaving, leave := context.WithCancel(acme)
	go func() {
		_, _, err := e.List(leaving, jobs.ListRequest{Tenant: "a"})
		lists <- err
	}()
	waitUntil(t, "a fourth of a's reads waiting", func() bool { return e.ReadsWaiting() == 4 })
	leave()
	if err := <-lists; !errors.Is(err, context.Canceled) {
		t.Fatalf("the read whose caller left answered %v, want context.Canceled", err)
	}
	if n := e.ReadsWaiting(); n != 3 {
		t.Fatalf("%d reads wait after one caller left, want a's other 3", n)
	}

	got := make(chan error, 1)
	go func() {
		_, err := e.GetIn(jobs.WithReader(context.Background(), "tenant/b"), "b", b.ID)
		got <- err
	}()
	waitUntil(t, "b's read waiting behind a's", func() bool { return e.ReadsWaiting() == 4 })
	st.proceed <- struct{}{} // one of a's reads ends: its place is b's
	if err := <-got; err != nil {
		t.Fatalf("b's read: %v", err)
	}
	for range 4 {
		st.proceed <- struct{}{}
	}
	for range 5 {
		if err := <-lists; err != nil {
			t.Fatalf("a's read: %v", err)
		}
	}
	want := []string{"a", "a", "b", "a", "a", "a"}
	if got := st.order(); !slices.Equal(got, want) {
		t.Errorf("the reads reached the store in the order %q, want %q", got, want)
	}
	if n := e.ReadsWaiting(); n != 0 {
		t.Errorf("%d reads still wait", n)
	}
}

// The engine's own reads, and reads of callers without a reader, do not
// wait for a turn.
func TestReadsWithoutAReaderDoNotWait(t *testing.T) {
	st := &heldReads{Store: openStore(t), proceed: make(chan struct{})}
	e := newEngineOver(t, st, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Tenant: "b"})
	acme := jobs.WithReader(context.Background(), "tenant/a")
	for range 3 {
		go func() { _, _, _ = e.List(acme, jobs.ListRequest{Tenant: "a"}) }()
	}
	waitUntil(t, "a's reads holding every place", func() bool { return e.ReadsWaiting() == 1 })
	if _, err := e.GetIn(context.Background(), "b", j.ID); err != nil {
		t.Fatalf("a read without a reader: %v", err)
	}
	for range 3 {
		st.proceed <- struct{}{}
	}
}
