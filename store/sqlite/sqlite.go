// Package sqlite is jobwatch's embedded default store.Store: one SQLite
// file (github.com/mattn/go-sqlite3, so it needs cgo), nothing else to run.
//
// Durability: the file is in WAL mode with synchronous=FULL, and a method
// that writes returns only after the transaction holding its write has
// committed, and the commit has fsynced the WAL. So every write
// acknowledged with a nil error survives kill -9 of the process and a
// power loss (as far as the disk honours fsync). A write that returned an
// error changed nothing.
//
// Group commit: writes are made by one writer goroutine on one connection
// that opens its transactions with BEGIN IMMEDIATE. It gathers the writes
// waiting for it (up to maxBatchWrites, and no more once the batch has run
// maxBatchTime) into one transaction, one commit and one fsync, each write
// inside a SAVEPOINT of its own: a write that fails its own checks is
// rolled back to its savepoint and fails nothing else. Nothing waits for
// company: a lone write commits at once, and batches grow with the load.
// The writes of a batch run one after another in their order of arrival,
// and each sees the ones before it, so a read-modify-write (UpdateJob,
// ClaimJob) can never interleave with another, also across processes
// sharing the file. A write waits for the database (the writes ahead of it
// in this process, then another process's write lock) at most
// Config.LockTimeout and never past its caller's deadline; then it fails
// with jobtype.ErrUnavailable (at the lock timeout) or with an error
// wrapping context.DeadlineExceeded (near the caller's deadline, which is
// no store failure). Reads use a separate pool of query-only
// connections and see every committed write.
//
// A write whose caller has gone (its context ended) while it waits, or
// before its function returned, is rolled back (or never run) and
// returns the context's error; once its changes have joined the batch it
// commits with the batch, whatever the caller does. A batch whose commit
// fails fails every write in it. So every write either committed and
// returned nil, or changed nothing.
//
// The package only stores and finds jobs; it must never decide a job's
// life cycle (package jobs does) or change a job outside the transaction
// of the method that was called.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// DefaultLockTimeout is Config.LockTimeout's default.
const DefaultLockTimeout = 5 * time.Second

// busyStep is the writer connection's SQLite busy timeout: how long one
// BEGIN IMMEDIATE waits inside SQLite for another process's write lock.
// SQLite's busy handler sleeps without looking at contexts or interrupts,
// so the wait for the lock is a Go loop of such short steps that checks the
// deadline between them; a step is what a write can overrun it by.
const busyStep = 20 * time.Millisecond

// lockDeadlineMargin is how long before its caller's deadline a write
// stops waiting for the lock (at most a tenth of the time left), so the
// caller hears an answer (deadline exceeded: the time was the caller's to
// set, so it says nothing of the database) before its own timeout cuts
// the call.
const lockDeadlineMargin = 100 * time.Millisecond

// stmtCacheSize is how many prepared statements each connection keeps
// (mattn/go-sqlite3 looks them up by their text): every statement of the
// write path is prepared once, not once per write, which was about a third
// of the writer's time.
const stmtCacheSize = 128

// readConns bounds the read pool; WAL lets them all read while a write
// commits.
const readConns = 4

// Config tunes a Store. Zero fields take the documented defaults.
type Config struct {
	// LockTimeout bounds how long a write waits for the database: for the
	// writes ahead of it in this process and for another process holding
	// the file's write lock, together. Past it the write fails with
	// jobtype.ErrUnavailable and writes nothing. A caller whose own
	// deadline comes first stops waiting lockDeadlineMargin before it,
	// with an error wrapping context.DeadlineExceeded, not
	// jobtype.ErrUnavailable: a caller's short deadline is no sign that
	// the database is failing, and never starts an episode (health.go).
	// Reads wait up to it too, though in WAL mode a held write lock does
	// not block them. Default DefaultLockTimeout.
	LockTimeout time.Duration
	// Logger hears when writes start failing with jobtype.ErrUnavailable
	// (locked, disk full, read-only, unreadable): one warning with the
	// cause when an episode begins, one info line when a write succeeds
	// again. Default slog.Default().
	Logger *slog.Logger
}

// Store is a store.Store on one SQLite file. Create it with Open or
// OpenWith.
type Store struct {
	write *sql.DB // exactly one connection, BEGIN IMMEDIATE, used by the writer goroutine
	read  *sql.DB // query-only connections
	cfg   Config
	// w queues writes for the writer goroutine (writer.go).
	w *writer
	// writes tracks episodes of failing writes, so each is logged once.
	writes health
	// deleteBatch bounds one retention transaction, so that a backlog
	// (the first sweep after a long stop) never holds the single writer
	// for long: Submit and Complete get their turn between batches.
	deleteBatch int
	// holderQuery finds the active job holding a unique key; a field so a
	// test can make the lookup fail.
	holderQuery string
	// feed hands committed changes to listeners (listen.go).
	feed *feed
}

var _ store.Store = (*Store)(nil)

// Open opens (creating it if needed) the SQLite database file at path and
// brings its schema up to date, with the default Config. A file written
// by a newer jobwatch is refused with ErrSchemaTooNew; a file that cannot
// be opened returns an error wrapping jobtype.ErrUnavailable. path must name
// a file: ":memory:" is refused because the read pool would not share it.
func Open(path string) (*Store, error) {
	return OpenWith(path, Config{})
}

// OpenWith is Open with a Config.
func OpenWith(path string, cfg Config) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open sqlite: %q is not a file path", path)
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := createPrivate(path, cfg.Logger); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	// mattn/go-sqlite3 sets these pragmas on every new connection, and
	// writerConnector the one it has no parameter for.
	write := sql.OpenDB(writerConnector(dsn(path, fmt.Sprintf(
		"_journal_mode=WAL&_synchronous=FULL&_busy_timeout=%d&_foreign_keys=on&_txlock=immediate&_stmt_cache_size=%d",
		busyStep.Milliseconds(), stmtCacheSize))))
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	s := &Store{
		write:       write,
		cfg:         cfg,
		writes:      health{log: cfg.Logger},
		deleteBatch: 1000,
		holderQuery: holderQuery,
		w:           newWriter(),
	}
	ctx := context.Background()
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	if err := s.migrate(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}

	// The read pool opens after the writer has made the file WAL, which is
	// a property of the file, so the readers need not (and, query-only,
	// could not) set it.
	read, err := sql.Open("sqlite3", dsn(path, fmt.Sprintf(
		"_busy_timeout=%d&_foreign_keys=on&_query_only=1", cfg.LockTimeout.Milliseconds())))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	if err := read.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	s.read = read
	s.feed = openFeed(path)
	go s.runWriter()
	return s, nil
}

// FileMode is the mode a new database file is created with: readable
// and writable by its owner alone, since it holds every tenant's
// payloads and results. SQLite gives the -wal and -shm files beside it
// the database file's mode, so they are 0600 too (less the umask).
const FileMode fs.FileMode = 0o600

// createPrivate creates the database file at path, empty, with FileMode
// if it does not exist, before SQLite opens it (SQLite would create it
// 0644). An existing file keeps its mode: it is the operator's; one that
// others may read is logged at warn, with what to do.
func createPrivate(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		log.Warn("the database file may be read by other users: it holds every job's payload and result; "+
			"chmod 600 it and its -wal and -shm files", "path", path, "mode", fmt.Sprintf("%#o", info.Mode().Perm()))
	}
	return nil
}

// writerConnector opens the writer's connections with temp_store =
// MEMORY, which keeps the statement journal (the undo log of each write's
// SAVEPOINT and of each statement) in memory. By default it spills to a
// temporary file past 64 KiB, and a batch of writes then paid two pwrite
// calls for every page it changed, most of the writer's time. It holds
// only what a rollback of the current write would need: it is no part of
// durability, which is the WAL's.
func writerConnector(dsn string) driver.Connector {
	return &connector{dsn: dsn, driver: &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			_, err := c.Exec("PRAGMA temp_store = MEMORY", nil)
			return err
		},
	}}
}

type connector struct {
	dsn    string
	driver *sqlite3.SQLiteDriver
}

func (c *connector) Connect(context.Context) (driver.Conn, error) { return c.driver.Open(c.dsn) }
func (c *connector) Driver() driver.Driver                        { return c.driver }

// dsn makes a SQLite URI of path, so that '?' or '#' in a file name are
// not taken for parameters.
func dsn(path, params string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + params
}

// Close closes the database. Every acknowledged write is already on disk.
// A batch being written completes first; writes still queued, and any
// made afterwards, fail with jobtype.ErrUnavailable and write nothing.
func (s *Store) Close() error {
	s.w.close()
	<-s.w.stopped
	s.feed.close()
	return errors.Join(s.read.Close(), s.write.Close())
}

// classify wraps the errors that mean "the database cannot be used right
// now" (locked by another process beyond the busy timeout, unreadable,
// full) with jobtype.ErrUnavailable; nothing was written in those cases.
func classify(err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrCantOpen, sqlite3.ErrIoErr,
		sqlite3.ErrFull, sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrPerm, sqlite3.ErrReadonly:
		return fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)
	}
	return err
}

func isUniqueViolation(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintUnique
}

func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// totalChanges is the writer connection's count of rows changed so far,
// or -1 if it cannot be read. It tells a commit that wrote rows from one
// that wrote none: only the former proves that a full disk or a
// read-only file takes writes again. A count that cannot be read only
// delays that verdict to a later write.
func totalChanges(ctx context.Context, tx *sql.Tx) int64 {
	var n int64
	if err := tx.QueryRowContext(ctx, "SELECT total_changes()").Scan(&n); err != nil {
		return -1
	}
	return n
}

// begin takes the writer connection and opens an immediate transaction
// on it, waiting for both at most until lockDeadline; the migration uses
// it, before the writer goroutine starts. The transaction is not bound to
// ctx (see writeTx); the caller must roll it back or commit it, then close
// the connection.
func (s *Store) begin(ctx context.Context) (*sql.Conn, *sql.Tx, error) {
	start := time.Now()
	deadline, callers := s.lockDeadline(ctx)
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := s.write.Conn(waitCtx)
	if err != nil {
		return nil, nil, lockWaitError(ctx, start, callers, "other writes of this process held the database", err)
	}
	for {
		attempt := time.Now()
		tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
		if err == nil {
			return conn, tx, nil
		}
		if !isBusy(err) {
			conn.Close()
			return nil, nil, fmt.Errorf("begin: %w", classify(err))
		}
		// SQLite waited up to one busyStep. Some busy answers come at
		// once, without its busy handler; pause so as not to spin.
		if time.Since(attempt) < busyStep/2 {
			select {
			case <-waitCtx.Done():
			case <-time.After(busyStep):
			}
		}
		if waitCtx.Err() != nil {
			conn.Close()
			return nil, nil, lockWaitError(ctx, start, callers, "another process holds the write lock", err)
		}
	}
}

// lockDeadline is when a write stops waiting for the database: after the
// lock timeout, or lockDeadlineMargin before the caller's deadline,
// whichever is sooner; callers reports that it is the caller's.
func (s *Store) lockDeadline(ctx context.Context) (deadline time.Time, callers bool) {
	deadline = time.Now().Add(s.cfg.LockTimeout)
	if callerDeadline, ok := ctx.Deadline(); ok {
		margin := min(lockDeadlineMargin, time.Until(callerDeadline)/10)
		if near := callerDeadline.Add(-max(0, margin)); near.Before(deadline) {
			return near, true
		}
	}
	return deadline, false
}

// lockWaitError says why a write got no transaction: its caller left or
// its caller's deadline was near (callers: the lock deadline was the
// caller's; either is the context's error, not a store failure), or the
// database stayed held past the lock timeout (jobtype.ErrUnavailable, with
// why).
func lockWaitError(ctx context.Context, start time.Time, callers bool, why string, err error) error {
	waited := time.Since(start).Round(time.Millisecond)
	if ctx.Err() != nil {
		return fmt.Errorf("wait for the database: %w", ctx.Err())
	}
	if callers {
		return fmt.Errorf("wait for the database: the caller's deadline is near, after %v (%s): %w",
			waited, why, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: no write lock after %v (%s): %w", jobtype.ErrUnavailable, waited, why, err)
}

// --- encoding ---

const columns = `id, tenant, kind, queue, state, version, percent, step, payload, result,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, seq`

func toMicro(t time.Time) int64 { return t.UnixMicro() }

func fromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullJSON(m json.RawMessage) sql.NullString {
	return sql.NullString{String: string(m), Valid: len(m) > 0}
}

func fromNullJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// normalize returns j as it will read back: times in UTC to the
// microsecond, an empty payload or result as none, its own copies of
// slices and the error.
func normalize(j jobtype.Job) jobtype.Job {
	for _, t := range []*time.Time{&j.CreatedAt, &j.StartedAt, &j.UpdatedAt, &j.FinishedAt, &j.RunAt, &j.LeaseExpiresAt} {
		*t = fromMicro(toMicro(*t))
	}
	j.Payload = fromNullJSON(nullJSON(j.Payload))
	j.Result = fromNullJSON(nullJSON(j.Result))
	if j.Error != nil {
		e := *j.Error
		j.Error = &e
	}
	return j
}

// values are the bind values of every column but seq, in columns' order.
func values(j jobtype.Job) []any {
	var errType, errMsg sql.NullString
	if j.Error != nil {
		errType = sql.NullString{String: j.Error.Type, Valid: true}
		errMsg = sql.NullString{String: j.Error.Message, Valid: true}
	}
	return []any{
		j.ID, j.Tenant, j.Kind, j.Queue, string(j.State), j.Version, j.Percent, j.Step,
		nullJSON(j.Payload), nullJSON(j.Result), errType, errMsg, j.Attempt, j.MaxAttempts,
		j.UniqueKey, toMicro(j.CreatedAt), toMicro(j.StartedAt), toMicro(j.UpdatedAt),
		toMicro(j.FinishedAt), toMicro(j.RunAt), j.WorkerID, j.LeaseID, toMicro(j.LeaseExpiresAt),
	}
}

type scanner interface{ Scan(dest ...any) error }

// scanAlso scans the columns a query selects after a job's.
type scanAlso struct {
	r     scanner
	extra any
}

func (s scanAlso) Scan(dest ...any) error { return s.r.Scan(append(dest, s.extra)...) }

func scanJob(r scanner) (jobtype.Job, int64, error) {
	var (
		j                                                 jobtype.Job
		state                                             string
		payload, result, errType, errMsg                  sql.NullString
		created, started, updated, finished, runAt, lease int64
		seq                                               int64
	)
	err := r.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &state, &j.Version, &j.Percent, &j.Step,
		&payload, &result, &errType, &errMsg, &j.Attempt, &j.MaxAttempts, &j.UniqueKey,
		&created, &started, &updated, &finished, &runAt, &j.WorkerID, &j.LeaseID, &lease, &seq)
	if err != nil {
		return jobtype.Job{}, 0, err
	}
	j.State = jobtype.State(state)
	j.Payload, j.Result = fromNullJSON(payload), fromNullJSON(result)
	if errType.Valid {
		j.Error = &jobtype.JobError{Type: errType.String, Message: errMsg.String}
	}
	j.CreatedAt, j.StartedAt, j.UpdatedAt = fromMicro(created), fromMicro(started), fromMicro(updated)
	j.FinishedAt, j.RunAt, j.LeaseExpiresAt = fromMicro(finished), fromMicro(runAt), fromMicro(lease)
	return j, seq, nil
}

// --- writes ---

// insertJob takes values(j) and then the change sequence's value.
const insertJob = `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
	payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insert adds j, stamped with the batch's change sequence value. Only
// the writer goroutine calls it.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, j jobtype.Job) error {
	if _, err := tx.ExecContext(ctx, insertJob, append(values(j), s.w.change)...); err != nil {
		return err
	}
	s.changed(j)
	return nil
}

// valueColumns name the values of values(j), in order.
var valueColumns = []string{"id", "tenant", "kind", "queue", "state", "version", "percent", "step",
	"payload", "result", "error_type", "error_message", "attempt", "max_attempts", "unique_key", "created_at",
	"started_at", "updated_at", "finished_at", "run_at", "worker_id", "lease_id", "lease_expires_at"}

// updateChanged makes the UPDATE of row seq from old to next that sets
// only the columns whose values differ, or "" if none does. SQLite rewrites the entry of every
// index on a column an UPDATE sets, whether its value changed or not, so
// setting every column rewrote all nine indexes of jobs on each heartbeat
// and completion. The few shapes of change (claim, heartbeat, complete,
// ...) each make one statement text, prepared once by the statement
// cache. Triggers on "UPDATE OF state" fire only when state is set, and
// they act only when it changes. A change of version also stamps the
// batch's change sequence value, change.
func updateChanged(seq int64, old, next jobtype.Job, change int64) (string, []any) {
	was, now := values(old), values(next)
	var q strings.Builder
	q.WriteString("UPDATE jobs SET ")
	args := make([]any, 0, len(now)+1)
	for i, v := range now {
		if v == was[i] {
			continue
		}
		if len(args) > 0 {
			q.WriteString(", ")
		}
		q.WriteString(valueColumns[i])
		q.WriteString(" = ?")
		args = append(args, v)
	}
	if len(args) == 0 {
		return "", nil // nothing stored differs
	}
	if next.Version != old.Version {
		q.WriteString(", change_seq = ?")
		args = append(args, change)
	}
	q.WriteString(" WHERE seq = ?")
	return q.String(), append(args, seq)
}

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	j = normalize(j)
	err := s.writeStatement(ctx, "create job", func(ctx context.Context, tx *sql.Tx) error {
		if err := callerLeft(ctx); err != nil {
			return leftError("create job "+j.ID, err)
		}
		err := s.insert(ctx, tx, j)
		if isUniqueViolation(err) {
			if conflict := s.activeHolder(ctx, tx, j); conflict != nil {
				return conflict
			}
		}
		if err != nil {
			return fmt.Errorf("create job %s: %w", j.ID, classify(err))
		}
		return nil
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	return j, nil
}

// holderQuery finds the active job holding a unique key; its WHERE says
// what jobs_unique_active says, so that index answers it.
const holderQuery = `SELECT id FROM jobs
	WHERE tenant = ? AND unique_key = ? AND id <> ?
	AND unique_key <> '' AND state IN ('pending', 'queued', 'running')`

// activeHolder explains the unique violation just seen while writing j:
// the *jobtype.ConflictError naming the active job that holds j's unique
// key, nil if no job holds it (the violation was something else, such as
// the id), or the lookup's own error, classified, if the lookup failed.
func (s *Store) activeHolder(ctx context.Context, tx *sql.Tx, j jobtype.Job) error {
	if j.UniqueKey == "" || !isActive(j.State) {
		return nil
	}
	var id string
	err := tx.QueryRowContext(ctx, s.holderQuery, j.Tenant, j.UniqueKey, j.ID).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("job %s: look up the active job with unique key %q: %w", j.ID, j.UniqueKey, classify(err))
	}
	return &jobtype.ConflictError{ActiveID: id, UniqueKey: j.UniqueKey}
}

func isActive(s jobtype.State) bool {
	for _, a := range jobtype.ActiveStates {
		if s == a {
			return true
		}
	}
	return false
}

func getJob(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (jobtype.Job, int64, error) {
	j, seq, err := scanJob(q.QueryRowContext(ctx, "SELECT "+columns+" FROM jobs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return jobtype.Job{}, 0, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, 0, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return j, seq, nil
}

// writeJob stores next over the row seq, with old's id and the version
// store.Versioned decides. It skips the write when nothing changed at
// all. It is the one statement that changes anything in UpdateJob
// (writeStatement), so it asks first whether the caller is still there.
func (s *Store) writeJob(ctx context.Context, tx *sql.Tx, seq int64, old, next jobtype.Job) (jobtype.Job, error) {
	if next.ID != old.ID {
		return jobtype.Job{}, fmt.Errorf("update job %s: the id cannot change (to %q)", old.ID, next.ID)
	}
	next = versioned(old, next)
	if err := s.updateRow(ctx, tx, seq, old, next); err != nil {
		return jobtype.Job{}, err
	}
	if next.Version != old.Version {
		s.changed(next)
	}
	return next, nil
}

// updateRow stores next (as versioned makes it) over the row seq, which
// holds old, setting what changed; nothing if nothing did. It asks first
// whether the caller is still there.
func (s *Store) updateRow(ctx context.Context, tx *sql.Tx, seq int64, old, next jobtype.Job) error {
	query, args := updateChanged(seq, old, next, s.w.change)
	if query == "" {
		return nil
	}
	if err := callerLeft(ctx); err != nil {
		return leftError("update job "+old.ID, err)
	}
	_, err := tx.ExecContext(ctx, query, args...)
	if isUniqueViolation(err) {
		if conflict := s.activeHolder(ctx, tx, next); conflict != nil {
			return conflict
		}
	}
	if err != nil {
		return fmt.Errorf("update job %s: %w", old.ID, classify(err))
	}
	return nil
}

// UpdateJob implements store.Store.
func (s *Store) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	var out jobtype.Job
	err := s.writeStatement(ctx, "update job", func(ctx context.Context, tx *sql.Tx) error {
		old, seq, err := getJob(ctx, tx, id)
		if err != nil {
			return err
		}
		next := old.Clone()
		if err := update(&next); err != nil {
			return err
		}
		out, err = s.writeJob(ctx, tx, seq, old, next)
		return err
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	return out, nil
}

func in[T ~string](where string, args []any, column string, values []T) (string, []any) {
	if len(values) == 0 {
		return where, args
	}
	where += " AND " + column + " IN (?" + strings.Repeat(", ?", len(values)-1) + ")"
	for _, v := range values {
		args = append(args, string(v))
	}
	return where, args
}

// DeleteFinishedBefore implements store.Store.
func (s *Store) DeleteFinishedBefore(ctx context.Context, t time.Time) (int, error) {
	var n int
	for {
		var batch int64
		err := s.writeTx(ctx, "delete finished jobs", func(ctx context.Context, tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE seq IN (
				SELECT seq FROM jobs
				WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost') AND finished_at < ?
				LIMIT ?)`, toMicro(t), s.deleteBatch)
			if err != nil {
				return fmt.Errorf("delete finished jobs: %w", classify(err))
			}
			batch, err = res.RowsAffected()
			return err
		})
		n += int(batch)
		if err != nil || batch < int64(s.deleteBatch) {
			return n, err
		}
	}
}

// --- reads ---

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	j, _, err := getJob(ctx, s.read, id)
	return j, err
}

// ReadJob implements store.Store. The tenant is compared in the WHERE,
// before any column is returned; payload and result are the last columns
// of a row (migration 3), so a row that fails the comparison has its
// overflow pages, where a large payload lives, left unread.
func (s *Store) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	selected, where, args := columns, "id = ?", []any{id}
	if r.Summary {
		selected = summaryColumns
	}
	if r.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, r.Tenant)
	}
	j, _, err := scanJob(s.read.QueryRowContext(ctx, "SELECT "+selected+" FROM jobs WHERE "+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return jobtype.Job{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return j, nil
}

// A page token is the sort key of the last job of the page behind a
// format byte, so that a later format can tell itself apart: (created_at,
// seq) for a list newest first, (change_seq, seq) for a list of changes.
const (
	tokenFormat       = 1
	changeTokenFormat = 2
)

// summaryColumns are columns with NULL for payload and result, so that
// a summary list never copies them out of the database.
var summaryColumns = strings.Replace(columns, "payload, result", "NULL, NULL", 1)

// ListJobs implements store.Store. Pages are keyed by (created_at, seq),
// so rows created meanwhile never shift them. Rows are read one at a time
// and the query is closed as soon as the page is full by count or by
// bytes, so a page of large jobs holds at most f.MaxBytes of them, plus
// the one row that told it to stop.
func (s *Store) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	where, args := "1 = 1", []any(nil)
	if f.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, f.Tenant)
	}
	where, args = in(where, args, "state", f.States)
	if f.Kind != "" {
		where, args = where+" AND kind = ?", append(args, f.Kind)
	}
	if f.Queue != "" {
		where, args = where+" AND queue = ?", append(args, f.Queue)
	}
	// A list of changes comes in change order, which the index on
	// (tenant, change_seq, seq) gives: a feed reads only what changed.
	format, keyColumns, after, order := byte(tokenFormat), "(created_at, seq)", " < ", " ORDER BY created_at DESC, seq DESC"
	if f.ChangedSince != "" {
		change, err := decodeCursor(f.ChangedSince)
		if err != nil {
			return nil, "", err
		}
		where, args = where+" AND change_seq > ?", append(args, change)
		format, keyColumns, after, order = changeTokenFormat, "(change_seq, seq)", " > ", " ORDER BY change_seq, seq"
	}
	if f.PageToken != "" {
		key, seq, err := store.DecodePageToken(format, f.PageToken)
		if err != nil {
			return nil, "", err
		}
		where, args = where+" AND "+keyColumns+after+"(?, ?)", append(args, key, seq)
	}
	selected := summaryColumns
	if f.Full {
		selected = columns
	}
	query := "SELECT " + selected + ", change_seq FROM jobs WHERE " + where + order
	if f.Limit > 0 {
		// One more than asked tells whether there is a next page.
		query, args = query+" LIMIT ?", append(args, f.Limit+1)
	}
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	defer rows.Close()
	var (
		jobs             []jobtype.Job
		lastKey, lastSeq int64
		pageBytes        int
	)
	for rows.Next() {
		var change int64
		j, seq, err := scanJob(scanAlso{rows, &change})
		if err != nil {
			return nil, "", fmt.Errorf("list jobs: %w", classify(err))
		}
		full := f.Limit > 0 && len(jobs) == f.Limit
		pageBytes += j.Size()
		if full || (f.MaxBytes > 0 && pageBytes > f.MaxBytes && len(jobs) > 0) {
			// j starts the next page.
			return jobs, store.EncodePageToken(format, lastKey, lastSeq), nil
		}
		jobs, lastSeq = append(jobs, j), seq
		lastKey = toMicro(j.CreatedAt)
		if format == changeTokenFormat {
			lastKey = change
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	return jobs, "", nil
}

// NextReady implements store.Store, with the plan of pickQuery.
func (s *Store) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	pick, args := pickQuery(f, false, "run_at")
	var runAt int64
	err := s.read.QueryRowContext(ctx, pick, args...).Scan(&runAt)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next ready: %w", classify(err))
	}
	return fromMicro(runAt), true, nil
}

// scheduledJobsQuery walks the index jobs_state_run_at from the first
// RunAt after now, in its order: it reads only the rows it returns
// (TestScheduledJobsPlanSeeksTheIndex).
const scheduledJobsQuery = "SELECT id, tenant, kind, queue, run_at, version FROM jobs WHERE state = 'queued' AND run_at > ? ORDER BY run_at, seq LIMIT ?"

// ScheduledJobs implements store.Store.
func (s *Store) ScheduledJobs(ctx context.Context, now time.Time, limit int) ([]store.ScheduledJob, error) {
	rows, err := s.read.QueryContext(ctx, scheduledJobsQuery, toMicro(now), limit)
	if err != nil {
		return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
	}
	defer rows.Close()
	var jobs []store.ScheduledJob
	for rows.Next() {
		var (
			j     store.ScheduledJob
			runAt int64
		)
		if err := rows.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &runAt, &j.Version); err != nil {
			return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
		}
		j.RunAt = fromMicro(runAt)
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("scheduled jobs: %w", classify(err))
	}
	return jobs, nil
}

// ExpiredLeases implements store.Store.
func (s *Store) ExpiredLeases(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := s.read.QueryContext(ctx,
		"SELECT id FROM jobs WHERE state = 'running' AND lease_expires_at < ?", toMicro(now))
	if err != nil {
		return nil, fmt.Errorf("expired leases: %w", classify(err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("expired leases: %w", classify(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("expired leases: %w", classify(err))
	}
	return ids, nil
}

// timedOutQuery reads the queue's RUNNING jobs (a handful) through
// jobs_state_queue_run_at and each one's attempt by seq; it never scans
// jobs (TestTimedOutReadsRunningAttemptsNotTheJobsTable).
const timedOutQuery = `SELECT j.id, j.lease_id FROM running_attempts a JOIN jobs j ON j.seq = a.seq
	WHERE a.started_at < ? AND j.state = 'running' AND j.queue = ?`

// TimedOut implements store.Store.
func (s *Store) TimedOut(ctx context.Context, queue string, startedBefore time.Time) ([]store.Attempt, error) {
	rows, err := s.read.QueryContext(ctx, timedOutQuery, toMicro(startedBefore), queue)
	if err != nil {
		return nil, fmt.Errorf("timed out attempts: %w", classify(err))
	}
	defer rows.Close()
	var attempts []store.Attempt
	for rows.Next() {
		var a store.Attempt
		if err := rows.Scan(&a.JobID, &a.LeaseID); err != nil {
			return nil, fmt.Errorf("timed out attempts: %w", classify(err))
		}
		attempts = append(attempts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("timed out attempts: %w", classify(err))
	}
	return attempts, nil
}

// MarkDrained implements store.Store, in one transaction.
func (s *Store) MarkDrained(ctx context.Context, queues []string, t time.Time) error {
	if len(queues) == 0 {
		return nil
	}
	return s.writeTx(ctx, "mark queues drained", func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range queues {
			if _, err := tx.ExecContext(ctx, `INSERT INTO queue_drains (queue, drained_at) VALUES (?, ?)
				ON CONFLICT (queue) DO UPDATE SET drained_at = max(drained_at, excluded.drained_at)`,
				q, toMicro(t)); err != nil {
				return fmt.Errorf("mark queue %s drained: %w", q, classify(err))
			}
		}
		return nil
	})
}

// SetAlerting implements store.Store. The statement changes a row only
// if the recorded state differs, and the writer runs writes one at a
// time, so of two callers recording one change the second changes
// nothing.
func (s *Store) SetAlerting(ctx context.Context, queue string, alerting bool, at time.Time) (bool, error) {
	query := `INSERT INTO queue_alerts (queue, alerting, changed_at) VALUES (?, 1, ?)
		ON CONFLICT (queue) DO UPDATE SET alerting = 1, changed_at = excluded.changed_at WHERE alerting = 0`
	if !alerting {
		query = `UPDATE queue_alerts SET alerting = 0, changed_at = ? WHERE queue = ? AND alerting = 1`
	}
	var changed bool
	err := s.writeStatement(ctx, "record a queue alerting", func(ctx context.Context, tx *sql.Tx) error {
		if err := callerLeft(ctx); err != nil {
			return leftError("record queue "+queue+" alerting", err)
		}
		args := []any{queue, toMicro(at)}
		if !alerting {
			args = []any{toMicro(at), queue}
		}
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("record queue %s alerting: %w", queue, classify(err))
		}
		n, err := res.RowsAffected()
		changed = n > 0
		return err
	})
	return changed, err
}

// LastDrained implements store.Store.
func (s *Store) LastDrained(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT queue, drained_at FROM queue_drains")
	if err != nil {
		return nil, fmt.Errorf("read queue drains: %w", classify(err))
	}
	defer rows.Close()
	drained := map[string]time.Time{}
	for rows.Next() {
		var (
			q  string
			at int64
		)
		if err := rows.Scan(&q, &at); err != nil {
			return nil, fmt.Errorf("read queue drains: %w", classify(err))
		}
		drained[q] = fromMicro(at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read queue drains: %w", classify(err))
	}
	return drained, nil
}

// CountByState implements store.Store.
func (s *Store) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	rows, err := s.read.QueryContext(ctx, "SELECT state, COUNT(*) FROM jobs GROUP BY state")
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", classify(err))
	}
	defer rows.Close()
	counts := map[jobtype.State]int64{}
	for rows.Next() {
		var (
			state string
			n     int64
		)
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count jobs: %w", classify(err))
		}
		counts[jobtype.State(state)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count jobs: %w", classify(err))
	}
	return counts, nil
}

// queueStatsQuery groups by (state, queue), the order of the index
// jobs_state_queue_run_at, so SQLite answers it from that index alone
// (TestQueueStatsReadsOnlyAnIndex holds it to that).
const queueStatsQuery = `SELECT queue, state, COUNT(*),
	MIN(CASE WHEN state = 'queued' AND run_at <= ? THEN run_at END)
	FROM jobs WHERE state IN ('queued', 'running')
	GROUP BY state, queue`

// QueueStats implements store.Store.
func (s *Store) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	rows, err := s.read.QueryContext(ctx, queueStatsQuery, toMicro(now))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", classify(err))
	}
	defer rows.Close()
	byName := map[string]*store.QueueStats{}
	for rows.Next() {
		var (
			name, state string
			n           int64
			oldest      sql.NullInt64
		)
		if err := rows.Scan(&name, &state, &n, &oldest); err != nil {
			return nil, fmt.Errorf("queue stats: %w", classify(err))
		}
		q := byName[name]
		if q == nil {
			q = &store.QueueStats{Name: name}
			byName[name] = q
		}
		switch jobtype.State(state) {
		case jobtype.Queued:
			q.Queued = n
			if oldest.Valid {
				q.OldestReadyRunAt = fromMicro(oldest.Int64)
			}
		case jobtype.Running:
			q.Running = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue stats: %w", classify(err))
	}
	stats := make([]store.QueueStats, 0, len(byName))
	for _, q := range byName {
		stats = append(stats, *q)
	}
	slices.SortFunc(stats, func(a, b store.QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return stats, nil
}
