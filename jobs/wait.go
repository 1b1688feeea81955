package jobs

import (
	"context"
	"time"

	"github.com/jobwatch/jobwatch/internal/shallow"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/watch"
)

// Wait subscribes to the job, then reads it: a terminal job returns at
// once, a PENDING one ErrNotStarted, an unknown one ErrNotFound. Otherwise
// it waits for a terminal state until the deadline (zero: none), ctx's end
// or Shutdown, and returns the latest state (nil error) in each of those
// cases. The job comes whole (payload and result), except at ctx's end,
// when nobody reads it; at the deadline or Shutdown a wait that saw no
// change reads it again, and returns that read's error if it fails.
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
func (e *Engine) Wait(ctx context.Context, id string, deadline time.Time) (store.Job, error) {
	var j store.Job
	if err := e.WaitInto(ctx, id, deadline, &j); err != nil {
		return store.Job{}, err
	}
	return j, nil
}

// WaitInto is Wait writing the job into *j, which is not to be read on
// an error. A caller whose goroutine parks in it keeps no copy of the
// job in its own frame: see waitParked.
func (e *Engine) WaitInto(ctx context.Context, id string, deadline time.Time, j *store.Job) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	sub := e.hub.Subscribe(id)
	defer sub.Close()

	// On a goroutine of its own: the read is deep, and this goroutine is
	// about to park (see package shallow). Without ctx's cancellation: the
	// SQLite driver would register a context.AfterFunc with ctx, and the
	// map that holds it stays with ctx while the call is parked. The read
	// is one row by primary key.
	if err := shallow.Do(func() error { return e.readInto(context.WithoutCancel(ctx), id, j) }); err != nil {
		return wrap("wait for", id, err)
	}
	if j.State == store.Pending {
		return ErrNotStarted
	}
	if j.State.Terminal() {
		return nil
	}
	// While parked the wait keeps its job without payload and result, so
	// a parked call costs as little for a job of 256 KiB as for one of
	// ten bytes: MaxParkedCalls waits on large jobs would otherwise hold
	// gigabytes, one copy each. Snapshots from the cell are shared by
	// every subscriber, and whole; a wait that ends without one reads the
	// job again (whole).
	j.Payload, j.Result = nil, nil
	if e.waitParked(ctx, sub, j, deadline) {
		if err := e.readInto(context.WithoutCancel(ctx), id, j); err != nil {
			return wrap("wait for", id, err)
		}
	}
	return nil
}

// readInto reads job id into *j, keeping a copy of the job out of the
// caller's frame (see waitParked).
//
//go:noinline
func (e *Engine) readInto(ctx context.Context, id string, j *store.Job) error {
	again, err := e.store.GetJob(ctx, id)
	if err != nil {
		return err
	}
	*j = again
	return nil
}

// waitParked waits until *j is terminal, the deadline, ctx's end or
// Shutdown, copying each newer snapshot of the cell into *j. It reports
// whether the wait ended at the deadline or Shutdown with *j possibly not
// whole (no snapshot came from the cell since the read), which WaitInto
// then reads again.
//
// Its frame holds no job: a parked call's goroutine sits here, under
// net/http, connect and the server's middleware, and every byte of depth
// counts against the 8 KiB a parked goroutine's stack can stay within.
func (e *Engine) waitParked(ctx context.Context, sub *watch.Subscription[store.Job], j *store.Job, deadline time.Time) (reread bool) {
	timer, stop := e.timerUntil(deadline)
	defer stop()
	stripped, woken := true, false
	for {
		changed, newer := takeNewer(sub, j)
		if newer {
			stripped = false
			if woken {
				e.woke("wait", j.UpdatedAt)
			}
		}
		if j.State.Terminal() {
			return false
		}
		woken = false
		select {
		case <-changed:
			woken = true
		case <-timer:
			return stripped
		case <-ctx.Done():
			return false // nobody reads it
		case <-e.done:
			return stripped
		}
	}
}

// takeNewer copies the cell's value into *j when its version is above
// j's, and returns the channel that is closed at the next change.
//
//go:noinline
func takeNewer(sub *watch.Subscription[store.Job], j *store.Job) (changed <-chan struct{}, newer bool) {
	latest, version, changed := sub.Latest()
	if version > j.Version {
		*j = latest
		return changed, true
	}
	return changed, false
}
