package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Writes do not NOTIFY in their own transaction. PostgreSQL lets one
// notifying transaction commit at a time (a cluster-wide lock taken
// before the commit and held past its WAL flush), so writes that notify
// flush one after another however many connections write. Instead each
// write that raised a version hands its change, after its commit, to the
// Store's notifier, which sends whatever is queued in one short
// transaction of its own (synchronous_commit off: it writes nothing that
// needs flushing). A replica that dies between a commit and its
// notification leaves that change to the listeners' catch-up (listen.go),
// which finds it within catchUpEvery.

const (
	// maxPayload bounds one notification's payload, under NOTIFY's 8000
	// bytes with room to spare; a change is at most about 3.5 KB (its
	// names are at most 128 bytes each, escaped).
	maxPayload = 7000
	// notifyTimeout bounds one send, so that Close returns when the
	// database does not answer.
	notifyTimeout = 5 * time.Second
)

// notifier sends the changes of this Store's writes, from one goroutine.
// Changes queued while a send is in flight go together in the next one,
// as a group commit gathers commits: no write waits for company, and
// none waits for its notification.
type notifier struct {
	send func([]store.Change) error
	log  func(failing bool, err error)

	mu     sync.Mutex
	queued []store.Change
	wake   chan struct{} // a token when something is queued
	stop   chan struct{} // closed by close
	once   sync.Once
	done   chan struct{} // closed when the goroutine has flushed and ended
}

func newNotifier(send func([]store.Change) error, log func(failing bool, err error)) *notifier {
	n := &notifier{send: send, log: log, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go n.run()
	return n
}

// add queues c and returns at once.
func (n *notifier) add(c store.Change) {
	n.mu.Lock()
	n.queued = append(n.queued, c)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *notifier) take() []store.Change {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.queued
	n.queued = nil
	return q
}

func (n *notifier) run() {
	defer close(n.done)
	failing := false
	for {
		stopping := false
		select {
		case <-n.wake:
		case <-n.stop:
			stopping = true
		}
		if changes := n.take(); len(changes) > 0 {
			// A failed send is not retried: the listeners' catch-up finds
			// those changes in the database.
			err := n.send(changes)
			if (err != nil) != failing {
				failing = err != nil
				n.log(failing, err)
			}
		}
		if stopping {
			return
		}
	}
}

// close sends what is queued and ends the goroutine.
func (n *notifier) close() {
	n.once.Do(func() { close(n.stop) })
	<-n.done
}

// changeOf is the change a write of j committed.
func changeOf(j jobtype.Job) store.Change {
	return store.Change{JobID: j.ID, Version: j.Version, Tenant: j.Tenant, Kind: j.Kind,
		Queue: j.Queue, State: j.State, RunAt: j.RunAt}
}

// announce hands the change of a committed write of j to the notifier.
func (s *Store) announce(j jobtype.Job) { s.notifier.add(changeOf(j)) }

// sendChanges notifies changes in one round trip: one transaction that
// commits without waiting for its WAL flush, so it holds the cluster's
// notify lock only briefly, with as few notifications as the payload
// bound allows. It sends on a connection of its own, so writers never
// wait for the pool's connection it would hold; that connection's pid is
// in conns, so this Store's listeners hear these changes as Local.
// Only the notifier's goroutine calls it.
func (s *Store) sendChanges(changes []store.Change) error {
	payloads := packChanges(changes, maxPayload)
	if len(payloads) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	reused := s.notifyConn != nil && !s.notifyConn.IsClosed()
	err := s.notifyOnce(ctx, payloads)
	if err != nil && reused && ctx.Err() == nil {
		// The connection may have been dropped while it sat idle (the
		// database restarted, or an operator ended its backend): once
		// more on a new one. Sent twice, a change is heard once
		// (listeners pass over versions they have delivered).
		err = s.notifyOnce(ctx, payloads)
	}
	if err != nil {
		return fmt.Errorf("notify %d changes: %w", len(changes), classify(err))
	}
	return nil
}

// notifyOnce sends payloads on notifyConn, connecting first if it has
// none. Whatever state a failed send leaves the connection in, the next
// send starts on a new one.
func (s *Store) notifyOnce(ctx context.Context, payloads []string) error {
	if s.notifyConn == nil || s.notifyConn.IsClosed() {
		s.closeNotifyConn()
		cfg := s.pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = notifyApp + " " + s.schema
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		s.notifyConn = conn
		s.conns.add(conn.PgConn().PID())
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit TO off")
	b.Queue("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", s.channel, payloads)
	b.Queue("COMMIT")
	if err := s.notifyConn.SendBatch(ctx, b).Close(); err != nil {
		s.closeNotifyConn()
		return err
	}
	return nil
}

// notifyApp names the notifying connections in pg_stat_activity, followed
// by a space and the store's schema.
const notifyApp = "jobwatch-notify"

func (s *Store) closeNotifyConn() {
	if s.notifyConn == nil {
		return
	}
	s.conns.remove(s.notifyConn.PgConn().PID())
	s.notifyConn.Close(context.Background())
	s.notifyConn = nil
}

// logNotify hands the notifier's failures and recoveries to the store's
// health, which logs them with the rest of an outage (health.go).
func (s *Store) logNotify(failing bool, err error) {
	if failing {
		s.reach.notified(err)
		return
	}
	s.reach.notified(nil)
}

// packChanges encodes changes as notification payloads of at most max
// bytes each: a JSON array of changes, each [id, version, tenant, kind,
// queue, state, run_at in microseconds since 1970 or null for the zero
// time]. A change that cannot fit alone is left out (listeners' catch-up
// finds it). Every listener reads every payload, so both ends are
// written by hand for this one shape (encoding/json was a tenth of a
// replica's CPU at a few thousand jobs a second); parseChanges still
// reads any JSON of that shape.
func packChanges(changes []store.Change, max int) []string {
	var (
		payloads []string
		b        []byte
		enc      []byte
	)
	for _, c := range changes {
		enc = appendChange(enc[:0], c)
		if len(enc)+2 > max {
			continue
		}
		if len(b) > 0 && len(b)+1+len(enc)+1 > max {
			payloads = append(payloads, string(append(b, ']')))
			b = b[:0]
		}
		if len(b) == 0 {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		b = append(b, enc...)
	}
	if len(b) > 0 {
		payloads = append(payloads, string(append(b, ']')))
	}
	return payloads
}

// appendChange appends c's JSON array to b.
func appendChange(b []byte, c store.Change) []byte {
	b = append(b, '[')
	b = appendJSONString(b, c.JobID)
	b = append(b, ',')
	b = strconv.AppendInt(b, c.Version, 10)
	for _, f := range [...]string{c.Tenant, c.Kind, c.Queue, string(c.State)} {
		b = append(b, ',')
		b = appendJSONString(b, f)
	}
	b = append(b, ',')
	if c.RunAt.IsZero() {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, c.RunAt.UnixMicro(), 10)
	}
	return append(b, ']')
}

// appendJSONString appends v as a JSON string: as it is when it needs no
// escape (names and ids always), else as encoding/json writes it.
func appendJSONString(b []byte, v string) []byte {
	plain := utf8.ValidString(v)
	for i := 0; plain && i < len(v); i++ {
		plain = v[i] >= 0x20 && v[i] != '"' && v[i] != '\\'
	}
	if plain {
		b = append(b, '"')
		b = append(b, v...)
		return append(b, '"')
	}
	enc, _ := json.Marshal(v) // a string always encodes
	return append(b, enc...)
}

// parseChanges reads a payload packChanges made: by hand when no string
// in it has an escape, else with encoding/json.
func parseChanges(payload string) ([]store.Change, error) {
	if changes, ok := scanChanges(payload); ok {
		return changes, nil
	}
	var list [][]json.RawMessage
	if err := json.Unmarshal([]byte(payload), &list); err != nil {
		return nil, err
	}
	changes := make([]store.Change, 0, len(list))
	for _, fields := range list {
		if len(fields) != 7 {
			return nil, fmt.Errorf("a change of %d fields, want 7", len(fields))
		}
		var (
			c     store.Change
			state string
			runAt *int64
		)
		for i, dst := range []any{&c.JobID, &c.Version, &c.Tenant, &c.Kind, &c.Queue, &state, &runAt} {
			if err := json.Unmarshal(fields[i], dst); err != nil {
				return nil, err
			}
		}
		c.State = jobtype.State(state)
		if runAt != nil {
			c.RunAt = time.UnixMicro(*runAt).UTC()
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// scanChanges reads payload if it is exactly as packChanges writes it
// with no escape in its strings; ok is false for anything else, which
// parseChanges then reads as JSON.
func scanChanges(payload string) (changes []store.Change, ok bool) {
	p := changeScanner{s: payload}
	if !p.byte('[') {
		return nil, false
	}
	changes = make([]store.Change, 0, strings.Count(payload, "],")+1)
	for {
		var c store.Change
		var state string
		var runAt int64
		var null bool
		if !(p.byte('[') && p.str(&c.JobID) && p.byte(',') && p.int(&c.Version, nil) &&
			p.byte(',') && p.str(&c.Tenant) && p.byte(',') && p.str(&c.Kind) &&
			p.byte(',') && p.str(&c.Queue) && p.byte(',') && p.str(&state) &&
			p.byte(',') && p.int(&runAt, &null) && p.byte(']')) {
			return nil, false
		}
		c.State = jobtype.State(state)
		if !null {
			c.RunAt = time.UnixMicro(runAt).UTC()
		}
		changes = append(changes, c)
		if p.byte(']') {
			return changes, p.i == len(p.s)
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// changeScanner reads scanChanges' payload from s[i:].
type changeScanner struct {
	s string
	i int
}

func (p *changeScanner) byte(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string with no escape, as JSON allows it: valid UTF-8, no
// control character.
func (p *changeScanner) str(dst *string) bool {
	if !p.byte('"') {
		return false
	}
	for j := p.i; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			if !utf8.ValidString(p.s[p.i:j]) {
				return false
			}
			*dst, p.i = p.s[p.i:j], j+1
			return true
		case c < 0x20 || c == '\\':
			return false
		}
	}
	return false
}

// int reads an integer as JSON writes it (no leading zero), or null if
// null is not nil.
func (p *changeScanner) int(dst *int64, null *bool) bool {
	if null != nil && strings.HasPrefix(p.s[p.i:], "null") {
		p.i += 4
		*null = true
		return true
	}
	j := p.i
	if j < len(p.s) && p.s[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	if j == digits || (p.s[digits] == '0' && j > digits+1) {
		return false
	}
	v, err := strconv.ParseInt(p.s[p.i:j], 10, 64)
	if err != nil {
		return false
	}
	*dst, p.i = v, j
	return true
}
