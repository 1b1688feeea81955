package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/internal/backoff"
)

// Backoff is the delay between retries: the first retry waits up to
// Initial, each next one up to twice as long, at most Max, each a random
// delay between 0 and that step ("full jitter", jobwatch's one retry
// policy), so many clients cut off together do not come back together.
// Zero fields take the package defaults (DefaultBackoffInitial,
// DefaultBackoffMax); a Max below Initial is Initial.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// policy is b with the defaults filled in.
func (b Backoff) policy() backoff.Policy {
	p := backoff.Policy(b)
	if p.Initial <= 0 {
		p.Initial = DefaultBackoffInitial
	}
	if p.Max <= 0 {
		p.Max = DefaultBackoffMax
	}
	p.Max = max(p.Max, p.Initial)
	return p
}

// retrier counts consecutive failures of one loop; reset it after any
// success so the next outage starts from Initial again.
type retrier struct {
	b      Backoff
	notify func(err error, delay time.Duration)
	retry  backoff.Retry
	// last is the failure wait last waited out; nil again once a try
	// went through (answered).
	last error
}

func (r *retrier) reset() { r.retry.Reset() }

// answered forgets the failure waited out: a try went through.
func (r *retrier) answered() { r.last = nil }

// heldCall is how long a call that then failed must have been held for
// its failure to count as the first of a new outage: a long call parked
// on a server that died (a crash, a restart) reached a live server, so
// its retry starts again from Initial, as after an answer. Without it a
// server restarted now and then had a parked wait's retries wait longer
// each time (seconds after a few restarts), though each had been heard.
const heldCall = time.Second

// failedAfter counts the call asked at that failed: one held at least
// heldCall resets the count before the next delay.
func (r *retrier) failedAfter(asked time.Time) {
	if time.Since(asked) >= heldCall {
		r.reset()
	}
}

// delay is the next sleep, counting one more failure.
func (r *retrier) delay() time.Duration {
	r.retry.Policy = r.b.policy()
	return r.retry.Next()
}

// wait sleeps the next delay after err, or returns ctx's cause first,
// saying what the last try met: a caller whose deadline passed while the
// server could not be reached is told so, not only that time ran out.
func (r *retrier) wait(ctx context.Context, err error) error {
	r.last = err
	d := r.delay()
	// A retry the caller's deadline comes before is not announced: the
	// deadline's answer says what the last try met. (A server answering
	// deadline_exceeded as the deadline it was sent nears read as a
	// retry of a busy server, just before the command's own --timeout.)
	if dl, ok := ctx.Deadline(); r.notify != nil && (!ok || time.Until(dl) > d) {
		r.notify(err, d)
	}
	if !backoff.Sleep(ctx.Done(), d) {
		return gaveUp(ctx, err)
	}
	return nil
}

// gaveUp is ctx's cause, ctx having ended while the tries waited out
// last, saying what last was unless it says nothing the cause does not:
// the quick answers of a live server (one shutting down or full, a
// stream ended at the caller's deadline, or the deadline itself, passed
// by the time the server read the call).
func gaveUp(ctx context.Context, last error) error {
	if last == nil || errors.Is(last, errNotParked) || errors.Is(last, errParkedFull) || errors.Is(last, errEmptyStream) ||
		connect.CodeOf(last) == connect.CodeDeadlineExceeded ||
		// The caller's own end, which connect-go wraps (a reset stream
		// of a server or proxy, also canceled, is worth saying).
		errors.Is(last, context.DeadlineExceeded) || errors.Is(last, context.Canceled) {
		return context.Cause(ctx)
	}
	return &gaveUpError{cause: context.Cause(ctx), last: last}
}

// ended is ctx's cause once ctx has ended during a try that failed with
// err, saying as wait does what the tries were waiting out: err, unless
// it is ctx's end itself, else the failure before it. A deadline that
// passed while a try to a server that could not be reached was under way
// said only that time ran out.
func (r *retrier) ended(ctx context.Context, err error) error {
	if e, ok := gaveUp(ctx, err).(*gaveUpError); ok {
		return e
	}
	return gaveUp(ctx, r.last)
}

// gaveUpError is ctx's cause when it ended while a call was being
// retried. It unwraps to the cause alone (errors.Is(err,
// context.DeadlineExceeded) holds, and connect.CodeOf does not take the
// last try's code for the call's); the last try's error is in its text.
type gaveUpError struct {
	cause, last error
}

func (e *gaveUpError) Error() string {
	return fmt.Sprintf("%v (the last try: %s)", e.cause, retryText(e.last))
}

func (e *gaveUpError) Unwrap() error { return e.cause }

// LastTry is the failure a retry loop (WaitForJob, Watch, a Worker's
// calls) was waiting out when its context ended: the server unreachable,
// say. It is nil when the context ended while the server was answering,
// so a caller can tell "the deadline passed before the job ended" from
// "the deadline passed while the server could not be asked".
func LastTry(err error) error {
	var g *gaveUpError
	if errors.As(err, &g) {
		return g.last
	}
	return nil
}

// retryText is a retried error as a person reads it.
func retryText(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code().String() + ": " + ce.Message()
	}
	return err.Error()
}
