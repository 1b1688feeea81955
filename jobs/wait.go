package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jobwatch/jobwatch/internal/shallow"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/watch"
)

// Wait subscribes to the job, then reads it: a terminal job returns at
// once, a PENDING one ErrNotStarted, an unknown one ErrNotFound. Otherwise
// it waits for a terminal state until the deadline (zero: none), ctx's end
// or Shutdown, and returns the latest state (nil error) in each of those
// cases. The job comes whole (payload and result), except at ctx's end,
// when nobody reads it; at the deadline or Shutdown the wait reads it
// again (a change another replica committed may not have reached this
// one yet, and a wait that saw no change kept no payload), and returns
// that read's error if it fails, but for an unreachable database or one
// that does not answer within rereadBound.
//
// The deadline is an instant on the monotonic clock: time.Now().Add(cap),
// or a context's deadline. It is computed once, by the caller, and waited
// for with a timer, so a step of the wall clock while the call is parked
// moves it neither way; the engine's own clock (Config.Now) is for
// stamps and is never compared with it.
//
// Subscribing first is what makes the wait exact: a change committed
// before the read is in the read, and one committed after it is published
// after the subscription opened, so the cell has it. The read goes to the
// store, not the hub, so a job that ended long ago (its cell freed) is
// still answered at once.
func (e *Engine) Wait(ctx context.Context, id string, deadline time.Time) (jobtype.Job, error) {
	snap, err := e.WaitSnapshot(ctx, id, deadline)
	if err != nil {
		return jobtype.Job{}, err
	}
	return snap.Job, nil
}

// WaitSnapshot is Wait returning the snapshot itself: a Wait woken by a
// publish returns the very Snapshot that publish handed to every waiter
// and watcher of the job, so what the caller derives from it through
// Memo is built once for all of them. The snapshot must not be modified.
func (e *Engine) WaitSnapshot(ctx context.Context, id string, deadline time.Time) (*Snapshot, error) {
	if err := validID("job_id", id); err != nil {
		return nil, err
	}
	sub := e.hub.Subscribe(id)
	defer sub.Close()

	first, err := e.readSnapshot(ctx, id)
	if err != nil {
		return nil, wrap("wait for", id, err)
	}
	if first.Job.State == jobtype.Pending {
		return nil, ErrNotStarted
	}
	if first.Job.State.Terminal() {
		return first, nil
	}
	// While parked the wait keeps its job without payload and result, so
	// a parked call costs as little for a job of 256 KiB as for one of
	// ten bytes: MaxParkedCalls waits on large jobs would otherwise hold
	// gigabytes, one copy each. Snapshots from the cell are shared by
	// every subscriber, and whole; a wait that ends without one reads the
	// job again (whole).
	first.Job.Payload, first.Job.Result = nil, nil
	snap, reread := e.waitParked(ctx, sub, first, deadline)
	if snap.Gone {
		return nil, wrap("wait for", id, jobtype.ErrNotFound) // deleted meanwhile
	}
	if reread {
		whole, err := e.rereadSnapshot(ctx, id)
		switch {
		case err == nil:
			snap = whole
		case errors.Is(err, jobtype.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
			// The database cannot be read now (an outage, a hung
			// server, or the server shutting down beside one): the
			// wait still ends OK at its cap, with the latest state
			// this server saw, whose payload it did not keep.
		default:
			return nil, wrap("wait for", id, err)
		}
	}
	return snap, nil
}

// detached is the context of a parked call's read before it parks: ctx's
// values and deadline, without ctx's cancellation, which the SQLite
// driver would register a context.AfterFunc with, in a map that stays
// with ctx while the call is parked. The deadline stays, so that a read
// of a database that hangs ends at the caller's deadline, as a GetJob's
// does, and the call with it. Call cancel when the read is done.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), d)
	}
	return context.WithoutCancel(ctx), func() {}
}

// rereadTimeout bounds the read a wait makes as it ends at its cap or at
// Shutdown, so that a database that hangs holds no answer.
const rereadTimeout = 2 * time.Second

// rereadBound is how long the read a wait makes as it ends may take: at
// most rereadTimeout, and at most half the time left before ctx's own
// deadline (the caller's), the other half left for the answer to reach
// the caller; a wait ends that margin before it (server.Config's
// DeadlineMargin), and a database that hangs must not eat it.
func rereadBound(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return min(rereadTimeout, time.Until(d)/2)
	}
	return rereadTimeout
}

// rereadSnapshot is readSnapshot bounded by rereadBound. The waits of
// one job that end at once share one read, bounded by rereadTimeout
// (Shutdown ends every parked wait: 5,000 waits of one job made 5,000
// reads of it, and the last answer came seconds after the signal); each
// waits for it at most its own bound. After Shutdown a read is kept for
// rereadTimeout, so that waits which come to it once it is done (their
// goroutines run one after another on a busy machine) take it too: the
// server is closing, and the latest state it read is its answer. The
// snapshot is shared and must not be modified.
func (e *Engine) rereadSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	closing := e.shuttingDown()
	if kept, ok := e.shutdownReads.Load(id); ok && closing {
		return kept.(*Snapshot), nil
	}
	limit := rereadBound(ctx)
	read := e.rereads.DoChan(id, func() (any, error) {
		return shallow.Call(func() (*Snapshot, error) {
			bounded, cancel := context.WithTimeout(context.WithoutCancel(ctx), rereadTimeout)
			defer cancel()
			j, err := e.store.GetJob(bounded, id)
			if err != nil {
				return nil, err
			}
			snap := &Snapshot{Job: j, shared: true} // perhaps handed to many waits
			if closing {
				e.shutdownReads.Store(id, snap)
				time.AfterFunc(rereadTimeout, func() { e.shutdownReads.CompareAndDelete(id, snap) })
			}
			return snap, nil
		})
	})
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case r := <-read:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*Snapshot), nil
	case <-t.C:
		return nil, context.DeadlineExceeded
	}
}

// readSnapshot reads job id for one call, on a goroutine of its own: the
// read is deep, and the caller's goroutine is about to park (see package
// shallow). It reads under detached(ctx). The read is one row by primary
// key.
func (e *Engine) readSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return shallow.Call(func() (*Snapshot, error) {
		read, cancel := detached(ctx)
		defer cancel()
		j, err := e.store.GetJob(read, id)
		if err != nil {
			return nil, err
		}
		return newSnapshot(j), nil
	})
}

// waitParked waits until the job is terminal, the deadline, ctx's end or
// Shutdown, and returns the newest snapshot it saw (first, the stripped
// read, until the cell has a newer one). reread reports that the wait
// ended at the deadline or Shutdown, so the caller reads the job again,
// whole: what the cell has may be behind the database, where another
// replica's change is committed before this one hears of it.
//
// Its frame holds pointers only, no job: a parked call's goroutine sits
// here, under net/http, connect and the server's middleware, and every
// byte of depth counts against the 8 KiB a parked goroutine's stack can
// stay within.
func (e *Engine) waitParked(ctx context.Context, sub *watch.Subscription[*Snapshot], first *Snapshot, deadline time.Time) (latest *Snapshot, reread bool) {
	timer, stop := e.timerUntil(deadline)
	defer stop()
	latest = first
	woken := false
	for {
		snap, version, changed := sub.Latest()
		if version > latest.Job.Version {
			latest = snap
			if woken {
				e.woke("wait", snap.Job.UpdatedAt)
			}
			if snap.Gone || snap.Job.State.Terminal() {
				return snap, false
			}
		}
		woken = false
		select {
		case <-changed:
			woken = true
		case <-timer:
			return latest, true
		case <-ctx.Done():
			return latest, false // nobody reads it
		case <-e.done:
			return latest, true
		}
	}
}
