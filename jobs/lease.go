package jobs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jobwatch/jobwatch/internal/backoff"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// The calls of the worker holding a job. Each checks the lease inside the
// store's transaction, so a worker whose lease was taken (cancel, expiry,
// a new claim) can change nothing: the lease id is the fencing token.

// checkLease refuses a lease that does not hold j. A lease that expired
// but has not been reaped yet still holds: nobody else has the job, and
// the reaper re-checks the expiry inside its own transaction.
func checkLease(j *jobtype.Job, leaseID string) error {
	if j.State != jobtype.Running || j.LeaseID != leaseID {
		return ErrStaleLease
	}
	return nil
}

func validLease(id, leaseID string) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	return jobtype.CheckName("lease_id", leaseID)
}

// Heartbeat extends the lease and records progress (percent clamped to
// 0..100 and never lowered within an attempt; an empty step keeps the
// last; a step over jobtype.MaxStepBytes is a *jobtype.InvalidError; a
// NUL in it is stored as U+FFFD, within the limit, jobtype.NoNULWithin). A
// job whose attempt the server ended while the lease was held (cancelled,
// or timed out by its queue's timeout: QUEUED again or FAILED) returns as
// it is, not RUNNING, with a nil error, so the worker learns that it
// should stop; the wire calls that "cancelled". Any other lease mismatch
// is ErrStaleLease.
func (e *Engine) Heartbeat(ctx context.Context, id, leaseID string, percent int32, step string) (jobtype.Job, error) {
	if err := validLease(id, leaseID); err != nil {
		return jobtype.Job{}, err
	}
	if err := jobtype.CheckText("step", step, jobtype.MaxStepBytes); err != nil {
		return jobtype.Job{}, err
	}
	return e.writeLease(ctx, "heartbeat", store.LeaseWrite{Op: store.Heartbeat, JobID: id, LeaseID: leaseID,
		Percent: min(max(percent, 0), 100), Step: jobtype.NoNULWithin(step, jobtype.MaxStepBytes)})
}

// Complete ends the job SUCCEEDED with result and percent 100. A result
// is checked like a payload: *jobtype.TooLargeError over
// Config.MaxPayloadBytes, *jobtype.InvalidError when it is not JSON or
// nests deeper than jobtype.MaxJSONDepth.
//
// Complete and Fail are idempotent under one lease: the same report made
// again, once its first try has ended the attempt (its answer lost to a
// restart or a dropped connection, or the report sent again to another
// replica), answers with the job as that try left it, not ErrStaleLease,
// until the job is claimed again or retried. A report that differs (a
// Complete after the lease's Fail, another error) is ErrStaleLease.
func (e *Engine) Complete(ctx context.Context, id, leaseID string, result json.RawMessage) (jobtype.Job, error) {
	if err := validLease(id, leaseID); err != nil {
		return jobtype.Job{}, err
	}
	if err := jobtype.CheckJSON("result", result, e.cfg.MaxPayloadBytes); err != nil {
		return jobtype.Job{}, err
	}
	return e.writeLease(ctx, "complete", store.LeaseWrite{Op: store.Complete, JobID: id, LeaseID: leaseID, Result: result})
}

// Fail ends the attempt. With retryable and attempts left the job is
// QUEUED again after a backoff (RunAt), with Error saying why the last
// attempt ended; Attempt still counts the attempt that failed until the
// next claim starts another. Otherwise it is FAILED.
//
// An empty error type becomes DefaultErrorType rather than a refusal: a
// worker that reports a failure without a class (a script's "error"
// line with nothing after it) still ends the job, instead of having its
// report refused and the job sit RUNNING until its lease expires. A type
// or message over its limit (MaxErrorTypeBytes, MaxErrorMessageBytes) or
// not UTF-8 is a *jobtype.InvalidError; workers trim to the limits.
func (e *Engine) Fail(ctx context.Context, id, leaseID string, jerr jobtype.JobError, retryable bool) (jobtype.Job, error) {
	if err := validLease(id, leaseID); err != nil {
		return jobtype.Job{}, err
	}
	if jerr.Type == "" {
		jerr.Type = jobtype.DefaultErrorType
	}
	if err := jobtype.CheckText("error.type", jerr.Type, jobtype.MaxErrorTypeBytes); err != nil {
		return jobtype.Job{}, err
	}
	if err := jobtype.CheckText("error.message", jerr.Message, jobtype.MaxErrorMessageBytes); err != nil {
		return jobtype.Job{}, err
	}
	jerr.Type = jobtype.NoNULWithin(jerr.Type, jobtype.MaxErrorTypeBytes)
	jerr.Message = jobtype.NoNULWithin(jerr.Message, jobtype.MaxErrorMessageBytes)
	return e.writeLease(ctx, "fail", store.LeaseWrite{Op: store.Fail, JobID: id, LeaseID: leaseID,
		Error: &jerr, Retry: retryable, Jitter: backoff.Jitter()})
}

// requeue puts a job whose attempt ended back in the queue after its
// queue's backoff (store.Backoff: full jitter). Progress starts over with
// the next attempt: carrying the last attempt's percent over would pin the
// new attempt's reports below it.
func (e *Engine) requeue(j *jobtype.Job, now time.Time) {
	j.State = jobtype.Queued
	j.RunAt = now.Add(e.backoffOf(e.queueRules(j.Queue)).Delay(j.Attempt, backoff.Jitter()))
	j.Percent = 0
	j.Step = ""
	releaseLease(j)
}

func releaseLease(j *jobtype.Job) {
	j.LeaseID = ""
	j.LeaseExpiresAt = time.Time{}
}

// leaseExpiredError says why a job's attempt ended with no word from its
// worker.
func leaseExpiredError(timeout time.Duration) *jobtype.JobError {
	return &jobtype.JobError{Type: "LeaseExpired", Message: "no heartbeat for " + timeout.String()}
}
