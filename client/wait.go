package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// Terminal reports whether a job in state s has ended: it changes again
// only if a retry (RetryJob) makes it QUEUED for another run.
func Terminal(s jobwatchv1.JobState) bool {
	switch s {
	case jobwatchv1.JobState_JOB_STATE_SUCCEEDED, jobwatchv1.JobState_JOB_STATE_FAILED,
		jobwatchv1.JobState_JOB_STATE_CANCELLED, jobwatchv1.JobState_JOB_STATE_LOST:
		return true
	}
	return false
}

// minPark is the least time a long call that answered "nothing yet" must
// have been parked to be re-issued at once; quicker answers come from a
// server shutting down and are retried with backoff instead.
const minPark = 20 * time.Millisecond

// cutShort reports whether a long call asked at asked was given little
// time to park by the caller's own deadline: the server answers a tenth
// of what the caller has left before its deadline (at least
// shortMargin, or half of it), so with under 10 × minPark left a quick
// "not yet" is that, not a server shutting down, and the call is asked
// again at once (each time with less left, until the deadline ends it).
func cutShort(ctx context.Context, asked time.Time) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Sub(asked) < 10*minPark
}

// shortMargin is the least time before a caller's deadline that a server
// answers a parked call or ends a stream, unless the caller had less
// than twice that left (then it answers halfway).
const shortMargin = 10 * time.Millisecond

// nearDeadline reports whether a stream opened at asked that ended
// without a word did so for ctx's deadline: servers end a stream a tenth
// of the time left before the caller's deadline, or shortMargin (half
// the time left, if less) when that is more, so what is left now is at
// most a fifth of what was left at asked, or under twice shortMargin.
func nearDeadline(ctx context.Context, asked time.Time) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	left := time.Until(dl)
	return left <= dl.Sub(asked)/5 || left < 2*shortMargin
}

// errNotParked is what a retry notification says about such an answer.
var errNotParked = errors.New("server answered without waiting (shutting down?)")

// errParkedFull is what a retry notification says about a wait the
// server answered at once because it held as many parked calls as it
// may (in all, of the caller's tenant, or of its connection): the
// answer says so (parkedFull), however long it took to arrive, and the
// wait backs off before it asks again.
var errParkedFull = errors.New("server answered without waiting: its parked calls are full")

// parkedFull reports whether an answer is marked as given at once for
// that reason (the header Jobwatch-Parked-Calls: full).
func parkedFull(h http.Header) bool { return h.Get("Jobwatch-Parked-Calls") == "full" }

// errEmptyStream is what a retry notification says when a watch stream
// ended at once without a snapshot (a server shutting down does that).
var errEmptyStream = errors.New("watch stream ended without a snapshot")

func (c *Client) retrier() *retrier { return &retrier{b: c.backoff, notify: c.onRetry} }

// WaitForJob returns the job once it has ended, however long that takes:
// it has no deadline of its own, so bound it with ctx. It re-issues
// WaitJob at once when the server's cap returns a job still running, and
// retries transient failures (the server restarting, a dropped
// connection) with backoff. A PENDING job is ErrJobNotStarted and an
// unknown one ErrJobNotFound; any other refusal is returned as it is.
// When ctx ends it returns context.Cause(ctx): ctx's error, or the cause
// a context.WithCancelCause or WithTimeoutCause gave it (test for that
// cause, not for context.Canceled).
func (c *Client) WaitForJob(ctx context.Context, id string) (*jobwatchv1.Job, error) {
	r := c.retrier()
	req := &jobwatchv1.WaitJobRequest{JobId: id}
	for {
		asked := time.Now()
		callCtx, call := connect.NewClientContext(ctx)
		resp, err := c.longJobs.WaitJob(callCtx, req)
		if err == nil {
			r.answered()
			if job := resp.GetJob(); job != nil && Terminal(job.GetState()) {
				return job, nil
			}
			if parkedFull(call.ResponseHeader()) {
				if err := r.wait(ctx, errParkedFull); err != nil {
					return nil, err
				}
				continue
			}
			if time.Since(asked) >= minPark || cutShort(ctx, asked) {
				r.reset()
				continue
			}
			// A server answers "not yet" without waiting only while it
			// shuts down; asking again at once would spin until it has.
			if err := r.wait(ctx, errNotParked); err != nil {
				return nil, err
			}
			continue
		}
		if ctx.Err() != nil {
			return nil, r.ended(ctx, err)
		}
		if err := waitError("wait for job", id, err); err != nil {
			return nil, err
		}
		r.failedAfter(asked)
		if err := r.wait(ctx, err); err != nil {
			return nil, err
		}
	}
}

// waitError is the error a wait or watch (op) of job id returns for
// err, or nil when err is transient and the call should be retried.
func waitError(op, id string, err error) error {
	// The sentinels wrap the server's answer, so that connect.CodeOf
	// reads its code as it does for every other call; the error names
	// the job once, whether or not the server's message does.
	var sentinel error
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition:
		sentinel = ErrJobNotStarted
	case connect.CodeNotFound:
		sentinel = ErrJobNotFound
	default:
		if transient(context.Background(), err) {
			return nil
		}
		return fmt.Errorf("%s %s: %w", op, id, err)
	}
	text := fmt.Sprintf("%s %s: %s", op, id, sentinel)
	if msg := connectMessage(err); msg != sentinel.Error() && msg != id+": "+sentinel.Error() {
		text += ": " + msg
	}
	return &sentinelError{sentinel: sentinel, answer: err, text: text}
}

// Watch yields each new snapshot of the job, in version order and never
// the same version twice, and ends after the terminal one. It opens a
// WatchJob stream and, whenever the stream ends before the job did (the
// server's stream lifetime, a restart, a dropped connection), opens
// another with after_version set to the last version it yielded, backing
// off only when the server could not be reached. It ends by yielding an
// error when the server refuses the watch (ErrJobNotFound for an unknown
// job) and ctx's cause when ctx ends; breaking out of the loop closes the
// stream. A PENDING job is watched like any other.
//
// One exception to version order: if the server's versions went backwards
// (its database was restored from a backup) and the job there is already
// terminal, that terminal snapshot is yielded, because it is the outcome
// and no higher version will ever come.
func (c *Client) Watch(ctx context.Context, id string) iter.Seq2[*jobwatchv1.Job, error] {
	return func(yield func(*jobwatchv1.Job, error) bool) {
		var last int64
		c.resume(ctx, func() (bool, bool, error) { return c.watchOnce(ctx, id, &last, yield) },
			func(err error) error { return waitError("watch job", id, err) },
			func(err error) { yield(nil, err) })
	}
}

// resume runs a stream that resumes where it left off (Watch,
// WatchJobs): once opens a stream and reads it to its end, and says
// whether the consumer stopped, whether the stream delivered anything
// (so the server is up) and how it ended. After a clean end of a live
// stream it opens another at once; after a failure it backs off and
// tries again, unless refused makes the failure final (non-nil: what to
// yield). It ends by passing fail that, or ctx's cause when ctx ends.
func (c *Client) resume(ctx context.Context, once func() (stopped, received bool, err error), refused func(error) error, fail func(error)) {
	r := c.retrier()
	for {
		asked := time.Now()
		stopped, received, err := once()
		if stopped {
			return
		}
		if received || err == nil {
			// The server answered: a failure before is no longer what
			// the tries wait out, even if ctx ended during this stream.
			r.answered()
		}
		if ctx.Err() != nil {
			fail(r.ended(ctx, err))
			return
		}
		if received {
			r.reset()
		}
		if err != nil {
			r.failedAfter(asked)
		}
		switch {
		case err == nil && received:
			continue // a clean end of a live stream: resume at once
		case err == nil && (time.Since(asked) >= minPark || nearDeadline(ctx, asked)):
			// Ended by the server's stream lifetime, or for the caller's
			// deadline, with nothing new to say: resume at once. Only a
			// stream that ends at once (a server shutting down) backs off.
			continue
		case err == nil:
			err = errEmptyStream
		default:
			if ferr := refused(err); ferr != nil {
				fail(ferr)
				return
			}
		}
		if err := r.wait(ctx, err); err != nil {
			fail(err)
			return
		}
	}
}

// watchOnce runs one WatchJob stream. ended says Watch is over (terminal
// snapshot yielded, or the consumer stopped); received says the stream
// delivered anything (a snapshot or a keepalive), so the server is up.
func (c *Client) watchOnce(ctx context.Context, id string, last *int64,
	yield func(*jobwatchv1.Job, error) bool) (ended, received bool, err error) {
	req := &jobwatchv1.WatchJobRequest{JobId: id, AfterVersion: *last}
	return stream(ctx, c.longJobs.WatchJob, req, func(msg *jobwatchv1.WatchJobResponse) bool {
		job := msg.GetJob()
		if job == nil {
			return true // keepalive
		}
		terminal := Terminal(job.GetState())
		if job.GetVersion() <= *last && !terminal {
			return true
		}
		*last = max(*last, job.GetVersion())
		return yield(job, nil) && !terminal
	})
}

// stream runs one server stream (of Watch, WatchJobs, WatchLogs): it
// opens it with open(ctx, req) and hands each message to each until each
// says to read no more or the stream ends, and closes it. done says each
// ended it; received that the stream delivered anything (a message or a
// keepalive), so the server is up; err is why it could not be opened or
// how it ended (nil, when each ended it).
func stream[Req, Msg any](ctx context.Context,
	open func(context.Context, *Req) (*connect.ServerStreamForClient[Msg], error), req *Req,
	each func(*Msg) (more bool)) (done, received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := open(ctx, req)
	if err != nil {
		return false, false, err
	}
	defer s.Close()
	for s.Receive() {
		received = true
		if !each(s.Msg()) {
			return true, true, nil
		}
	}
	return false, received, s.Err()
}
