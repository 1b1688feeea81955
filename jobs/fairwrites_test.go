package jobs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/heldstore"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// batchOf is n requests of tenant's no-op jobs.
func batchOf(tenant string, n int) []jobs.SubmitRequest {
	rs := make([]jobs.SubmitRequest, n)
	for i := range rs {
		rs[i] = jobs.SubmitRequest{Tenant: tenant, Kind: "bulk"}
	}
	return rs
}

// sendBatches sends n of tenant a's batches of 1,000 through e, each in a
// goroutine of its own, answering on the channel returned.
func sendBatches(e *jobs.Engine, n int) chan error {
	acme := jobs.WithReader(context.Background(), "tenant/a")
	batches := make(chan error, n)
	for range n {
		go func() {
			_, err := e.SubmitMany(acme, batchOf("a", jobtype.MaxBatchJobs))
			batches <- err
		}()
	}
	return batches
}

// One tenant's batches of 1,000 take every place for writes (two of
// them) while it writes alone; another tenant's submit arriving behind
// its third batch takes the first places freed, ahead of it; a write
// whose caller leaves while it waits gives up its turn.
func TestATenantsBatchesDoNotKeepAnothersSubmitWaiting(t *testing.T) {
	st := heldstore.New(openStore(t))
	e := newEngineOver(t, st, jobs.Config{WriteTurnWait: time.Hour})
	acme := jobs.WithReader(context.Background(), "tenant/a")

	first := sendBatches(e, 2)
	waitUntil(t, "a's two batches in the store at once", func() bool { return len(st.Order()) == 2 })
	third := sendBatches(e, 1)
	waitUntil(t, "a's third batch waiting", func() bool { return e.WritesWaiting() == 1 })

	got := make(chan error, 1)
	go func() {
		_, err := e.Submit(jobs.WithReader(context.Background(), "tenant/b"), jobs.SubmitRequest{Tenant: "b", Kind: "one"})
		got <- err
	}()
	waitUntil(t, "b's submit waiting behind a's batch", func() bool { return e.WritesWaiting() == 2 })
	// One more of a's, whose caller leaves while it waits: it gives up
	// its turn, and b's keeps its own.
	leaving, leave := context.WithCancel(acme)
	left := make(chan error, 1)
	go func() {
		_, err := e.Submit(leaving, jobs.SubmitRequest{Tenant: "a", Kind: "left"})
		left <- err
	}()
	waitUntil(t, "a's write waiting", func() bool { return e.WritesWaiting() == 3 })
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("a write whose caller left while it waited answered %v, want context.Canceled", err)
	}
	st.Release("a") // one of a's batches commits: b's turn
	waitUntil(t, "b's submit in the store", func() bool { return len(st.Order()) == 3 })
	if n := e.WritesWaiting(); n != 1 {
		t.Fatalf("%d writes wait with b's in the store, want a's third batch", n)
	}
	st.Release("b")
	if err := <-got; err != nil {
		t.Fatalf("b's submit: %v", err)
	}
	for range 2 {
		st.Release("a")
	}
	for _, err := range []error{<-first, <-first, <-third} {
		if err != nil {
			t.Fatalf("a's batch: %v", err)
		}
	}
	if want := []string{"a", "a", "b", "a"}; !slices.Equal(st.Order(), want) {
		t.Errorf("the writes reached the store in the order %q, want %q", st.Order(), want)
	}
	if n := e.WritesWaiting(); n != 0 {
		t.Errorf("%d writes still wait", n)
	}
}

// A write that waits Config.WriteTurnWait for its turn is refused
// unavailable, having written nothing, and says why. The engine's own
// writes, and those of callers without a writer, take no turn.
func TestAWriteTooLongWithoutItsTurnIsRefused(t *testing.T) {
	st := heldstore.New(openStore(t))
	e := newEngineOver(t, st, jobs.Config{WriteTurnWait: 200 * time.Millisecond})
	go st.Release("c")
	queued := submit(t, e, jobs.SubmitRequest{Tenant: "c"})
	acme := jobs.WithReader(context.Background(), "tenant/a")

	batches := sendBatches(e, 2)
	waitUntil(t, "a's two batches holding every place", func() bool { return len(st.Order()) == 3 })

	_, err := e.Submit(acme, jobs.SubmitRequest{Tenant: "a", Kind: "late"})
	var turn *jobs.WriteTurnError
	if !errors.As(err, &turn) || !errors.Is(err, jobtype.ErrUnavailable) || turn.Writer != "tenant/a" {
		t.Fatalf("a write past its turn's wait answered %v, want a WriteTurnError of tenant/a wrapping ErrUnavailable", err)
	}
	if want := "the write waited 200ms for its turn behind the other writes of tenant a"; len(turn.UnavailableCause()) < len(want) || turn.UnavailableCause()[:len(want)] != want {
		t.Errorf("its cause reads %q, want it to start %q", turn.UnavailableCause(), want)
	}

	// Writes without a writer (the engine's own, or a server's without
	// tokens) do not wait for a place.
	if _, err := e.Cancel(context.Background(), queued.ID); err != nil {
		t.Fatalf("a cancel without a writer while writes hold every place: %v", err)
	}
	go st.Release("x")
	if _, err := e.Submit(context.Background(), jobs.SubmitRequest{Tenant: "x", Kind: "k"}); err != nil {
		t.Fatalf("a submit without a writer while writes hold every place: %v", err)
	}
	for range 2 {
		st.Release("a")
	}
	for range 2 {
		if err := <-batches; err != nil {
			t.Fatalf("a's batch: %v", err)
		}
	}
	page, _, err := e.List(context.Background(), jobs.ListRequest{Tenant: "a", Kind: "late"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 0 {
		t.Errorf("tenant a has %d jobs of the refused write", len(page))
	}
}

// A write holds places for itself as well as for its jobs, so a
// writer's many small writes hold every place at 183 (not 2,020), and
// another writer's write is written at the first freed.
func TestATenantsManySmallWritesDoNotKeepAnothersWaiting(t *testing.T) {
	st := heldstore.New(openStore(t))
	e := newEngineOver(t, st, jobs.Config{WriteTurnWait: time.Hour})
	acme := jobs.WithReader(context.Background(), "tenant/a")
	submits := make(chan error, 300)
	for range 300 {
		go func() {
			_, err := e.Submit(acme, jobs.SubmitRequest{Tenant: "a", Kind: "small"})
			submits <- err
		}()
	}
	waitUntil(t, "a's small writes holding every place", func() bool {
		return len(st.Order()) == 183 && e.WritesWaiting() == 300-183
	})
	got := make(chan error, 1)
	go func() {
		_, err := e.Submit(jobs.WithReader(context.Background(), "tenant/b"), jobs.SubmitRequest{Tenant: "b", Kind: "one"})
		got <- err
	}()
	waitUntil(t, "b's submit waiting", func() bool { return e.WritesWaiting() == 300-183+1 })
	st.Release("a")
	waitUntil(t, "b's submit in the store", func() bool { return slices.Contains(st.Order(), "b") })
	if i := slices.Index(st.Order(), "b"); i != 183 {
		t.Errorf("b's submit reached the store %dth, want right after the 183 of a's that held every place", i+1)
	}
	st.Release("b")
	if err := <-got; err != nil {
		t.Fatalf("b's submit: %v", err)
	}
	for range 299 {
		st.Release("a")
	}
	for range 300 {
		if err := <-submits; err != nil {
			t.Fatalf("a's submit: %v", err)
		}
	}
}

// A bulk action's page takes one turn for its jobs, not one a job: it
// waits as one write while others hold every place, and then acts on
// its whole page.
func TestABulkPageTakesOneTurn(t *testing.T) {
	st := heldstore.New(openStore(t))
	e := newEngineOver(t, st, jobs.Config{WriteTurnWait: time.Hour})
	var ids []string
	for range 20 {
		go st.Release("c")
		ids = append(ids, submit(t, e, jobs.SubmitRequest{Tenant: "c", Kind: "k"}).ID)
	}
	batches := sendBatches(e, 2)
	waitUntil(t, "a's two batches holding every place", func() bool { return len(st.Order()) == 22 })
	type bulkOutcome struct {
		r   jobs.BulkResult
		err error
	}
	bulk := make(chan bulkOutcome, 1)
	go func() {
		r, err := e.Bulk(jobs.WithReader(context.Background(), "token/ops"), e.CancelAction(), jobs.BulkFilter{Tenant: "c", All: true}, "", 0)
		bulk <- bulkOutcome{r, err}
	}()
	waitUntil(t, "the bulk page waiting as one write", func() bool { return e.WritesWaiting() == 1 })
	st.Release("a")
	out := <-bulk
	if out.err != nil || out.r.Matched != 20 || out.r.Changed != 20 {
		t.Fatalf("the bulk cancel: %+v, %v; want all 20 of c's jobs cancelled", out.r, out.err)
	}
	for _, id := range ids {
		if j, err := e.Get(context.Background(), id); err != nil || j.State != jobtype.Cancelled {
			t.Errorf("%s after the bulk cancel: %v, %v", id, j.State, err)
		}
	}
	st.Release("a")
	for range 2 {
		if err := <-batches; err != nil {
			t.Fatalf("a's batch: %v", err)
		}
	}
}
