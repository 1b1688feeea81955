package postgres

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobwatch/jobwatch/internal/backoff"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// A change cursor is the xmin of a snapshot taken when it was issued,
// with the change sequence's value then (for ordering and debugging only).
//
// Why change_xid >= xmin finds every change committed after the cursor:
// jobs_stamp stamps each write that raises a job's version with the id of
// its transaction. Take a write W that commits after ChangeCursor
// returned. If W's transaction had its id when the cursor's snapshot was
// taken, it was still in flight then (it had not committed), and every
// transaction in flight at a snapshot has an id >= the snapshot's xmin.
// If it got its id later, the id is >= the snapshot's xmax > xmin, as
// ids are handed out in order. Either way W's row has change_xid >= xmin
// until a later write stamps it again, with a later transaction's id,
// which is just as large. Transactions with ids below xmin had all ended
// when the cursor was taken, so their writes are visible to any list
// made after it, which the caller has (or will have) read. The filter may
// return rows written shortly before the cursor (by transactions in
// flight then), which the contract allows: a reader must expect to see a
// version again.
//
// Format 2 also carries the database's identity (migration 21); one of
// format 1, without it, is read as this database's.
const (
	cursorFormat    = 2
	oldCursorFormat = 1
)

type cursor struct {
	xmin uint64
	seq  int64
	db   uint64 // 0: a cursor of format 1
}

func (c cursor) String() string {
	b := make([]byte, 25)
	b[0] = cursorFormat
	binary.BigEndian.PutUint64(b[1:], c.xmin)
	binary.BigEndian.PutUint64(b[9:], uint64(c.seq))
	binary.BigEndian.PutUint64(b[17:], c.db)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	switch {
	case err == nil && len(b) == 25 && b[0] == cursorFormat:
		return cursor{xmin: binary.BigEndian.Uint64(b[1:]), seq: int64(binary.BigEndian.Uint64(b[9:])), db: binary.BigEndian.Uint64(b[17:])}, nil
	case err == nil && len(b) == 17 && b[0] == oldCursorFormat:
		return cursor{xmin: binary.BigEndian.Uint64(b[1:]), seq: int64(binary.BigEndian.Uint64(b[9:]))}, nil
	}
	return cursor{}, fmt.Errorf("list jobs: change cursor: %w", jobtype.ErrInvalidPageToken)
}

// ChangeCursor implements store.Store.
func (s *Store) ChangeCursor(ctx context.Context) (string, error) {
	c := cursor{db: s.identity}
	err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint,
		(SELECT last_value FROM job_changes)`).Scan(&c.xmin, &c.seq)
	if err != nil {
		return "", fmt.Errorf("change cursor: %w", classify(err))
	}
	return c.String(), nil
}

// CursorAhead implements store.Store: either part of c is later than
// the database's own (a snapshot's xmin never goes back, nor does the
// change sequence), or c is another database's (a server moved to
// another database, and back), from which no change of this one follows.
func (s *Store) CursorAhead(ctx context.Context, c string) (bool, error) {
	given, err := decodeCursor(c)
	if err != nil {
		if store.CursorBackend(c) == store.SQLiteCursor {
			return true, nil // another database's
		}
		return false, err
	}
	if given.db != 0 && given.db != s.identity {
		return true, nil
	}
	var now cursor
	err = s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint,
		(SELECT last_value FROM job_changes)`).Scan(&now.xmin, &now.seq)
	if err != nil {
		return false, fmt.Errorf("change cursor: %w", classify(err))
	}
	return given.xmin > now.xmin || given.seq > now.seq, nil
}

// Listening: reconnect backoff, how long a batch waits for notifications
// that are already on their way, and how often the listener catches up
// from the database.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = time.Second
	batchWait        = 200 * time.Microsecond
	maxBatch         = 1024
	catchUpEvery     = time.Second
	// catchUpTimeout bounds a catch-up: a database that takes longer to
	// list a second's changes is taken as not reachable (a hung server,
	// a network that drops packets without a reset), so that health says
	// NOT_SERVING rather than SERVING for as long as TCP keeps the
	// connection open; the listener then connects again.
	catchUpTimeout = 10 * time.Second
	// maxRemembered bounds the jobs a listener remembers having
	// delivered in one catch-up window (it remembers two windows).
	maxRemembered = 1 << 16
)

// listenApp names the listening connections in pg_stat_activity,
// followed by a space and the store's schema.
const listenApp = "jobwatch-listen"

func (s *Store) listenName() string { return listenApp + " " + s.schema }

// catchUp lists, in one statement, every job whose version went up in a
// write that committed after the cursor since (a snapshot's xmin, as
// ChangeCursor's), with the xmin of its own snapshot: the cursor of the
// next catch-up. It reads the index jobs_change, and usually finds the
// few jobs changed in the last second; a transaction left open holds
// every snapshot's xmin back, and the catch-ups then list again every
// change since it began, which hearing.fresh passes over.
const catchUp = `SELECT x.xmin, j.id, j.version, j.tenant, j.kind, j.queue, j.state, j.run_at
	FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint AS xmin) AS x
	LEFT JOIN jobs AS j ON j.change_xid >= $1::text::xid8
	ORDER BY j.change_seq`

// Listen implements store.Store with LISTEN on a connection of its own
// (not from the pool, which it would hold forever). One goroutine reads
// notifications, gathers those that arrive together into one batch, and
// calls fn. Every catchUpEvery it also lists on that connection the
// changes committed since its previous list (catchUp) and delivers those
// it has not delivered (as not Local): a change whose notification never
// came (its replica died after the commit, or the send failed) is heard
// within about catchUpEvery. When the connection is lost it reconnects
// (backing off from listenBackoffMin, doubling to listenBackoffMax, with
// full jitter), listens again, and then calls fn(nil, true): changes
// committed meanwhile were not heard. It stops when ctx ends or the store
// closes.
func (s *Store) Listen(ctx context.Context, fn func(changes []store.Change, missed bool)) error {
	conn, err := s.listenConn(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	h := &hearing{fn: fn, delivered: map[string]int64{}, next: time.Now().Add(catchUpEvery)}
	if err := conn.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint").Scan(&h.since); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("listen: %w", classify(err))
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	s.listeners.Add(1)
	go func() {
		defer s.listeners.Done()
		defer stop()
		defer cancel()
		s.listen(ctx, conn, h)
	}()
	return nil
}

func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = s.listenName()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classify(err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, classify(err)
	}
	return conn, nil
}

// hearing is one listener's state, used by its goroutine only.
type hearing struct {
	fn    func([]store.Change, bool)
	since uint64    // the cursor of the next catch-up
	next  time.Time // when the next catch-up is due
	// delivered and before hold the highest version delivered of each job
	// in this catch-up window and the one before, so that a change heard
	// both ways, or listed by several catch-ups (a long transaction holds
	// their cursor back), is delivered once, and a job's versions are
	// delivered only upwards.
	delivered, before map[string]int64
}

// fresh reports whether c is newer than what was delivered of its job,
// and remembers it in this window either way.
func (h *hearing) fresh(c store.Change) bool {
	v, ok := h.delivered[c.JobID]
	if !ok {
		v, ok = h.before[c.JobID]
	}
	if ok && v >= c.Version {
		h.delivered[c.JobID] = v
		return false
	}
	if len(h.delivered) >= maxRemembered {
		h.rotate()
	}
	h.delivered[c.JobID] = c.Version
	return true
}

func (h *hearing) rotate() {
	h.before, h.delivered = h.delivered, make(map[string]int64, len(h.delivered))
}

// deliver calls fn with the changes not delivered before.
func (h *hearing) deliver(changes []store.Change) {
	fresh := changes[:0]
	for _, c := range changes {
		// A queue's pause or resume, an append to a job's log or a
		// worker's stop is no job's version: never a repeat.
		if c.QueueChange || c.LogChange || c.StopClaiming || h.fresh(c) {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) > 0 {
		h.fn(fresh, false)
	}
}

func (s *Store) listen(ctx context.Context, conn *pgx.Conn, h *hearing) {
	defer func() {
		if conn != nil { // nil once a relisten gave up as ctx ended
			conn.Close(context.Background())
		}
	}()
	for {
		err := s.hear(ctx, conn, h)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		s.reach.listenerLost(classify(err))
		conn.Close(context.Background())
		if conn = s.relisten(ctx); conn == nil {
			return
		}
		s.reach.listenerBack()
		h.fn(nil, true)
	}
}

func (s *Store) catchUpTimeout() time.Duration {
	if s.catchUpLimit > 0 {
		return s.catchUpLimit
	}
	return catchUpTimeout
}

// hear catches up if that is due, else delivers the next batch of
// notifications that arrives before it is.
func (s *Store) hear(ctx context.Context, conn *pgx.Conn, h *hearing) error {
	if !time.Now().Before(h.next) {
		bounded, cancel := context.WithTimeout(ctx, s.catchUpTimeout())
		changes, since, err := s.catchUp(bounded, conn, h.since)
		cancel()
		if err != nil {
			return err
		}
		h.since, h.next = since, time.Now().Add(catchUpEvery)
		h.rotate()
		if len(changes) > 0 {
			h.deliver(changes)
		}
		return nil
	}
	batch, err := s.readBatch(ctx, conn, h.next)
	if len(batch) > 0 {
		h.deliver(batch)
	}
	return err
}

// catchUp runs the catchUp statement from cursor since.
func (s *Store) catchUp(ctx context.Context, conn *pgx.Conn, since uint64) ([]store.Change, uint64, error) {
	rows, err := conn.Query(ctx, catchUp, fmt.Sprint(since))
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var (
		changes []store.Change
		next    uint64
	)
	for rows.Next() {
		var (
			id, tenant, kind, queue, state pgtype.Text
			version                        pgtype.Int8
			runAt                          pgtype.Timestamptz
		)
		if err := rows.Scan(&next, &id, &version, &tenant, &kind, &queue, &state, &runAt); err != nil {
			return nil, 0, err
		}
		if !id.Valid {
			continue // no change: the row carries only the cursor
		}
		changes = append(changes, store.Change{JobID: id.String, Version: version.Int64, Tenant: tenant.String,
			Kind: kind.String, Queue: queue.String, State: jobtype.State(state.String), RunAt: fromTime(runAt)})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return changes, next, nil
}

// readBatch waits until deadline for a notification, then takes the
// ones that follow it within batchWait: those the server has already
// sent. Nothing by deadline is no error.
func (s *Store) readBatch(ctx context.Context, conn *pgx.Conn, deadline time.Time) ([]store.Change, error) {
	wait, cancel := context.WithDeadline(ctx, deadline)
	n, err := conn.WaitForNotification(wait)
	cancel()
	if err != nil {
		if pgconn.Timeout(err) && ctx.Err() == nil && !conn.IsClosed() {
			return nil, nil
		}
		return nil, err
	}
	batch := s.appendChanges(nil, n)
	for len(batch) < maxBatch {
		short, cancel := context.WithTimeout(ctx, batchWait)
		n, err := conn.WaitForNotification(short)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil && !conn.IsClosed() {
				return batch, nil // nothing more on its way
			}
			return batch, err
		}
		batch = s.appendChanges(batch, n)
	}
	return batch, nil
}

func (s *Store) appendChanges(batch []store.Change, n *pgconn.Notification) []store.Change {
	var changes []store.Change
	var err error
	if isPauseNotice(n.Payload) {
		var released bool
		changes, released, err = parseReleaseNotice(n.Payload)
		if !released && err == nil {
			c, isStop, lerr := parseStopNotice(n.Payload)
			if !isStop && lerr == nil {
				var isLog bool
				c, isLog, lerr = parseLogNotice(n.Payload)
				if !isLog && lerr == nil {
					c, lerr = parsePauseNotice(n.Payload)
				}
			}
			changes, err = []store.Change{c}, lerr
		}
	} else {
		changes, err = parseChanges(n.Payload)
	}
	if err != nil {
		s.log.Warn("postgres listener: a notification it cannot read", "channel", n.Channel, "err", err)
		return batch
	}
	local := s.conns.has(n.PID)
	for _, c := range changes {
		c.Local = local
		batch = append(batch, c)
	}
	return batch
}

// conns are the backend process ids of the pool's open connections: a
// notification sent by one of them is of a write made through this
// Store (Change.Local). A pid is in the set only while its connection is
// open, so another backend cannot have it meanwhile.
type conns struct {
	mu   sync.Mutex
	pids map[uint32]bool
}

func (c *conns) add(pid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pids == nil {
		c.pids = map[uint32]bool{}
	}
	c.pids[pid] = true
}

func (c *conns) remove(pid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pids, pid)
}

func (c *conns) has(pid uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pids[pid]
}

// relisten connects and listens again, backing off between attempts
// (internal/backoff: with full jitter, so replicas that lost the database
// together do not all come back in the same instant), until it succeeds
// (the connection) or ctx ends (nil).
func (s *Store) relisten(ctx context.Context) *pgx.Conn {
	retry := backoff.Retry{Policy: backoff.Policy{Initial: listenBackoffMin, Max: listenBackoffMax}}
	for {
		if !backoff.Sleep(ctx.Done(), retry.Next()) {
			return nil
		}
		conn, err := s.listenConn(ctx)
		if err == nil {
			s.log.Debug("postgres listener listens again")
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// releaseNotice is the payload jobs_dependency_ended (schema.go,
// migration 10) sends for each job it touched: a JSON object, as a
// pauseNotice is, told apart by its "released" key, whose value is one
// change as packChanges writes it.
type releaseNotice struct {
	Released json.RawMessage `json:"released"`
}

// parseReleaseNotice reads an object notice (isPauseNotice) that is a
// release as its change, marked Released; ok is false for another
// notice.
func parseReleaseNotice(payload string) (changes []store.Change, ok bool, err error) {
	if !strings.Contains(payload, `"released"`) {
		return nil, false, nil
	}
	var n releaseNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return nil, false, fmt.Errorf("read a notice: %w", err)
	}
	if len(n.Released) == 0 {
		return nil, false, nil
	}
	changes, err = parseChanges("[" + string(n.Released) + "]")
	if err != nil {
		return nil, true, fmt.Errorf("read a release notice: %w", err)
	}
	for i := range changes {
		changes[i].Released = true
	}
	return changes, true, nil
}
