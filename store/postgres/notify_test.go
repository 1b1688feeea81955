package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
)

func TestPackedChangesStayUnderTheBoundAndReadBackInOrder(t *testing.T) {
	var changes []store.Change
	for i := range 200 {
		c := store.Change{JobID: fmt.Sprintf("job-%03d", i), Version: int64(i + 1), Tenant: "acme",
			Kind: "email", Queue: strings.Repeat("q", i%128), State: store.Queued}
		if i%2 == 0 {
			c.RunAt = t0.Add(time.Duration(i) * time.Microsecond)
		}
		changes = append(changes, c)
	}
	payloads := packChanges(changes, maxPayload)
	if len(payloads) < 2 {
		t.Fatalf("%d payloads, want the changes spread over several", len(payloads))
	}
	var got []store.Change
	for _, p := range payloads {
		if len(p) > maxPayload {
			t.Errorf("a payload of %d bytes, over %d", len(p), maxPayload)
		}
		cs, err := parseChanges(p)
		if err != nil {
			t.Fatalf("parse %q: %v", p, err)
		}
		got = append(got, cs...)
	}
	if !slices.Equal(got, changes) {
		t.Errorf("read back %d changes, not the %d packed, in order", len(got), len(changes))
	}
}

// A change committed without its notification (as if its replica died
// right after the commit) is heard from the listener's catch-up.
func TestListenCatchesUpWithAChangeNeverNotified(t *testing.T) {
	a, b := openTwo(t)
	l := listen(t, a)
	// Written with SQL, past b's notifier.
	if _, err := b.pool.Exec(t.Context(), insertJob, values(normalize(job("silent", "default", 0)))...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), "UPDATE jobs SET version = 2, step = 'x' WHERE id = 'silent'"); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "the unannounced change", heard("silent", 2))
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.changes[len(l.changes)-1]
	if c != (store.Change{JobID: "silent", Version: 2, Tenant: "acme", Kind: "email", Queue: "default", State: store.Queued, RunAt: t0}) {
		t.Errorf("change %+v, want every field of the job at version 2, not Local", c)
	}
	for _, c := range l.changes {
		if c.JobID == "silent" && c.Version == 1 {
			t.Errorf("heard version 1 after version 2 was read")
		}
	}
}

// Each change is delivered once, though the listener hears it both from
// its notification and from a catch-up: the unannounced marker, written
// after it, is heard only from a catch-up that ran after both commits.
func TestListenDeliversEachChangeOnce(t *testing.T) {
	a, b := openTwo(t)
	l := listen(t, a)
	mustCreate(t, b, job("job-1", "default", 0))
	if _, err := b.pool.Exec(t.Context(), insertJob, values(normalize(job("marker", "default", 1)))...); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "the create and the marker", func(changes []store.Change, missed int) bool {
		return heard("job-1", 1)(changes, missed) && heard("marker", 1)(changes, missed)
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.changes {
		if c.JobID == "job-1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("job-1 at version 1 delivered %d times, want once", n)
	}
}

// Close sends the notifications still queued.
func TestCloseSendsWhatIsQueued(t *testing.T) {
	url := pgtest.URL(t)
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 20 {
		id := fmt.Sprintf("job-%d", i)
		mustCreate(t, s, job(id, "default", i))
		want[id] = true
	}
	s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for len(want) > 0 {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("still waiting for %v: %v", want, err)
		}
		changes, err := parseChanges(n.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range changes {
			delete(want, c.JobID)
		}
	}
}
