package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// changeCases hold the store to what replicas sharing a database rely
// on: the change cursor, the listener and the database's clock.
var changeCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a change cursor lists every job whose version went up after it", testChangeCursor},
	{"a change cursor keeps the list's other filters", testChangeCursorFilters},
	{"a change cursor the store did not issue is refused", testChangeCursorBad},
	{"a listener hears every change that raises a version", testListenHears},
	{"a listener stops when its context ends", testListenStops},
	{"the database's clock is a UTC time near this machine's", testNow},
	{"recording a queue alerting tells one caller of each change", testSetAlerting},
}

// RunShared runs the cases that need two Stores on one database, as two
// replicas would have: open returns both, fresh and empty, and
// registers their removal with t.Cleanup. A backend that cannot share a
// database between Stores does not call it.
func RunShared(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	for _, tc := range slices.Concat([]struct {
		name string
		run  func(t *testing.T, a, b store.Store)
	}{
		{"a change committed through one store is heard by the other's listener", testListenShared},
		{"a change cursor from one store lists changes made through the other", testChangeCursorShared},
		{"a claim through either store never takes a job the other took", testClaimShared},
		{"of two stores recording one alert, one is told it changed", testSetAlertingShared},
	}, sharedLeaseCases, sharedPauseCases, sharedQuotaCases, sharedFairCases, sharedDepCases) {
		t.Run(tc.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() {
				for _, s := range []store.Store{a, b} {
					if err := s.Close(); err != nil {
						t.Errorf("close store: %v", err)
					}
				}
			})
			tc.run(t, a, b)
		})
	}
}

func cursor(t *testing.T, s store.Store) string {
	t.Helper()
	c, err := s.ChangeCursor(t.Context())
	if err != nil {
		t.Fatalf("change cursor: %v", err)
	}
	if c == "" || len(c) > 64 {
		t.Fatalf("change cursor %q: want 1 to 64 bytes", c)
	}
	return c
}

// changedSince lists every job f selects that changed since c, by
// version, following pages.
func changedSince(t *testing.T, s store.Store, f store.ListFilter, c string) map[string]int64 {
	t.Helper()
	f.ChangedSince, f.Limit = c, 2
	got := map[string]int64{}
	for {
		jobs, next := list(t, s, f)
		for _, j := range jobs {
			got[j.ID] = j.Version
		}
		if next == "" {
			return got
		}
		f.PageToken = next
	}
}

// visibleUpdate moves job id's progress, which raises its version.
func visibleUpdate(t *testing.T, s store.Store, id string, percent int32) jobtype.Job {
	t.Helper()
	j, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
		j.Percent = percent
		return nil
	})
	if err != nil {
		t.Fatalf("update %s: %v", id, err)
	}
	return j
}

func testChangeCursor(t *testing.T, s store.Store) {
	for _, id := range []string{"a", "b", "c"} {
		create(t, s, newJob(id, at(1)))
	}
	c := cursor(t, s)
	visibleUpdate(t, s, "a", 10)
	create(t, s, newJob("d", at(2)))
	if _, err := s.UpdateJob(t.Context(), "b", func(j *jobtype.Job) error {
		j.LeaseExpiresAt = at(50) // not visible: the version stays
		return nil
	}); err != nil {
		t.Fatalf("update b: %v", err)
	}
	got := changedSince(t, s, store.ListFilter{}, c)
	if got["a"] != 2 || got["d"] != 1 {
		t.Errorf("changed since the cursor: %v, want a at version 2 and d at 1 among them", got)
	}
	// A job may be listed again only if its write could have been in
	// flight when the cursor was taken; b's version went up before.
	if v, ok := got["b"]; ok && v != 1 {
		t.Errorf("b listed at version %d, want it absent or at 1", v)
	}

	later := cursor(t, s)
	visibleUpdate(t, s, "c", 50)
	if got := changedSince(t, s, store.ListFilter{}, later); got["c"] != 2 {
		t.Errorf("changed since the later cursor: %v, want c at version 2", got)
	}
	if got := changedSince(t, s, store.ListFilter{}, ""); len(got) != 4 {
		t.Errorf("an empty cursor listed %v, want all 4 jobs", got)
	}
}

func testChangeCursorFilters(t *testing.T, s store.Store) {
	for _, f := range []struct{ id, tenant string }{{"a", "acme"}, {"b", "globex"}, {"c", "acme"}} {
		j := newJob(f.id, at(1))
		j.Tenant, j.Payload = f.tenant, json.RawMessage(`{"n": 1}`)
		create(t, s, j)
	}
	c := cursor(t, s)
	visibleUpdate(t, s, "a", 10)
	visibleUpdate(t, s, "b", 10)
	got := changedSince(t, s, store.ListFilter{Tenant: "acme"}, c)
	if got["a"] != 2 {
		t.Errorf("acme's changes: %v, want a at version 2", got)
	}
	if _, ok := got["b"]; ok {
		t.Errorf("acme's changes hold globex's b: %v", got)
	}
	full, _ := list(t, s, store.ListFilter{Tenant: "acme", ChangedSince: c, Full: true})
	for _, j := range full {
		if j.ID == "a" && j.Payload == nil {
			t.Errorf("a full list since a cursor left out a's payload")
		}
	}
}

func testChangeCursorBad(t *testing.T, s store.Store) {
	create(t, s, newJob("a", at(1)))
	for _, c := range []string{"x", "not a cursor", "t1.abc", string(make([]byte, 70))} {
		_, _, err := s.ListJobs(t.Context(), store.ListFilter{ChangedSince: c, Limit: 10})
		if !errors.Is(err, jobtype.ErrInvalidPageToken) {
			t.Errorf("cursor %q: err = %v, want ErrInvalidPageToken", c, err)
		}
	}
}

// testCursorOfAnotherDatabase holds CursorAhead to a cursor that another
// database issued, a and b being two: a server moved to another database
// and back must not read a client's cursor of the other as one of its
// own (whatever their sequences, no change of this one follows from it),
// while this database's own cursors, old and new, are not ahead.
func testCursorOfAnotherDatabase(t *testing.T, a, b store.Store) {
	for _, id := range []string{"a1", "a2", "a3"} {
		create(t, a, newJob(id, at(1)))
	}
	create(t, b, newJob("b1", at(1)))
	early := cursor(t, b) // behind a's sequence, as a fresh database's is
	own := cursor(t, a)
	if ahead, err := a.CursorAhead(t.Context(), own); err != nil || ahead {
		t.Fatalf("CursorAhead of its own cursor %q = %v, %v; want false", own, ahead, err)
	}
	for _, id := range []string{"b2", "b3", "b4", "b5", "b6"} {
		create(t, b, newJob(id, at(1)))
	}
	// The other two, of either backend's form: a server moved from
	// SQLite to PostgreSQL or back.
	sqliteForm := "c2.0123456789abcdef.zz"
	postgresForm := base64.RawURLEncoding.EncodeToString([]byte{2, 24: 7}) // format 2, identity 7
	for _, c := range []string{early, cursor(t, b), sqliteForm, postgresForm} {
		ahead, err := a.CursorAhead(t.Context(), c)
		if err != nil || !ahead {
			t.Errorf("CursorAhead of another database's cursor %q = %v, %v; want true", c, ahead, err)
		}
	}
	for _, c := range []string{"x", "c3.a.b", "c2.", "c2.abc.5.6", "c2.abc.-1", "c2.abc.zzzzzzzzzzzzzz", base64.RawURLEncoding.EncodeToString(make([]byte, 25))} {
		if _, err := a.CursorAhead(t.Context(), c); !errors.Is(err, jobtype.ErrInvalidPageToken) {
			t.Errorf("CursorAhead of %q, no store's cursor: %v; want ErrInvalidPageToken", c, err)
		}
	}
}

// heard collects what a listener hears, by job, highest version.
type heard struct {
	c chan []store.Change
}

func listen(t *testing.T, s store.Store) *heard {
	t.Helper()
	h := &heard{c: make(chan []store.Change, 1024)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Listen(ctx, func(changes []store.Change, missed bool) {
		h.c <- slices.Clone(changes)
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	return h
}

// waitFor returns the change to job id at version once it is heard, and
// fails the test after a generous bound: a change is expected within
// milliseconds, and the bound only stops a broken listener from hanging.
func (h *heard) waitFor(t *testing.T, id string, version int64) store.Change {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case batch := <-h.c:
			for _, c := range batch {
				if c.JobID == id && c.Version == version {
					return c
				}
			}
		case <-timeout:
			t.Fatalf("no change to %s at version %d heard", id, version)
		}
	}
}

func testListenHears(t *testing.T, s store.Store) {
	h := listen(t, s)
	j := newJob("job-1", at(1))
	j.Tenant, j.Kind, j.Queue = "acme", "email", "bulk"
	create(t, s, j)
	c := h.waitFor(t, "job-1", 1)
	want := store.Change{JobID: "job-1", Version: 1, Tenant: "acme", Kind: "email", Queue: "bulk", State: jobtype.Queued,
		RunAt: j.RunAt, Local: true}
	if c.RunAt = c.RunAt.UTC(); !c.RunAt.Equal(want.RunAt) || c.JobID != want.JobID || c.Version != want.Version ||
		c.Tenant != want.Tenant || c.Kind != want.Kind || c.Queue != want.Queue || c.State != want.State || c.Local != want.Local {
		t.Errorf("heard %+v, want %+v", c, want)
	}
	visibleUpdate(t, s, "job-1", 20)
	h.waitFor(t, "job-1", 2)
	claimed, _, err := store.ClaimOne(t.Context(), s, store.ClaimFilter{Now: at(100)}, toRunning)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if c := h.waitFor(t, "job-1", claimed.Version); c.State != jobtype.Running {
		t.Errorf("the claim was heard with state %q, want running", c.State)
	}
}

func testListenStops(t *testing.T, s store.Store) {
	calls := make(chan struct{}, 1024)
	ctx, cancel := context.WithCancel(t.Context())
	if err := s.Listen(ctx, func([]store.Change, bool) { calls <- struct{}{} }); err != nil {
		t.Fatalf("listen: %v", err)
	}
	create(t, s, newJob("job-1", at(1)))
	<-calls
	cancel()
	// The other listener hears this job, so the first has had its chance.
	h := listen(t, s)
	create(t, s, newJob("job-2", at(1)))
	h.waitFor(t, "job-2", 1)
	for {
		select {
		case <-calls:
			// A batch that was being delivered as ctx ended may still
			// come; nothing must come after job-2 is heard elsewhere
			// and a further change is made.
			continue
		default:
		}
		break
	}
	create(t, s, newJob("job-3", at(1)))
	h.waitFor(t, "job-3", 1)
	select {
	case <-calls:
		t.Errorf("a listener whose context ended still hears changes")
	default:
	}
}

func testNow(t *testing.T, s store.Store) {
	now, err := s.Now(t.Context())
	if err != nil {
		t.Fatalf("now: %v", err)
	}
	if now.Location() != time.UTC {
		t.Errorf("Now() is in %v, want UTC", now.Location())
	}
	if d := time.Since(now); d > time.Minute || d < -time.Minute {
		t.Errorf("the database's clock is %v from this machine's", d)
	}
}

func testListenShared(t *testing.T, a, b store.Store) {
	h := listen(t, b)
	create(t, a, newJob("job-1", at(1)))
	if c := h.waitFor(t, "job-1", 1); c.Local {
		t.Errorf("b heard a's change as its own (Local)")
	}
	visibleUpdate(t, a, "job-1", 30)
	h.waitFor(t, "job-1", 2)
}

func testChangeCursorShared(t *testing.T, a, b store.Store) {
	create(t, a, newJob("job-1", at(1)))
	c := cursor(t, b)
	visibleUpdate(t, a, "job-1", 30)
	create(t, a, newJob("job-2", at(1)))
	if got := changedSince(t, b, store.ListFilter{}, c); got["job-1"] != 2 || got["job-2"] != 1 {
		t.Errorf("changed since b's cursor, as a wrote: %v, want job-1 at 2 and job-2 at 1", got)
	}
}

func testClaimShared(t *testing.T, a, b store.Store) {
	const jobs = 30
	for i := range jobs {
		create(t, a, newJob("job-"+string(rune('a'+i%26))+string(rune('a'+i/26)), at(i)))
	}
	claimed := make(chan string, jobs)
	errs := make(chan error, 8)
	for i := range 8 {
		s := []store.Store{a, b}[i%2]
		go func() {
			for {
				j, _, err := store.ClaimOne(context.Background(), s, store.ClaimFilter{Now: at(100)}, toRunning)
				if errors.Is(err, jobtype.ErrNoJob) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- err
					return
				}
				claimed <- j.ID
			}
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("claim: %v", err)
		}
	}
	close(claimed)
	seen := map[string]bool{}
	for id := range claimed {
		if seen[id] {
			t.Errorf("job %s claimed twice", id)
		}
		seen[id] = true
	}
	if len(seen) != jobs {
		t.Errorf("%d jobs claimed, want %d", len(seen), jobs)
	}
}

func setAlerting(t *testing.T, s store.Store, queue string, alerting bool) bool {
	t.Helper()
	changed, err := s.SetAlerting(t.Context(), queue, alerting, at(5))
	if err != nil {
		t.Fatalf("set alerting %s %v: %v", queue, alerting, err)
	}
	return changed
}

func testSetAlerting(t *testing.T, s store.Store) {
	steps := []struct {
		queue    string
		alerting bool
		changed  bool
	}{
		{"mail", false, false}, // never recorded: not alerting
		{"mail", true, true},
		{"mail", true, false},
		{"other", true, true},
		{"mail", false, true},
		{"mail", false, false},
		{"mail", true, true},
		{"other", true, false},
	}
	for i, st := range steps {
		if got := setAlerting(t, s, st.queue, st.alerting); got != st.changed {
			t.Errorf("step %d: set %s alerting=%v: changed %v, want %v", i, st.queue, st.alerting, got, st.changed)
		}
	}

	if n := alertAtOnce(t, s); n != 1 {
		t.Errorf("8 callers recorded one alert: %d told changed, want 1", n)
	}
}

// alertAtOnce records queue "busy" alerting from 8 goroutines at once,
// taking the stores in turn, and counts the calls told changed.
func alertAtOnce(t *testing.T, stores ...store.Store) int32 {
	var changed atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		s := stores[i%len(stores)]
		wg.Go(func() {
			if c, err := s.SetAlerting(context.Background(), "busy", true, at(9)); err != nil {
				t.Errorf("set alerting: %v", err)
			} else if c {
				changed.Add(1)
			}
		})
	}
	wg.Wait()
	return changed.Load()
}

func testSetAlertingShared(t *testing.T, a, b store.Store) {
	if n := alertAtOnce(t, a, b); n != 1 {
		t.Errorf("8 callers on two stores recorded one alert: %d told changed, want 1", n)
	}
	if !setAlerting(t, b, "busy", false) || setAlerting(t, a, "busy", false) {
		t.Errorf("ending the alert through b then a: want b told changed and a not")
	}
}
