package postgres

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
const cursorFormat = 1

type cursor struct {
	xmin uint64
	seq  int64
}

func (c cursor) String() string {
	b := make([]byte, 17)
	b[0] = cursorFormat
	binary.BigEndian.PutUint64(b[1:], c.xmin)
	binary.BigEndian.PutUint64(b[9:], uint64(c.seq))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 17 || b[0] != cursorFormat {
		return cursor{}, fmt.Errorf("list jobs: change cursor: %w", store.ErrInvalidPageToken)
	}
	return cursor{xmin: binary.BigEndian.Uint64(b[1:]), seq: int64(binary.BigEndian.Uint64(b[9:]))}, nil
}

// ChangeCursor implements store.Store.
func (s *Store) ChangeCursor(ctx context.Context) (string, error) {
	var c cursor
	err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric::bigint,
		(SELECT last_value FROM job_changes)`).Scan(&c.xmin, &c.seq)
	if err != nil {
		return "", fmt.Errorf("change cursor: %w", classify(err))
	}
	return c.String(), nil
}

// Listening: reconnect backoff and how long a batch waits for
// notifications that are already on their way.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
	batchWait        = 200 * time.Microsecond
	maxBatch         = 1024
)

// listenApp names the listening connections in pg_stat_activity.
const listenApp = "jobwatch-listen"

// Listen implements store.Store with LISTEN on a connection of its own
// (not from the pool, which it would hold forever). One goroutine reads
// notifications, gathers those that arrive together into one batch, and
// calls fn. When the connection is lost it reconnects (backing off from
// listenBackoffMin, doubling to listenBackoffMax), listens again, and
// then calls fn(nil, true): changes committed meanwhile were not heard.
// It stops when ctx ends or the store closes.
func (s *Store) Listen(ctx context.Context, fn func(changes []store.Change, missed bool)) error {
	conn, err := s.listenConn(ctx)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.closing, cancel)
	s.listeners.Add(1)
	go func() {
		defer s.listeners.Done()
		defer stop()
		defer cancel()
		s.listen(ctx, conn, fn)
	}()
	return nil
}

func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = listenApp
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

func (s *Store) listen(ctx context.Context, conn *pgx.Conn, fn func([]store.Change, bool)) {
	defer func() { conn.Close(context.Background()) }()
	for {
		batch, err := s.readBatch(ctx, conn)
		if len(batch) > 0 {
			fn(batch, false)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			continue
		}
		s.log.Warn("postgres listener lost its connection; reconnecting", "err", classify(err))
		conn.Close(context.Background())
		if conn = s.relisten(ctx); conn == nil {
			return
		}
		fn(nil, true)
	}
}

// readBatch waits for a notification, then takes the ones that follow
// it within batchWait: those the server has already sent.
func (s *Store) readBatch(ctx context.Context, conn *pgx.Conn) ([]store.Change, error) {
	n, err := conn.WaitForNotification(ctx)
	if err != nil {
		return nil, err
	}
	batch := s.appendChange(nil, n)
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
		batch = s.appendChange(batch, n)
	}
	return batch, nil
}

func (s *Store) appendChange(batch []store.Change, n *pgconn.Notification) []store.Change {
	var (
		fields []json.RawMessage
		c      store.Change
		state  string
		runAt  *int64
	)
	err := json.Unmarshal([]byte(n.Payload), &fields)
	if err == nil && len(fields) == 7 {
		for i, dst := range []any{&c.JobID, &c.Version, &c.Tenant, &c.Kind, &c.Queue, &state, &runAt} {
			if err = json.Unmarshal(fields[i], dst); err != nil {
				break
			}
		}
	}
	if err != nil || len(fields) != 7 {
		s.log.Warn("postgres listener: a notification it cannot read", "channel", n.Channel)
		return batch
	}
	c.State = store.State(state)
	if runAt != nil {
		c.RunAt = time.UnixMicro(*runAt).UTC()
	}
	c.Local = s.conns.has(n.PID)
	return append(batch, c)
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

// relisten connects and listens again, backing off between attempts,
// until it succeeds (the connection) or ctx ends (nil).
func (s *Store) relisten(ctx context.Context) *pgx.Conn {
	wait := listenBackoffMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		conn, err := s.listenConn(ctx)
		if err == nil {
			s.log.Info("postgres listener listens again")
			return conn
		}
		if ctx.Err() != nil {
			return nil
		}
		wait = min(2*wait, listenBackoffMax)
	}
}
