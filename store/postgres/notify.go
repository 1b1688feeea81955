package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

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
func changeOf(j store.Job) store.Change {
	return store.Change{JobID: j.ID, Version: j.Version, Tenant: j.Tenant, Kind: j.Kind,
		Queue: j.Queue, State: j.State, RunAt: j.RunAt}
}

// announce hands the change of a committed write of j to the notifier.
func (s *Store) announce(j store.Job) { s.notifier.add(changeOf(j)) }

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
	if s.notifyConn == nil || s.notifyConn.IsClosed() {
		s.closeNotifyConn()
		cfg := s.pool.Config().ConnConfig.Copy()
		cfg.RuntimeParams["application_name"] = notifyApp + " " + s.schema
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("notify %d changes: %w", len(changes), classify(err))
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
		// Whatever state the connection is in, the next send starts on a
		// new one.
		s.closeNotifyConn()
		return fmt.Errorf("notify %d changes: %w", len(changes), classify(err))
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

func (s *Store) logNotify(failing bool, err error) {
	if failing {
		s.log.Warn("postgres: cannot notify other replicas; they catch up from the database", "err", err)
		return
	}
	s.log.Info("postgres: notifying other replicas again")
}

// packChanges encodes changes as notification payloads of at most max
// bytes each: a JSON array of changes, each [id, version, tenant, kind,
// queue, state, run_at in microseconds since 1970 or null for the zero
// time]. A change that cannot fit alone is left out (listeners' catch-up
// finds it).
func packChanges(changes []store.Change, max int) []string {
	var (
		payloads []string
		b        strings.Builder
	)
	for _, c := range changes {
		var runAt *int64
		if !c.RunAt.IsZero() {
			us := c.RunAt.UnixMicro()
			runAt = &us
		}
		enc, err := json.Marshal([]any{c.JobID, c.Version, c.Tenant, c.Kind, c.Queue, string(c.State), runAt})
		if err != nil || len(enc)+2 > max {
			continue
		}
		if b.Len() > 0 && b.Len()+1+len(enc)+1 > max {
			payloads = append(payloads, b.String()+"]")
			b.Reset()
		}
		if b.Len() == 0 {
			b.WriteByte('[')
		} else {
			b.WriteByte(',')
		}
		b.Write(enc)
	}
	if b.Len() > 0 {
		payloads = append(payloads, b.String()+"]")
	}
	return payloads
}

// parseChanges reads a payload packChanges made.
func parseChanges(payload string) ([]store.Change, error) {
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
		c.State = store.State(state)
		if runAt != nil {
			c.RunAt = time.UnixMicro(*runAt).UTC()
		}
		changes = append(changes, c)
	}
	return changes, nil
}
