package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestPackedChangesStayUnderTheBoundAndReadBackInOrder(t *testing.T) {
	var changes []store.Change
	for i := range 200 {
		c := store.Change{JobID: fmt.Sprintf("job-%03d", i), Version: int64(i + 1), Tenant: "acme",
			Kind: "email", Queue: strings.Repeat("q", i%128), State: jobtype.Queued}
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

// Names a store holds need no escape, but the payload is JSON whatever
// they hold, and reads back the same; a payload written by encoding/json
// (as by a replica of an earlier version) reads the same too.
func TestPackedChangesReadBackWhateverTheirStringsHold(t *testing.T) {
	odd := []string{`quo"te`, `back\slash`, "tab\tnew\nline", "\x00nul", "caf\u00e9 \u2028", "bad \xff utf-8", ""}
	var changes []store.Change
	for i, v := range odd {
		changes = append(changes, store.Change{JobID: "j" + v, Version: int64(i), Tenant: v, Kind: "k" + v,
			Queue: v + "q", State: jobtype.State(v), RunAt: t0.Add(time.Duration(-i) * time.Hour)})
	}
	for _, c := range changes {
		want := c
		want.JobID, want.Tenant, want.Kind, want.Queue = valid(c.JobID), valid(c.Tenant), valid(c.Kind), valid(c.Queue)
		want.State = jobtype.State(valid(string(c.State)))
		payloads := packChanges([]store.Change{c}, maxPayload)
		if len(payloads) != 1 {
			t.Fatalf("%d payloads for one change", len(payloads))
		}
		if !json.Valid([]byte(payloads[0])) {
			t.Errorf("payload %q is not JSON", payloads[0])
		}
		got, err := parseChanges(payloads[0])
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("parse %q: %v, %v; want %v", payloads[0], got, err, want)
		}
		old, err := json.Marshal([][]any{{c.JobID, c.Version, c.Tenant, c.Kind, c.Queue, string(c.State), c.RunAt.UnixMicro()}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseChanges(string(old)); err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("parse %s (encoding/json's): %v, %v; want %v", old, got, err, want)
		}
	}
}

// valid is v as JSON carries it: invalid UTF-8 replaced.
func valid(v string) string { return strings.ToValidUTF8(v, "\uFFFD") }

// Whatever payload arrives, the hand-written reader agrees with
// encoding/json's or leaves it to it.
func FuzzParseChanges(f *testing.F) {
	f.Add(packChanges([]store.Change{{JobID: "j_1", Version: 2, Tenant: "t", Kind: "k", Queue: "q", State: jobtype.Queued}}, maxPayload)[0])
	f.Add(`[["a",1,"b","c","d","e",null],["f",-2,"g","h","i","j",17]]`)
	f.Add(`[["a\"",1,"b","c","d","e",null]]`)
	f.Fuzz(func(t *testing.T, payload string) {
		fast, ok := scanChanges(payload)
		if !ok {
			parseChanges(payload) // must not panic
			return
		}
		var list [][]json.RawMessage
		if err := json.Unmarshal([]byte(payload), &list); err != nil {
			t.Fatalf("scanChanges read %q, which is not JSON: %v", payload, err)
		}
		if len(list) != len(fast) {
			t.Fatalf("scanChanges read %d changes of %q, JSON has %d", len(fast), payload, len(list))
		}
		for i, fields := range list {
			var id string
			var version int64
			if len(fields) != 7 || json.Unmarshal(fields[0], &id) != nil || json.Unmarshal(fields[1], &version) != nil ||
				id != fast[i].JobID || version != fast[i].Version {
				t.Fatalf("scanChanges read %+v from %s", fast[i], payload)
			}
		}
	})
}

// A change committed without its notification (as if its replica died
// right after the commit) is heard from the listener's catch-up.
func TestListenCatchesUpWithAChangeNeverNotified(t *testing.T) {
	a, b := openTwo(t)
	l := listen(t, a)
	// Written with SQL, past b's notifier.
	if _, err := b.pool.Exec(t.Context(), insertJob, insertValues(normalize(job("silent", "default", 0)), 0)...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(t.Context(), "UPDATE jobs SET version = 2, step = 'x' WHERE id = 'silent'"); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "the unannounced change", heard("silent", 2))
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.changes[len(l.changes)-1]
	if c != (store.Change{JobID: "silent", Version: 2, Tenant: "acme", Kind: "email", Queue: "default", State: jobtype.Queued, RunAt: t0}) {
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
	if _, err := b.pool.Exec(t.Context(), insertJob, insertValues(normalize(job("marker", "default", 1)), 0)...); err != nil {
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
