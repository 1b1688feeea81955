package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// Checkpoints. A commit appends the pages it changed to the WAL, and a
// checkpoint copies them back into the database file. SQLite's default
// runs one in the committing connection, once the WAL holds 1,000 pages:
// the writer goroutine then spends a commit's time copying, and every
// write queued behind it waits. Here a goroutine of its own, with a
// connection of its own, runs a PASSIVE checkpoint after every
// checkpointEvery commits, beside the writer (on another core). PASSIVE
// never waits for a lock and never blocks the writer or a reader: it
// copies the pages that no reader still needs and leaves the rest for
// the next one. A write that begins once a checkpoint has copied the
// whole WAL starts it again from its beginning.
//
// The writer keeps SQLite's own checkpoint as a backstop, at
// walBackstopPages rather than 1,000. Under a steady stream of writes,
// a write seldom begins just when the checkpointer has caught up, so
// the WAL grows to the backstop, and the writer then runs one in line,
// as it did before, which has little left to copy, and starts the WAL
// over. The WAL is the durability: a commit is acknowledged once its
// pages are there and fsynced (synchronous = FULL), whether or not a
// checkpoint has copied them yet.

// checkpointEvery is how many commits the checkpointer lets pass between
// two checkpoints: a lone write commits with one fsync, not three.
const checkpointEvery = 8

// walBackstopPages is the writer connection's wal_autocheckpoint: the WAL
// length, in pages, past which the writer checkpoints in line.
const walBackstopPages = 16384

// checkpointer runs the background checkpoints of one store.
type checkpointer struct {
	db   *sql.DB
	kick chan struct{} // has a value when a checkpoint is due
	done chan struct{} // closed when run has returned

	// after, if set, is called with the result of each checkpoint
	// (tests).
	after atomic.Pointer[func(walPages, copied int)]

	closeOnce sync.Once
	closeErr  error
}

// openCheckpointer opens the checkpointer's connection to the database
// at path and starts it.
func openCheckpointer(path string) (*checkpointer, error) {
	db, err := sql.Open("sqlite3", dsn(path, "_busy_timeout=0"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	c := &checkpointer{db: db, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c, nil
}

// committed is the writer's note of its commit number n.
func (c *checkpointer) committed(n int64) {
	if n%checkpointEvery != 0 {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default: // one is due already
	}
}

// run checkpoints each time one is due, until close.
func (c *checkpointer) run() {
	defer close(c.done)
	for range c.kick {
		var busy, walPages, copied int
		err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &walPages, &copied)
		if err != nil {
			// Nothing is lost: the pages stay in the WAL for the next
			// checkpoint, or the writer's backstop.
			continue
		}
		if f := c.after.Load(); f != nil {
			(*f)(walPages, copied)
		}
	}
}

// close stops the checkpointer after the checkpoint it is running, and
// closes its connection; again, it does nothing. The writer must have
// stopped committing.
func (c *checkpointer) close() error {
	c.closeOnce.Do(func() {
		close(c.kick)
		<-c.done
		c.closeErr = c.db.Close()
	})
	return c.closeErr
}
