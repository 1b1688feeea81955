package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// ofJob is err of a call on the job id, with a not_found naming the id
// as WaitJobs' does ("j_…: job not found"): the id the caller sent, and
// nothing of whether it exists elsewhere; so is a wait on a PENDING job
// ("j_…: job is pending: start it first").
func ofJob(id string, err error) error {
	if (errors.Is(err, jobtype.ErrNotFound) || errors.Is(err, jobs.ErrNotStarted)) && !errors.As(err, new(*jobs.JobRefError)) {
		return &jobs.JobRefError{ID: id, Err: err}
	}
	return err
}

// toConnectError maps an engine or store error to what the caller sees.
// Only errors the caller can act on carry their text; anything unexpected
// becomes internal with the message "internal error", and the detail goes
// to the log, never to the caller.
func (s *Server) toConnectError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var (
		connectErr  *connect.Error
		invalidErr  *jobtype.InvalidError
		tooLargeErr *jobtype.TooLargeError
		stateErr    *jobs.StateError
		conflictErr *jobtype.ConflictError
		refErr      *jobs.JobRefError
		missingErr  *jobtype.MissingError
		batchErr    *jobtype.BatchNotFoundError
		quotaErr    *jobtype.QuotaError
	)
	switch {
	case errors.As(err, &connectErr):
		// Already a wire error, e.g. from sending on a stream.
		return connectErr
	case errors.As(err, &invalidErr):
		return connect.NewError(connect.CodeInvalidArgument, invalidErr)
	case errors.As(err, &tooLargeErr):
		return connect.NewError(connect.CodeResourceExhausted, tooLargeErr)
	case errors.As(err, &quotaErr):
		// The tenant, its count and its max_queued: the caller's own
		// numbers, and what to do.
		return quotaExceeded(quotaErr)
	case errors.As(err, &missingErr):
		// The id the caller sent, and nothing of whether it exists elsewhere.
		return connect.NewError(connect.CodeNotFound, missingErr)
	case errors.As(err, &batchErr):
		// The caller's own tenant and the batch it named.
		return connect.NewError(connect.CodeNotFound, batchErr)
	case errors.As(err, &refErr) && errors.Is(refErr.Err, jobtype.ErrNotFound):
		// The id the caller sent, and nothing of whether it exists elsewhere.
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: %w", refErr.ID, jobtype.ErrNotFound))
	case errors.As(err, &refErr) && errors.Is(refErr.Err, jobs.ErrNotStarted):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%s: %w", refErr.ID, jobs.ErrNotStarted))
	case errors.Is(err, jobtype.ErrInvalidPageToken):
		return invalid("page_token", "was not issued by this server")
	case errors.Is(err, jobtype.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, jobtype.ErrNotFound)
	case errors.Is(err, jobs.ErrNotStarted):
		return connect.NewError(connect.CodeFailedPrecondition, jobs.ErrNotStarted)
	case errors.Is(err, jobs.ErrStaleLease):
		return connect.NewError(connect.CodeFailedPrecondition, errStaleLease)
	case errors.As(err, &stateErr):
		return connect.NewError(connect.CodeFailedPrecondition, stateErr)
	case errors.As(err, &conflictErr):
		return conflict(conflictErr)
	}
	if cerr := callersEnd(ctx, err); cerr != nil {
		return cerr
	}
	if errors.Is(err, jobtype.ErrUnavailable) {
		// The details (SQLite's words, the file) are the operator's, in
		// the log; the caller learns what to do, and the cause when the
		// store can put it in a caller's words (a full disk, a read-only
		// file: store/sqlite's UnavailableError).
		var told interface{ UnavailableCause() string }
		if errors.As(err, &told) && told.UnavailableCause() != "" {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s; nothing was changed: retry with backoff", told.UnavailableCause()))
		}
		return connect.NewError(connect.CodeUnavailable, errRetryLater)
	}
	s.log.ErrorContext(ctx, "internal error", "op", op, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// callersEnd is what a call whose own context ended answers when the
// engine or store failed because of it: the caller left (canceled) or its
// deadline passed (deadline_exceeded), whether the store said so with the
// context's error or in its own words (pgx may report a read cut short
// as a lost connection, which the store calls unavailable). It also
// answers deadline_exceeded for an error wrapping
// context.DeadlineExceeded that is no store failure while the caller has
// a deadline: a store stops waiting for the database a little before
// that deadline, so that the caller hears an answer before its own
// timeout cuts the call. A caller's deadline is never unavailable (503):
// it says nothing of the database. nil for any other error (an
// unexpected one stays internal, and logged, even if the caller left).
func callersEnd(ctx context.Context, err error) *connect.Error {
	cut := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jobtype.ErrUnavailable)
	switch {
	case cut && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errCallersDeadline)
	case cut && ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, context.Canceled)
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jobtype.ErrUnavailable):
		if _, ok := ctx.Deadline(); ok {
			return connect.NewError(connect.CodeDeadlineExceeded, errCallersDeadline)
		}
	}
	return nil
}

// errCallersDeadline is what a call cut by its own deadline is told: in
// its words, not Go's ("context deadline exceeded"), with what it may
// rely on. It wraps context.DeadlineExceeded.
var errCallersDeadline = fmt.Errorf("the call's deadline passed before its answer was ready (its timeout is too short for how busy the server is); "+
	"if it asked for a change, the change was made whole or not at all: read the job to know which, or repeat a submit with its unique_key: %w", context.DeadlineExceeded)

// conflict is already_exists with the active job's id in the message and
// in a JobAlreadyActive detail that generated clients can read.
func conflict(c *jobtype.ConflictError) error {
	msg := fmt.Sprintf("job %s is already active with unique_key %q", c.ActiveID, c.UniqueKey)
	if c.Field != "" {
		msg = c.Field + ": " + msg
	}
	err := connect.NewError(connect.CodeAlreadyExists, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&jobwatchv1.JobAlreadyActive{
		JobId:     c.ActiveID,
		UniqueKey: c.UniqueKey,
	}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// quotaExceeded is resource_exhausted with the tenant's numbers in the
// message and in a QuotaExceeded detail, so that a client can tell a
// quota from the other resource_exhausted answers (a parked-call limit,
// which a retry soon may pass) without reading the message.
func quotaExceeded(q *jobtype.QuotaError) error {
	err := connect.NewError(connect.CodeResourceExhausted, q)
	if detail, derr := connect.NewErrorDetail(&jobwatchv1.QuotaExceeded{
		Tenant:    q.Tenant,
		MaxQueued: int64(q.MaxQueued),
		Queued:    int64(q.Queued),
		Adding:    int64(q.Adding),
	}); derr == nil {
		err.AddDetail(detail)
	}
	return err
}

// errRetryLater is what a caller hears when the database cannot take the
// call. It does not say that nothing was changed: a read changes nothing
// anyway, and on PostgreSQL a write whose commit was on its way when the
// connection was lost is in doubt (docs/CLIENTS.md, the error table).
var errRetryLater = errors.New("the database is busy or unavailable: retry with backoff")

// errStaleLease is what a lease call (Heartbeat, CompleteJob, FailJob,
// AppendJobLogs, ReleaseJob) with a lease the job no longer has hears:
// jobs.ErrStaleLease's words, and the usual reasons, so that a worker's
// operator knows where to look.
var errStaleLease = fmt.Errorf("%w: the job has ended, or its lease expired or went to another worker "+
	"(GetJob shows which); stop working on it", jobs.ErrStaleLease)
