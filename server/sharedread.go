package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
)

// sharedRead is a read over every job (a count by state, each queue's
// depth, the tenants' depths) that many callers share, so that its cost
// does not grow with the callers: /metrics' scrapes (metrics.go) and
// ListQueues (queueservice.go).
//
// A caller gets the last value while it is fresh: the read began after
// the caller arrived; or, with maxAge set, no job changed since the read
// began (Engine.Changes: this engine's changes and the changes of other
// replicas it hears) and it is younger than maxAge (for what the engine
// does not hear: retention's deletes, a notification a replica lost).
// Otherwise the caller reads again, and callers who arrive meanwhile
// wait for that read and share it (never two at once). Two reads are at
// least minGap apart (a caller in between waits for the next, so what it
// gets is never older than its own start). With reuse set, a value also
// stays fresh for reuse(took) after its read began, took being how long
// that read took, though jobs changed: so a read whose cost grows with
// the jobs (a second at millions) runs at most once per that gap however
// often callers ask, and what they get is that much older.
type sharedRead[T any] struct {
	engine *jobs.Engine
	log    *slog.Logger
	what   string // the read, as the log names it
	read   func(context.Context) (T, error)
	maxAge time.Duration
	minGap time.Duration
	reuse  func(took time.Duration) time.Duration

	mu       sync.Mutex
	value    T
	have     bool          // a read has succeeded
	readAt   time.Time     // when the last good read started
	took     time.Duration // how long it took
	seq      int64         // Engine.Changes() when it started
	tried    time.Time     // when the last read, good or not, started
	err      error         // the last read's error; nil if it succeeded
	counting chan struct{} // not nil while a read runs; closed at its end
}

// get returns the value and when it was read, reading again first when
// it is stale (see sharedRead). ok is false when no read has ever
// succeeded. err is the error of the read this call waited for, if it
// failed, or ctx's cause if ctx ended first; the value is then the last
// good one. A read's failure is logged once per read. get waits no
// longer than ctx lets it: a read it began goes on without it (bounded
// by jobCountTimeout), for the callers after it.
func (c *sharedRead[T]) get(ctx context.Context) (value T, at time.Time, ok bool, err error) {
	arrived := time.Now()
	for {
		c.mu.Lock()
		running := c.counting
		if running == nil {
			if c.fresh(arrived) {
				defer c.mu.Unlock()
				return c.value, c.readAt, true, nil
			}
			running = make(chan struct{})
			c.counting = running
			go c.readAgain(c.minGap-time.Since(c.tried), running)
		}
		c.mu.Unlock()
		select {
		case <-running: // bounded by minGap + jobCountTimeout
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.value, c.readAt, c.have, context.Cause(ctx)
		}
		c.mu.Lock()
		if !c.tried.Before(arrived) && c.err != nil {
			// The read waited for failed: say so, rather than reading
			// again for each caller who waited.
			defer c.mu.Unlock()
			return c.value, c.readAt, c.have, c.err
		}
		c.mu.Unlock()
	}
}

// readAgain reads after wait (the rest of minGap), keeps the value if
// the read succeeded, and closes done.
func (c *sharedRead[T]) readAgain(wait time.Duration, done chan struct{}) {
	if wait > 0 {
		time.Sleep(wait)
	}
	start, seq := time.Now(), c.engine.Changes()
	ctx, cancel := context.WithTimeout(context.Background(), jobCountTimeout)
	v, err := c.read(ctx)
	cancel()

	c.mu.Lock()
	defer c.mu.Unlock()
	c.tried, c.err = start, err
	if err != nil {
		c.log.Warn(c.what+"; the last read stands", "read_at", c.readAt, "err", err)
	} else {
		c.value, c.have, c.readAt, c.took, c.seq = v, true, start, time.Since(start), seq
	}
	c.counting = nil
	close(done)
}

// fresh reports whether the last value may answer a caller who arrived
// at arrived (see sharedRead). c.mu is held.
func (c *sharedRead[T]) fresh(arrived time.Time) bool {
	if !c.have {
		return false
	}
	age := time.Since(c.readAt)
	return !c.readAt.Before(arrived) || // began after the caller arrived
		c.maxAge > 0 && c.engine.Changes() == c.seq && age < c.maxAge ||
		c.reuse != nil && age < c.reuse(c.took)
}

// lastRead is a scrape's read of a small table (the paused queues, the
// rate windows, the schedules' state) that answers with the last good
// value when the database does not answer within scrapeWait: as it was
// then (no pause or schedule run can change while the database is away,
// and a rate window's count can only fall). Each scrape reads again;
// the read is cheap, a row a queue or schedule.
type lastRead[T any] struct {
	what string // the read, as the log names it
	read func(context.Context) (T, error)
	log  *slog.Logger

	mu      sync.Mutex
	value   T
	have    bool      // a read has succeeded
	failing time.Time // when reads began to fail; zero while they succeed
}

// get reads, waiting at most scrapeWait, and returns the value read, or
// the last good one; err only when no read has ever succeeded. The first
// failure of a run of them is logged, and the first success after it,
// not every scrape's.
func (r *lastRead[T]) get() (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeWait)
	defer cancel()
	v, err := r.read(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		if !r.failing.IsZero() {
			r.log.Info(r.what+" succeeds again", "failing_for", time.Since(r.failing).Round(time.Millisecond))
			r.failing = time.Time{}
		}
		r.value, r.have = v, true
		return v, nil
	}
	if r.failing.IsZero() {
		r.failing = time.Now()
		if r.have {
			r.log.Warn(r.what+"; the last read stands until one succeeds", "err", err)
		} else {
			r.log.Warn(r.what+"; no series until a read succeeds", "err", err)
		}
	}
	if !r.have {
		var zero T
		return zero, err
	}
	return r.value, nil
}
