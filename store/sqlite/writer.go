package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Group commit. Every write is a request to one writer goroutine, which
// uses the writer connection. It takes every request waiting (at most
// maxBatchWrites), opens one BEGIN IMMEDIATE, runs each request's function
// so that a write that fails its own checks changes nothing and fails
// nothing else (inside a SAVEPOINT of its own, rolled back to when the
// function fails; or, for a function whose one change is its last
// statement, by SQLite undoing a failed statement), commits once, with one
// fsync, and only then answers every caller.
// Nothing waits for company: requests that arrive while a batch runs form
// the next one, so a lone write commits at once and the batch grows only
// with the load. The requests of a batch run one after another in their
// order of arrival, in one transaction, so each sees the ones before it:
// the same serial order as one transaction per write.
//
// A request is queued, then taken by the writer just before its function
// runs, or abandoned by its caller (gone, or past its lock deadline)
// while still queued: whichever side moves it out of queued first wins, so
// a request either runs once and is answered, or never runs.

// maxBatchWrites bounds the writes that share one transaction.
const maxBatchWrites = 256

// maxBatchTime bounds how long a batch takes new writes after it began: a
// batch whose functions have run this long commits, and the writes still
// waiting start the next one. It keeps a slow write (a retention batch, a
// claim over many queues) from holding the answers of many others.
const maxBatchTime = 20 * time.Millisecond

// errClosed answers writes made after Close, or queued when it came.
var errClosed = fmt.Errorf("%w: the store is closed", jobtype.ErrUnavailable)

const (
	writeQueued    int32 = iota // waiting for its turn
	writeTaken                  // the writer runs it; its caller waits for the answer
	writeAbandoned              // its caller left first; the writer skips it
)

// writeRequest is one call of writeTx or writeStatement.
type writeRequest struct {
	ctx  context.Context
	what string
	fn   func(ctx context.Context, tx *sql.Tx) error
	// statement: fn changes the database with at most one statement,
	// its last, and asks callerLeft just before it (writeStatement).
	statement bool
	state     atomic.Int32
	done      chan struct{} // closed by the writer once err, panicked and wrote are set
	// probe: the write is health's probe (probeWrite), whose refusals
	// are not callers' writes refused, and are not counted.
	probe bool

	err      error
	panicked any  // what fn panicked with, to panic again in the caller
	wrote    bool // its batch committed and changed rows (for health)
	released bool // fn succeeded and its savepoint joined the transaction
}

// writer is the queue between writeTx and the writer goroutine.
type writer struct {
	mu     sync.Mutex
	queue  []*writeRequest
	closed bool

	wake    chan struct{} // has a value when the queue may be non-empty
	stopped chan struct{} // closed when the writer goroutine has returned

	// lockHeld: the writer is waiting for another process's write lock;
	// lastBusy is the busy error it got. They tell a request that gives up
	// while queued why it waited.
	lockHeld atomic.Bool
	lastBusy atomic.Pointer[error]

	// commits and batched count committed transactions and the writes
	// they committed, for tests.
	commits atomic.Int64
	batched atomic.Int64
	// beforeTake, if set, runs each time the writer is about to take a
	// batch from the queue; a test blocks in it so that requests pile up
	// into one batch.
	beforeTake atomic.Pointer[func()]
	// batchTime is maxBatchTime; a field so that a test can change it.
	batchTime time.Duration

	// Only the writer goroutine touches these. change is the change
	// sequence's value the current batch took; changes are the changes
	// its released writes made, collected only while anyone listens
	// (collect), and delivered once it commits.
	change  int64
	collect bool
	changes []store.Change
}

func newWriter() *writer {
	return &writer{wake: make(chan struct{}, 1), stopped: make(chan struct{}), batchTime: maxBatchTime}
}

// enqueue adds r to the queue; false if the store is closed.
func (w *writer) enqueue(r *writeRequest) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// queued is how many requests wait in the queue (some perhaps abandoned).
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// take returns the next batch: carry (the requests a batch left over)
// first, then the queue's, at most maxBatchWrites that are still queued.
// It waits for one; closed reports that Close was called, and then the
// batch is every request left, to be refused.
func (w *writer) take(carry []*writeRequest) (batch []*writeRequest, closed bool) {
	batch = make([]*writeRequest, 0, min(maxBatchWrites, len(carry)+8))
	for _, r := range carry {
		if r.state.Load() == writeQueued {
			batch = append(batch, r)
		}
	}
	for {
		if f := w.beforeTake.Load(); f != nil {
			(*f)()
		}
		w.mu.Lock()
		if w.closed {
			batch = append(batch, w.queue...)
			w.queue = nil
			w.mu.Unlock()
			return batch, true
		}
		n := 0
		for _, r := range w.queue {
			if len(batch) == maxBatchWrites {
				break
			}
			n++
			if r.state.Load() == writeQueued {
				batch = append(batch, r)
			}
		}
		rest := copy(w.queue, w.queue[n:])
		clear(w.queue[rest:])
		w.queue = w.queue[:rest]
		w.mu.Unlock()
		if len(batch) > 0 {
			return batch, false
		}
		<-w.wake
	}
}

// close refuses new requests and wakes the writer to refuse the queued.
func (w *writer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// lockWaitError says why a request gave up while queued; callers: at
// its caller's deadline, not the lock timeout.
func (w *writer) lockWaitError(ctx context.Context, start time.Time, callers bool) error {
	if w.lockHeld.Load() {
		var busy error = errors.New("database is locked")
		if p := w.lastBusy.Load(); p != nil {
			busy = *p
		}
		return lockWaitError(ctx, start, callers, "another process holds the write lock", busy)
	}
	return lockWaitError(ctx, start, callers, "other writes of this process held the database", errors.New("the lock timeout passed"))
}

// writeTx runs fn in the writer's transaction (see Group commit above) and
// returns once that transaction has committed, or fn failed, or the write
// gave up. fn's own errors come back as they are, and a panic in fn
// panics again here, in the caller's goroutine.
//
// fn's statements run on a context the caller cannot cancel: a statement
// interrupted half way would leave the outcome to chance. Whether the
// caller is still there is asked once, when fn has returned: gone, its
// savepoint is rolled back and nothing is written; there, its changes join
// the batch and commit with it even if the caller leaves meanwhile. fn
// must return or panic (not call runtime.Goexit, as t.FailNow does): it
// runs on the writer goroutine.
// While queued, the write waits at most its lock deadline (lockDeadline),
// then gives up with jobtype.ErrUnavailable, or with the context's error if
// the caller left or its deadline was near: a caller's own deadline is no
// store failure, and is not counted as one (health).
func (s *Store) writeTx(ctx context.Context, what string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.submitWrite(ctx, what, fn, false)
}

// writeStatement is writeTx for a write whose fn changes the database
// with at most one statement, its last, having asked callerLeft just
// before it. A statement that fails changes nothing (SQLite undoes it
// alone), so such a write needs no savepoint of its own: SAVEPOINT and
// RELEASE added about 11 µs of CPU to a 25 µs insert. If the caller
// leaves after callerLeft answered, the write commits.
func (s *Store) writeStatement(ctx context.Context, what string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.submitWrite(ctx, what, fn, true)
}

// callerKey holds, in the context a write's fn runs with, its caller's
// own context.
type callerKey struct{}

// callerLeft returns the error of the context of the caller of the write
// whose fn runs with ctx, if that caller has left.
func callerLeft(ctx context.Context) error {
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c.Err()
	}
	return nil
}

// leftError is what a write whose caller left before the commit returns.
func leftError(what string, err error) error {
	return fmt.Errorf("%s: the caller left before the commit, nothing was written: %w", what, err)
}

// submitWrite queues the write and waits for its answer.
func (s *Store) submitWrite(ctx context.Context, what string, fn func(ctx context.Context, tx *sql.Tx) error, statement bool) error {
	return s.submit(&writeRequest{ctx: ctx, what: what, fn: fn, statement: statement, done: make(chan struct{})})
}

// submit queues r and waits for its answer.
func (s *Store) submit(r *writeRequest) error {
	ctx, what := r.ctx, r.what
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: wait for the database: %w", what, err)
	}
	start := time.Now()
	if !s.w.enqueue(r) {
		return fmt.Errorf("%s: %w", what, errClosed)
	}
	deadline, callers := s.lockDeadline(ctx)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-r.done:
		return s.answer(r)
	case <-ctx.Done():
	case <-timer.C:
	}
	if r.state.CompareAndSwap(writeQueued, writeAbandoned) {
		err := fmt.Errorf("%s: %w", what, s.w.lockWaitError(ctx, start, callers))
		if !r.probe {
			s.writes.observe(err, false)
		}
		return err
	}
	<-r.done // the writer has it: its answer comes after its commit
	return s.answer(r)
}

// answer returns the writer's verdict on r to its caller.
func (s *Store) answer(r *writeRequest) error {
	if r.panicked != nil {
		panic(r.panicked)
	}
	if !errors.Is(r.err, errClosed) && (!r.probe || r.err == nil) {
		s.writes.observe(r.err, r.wrote)
	}
	return r.err
}

// runWriter is the writer goroutine: batch after batch until Close.
func (s *Store) runWriter() {
	defer close(s.w.stopped)
	var carry []*writeRequest
	for {
		batch, closed := s.w.take(carry)
		if closed {
			for _, r := range batch {
				if r.state.CompareAndSwap(writeQueued, writeTaken) {
					r.err = fmt.Errorf("%s: %w", r.what, errClosed)
					close(r.done)
				}
			}
			return
		}
		carry = s.runBatch(batch)
	}
}

// runBatch runs batch in one transaction and answers every request it
// took. It returns the requests it did not get to (still queued), which
// go first in the next batch.
func (s *Store) runBatch(batch []*writeRequest) (carry []*writeRequest) {
	ctx := context.Background()
	conn, err := s.write.Conn(ctx)
	if err != nil {
		return s.refuse(batch, fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err))
	}
	defer conn.Close()
	tx, err := s.beginBatch(ctx, conn, batch)
	if err != nil {
		return s.refuse(batch, err)
	}
	if tx == nil {
		return batch // nobody is waiting any more, or the store is closing
	}
	if err := tx.QueryRowContext(ctx, "UPDATE changes SET seq = seq + 1 WHERE id = 1 RETURNING seq").Scan(&s.w.change); err != nil {
		_ = tx.Rollback()
		return s.refuse(batch, fmt.Errorf("take the next change sequence value: %w", classify(err)))
	}
	s.w.collect, s.w.changes = s.feed.listening(), s.w.changes[:0]

	measure := s.writes.isFailing()
	before := int64(-1)
	if measure {
		before = totalChanges(ctx, tx)
	}
	var (
		taken    []*writeRequest
		released int
		lone     = len(batch) == 1
		began    = time.Now()
	)
	for i, r := range batch {
		if released > 0 && time.Since(began) > s.w.batchTime {
			carry = batch[i:]
			break
		}
		if !r.state.CompareAndSwap(writeQueued, writeTaken) {
			continue
		}
		taken = append(taken, r)
		if err := s.runOne(ctx, conn, tx, r, lone); err != nil {
			// The transaction is gone with the writes released into it.
			_ = tx.Rollback()
			for _, t := range taken {
				if t.released {
					t.err, t.released = fmt.Errorf("%s: %w", t.what, err), false
				}
			}
			s.reply(taken)
			return batch[i+1:]
		}
		if r.released {
			released++
		}
	}
	if released == 0 {
		_ = tx.Rollback() // nothing to write: no fsync
		s.reply(taken)
		return carry
	}
	err = s.drainReleases(ctx, tx)
	if err == nil {
		err = s.file.check()
	}
	if err != nil {
		_ = tx.Rollback()
		for _, t := range taken {
			if t.released {
				t.err, t.released = fmt.Errorf("%s: %w", t.what, err), false
			}
		}
		s.reply(taken)
		return carry
	}
	changed := measure && totalChanges(ctx, tx) > before
	if err := tx.Commit(); err != nil {
		// mattn/go-sqlite3 rolls back a transaction whose COMMIT failed
		// (SQLITE_BUSY, I/O error), so every write in it is undone.
		for _, t := range taken {
			if t.panicked == nil {
				t.err = fmt.Errorf("%s: commit: %w", t.what, classify(err))
			}
		}
		s.reply(taken)
		return carry
	}
	s.ckpt.committed(s.w.commits.Add(1))
	s.w.batched.Add(int64(released))
	s.feed.deliver(s, s.w.changes)
	for _, t := range taken {
		t.wrote = changed
	}
	s.reply(taken)
	return carry
}

// drainReleases empties job_releases, where jobs_dependency_ended notes
// the jobs it touched in this batch (schema.go, migration 15), into the
// batch's changes, marked Released: the writes that ended their
// dependencies do not know of them. Deleting and reading the table,
// empty but for batches that ended a dependency, costs a statement. The
// jobs are read by their ids as one JSON array, not one variable each:
// a cascade may release more jobs than a statement takes variables
// (32,766), and a cancel of a job with 33,000 jobs after it failed.
func (s *Store) drainReleases(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "DELETE FROM job_releases RETURNING job_id")
	if err != nil {
		return fmt.Errorf("read the jobs dependencies released: %w", classify(err))
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("read the jobs dependencies released: %w", classify(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read the jobs dependencies released: %w", classify(err))
	}
	if len(ids) == 0 || !s.w.collect {
		return nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("read the jobs dependencies released: %w", err)
	}
	rows, err = tx.QueryContext(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id IN (SELECT value FROM json_each(?))", string(list))
	if err != nil {
		return fmt.Errorf("read the jobs dependencies released: %w", classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		j, _, err := scanJob(rows)
		if err != nil {
			return fmt.Errorf("read the jobs dependencies released: %w", classify(err))
		}
		s.w.changes = append(s.w.changes, store.Change{JobID: j.ID, Version: j.Version, Tenant: j.Tenant,
			Kind: j.Kind, Queue: j.Queue, State: j.State, RunAt: j.RunAt, Released: true})
	}
	return rows.Err()
}

// runOne runs r's function in tx: inside a savepoint, unless r is alone
// in its batch (then the whole transaction is its savepoint) or its
// function is one statement (writeStatement). It returns an error only
// when the transaction itself is lost (SQLite rolls back the whole
// transaction on some I/O and full-disk errors), which undoes the writes
// before r in the batch too.
func (s *Store) runOne(ctx context.Context, conn *sql.Conn, tx *sql.Tx, r *writeRequest, lone bool) error {
	savepoint := !lone && !r.statement
	if savepoint {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT w"); err != nil {
			r.err = fmt.Errorf("%s: %w", r.what, classify(err))
			return lostTx(err)
		}
	}
	fnCtx := context.WithValue(context.WithoutCancel(r.ctx), callerKey{}, r.ctx)
	mark := len(s.w.changes)
	defer func() {
		if !r.released {
			s.w.changes = s.w.changes[:mark] // undone, or never made
		}
	}()
	r.panicked, r.err = call(fnCtx, tx, r.fn)
	if r.err == nil && r.panicked == nil && !r.statement {
		if err := callerLeft(fnCtx); err != nil {
			r.err = leftError(r.what, err)
		}
	}
	if r.err == nil && r.panicked == nil {
		r.released = true
		if !savepoint {
			return nil
		}
		if _, err := tx.ExecContext(ctx, "RELEASE w"); err != nil {
			r.err, r.released = fmt.Errorf("%s: %w", r.what, classify(err)), false
			return lostTx(err)
		}
		return nil
	}
	switch {
	case lone:
		return nil // nothing released: runBatch rolls the transaction back
	case !savepoint:
		// The failed statement undid itself, unless its failure (a full
		// disk, say) made SQLite roll back the whole transaction. Errors
		// of the write's own checks (not found, a conflict, nothing to
		// claim) come from no failed statement.
		var se sqlite3.Error
		if !errors.As(r.err, &se) || inTx(conn) {
			return nil
		}
		return lostTx(r.err)
	}
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO w; RELEASE w"); err != nil {
		// The savepoint is gone with the transaction.
		cause := r.err
		if !errors.Is(cause, jobtype.ErrUnavailable) {
			cause = classify(err)
		}
		return lostTx(cause)
	}
	return nil
}

// inTx reports whether conn is still in a transaction.
func inTx(conn *sql.Conn) bool {
	open := false
	_ = conn.Raw(func(c any) error {
		if sc, ok := c.(*sqlite3.SQLiteConn); ok {
			open = !sc.AutoCommit()
		}
		return nil
	})
	return open
}

// lostTx is what the writes of a batch whose transaction was rolled back
// under them hear.
func lostTx(cause error) error {
	if errors.Is(cause, jobtype.ErrUnavailable) {
		return fmt.Errorf("the transaction shared with other writes was rolled back: %w", cause)
	}
	return fmt.Errorf("%w: the transaction shared with other writes was rolled back: %w", jobtype.ErrUnavailable, cause)
}

// call runs fn, turning a panic into a value to hand to the caller.
func call(ctx context.Context, tx *sql.Tx, fn func(context.Context, *sql.Tx) error) (panicked any, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return nil, fn(ctx, tx)
}

// refuse answers every request of batch still queued with err (a batch
// that got no transaction) and carries none.
func (s *Store) refuse(batch []*writeRequest, err error) []*writeRequest {
	for _, r := range batch {
		if r.state.CompareAndSwap(writeQueued, writeTaken) {
			r.err = fmt.Errorf("%s: %w", r.what, err)
			close(r.done)
		}
	}
	return nil
}

// reply answers the requests the writer took.
func (s *Store) reply(taken []*writeRequest) {
	for _, r := range taken {
		close(r.done)
	}
}

// beginBatch opens an immediate transaction on conn for batch. Another
// process may hold the file's write lock: SQLite's busy handler waits one
// busyStep at a time, and between steps the writer looks whether any
// request of batch still waits (each gives up at its own lock deadline)
// and whether the store is closing; if not, it returns no transaction and
// no error.
func (s *Store) beginBatch(ctx context.Context, conn *sql.Conn, batch []*writeRequest) (*sql.Tx, error) {
	defer s.w.lockHeld.Store(false)
	for {
		attempt := time.Now()
		tx, err := conn.BeginTx(ctx, nil)
		if err == nil {
			return tx, nil
		}
		if !isBusy(err) {
			return nil, fmt.Errorf("begin: %w", classify(err))
		}
		s.w.lastBusy.Store(&err)
		s.w.lockHeld.Store(true)
		// SQLite waited up to one busyStep. Some busy answers come at
		// once, without its busy handler; pause so as not to spin.
		if time.Since(attempt) < busyStep/2 {
			time.Sleep(busyStep)
		}
		if !anyQueued(batch) || s.w.isClosed() {
			return nil, nil
		}
	}
}

func (w *writer) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

func anyQueued(batch []*writeRequest) bool {
	for _, r := range batch {
		if r.state.Load() == writeQueued {
			return true
		}
	}
	return false
}
