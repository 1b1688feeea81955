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

// Opening a Store (Open, OpenWith, Config, the file's mode, the writer's
// and readers' connections), Close, the classification of SQLite's
// errors, and how a write waits for the write lock. The rest is beside
// it: schema.go (migrations), encode.go (rows), jobs.go (the job table's
// writes and reads), claims.go, leases.go, schedules.go, sweeps.go,
// listen.go, health.go, and writer.go (the group-committing writer).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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
//
// A cached statement is prepared again anyway when a parameter whose
// value SQLite's planner read is bound again, even to the same value:
// a LIMIT ?, and, as measured, a parameter compared with a column of
// the partial indexes of the queued jobs (tenant = :tenant). In the
// claim's walks that cost 200 to 300 µs a run, four times the run; so
// their parameters come through json_each or a CTE's column instead
// (unruledPickQuery, readyTenantsQuery). BenchmarkClaimTenants shows it.
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
	// writes tracks episodes of failing writes, so each is logged once,
	// and probes the file while one is on (health.go).
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
	// identity is the database's own (migration 29), which its change
	// cursors carry.
	identity string
	// sole: no other Store, of this process or another, had the file open
	// when this one opened it (SoleServer).
	sole bool
	// fairQueues are the queues with fair-claiming state (fair.go); nil
	// until first read from the table.
	fairMu     sync.Mutex
	fairQueues map[string]bool
	// mark keeps the file beside the database that tells one restored
	// from an older copy (watermark.go).
	mark marker
	// ckpt copies the WAL into the database file beside the writer
	// (checkpoint.go).
	ckpt *checkpointer
	// file is the database file as opened; the writer commits nothing
	// while it is not at its path, or its -wal is gone (filegone.go).
	file fileIdentity
	// fairTenants is, for each queue whose last claim found it
	// contested, how many tenants had ready jobs there (claimJobs' hint
	// of how many jobs to pick first; under fairMu).
	fairTenants map[string]int
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
//
// A file this process cannot write (write-protected, on a read-only
// file system; SQLite then opens it read-only without a word) or whose
// disk is full is refused with an error wrapping jobtype.ErrUnavailable
// and an *UnavailableError that says so: Open makes one harmless write
// to find out, as a file already in WAL mode (say, left by a process
// that was killed) and up to date needs none to open.
func OpenWith(path string, cfg Config) (*Store, error) {
	return open(path, cfg, "")
}

// open is OpenWith; writerParams are added to the writer connection's
// URI parameters (a test opens it with mode=ro, as SQLite itself does a
// file it may not write).
func open(path string, cfg Config, writerParams string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("open sqlite: %q is not a file path", path)
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := walWithoutFile(path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	var wrong *wrongPathError
	if err := createPrivate(path, cfg.Logger); errors.Is(err, errDirectory) {
		return nil, fmt.Errorf("open sqlite: %s %w: give the path of a database file (a new one is created)", path, err)
	} else if errors.As(err, &wrong) {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	} else if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	// The file is this process's alone while it has a Store open on it
	// (openFeed), before anything is read or migrated.
	feed, first, err := openFeed(path)
	if errors.Is(err, fs.ErrPermission) {
		// A file copied in by root (a restored backup, say) and left
		// root's.
		return nil, fmt.Errorf("open sqlite %s: %w: make it, its -wal and -shm files and their directory "+
			"readable and writable by the user this process runs as (uid %d), with chown", path, err, os.Getuid())
	}
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	opened := false
	defer func() {
		if !opened {
			feed.close()
		}
	}()
	// Before SQLite opens the file and replays its WAL: a WAL left on
	// disk says the last server on it did not stop cleanly.
	unclean := first && walLeft(path)
	// mattn/go-sqlite3 sets these pragmas on every new connection, and
	// writerConnector the one it has no parameter for.
	write := sql.OpenDB(writerConnector(dsn(path, fmt.Sprintf(
		"_journal_mode=WAL&_synchronous=FULL&_busy_timeout=%d&_foreign_keys=on&_recursive_triggers=on&_txlock=immediate&_stmt_cache_size=%d",
		busyStep.Milliseconds(), stmtCacheSize)+writerParams)))
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
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, unavailable(err)))
	}
	if err := s.migrate(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, err))
	}
	// SQLite opens a file it may not write read-only without a word, and
	// a file already in WAL mode and up to date needs no write to open:
	// only a write shows it, so one is made before the store is used.
	if err := s.probeOpen(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, err))
	}
	if s.identity, err = readIdentity(ctx, write); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, err))
	}
	if err := s.checkWatermark(ctx, path); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, err))
	}
	if s.file, err = identify(path); err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}

	// The read pool opens after the writer has made the file WAL, which is
	// a property of the file, so the readers need not (and, query-only,
	// could not) set it.
	read, err := sql.Open("sqlite3", dsn(path, fmt.Sprintf(
		"_busy_timeout=%d&_foreign_keys=on&_query_only=1", cfg.LockTimeout.Milliseconds())))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, unavailable(err))
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	if err := read.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, openFailed(path, unavailable(err)))
	}
	s.read = read
	s.writes.probe = s.probeWrite
	s.writes.closing, s.writes.stop = context.WithCancel(context.Background())
	s.feed = feed
	s.sole = first
	if s.ckpt, err = openCheckpointer(path); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open sqlite %s: %w: %w", path, jobtype.ErrUnavailable, err)
	}
	go s.runWriter()
	s.mark.stop, s.mark.done = make(chan struct{}), make(chan struct{})
	go s.keepWatermark()
	opened = true
	if unclean {
		s.logUncleanStop(ctx, path)
	}
	return s, nil
}

// walLeft reports whether the database at path has a write-ahead log
// on disk. The last connection to close a WAL database checkpoints it
// and deletes the log, as serve's Close does on a clean stop; a server
// killed (kill -9, a crash, a power cut) leaves it, to be replayed.
func walLeft(path string) bool {
	fi, err := os.Stat(path + "-wal")
	return err == nil && fi.Size() > 0
}

// walWithoutFile refuses a path where the database file is missing but
// a -wal is not: the file was removed or moved away while a server had it
// open (which refused writes from then on, filegone.go), and its log of
// the latest writes stayed. A new, empty file there would look like a
// restart after a crash, with every job gone.
func walWithoutFile(path string) error {
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) || !walLeft(path) {
		return nil
	}
	return fmt.Errorf("the database file is missing, but %s-wal, the latest writes of the one that was there, is not: "+
		"the file was removed or moved away while a server had it open; put it back (its -wal and -shm stay beside it), "+
		"or, to start an empty database here, remove %s-wal and %s-shm", path, path, path)
}

// logUncleanStop says, at warn, that the last server on the file did not
// stop cleanly, and what became of its work: an operator who finds the
// server restarted (by systemd, say) learns it from the log, with how
// many jobs were left RUNNING and where their fate is told.
func (s *Store) logUncleanStop(ctx context.Context, path string) {
	var running int64
	err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE state = 'running'`).Scan(&running)
	attrs := []any{"db", path}
	if err == nil {
		attrs = append(attrs, "running_jobs", running)
	}
	s.cfg.Logger.Warn("the last server on this file did not stop cleanly (kill -9, a crash or a power cut; or another program, such as sqlite3, had the file open when it stopped): "+
		"every write it acknowledged is kept; the jobs it left RUNNING stay so while their workers heartbeat, and each is queued again or retried at its lease's end otherwise (docs/OPERATING.md)", attrs...)
}

// FileMode is the mode a new database file is created with: readable
// and writable by its owner alone, since it holds every tenant's
// payloads and results. SQLite gives the -wal and -shm files beside it
// the database file's mode, so they are 0600 too (less the umask).
const FileMode fs.FileMode = 0o600

// errDirectory is createPrivate's error for a path that is a directory.
var errDirectory = errors.New("is a directory")

// A wrongPathError is createPrivate's refusal of a path that cannot be a
// database, plain before SQLite opens it (its directory is missing, or
// the file there is not a SQLite database), in a sentence that says what
// to do: where the error of the open would name the path at each layer.
// A missing directory is still jobtype.ErrUnavailable, as it was (a
// volume not mounted yet may bring it); a file that is not a database is
// not.
type wrongPathError struct {
	reason      string
	unavailable bool
}

func (e *wrongPathError) Error() string { return e.reason }

func (e *wrongPathError) Unwrap() error {
	if e.unavailable {
		return jobtype.ErrUnavailable
	}
	return nil
}

// sqliteHeader is how every SQLite database file begins.
const sqliteHeader = "SQLite format 3\x00"

// isSQLiteFile reports whether the file at path, info, may be a SQLite
// database: empty (SQLite makes it one), or beginning as one does. A
// file it cannot read is left to SQLite to explain.
func isSQLiteFile(path string, info fs.FileInfo) bool {
	if !info.Mode().IsRegular() || info.Size() == 0 {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return true
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	return string(head[:n]) == sqliteHeader
}

// shellWord is s as one word of a shell's command line: as it is when
// it has no character a shell reads otherwise, else in single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// createPrivate creates the database file at path, empty, with FileMode
// if it does not exist, before SQLite opens it (SQLite would create it
// 0644). An existing file keeps its mode: it is the operator's; one that
// others may read is logged at warn, with what to do.
func createPrivate(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	if err == nil {
		return f.Close()
	}
	dir := filepath.Dir(path)
	switch {
	case errors.Is(err, syscall.EISDIR): // "dir/"
		return errDirectory
	case errors.Is(err, fs.ErrNotExist):
		return &wrongPathError{fmt.Sprintf("its directory %s does not exist: create it first (mkdir -p %s)", dir, shellWord(dir)), true}
	case errors.Is(err, syscall.ENOTDIR):
		return &wrongPathError{reason: fmt.Sprintf("%s is a file, not a directory: give a path in a directory", dir)}
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	info, err := os.Stat(path)
	if err == nil && info.IsDir() {
		return errDirectory
	}
	if err == nil && !isSQLiteFile(path, info) {
		return &wrongPathError{reason: "the file is not a SQLite database (it does not begin as one does): " +
			"give the path of a jobwatch database, or of a file that does not exist yet to make a new one"}
	}
	if err == nil && info.Mode().Perm()&0o077 != 0 {
		log.Warn("the database file may be read by other users: it holds every job's payload and result; "+
			"chmod 600 it and its -wal and -shm files", "path", path, "mode", fmt.Sprintf("%#o", info.Mode().Perm()))
	}
	return nil
}

// walSizeLimit is the size, in bytes, the -wal file is cut back to: the
// backstop's 16,384 pages of 4 KiB, which a busy server reaches anyway.
const walSizeLimit = walBackstopPages * 4096

// writerConnector opens the writer's connections with temp_store =
// MEMORY, which keeps the statement journal (the undo log of each write's
// SAVEPOINT and of each statement) in memory. By default it spills to a
// temporary file past 64 KiB, and a batch of writes then paid two pwrite
// calls for every page it changed, most of the writer's time. It holds
// only what a rollback of the current write would need: it is no part of
// durability, which is the WAL's. And with wal_autocheckpoint =
// walBackstopPages: the checkpointer copies the WAL into the database
// file beside the writer (checkpoint.go). And with journal_size_limit =
// walSizeLimit: SQLite keeps the -wal file at the largest size it ever
// reached (a burst of writes, or a long read such as a backup, that kept
// it from starting over grew it past the backstop); with the limit, the
// first commit after the WAL starts over cuts the file back to it.
func writerConnector(dsn string) driver.Connector {
	return &connector{dsn: dsn, driver: &sqlite3.SQLiteDriver{
		ConnectHook: func(c *sqlite3.SQLiteConn) error {
			_, err := c.Exec(fmt.Sprintf("PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = %d; PRAGMA journal_size_limit = %d",
				walBackstopPages, walSizeLimit), nil)
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
	s.writes.close()
	<-s.w.stopped
	s.mark.stopped.Do(func() { close(s.mark.stop) })
	<-s.mark.done
	// What was written to a file gone from its path is in that file
	// alone, and lost with it if it was removed: said once more, last.
	if err := s.file.check(); err != nil {
		s.cfg.Logger.Error("closing a database file that is gone from its path", "db", s.file.path, "err", err)
	}
	err := errors.Join(s.ckpt.close(), s.read.Close(), s.write.Close())
	// Last: the feed's release closes a descriptor of the file, which
	// drops every POSIX lock this process holds on it, SQLite's too.
	s.feed.close()
	return err
}

// ReadConns is how many callers' reads of jobs and logs the engine lets
// run at once (jobs.WithReader): one per connection of the read pool.
func (s *Store) ReadConns() int { return readConns }

// SoleServer reports whether no other Store had the file open when this
// one opened it: the lock Open takes on the file keeps other processes
// out while it is open, so then every lease on a RUNNING job from before
// was handed out by a process that has stopped (jobs.Engine gives such a
// job back when its worker never answered). A second Store of one
// process on the file (tests' replicas) is not sole.
func (s *Store) SoleServer() bool { return s.sole }

// classify wraps the errors that mean "the database cannot be used right
// now" (locked by another process beyond the busy timeout, unreadable,
// full, read-only) with jobtype.ErrUnavailable; nothing was written in
// those cases. A full disk and a read-only file also carry their cause in
// a caller's words (UnavailableError). An error that already wraps
// jobtype.ErrUnavailable is returned as it is.
func classify(err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) || errors.Is(err, jobtype.ErrUnavailable) {
		return err
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrCantOpen, sqlite3.ErrIoErr,
		sqlite3.ErrFull, sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrPerm, sqlite3.ErrReadonly:
		return &UnavailableError{Cause: causeOf(se), err: fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)}
	}
	return err
}

// unavailable is classify for an error that stops the file from being
// opened at all: one SQLite does not call a failure of the database (or
// no SQLite error) is jobtype.ErrUnavailable too.
func unavailable(err error) error {
	if err = classify(err); errors.Is(err, jobtype.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)
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
