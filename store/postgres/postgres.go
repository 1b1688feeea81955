// Package postgres is the store.Store for several jobwatch replicas
// sharing one PostgreSQL database (github.com/jackc/pgx/v5, a pgxpool).
//
// It keeps jobs, schedules and queue drains in tables of one schema (the
// first of the connection's search_path, "public" by default), migrated
// at Open under an advisory lock so replicas starting together take
// turns. Every write is one statement that checks in SQL what it depends
// on, sent in one round trip (a claim and a batch of lease writes behind
// a statement that sets their plan and takes their advisory locks, in
// one pipelined batch): a claim picks up to n jobs with FOR UPDATE SKIP
// LOCKED from indexes in claim order, with a plan that stale statistics
// cannot turn into a scan of the backlog (claims.go), and counts RUNNING
// jobs after taking the advisory locks of the limited queues and pools it
// may touch; WriteLeases checks each lease in the UPDATE that writes it;
// UpdateJob reads without a lock and writes only if the row's revision is
// still the one it read. No transaction stays open while Go code runs,
// but for UpdateJob's last try on a job other writers keep changing,
// which locks the row for its read (see optimisticUpdates).
// A trigger stamps each visible write with a change sequence and its
// transaction id (ChangeCursor). Writes do not NOTIFY in their own
// transaction, which PostgreSQL would commit one at a time: after the
// commit the Store hands the change to its notifier, which sends all
// that is queued in one short transaction of its own (notify.go), and
// each listener also lists the changes since its last look every second,
// so a change whose notification was lost is still heard (Listen).
//
// A write acknowledged with a nil error is committed, with the durability
// the server's synchronous_commit gives; one whose caller left before it
// was sent changed nothing, and once sent it runs to its end. Errors that
// mean the database cannot be reached (refused or lost connections,
// shutdowns, timeouts) wrap jobtype.ErrUnavailable. The pool's settings
// (pool_max_conns and the like) come from the URL, as pgxpool reads them,
// but for a pool of DefaultMaxConns when the URL sets no size, and
// DefaultMaxConnIdleTime when it sets no idle time. A write, or a read
// of jobs, that finds the database refusing the pool another connection
// for want of room (max_connections) waits for one of those the pool
// holds (acquire, pooled).
//
// The package only stores and finds jobs; it must never decide a job's
// life cycle (package jobs does).
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// deleteBatch bounds one retention statement, so a backlog (the first
// sweep after a long stop) never holds locks on many rows at once.
const deleteBatch = 1000

// DefaultMaxConns is the pool's size when the URL gives no
// pool_max_conns. pgxpool's own default (4, or the number of CPUs) made a
// server's concurrent writes queue for connections: on 2 cores, 16
// remote workers ran 486 jobs/s with it and 721 with 16 connections.
const DefaultMaxConns = 16

// DefaultMaxConnIdleTime is how long a connection of the pool may sit
// idle before the pool closes it, when the URL gives no
// pool_max_conn_idle_time (pgxpool's own default is 30 minutes): so a
// replica that a burst made open its whole pool gives the connections
// it no longer needs back to the database in a little over a minute
// (the pool looks every idleCheckEvery), where they kept a replica
// starting beside it out of a max_connections they had filled.
const DefaultMaxConnIdleTime = time.Minute

// idleCheckEvery is how often the pool closes the connections idle past
// DefaultMaxConnIdleTime (pgxpool's HealthCheckPeriod, a minute by
// default), when the URL gives no pool_health_check_period.
const idleCheckEvery = 15 * time.Second

// Store is a store.Store on a PostgreSQL database. Create it with Open.
type Store struct {
	pool    *pgxpool.Pool
	schema  string // where the tables are
	channel string // the NOTIFY channel of the schema
	// identity is the database's own (migration 21), which its change
	// cursors carry.
	identity uint64
	log      *slog.Logger
	// ruledTurns queues this Store's claims of ruled queues before they
	// take a connection (claims.go).
	ruledTurns ruledTurns
	// conns knows the pool's connections, to tell Listen which changes
	// were made through this Store.
	conns conns
	// reach follows whether the database can be reached (health.go):
	// an outage is one episode in the log, and Reachable says it.
	reach health
	// notifier tells every replica's listener of this Store's writes,
	// after they commit, on notifyConn (its goroutine's only).
	notifier   *notifier
	notifyConn *pgx.Conn

	// catchUpLimit is catchUpTimeout when zero (tests shorten it).
	catchUpLimit time.Duration

	// closing ends the listeners when the store closes.
	closing   context.Context
	close     context.CancelFunc
	listeners sync.WaitGroup

	// contested are the queues whose last claim here found ready jobs of
	// several tenants, and how many (fair.go): a claim that may take from
	// one goes straight to its fair turn.
	contested sync.Map // queue -> int

	// bounded are the tenants whose creations this Store has counted
	// under a bound (quota.go).
	bounded sync.Map // tenant -> true

	// vacuum vacuums the jobs table where autovacuum does not
	// (vacuum.go).
	vacuum vacuumer

	// crowded is set once the database first refused the pool a
	// connection for want of room (acquire), which it logs once.
	crowded atomic.Bool
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or a key=value
// connection string; search_path, if given, names the schema), applies
// the migrations it lacks and returns the store. A database it cannot
// reach returns an error wrapping jobtype.ErrUnavailable; one migrated by a
// newer jobwatch, ErrSchemaTooNew.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if !strings.Contains(url, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if !strings.Contains(url, "pool_health_check_period") {
		cfg.HealthCheckPeriod = idleCheckEvery
	}
	s := &Store{log: slog.Default(), reach: health{log: slog.Default()}}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		s.conns.add(c.PgConn().PID())
		return nil
	}
	cfg.BeforeClose = func(c *pgx.Conn) { s.conns.remove(c.PgConn().PID()) }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", classify(err))
	}
	s.pool = pool
	s.closing, s.close = context.WithCancel(context.Background())
	s.reach.closing, s.reach.probe = s.closing, s.probeWrite
	var schema *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", classify(err))
	}
	if schema == nil {
		err := missingSchema(ctx, pool)
		pool.Close()
		return nil, err
	}
	s.schema, s.channel = *schema, channelFor(*schema)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := s.checkFunctionsSchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	var identity int64
	if err := pool.QueryRow(ctx, "SELECT id FROM db_identity").Scan(&identity); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: read the database's identity: %w", classify(err))
	}
	s.identity = uint64(identity)
	// Creations while no process bounded a tenant are in no mark
	// (quota.go): every tenant starts again from an exact count.
	if _, err := pool.Exec(ctx, "DELETE FROM quota_marks"); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: forget the quota marks: %w", classify(err))
	}
	if err := s.startVacuumer(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s.notifier = newNotifier(s.sendChanges, s.logNotify)
	return s, nil
}

// missingSchema is the error of Open when no schema of the search_path
// exists (current_schema() is NULL): jobwatch creates its tables but not
// the schema, so it names the schema and the statement that creates it.
func missingSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var path string
	if err := pool.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path); err != nil {
		return fmt.Errorf("open postgres: no schema of the search_path exists: %w", classify(err))
	}
	first := ""
	for _, name := range strings.Split(path, ",") {
		if name = strings.TrimSpace(name); name != "" && name != `"$user"` {
			first = name // as PostgreSQL prints it: quoted where SQL needs it
			break
		}
	}
	if first == "" {
		return fmt.Errorf("open postgres: no schema of the search_path (%s) exists: name one in the URL's search_path parameter", path)
	}
	return fmt.Errorf("open postgres: schema %s does not exist (search_path is %s); jobwatch creates its tables, not the schema: create it first with CREATE SCHEMA %s", first, path, first)
}

// Close sends the notifications still queued, stops the listeners and
// closes the pool.
func (s *Store) Close() error {
	s.notifier.close()
	s.closeNotifyConn()
	s.close()
	s.listeners.Wait()
	s.pool.Close()
	return nil
}

// write runs one write on a connection of the pool. The caller's ctx
// bounds the wait for the connection; once the write is sent it runs to
// its end whatever the caller does (its context reaches the statement
// only for its values), so that an error from a write the caller left
// always means it changed nothing. Only a lost connection leaves the
// outcome unknown, and that error wraps jobtype.ErrUnavailable.
//
// A write that failed before anything was sent (a connection found dead
// as the write began) runs again once, on another connection. A write
// PostgreSQL rolled back to break a deadlock, or for a serialization
// failure, runs again too, up to rollbackAttempts times in all: every fn
// is one transaction, or stops before its commit on an error, so the
// write rolled back changed nothing. Two such writes are two batches of
// completions whose jobs others run after: the trigger that releases
// those others locks them as each completion's row is written, so two
// batches can each hold one the other needs (deps.go in storetest). The
// write that runs again waits for the one that won, and then sees it.
// Past the bound the error wraps jobtype.ErrUnavailable, so that callers
// try again, without counting against the database's reachability.
func (s *Store) write(ctx context.Context, fn func(context.Context, *pgxpool.Conn) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = s.writeOnce(ctx, fn)
		if pgconn.SafeToRetry(err) {
			err = s.writeOnce(ctx, fn)
		}
		if !rolledBack(err) || attempt == rollbackAttempts {
			break
		}
	}
	s.reach.observe(classify(err))
	if rolledBack(err) {
		return fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)
	}
	return err
}

// rollbackAttempts bounds how often write runs a write that PostgreSQL
// rolled back to break a deadlock or a serialization failure.
const rollbackAttempts = 5

// rolledBack reports whether err is PostgreSQL's rollback of a
// transaction that lost to a concurrent one: a deadlock broken
// (40P01) or a serialization failure (40001).
func rolledBack(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// ReadConns is how many callers' reads of jobs and logs the engine lets
// run at once (jobs.WithReader): half the pool, so that however many
// reads wait their turn, claims, heartbeats and completions find a
// connection.
func (s *Store) ReadConns() int { return max(1, int(s.pool.Config().MaxConns)/2) }

// Reachable reports whether the database takes this store's writes and
// its listener hears changes, as far as the store has seen: false from
// the first write refused unavailable, or the listener's connection
// lost, until writes succeed again (a probe tries one every probeEvery)
// and the listener listens again. The server's gRPC health follows it.
func (s *Store) Reachable() bool { return s.reach.reachable() }

// probeWrite needs what a write needs, a connection to a primary that
// can start a writing transaction (a standby refuses txid_current), and
// writes nothing.
func (s *Store) probeWrite(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "SELECT txid_current()")
	return classify(err)
}

func (s *Store) writeOnce(ctx context.Context, fn func(context.Context, *pgxpool.Conn) error) error {
	conn, err := s.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			// The caller left or its deadline passed while it waited:
			// its own doing, however pgx wrapped it (a dial cut short
			// reads as a network error), so no store failure.
			return fmt.Errorf("wait for a connection: %w (%v)", ctx.Err(), err)
		}
		return classify(err)
	}
	defer conn.Release()
	if err := ctx.Err(); err != nil {
		return err
	}
	return fn(context.WithoutCancel(ctx), conn)
}

// acquire takes a connection of the pool. When the pool would open one
// more and PostgreSQL refuses it (too many connections: max_connections
// or the role's limit, which the replicas' pools together outgrow), it
// waits for one of the connections the pool holds to come free instead,
// trying again every few milliseconds, until ctx ends: that refusal
// says the database has no room for one more connection, not that it
// cannot be reached, and the pool's own connections still work. A pool
// holding none has nothing to wait for, and fails.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	wait := time.Millisecond
	for {
		conn, err := s.pool.Acquire(ctx)
		if err == nil || !TooManyConnections(err) || s.pool.Stat().TotalConns() == 0 {
			return conn, err
		}
		if !s.crowded.Swap(true) {
			st := s.pool.Stat()
			s.log.Warn("postgres: the database refuses more connections; this replica makes do with those its pool holds. "+
				"Its max_connections, and the role's connection limit, must cover replicas × (pool_max_conns + 2)",
				"pool_max_conns", st.MaxConns(), "held", st.AcquiredConns()+st.IdleConns(), "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// TooManyConnections reports whether err is PostgreSQL's refusal of a
// connection for want of room: too_many_connections (53300), for the
// server's max_connections or the role's or database's limit.
func TooManyConnections(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "53300"
}

// classify wraps the errors that mean "the database cannot be used right
// now" with jobtype.ErrUnavailable, keeping only the server's short message
// (never the statement). A caller's own cancellation stays what it is.
func classify(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "53300": // too_many_connections
			return fmt.Errorf("%w: %w: the database has no room for another connection; "+
				"its max_connections, and the role's connection limit, must cover replicas × (pool_max_conns + 2)",
				jobtype.ErrUnavailable, pe)
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),                           // insufficient resources, too many connections
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // shutdown, cannot connect now
			pe.Code == "57014", // statement timeout
			pe.Code == "55P03", // lock timeout
			pe.Code == "25006": // read-only transaction (a standby)
			return fmt.Errorf("%w: %s (SQLSTATE %s)", jobtype.ErrUnavailable, pe.Message, pe.Code)
		case pe.Code == "42P01", // undefined_table
			pe.Code == "3F000": // invalid_schema_name
			// jobwatch's schema, or a table of it, was dropped under a
			// running server (Open creates them, and migrations never
			// drop one): no call can be served until an operator
			// restores it, which is no bug of the call's (internal),
			// and callers may try again later, as health says.
			return fmt.Errorf("%w: %s (SQLSTATE %s): jobwatch's schema or one of its tables is gone from the database; "+
				"restore it from a backup, or create the schema again if it was dropped and restart jobwatch, which creates its tables in an empty schema",
				jobtype.ErrUnavailable, pe.Message, pe.Code)
		}
		return err
	}
	var (
		ce *pgconn.ConnectError
		ne net.Error
	)
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed") {
		return fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)
	}
	return err
}

func isUniqueViolation(err error, constraint string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && (constraint == "" || pe.ConstraintName == constraint)
}

// --- encoding ---

// columns are every column of a job, in scanJob's order; summaryColumns
// the same with NULL for payload, result and history, so a summary never
// reads them.
const columns = `id, tenant, kind, queue, state, version, percent, step,
	payload::text, result::text, history::text, error_type, error_message, attempt, max_attempts,
	unique_key, created_at, started_at, updated_at, finished_at, run_at, worker_id, lease_id,
	lease_expires_at, priority, batch, after, after_policy, trace_parent, trace_state, seq, rev`

var summaryColumns = strings.Replace(columns, "payload::text, result::text, history::text", "NULL::text, NULL::text, NULL::text", 1)

// qualified prefixes every column of columns with alias.
func qualified(cols, alias string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.HasPrefix(p, "NULL") {
			p = alias + "." + p
		}
		parts[i] = p
	}
	return strings.Join(parts, ", ")
}

// sizeExpr is jobtype.Job.Size in SQL, for ListFilter.MaxBytes; with
// full false it leaves payload and result out, as a summary has none.
func sizeExpr(full bool) string {
	e := fmt.Sprintf(`(%d + octet_length(id) + octet_length(tenant) + octet_length(kind) + octet_length(queue)
		+ octet_length(state) + octet_length(step) + octet_length(unique_key) + octet_length(worker_id) + octet_length(batch) + coalesce(octet_length(array_to_string(after, '')), 0)
		+ coalesce(octet_length(error_type), 0) + coalesce(octet_length(error_message), 0)`, jobtype.SizeOverhead)
	if full {
		e += " + coalesce(octet_length(payload::text), 0) + coalesce(octet_length(result::text), 0)"
	}
	return e + ")"
}

// micro returns t as it is stored: UTC, truncated to the microsecond.
func micro(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond).UTC()
}

// nullTime is the bind value of a nullable time column: NULL for zero.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// orderTime is the bind value of created_at and run_at: '-infinity' for
// zero, which sorts first as the zero time does.
func orderTime(t time.Time) any {
	if t.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return t
}

// fromTime reads back what nullTime and orderTime wrote.
func fromTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time.UTC()
}

func nullJSON(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

func fromText(t pgtype.Text) json.RawMessage {
	if !t.Valid {
		return nil
	}
	return json.RawMessage(t.String)
}

// normalize returns j as it will read back: times in UTC to the
// microsecond, an empty payload or result as none, its own copies of
// slices and the error.
func normalize(j jobtype.Job) jobtype.Job {
	for _, t := range []*time.Time{&j.CreatedAt, &j.StartedAt, &j.UpdatedAt, &j.FinishedAt, &j.RunAt, &j.LeaseExpiresAt} {
		*t = micro(*t)
	}
	j = j.Clone()
	for i := range j.History {
		j.History[i].StartedAt, j.History[i].FinishedAt = micro(j.History[i].StartedAt), micro(j.History[i].FinishedAt)
	}
	return j
}

// sameStored reports whether a and b (both normalized) store the same
// row, so that an update that changes nothing writes nothing.
func sameStored(a, b jobtype.Job) bool {
	return a.SameVisible(&b) && a.ID == b.ID && a.Tenant == b.Tenant && a.Kind == b.Kind &&
		a.Queue == b.Queue && string(a.Payload) == string(b.Payload) &&
		(a.Error == nil) == (b.Error == nil) && a.MaxAttempts == b.MaxAttempts &&
		a.UniqueKey == b.UniqueKey && a.CreatedAt.Equal(b.CreatedAt) && a.StartedAt.Equal(b.StartedAt) &&
		a.UpdatedAt.Equal(b.UpdatedAt) && a.FinishedAt.Equal(b.FinishedAt) &&
		a.LeaseID == b.LeaseID && a.LeaseExpiresAt.Equal(b.LeaseExpiresAt) &&
		a.Priority == b.Priority && a.Batch == b.Batch && toHistory(a.History) == toHistory(b.History)
}

// values are the bind values of the job's columns in insertJob's order.
func values(j jobtype.Job) []any {
	var errType, errMsg any
	if j.Error != nil {
		errType, errMsg = j.Error.Type, j.Error.Message
	}
	return []any{
		j.ID, j.Tenant, j.Kind, j.Queue, string(j.State), j.Version, j.Percent, j.Step,
		nullJSON(j.Payload), nullJSON(j.Result), errType, errMsg, j.Attempt, j.MaxAttempts,
		j.UniqueKey, orderTime(j.CreatedAt), nullTime(j.StartedAt), nullTime(j.UpdatedAt),
		nullTime(j.FinishedAt), orderTime(j.RunAt), j.WorkerID, j.LeaseID, nullTime(j.LeaseExpiresAt),
		j.Priority, toHistory(j.History),
	}
}

// toHistory is how History is stored: a JSON array, NULL while empty.
func toHistory(h []jobtype.HistoryEntry) any {
	if len(h) == 0 {
		return nil
	}
	h = slices.Clone(h)
	for i := range h {
		h[i].StartedAt, h[i].FinishedAt = micro(h[i].StartedAt), micro(h[i].FinishedAt)
	}
	b, err := json.Marshal(h)
	if err != nil {
		panic("postgres: encode history: " + err.Error()) // plain data: cannot fail
	}
	return string(b)
}

// fromHistory reads what toHistory stored; what it cannot read (no
// binary writes it) reads as no history rather than failing the job.
func fromHistory(t pgtype.Text) []jobtype.HistoryEntry {
	if !t.Valid {
		return nil
	}
	var h []jobtype.HistoryEntry
	if json.Unmarshal([]byte(t.String), &h) != nil {
		return nil
	}
	return h
}

// storedRow is one job row as read: the job, its seq and its revision.
type storedRow struct {
	job      jobtype.Job
	seq, rev int64
}

// scanState scans the columns "id, state, version" (store.JobRead's
// States) into a row whose job has only those.
func scanState(r pgx.Row) (storedRow, error) {
	var (
		row   storedRow
		state string
	)
	err := r.Scan(&row.job.ID, &state, &row.job.Version)
	row.job.State = jobtype.State(state)
	return row, err
}

// scanJob reads the columns of columns (or summaryColumns), then extra.
func scanJob(r pgx.Row, extra ...any) (storedRow, error) {
	var (
		row                                               storedRow
		j                                                 = &row.job
		state                                             string
		payload, result, history, errType, errMsg         pgtype.Text
		created, started, updated, finished, runAt, lease pgtype.Timestamptz
		afterPolicy                                       string
	)
	dest := append([]any{&j.ID, &j.Tenant, &j.Kind, &j.Queue, &state, &j.Version, &j.Percent, &j.Step,
		&payload, &result, &history, &errType, &errMsg, &j.Attempt, &j.MaxAttempts, &j.UniqueKey,
		&created, &started, &updated, &finished, &runAt, &j.WorkerID, &j.LeaseID, &lease,
		&j.Priority, &j.Batch, &j.After, &afterPolicy, &j.TraceParent, &j.TraceState, &row.seq, &row.rev}, extra...)
	if err := r.Scan(dest...); err != nil {
		return storedRow{}, err
	}
	j.State = jobtype.State(state)
	j.Payload, j.Result = fromText(payload), fromText(result)
	j.History = fromHistory(history)
	j.OnDependencyFailure = jobtype.DependencyFailure(afterPolicy)
	if errType.Valid {
		j.Error = &jobtype.JobError{Type: errType.String, Message: errMsg.String}
	}
	j.CreatedAt, j.StartedAt, j.UpdatedAt = fromTime(created), fromTime(started), fromTime(updated)
	j.FinishedAt, j.RunAt, j.LeaseExpiresAt = fromTime(finished), fromTime(runAt), fromTime(lease)
	return row, nil
}
