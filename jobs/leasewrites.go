package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// The writes of workers holding leases (heartbeats, completions,
// failures) are combined: whoever calls while a batch is being written
// waits, and the next batch carries every write that queued meanwhile,
// in one store.WriteLeases, one statement on PostgreSQL, so a job's
// completion costs a fraction of a round trip and a commit when many
// workers report at once (River's completer batches the same way). A
// lone write goes at once: nothing waits for a batch to fill.
//
// One batch is in flight at a time. Its writer is the first caller in
// the queue (the leader); when its batch is written it hands the results
// out and makes the next queued caller the leader, so no goroutine of
// its own runs and no caller writes others' batches for long.

// maxLeaseBatch bounds the writes in one batch, and so the statement's
// size and the time the first caller in it waits.
const maxLeaseBatch = 500

// leaseWriteTimeout bounds a batch's write. The batch outlives the
// caller that leads it (its writes are others' too), so the leader's
// context does not end it; this does, should the store hang.
const leaseWriteTimeout = 30 * time.Second

// leaseWriter is the queue of lease writes waiting for a batch.
type leaseWriter struct {
	mu    sync.Mutex
	queue []*leaseCall // the first is the leader while busy
	busy  bool
}

// leaseCall is one caller's write and, once done, its outcome.
type leaseCall struct {
	w    store.LeaseWrite
	wake chan struct{} // capacity 1: done, or lead

	// Under leaseWriter.mu:
	done bool
	lead bool
	res  store.LeaseResult
	now  time.Time
	err  error
}

// writeLease makes w through the batch and turns its outcome into the
// engine's: the committed job (published if its version went up),
// ErrStaleLease, or for a heartbeat of a job the server ended while
// the lease held, the job as it is.
func (e *Engine) writeLease(ctx context.Context, op string, w store.LeaseWrite) (jobtype.Job, error) {
	res, now, err := e.leaseWriter.write(ctx, e, w)
	switch {
	case err != nil:
		return jobtype.Job{}, wrap(op, w.JobID, err)
	case res.Err != nil:
		return jobtype.Job{}, wrap(op, w.JobID, res.Err)
	case !res.Held:
		if w.Op == store.Heartbeat && endedUnder(&res.Job, w.LeaseID) {
			return res.Job, nil // ended by a cancel or a timeout: see Heartbeat
		}
		if reported(w, &res.Job) {
			return res.Job, nil // the same outcome, sent again: see Complete
		}
		return jobtype.Job{}, ErrStaleLease
	}
	// A heartbeat that changed nothing a watcher sees keeps UpdatedAt
	// (store.LeaseWrite.Apply); every other held write changes it to
	// the batch's time. Publishing a version twice is harmless, so an
	// earlier change at the same microsecond costs a wake, no more.
	if w.Op != store.Heartbeat || res.Job.UpdatedAt.Equal(now) {
		e.publish(res.Job)
	}
	if w.Op != store.Heartbeat {
		e.traceAttemptEnd(res.Job) // a completion or failure ends the attempt
	}
	return res.Job, nil
}

// endedUnder reports whether the server ended j's attempt under leaseID
// while the lease was held (a cancel, the queue's timeout), which a
// heartbeat or a log append of that lease hears as "cancelled". The
// lease's own outcome leaves its id on j too (see reported), and is not
// that: the lease is simply gone.
func endedUnder(j *jobtype.Job, leaseID string) bool {
	return j.LeaseID == leaseID && j.State != jobtype.Running && (j.State == jobtype.Cancelled ||
		(j.Error != nil && j.Error.Type == TimeoutErrorType))
}

// reported reports whether j already holds the outcome w reports: the
// attempt w's lease ran ended as w says (the lease's id stays on the job
// until its next claim, store.LeaseWrite.Apply), so w is that report sent
// again, after its answer was lost. A cancel or a timeout that ended the
// attempt first left another state or error, and w stays refused; so
// does a completion with another result than the one stored, which
// would otherwise be answered OK and never stored.
func reported(w store.LeaseWrite, j *jobtype.Job) bool {
	if j.LeaseID != w.LeaseID || j.State == jobtype.Running {
		return false
	}
	switch w.Op {
	case store.Complete:
		return j.State == jobtype.Succeeded && sameJSON(j.Result, w.Result)
	case store.Fail:
		return (j.State == jobtype.Failed || j.State == jobtype.Queued) && j.Error != nil && w.Error != nil && *j.Error == *w.Error
	}
	return false
}

// write queues w and returns its result once a batch has written it,
// with the time the batch was written at.
func (lw *leaseWriter) write(ctx context.Context, e *Engine, w store.LeaseWrite) (store.LeaseResult, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return store.LeaseResult{}, time.Time{}, err
	}
	c := &leaseCall{w: w, wake: make(chan struct{}, 1)}
	lw.mu.Lock()
	lw.queue = append(lw.queue, c)
	if !lw.busy {
		lw.busy, c.lead = true, true
	}
	lw.mu.Unlock()
	for {
		lw.mu.Lock()
		done, lead := c.done, c.lead
		lw.mu.Unlock()
		if done {
			return c.res, c.now, c.err
		}
		if lead {
			lw.writeBatch(ctx, e)
			continue // c was in the batch: done
		}
		// Not abandoned when ctx ends: the write is queued and may be
		// leader next, and a write the batch commits must not be
		// reported as not made.
		<-c.wake
	}
}

// writeBatch writes the first maxLeaseBatch queued writes (the leader's
// among them: it is first), hands out their results and passes the lead
// to the next queued caller.
func (lw *leaseWriter) writeBatch(ctx context.Context, e *Engine) {
	lw.mu.Lock()
	n := min(len(lw.queue), maxLeaseBatch)
	batch := lw.queue[:n:n]
	lw.queue = lw.queue[n:]
	lw.mu.Unlock()

	ws := make([]store.LeaseWrite, len(batch))
	for i, c := range batch {
		ws[i] = c.w
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseWriteTimeout)
	// To the microsecond, as stores keep times, so that writeLease can
	// tell a write made at now by its UpdatedAt.
	now := e.now().Truncate(time.Microsecond)
	results, err := e.store.WriteLeases(ctx, ws, e.leaseRules(now))
	cancel()
	if err == nil && len(results) != len(ws) {
		err = errors.New("write leases: the store answered a different number of writes")
	}

	lw.mu.Lock()
	defer lw.mu.Unlock()
	for i, c := range batch {
		c.done, c.now, c.err = true, now, err
		if err == nil {
			c.res = results[i]
		}
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	if len(lw.queue) == 0 {
		lw.busy = false
		return
	}
	next := lw.queue[0]
	next.lead = true
	select {
	case next.wake <- struct{}{}:
	default:
	}
}

// sameJSON reports whether a and b are the same JSON value, however
// spaced or with whatever order of keys: a client's encoder need not
// write a value sent again byte for byte as it did the first time.
// Numbers compare as written. Empty is no value.
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	va, err := decodeJSON(a)
	if err != nil {
		return false
	}
	vb, err := decodeJSON(b)
	return err == nil && reflect.DeepEqual(va, vb)
}

func decodeJSON(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
