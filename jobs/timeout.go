package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// TimeoutErrorType is the error type of an attempt that ran longer than
// its queue's timeout. It is retryable: the job is QUEUED again with
// backoff while attempts remain, else FAILED.
const TimeoutErrorType = "Timeout"

// timeoutError says why an attempt was ended by its queue's timeout.
func timeoutError(timeout time.Duration) *jobtype.JobError {
	return &jobtype.JobError{Type: TimeoutErrorType, Message: "attempt ran longer than the queue's timeout of " + timeout.String()}
}

// timeOutAttempts ends every RUNNING attempt that has run longer than its
// queue's timeout (QueueRules.Timeout; queues without one are never
// read). Each attempt is ended inside its own transaction only if the job
// is still RUNNING under the very lease the store reported, so a
// completion, a heartbeat's cancel, a newer attempt or another replica's
// sweep that came first is left alone, and sweeping twice changes
// nothing. The worker learns of it at its next call: the ended attempt's
// lease stays on the row (like a cancel's), so its next Heartbeat answers
// with the job no longer RUNNING, which the wire calls cancelled, and its
// Complete or Fail is refused with ErrStaleLease. Once another worker
// claims the retry, the old lease is gone and its heartbeat is
// ErrStaleLease too: either way the worker stops the handler.
func (e *Engine) timeOutAttempts(ctx context.Context) error {
	now := e.now()
	var errs []error
	for queue, q := range e.rules.Load().Queues {
		if q.Timeout <= 0 {
			continue
		}
		attempts, err := e.store.TimedOut(ctx, queue, now.Add(-q.Timeout))
		if err != nil {
			errs = append(errs, fmt.Errorf("find attempts past the timeout of queue %s: %w", queue, err))
			continue
		}
		for _, a := range attempts {
			if err := e.timeOut(ctx, a, q.Timeout); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// timeOut ends attempt a as timed out after timeout.
func (e *Engine) timeOut(ctx context.Context, a store.Attempt, timeout time.Duration) error {
	ended := false
	j, err := e.update(ctx, "time out", a.JobID, func(j *jobtype.Job, now time.Time) error {
		ended = false // run again on a newer read: only the last run says
		if j.State != jobtype.Running || j.LeaseID != a.LeaseID {
			return errUnchanged
		}
		ended = true
		j.Error = timeoutError(timeout)
		leaseEnd := j.LeaseExpiresAt
		if j.Attempt < j.MaxAttempts {
			e.requeue(j, now)
			// Its worker hears of the end at its next heartbeat, due
			// before the lease expires, and stops the handler then (a
			// command that ignores its SIGTERM is killed 10 s later):
			// the next attempt is not handed out before, so two attempts
			// of one job do not run at once, as after a cancel.
			if leaseEnd.After(j.RunAt) {
				j.RunAt = leaseEnd
			}
		} else {
			j.State = jobtype.Failed
			j.FinishedAt = now
			releaseLease(j)
		}
		j.EndAttempt(now, "")
		// The ended attempt's lease stays, so that its worker's next
		// heartbeat hears that the attempt was ended (see Heartbeat), and
		// an operator's retry waits for its end (see Retry).
		j.LeaseID, j.LeaseExpiresAt = a.LeaseID, leaseEnd
		return nil
	})
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return err
	case ended:
		e.log.Info("attempt timed out", "job_id", j.ID, "queue", j.Queue, "worker_id", j.WorkerID,
			"attempt", j.Attempt, "timeout", timeout, "state", j.State)
	}
	return nil
}
