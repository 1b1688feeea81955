package client

import (
	"context"
	"crypto/tls"
	"errors"
	"reflect"
	"regexp"
	"strings"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Errors callers branch on, returned wrapped with what was being done.
var (
	// ErrJobNotStarted: the job is PENDING (submitted with hold) and will
	// not end until someone starts it, so there is nothing to wait for.
	ErrJobNotStarted = errors.New("job is pending: start it first")
	// ErrJobNotFound: no such job, or it ended longer ago than the
	// server's retention.
	ErrJobNotFound = errors.New("job not found")
	// ErrJobAlreadyActive: a Submit, SubmitJobs or Retry whose unique_key
	// an active job of the tenant holds (already_exists); ActiveJob says
	// which job. Nothing was created or changed.
	ErrJobAlreadyActive = errors.New("job already active")
	// ErrQuotaExceeded: a Submit, SubmitJobs, Retry or RetryJobs that
	// would take the tenant's jobs not yet running past its max_queued
	// (resource_exhausted); Quota says the tenant's numbers. Nothing of
	// the refused call was made; submit again once some of its jobs have
	// started.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrJobCancelled is the cause (context.Cause) of a handler's context
	// when the job was cancelled while it ran.
	ErrJobCancelled = errors.New("job was cancelled")
	// ErrLeaseLost is the cause of a handler's context when the worker no
	// longer holds the job's lease (it expired, or the job was re-claimed):
	// whatever the handler does now will be refused.
	ErrLeaseLost = errors.New("lease lost")
	// ErrWorkerStopped is the cause of a handler's context when the worker
	// stopped and the drain timeout passed before the handler returned.
	ErrWorkerStopped = errors.New("worker stopped")

	errBadScheme = errors.New("server address must start with http:// or https://")
)

// mapJobError turns not_found into ErrJobNotFound, already_exists into
// ErrJobAlreadyActive and a quota's resource_exhausted into
// ErrQuotaExceeded, and leaves every other error as connect returned it;
// connect.CodeOf and errors.As of a *connect.Error work on all of them.
func mapJobError(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return asSentinel(ErrJobNotFound, err)
	case connect.CodeAlreadyExists:
		return asSentinel(ErrJobAlreadyActive, err)
	case connect.CodeResourceExhausted:
		// Also a parked-call limit or a request too large: only the
		// detail tells a quota.
		if _, ok := detail[*jobwatchv1.QuotaExceeded](err); ok {
			return asSentinel(ErrQuotaExceeded, err)
		}
	}
	return err
}

// ActiveJob is the job whose unique_key an ErrJobAlreadyActive refusal
// is about, from the answer's JobAlreadyActive detail: its id and the
// key. ok is false for any other error, or an answer without the detail
// (one rewritten by a proxy).
func ActiveJob(err error) (active *jobwatchv1.JobAlreadyActive, ok bool) {
	if !errors.Is(err, ErrJobAlreadyActive) {
		return nil, false
	}
	return detail[*jobwatchv1.JobAlreadyActive](err)
}

// Quota is the tenant's numbers an ErrQuotaExceeded refusal gives, from
// the answer's QuotaExceeded detail: the tenant, its max_queued, how many
// of its jobs were not yet running and how many the call would have
// added. ok is false for any other error.
func Quota(err error) (quota *jobwatchv1.QuotaExceeded, ok bool) {
	return detail[*jobwatchv1.QuotaExceeded](err)
}

// detail is the first error detail of type T of the server's answer err.
func detail[T any](err error) (v T, ok bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return v, false
	}
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			if v, ok = m.(T); ok {
				return v, true
			}
		}
	}
	return v, false
}

// sentinelError is a server's answer as one of this package's sentinel
// errors: errors.Is finds the sentinel, and errors.As the server's
// *connect.Error, as for every other answer. It reads as the sentinel
// and the server's message, once.
type sentinelError struct {
	sentinel error
	answer   error
	text     string // what it reads as; "": the sentinel and the message
}

// asSentinel returns err, an answer of the server, as sentinel.
func asSentinel(sentinel, err error) error {
	return &sentinelError{sentinel: sentinel, answer: err}
}

func (e *sentinelError) Error() string {
	msg := connectMessage(e.answer)
	switch {
	case e.text != "":
		return e.text
	case msg == e.sentinel.Error():
		return msg
	case strings.HasSuffix(msg, ": "+e.sentinel.Error()):
		// The server names what it is about: "j_…: job not found".
		return msg
	case e.sentinel == ErrJobNotFound && strings.HasSuffix(msg, " not found"),
		e.sentinel == ErrJobAlreadyActive && strings.Contains(msg, " is already active"),
		e.sentinel == ErrQuotaExceeded && strings.Contains(msg, "max_queued"):
		// It says so in its own words: "after: job j_… not found", "job
		// j_… is already active with unique_key …", "tenant "acme" has 10
		// jobs not yet running, its max_queued is 10: …".
		return msg
	}
	return e.sentinel.Error() + ": " + msg
}

func (e *sentinelError) Unwrap() []error { return []error{e.sentinel, e.answer} }

func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// transient reports whether a failed call is worth repeating unchanged:
// the server could not be reached or went away, or asked to come back
// later. ctx is the caller's: a call that failed because ctx ended is
// never transient.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable: // refused, reset, GOAWAY, store down
		return !misconfigured(err)
	case connect.CodeAborted, // the server gave up on the call
		connect.CodeResourceExhausted, // too many parked calls: try later
		connect.CodeCanceled,          // the server or a proxy reset the stream, not us
		connect.CodeDeadlineExceeded:  // a proxy's timeout, not ours
		return true
	case connect.CodeUnknown, connect.CodeInternal:
		// A broken HTTP/2 stream or body surfaces as unknown or internal,
		// synthesized by the client; the same codes sent by the server
		// are real answers and retrying them would loop for ever, and so
		// is an HTTP status that is no answer of jobwatch's (a 405 of a
		// wrong path, a proxy's 500), which connect-go names by it.
		return !connect.IsWireError(err) && !httpStatusAnswer.MatchString(connectMessage(err))
	}
	return false
}

// httpStatusAnswer is the message connect-go gives an answer that was an
// HTTP status without a Connect or gRPC error ("405 Method Not Allowed",
// "HTTP status 500 Internal Server Error"), or a body that was not one
// (a page answering at a wrong path).
var httpStatusAnswer = regexp.MustCompile(`^(HTTP status )?[1-5][0-9][0-9] |^invalid content-type`)

// misconfigured reports whether err, which connect-go calls unavailable,
// is an address that can never answer as given: https:// to a server
// that speaks plain HTTP, or a certificate this machine does not trust
// or that names another host. Retrying it would loop for ever. http://
// to a server that does not speak HTTP/2 over it (jobwatch does; a
// proxy may not) is caught when its answer says so; it may also just
// cut the connection, which reads as any cut connection and is retried.
func misconfigured(err error) bool {
	var verify *tls.CertificateVerificationError // every failed verification of the server's chain
	msg := err.Error()
	return errors.As(err, &verify) || strings.Contains(msg, "server gave HTTP response to HTTPS client") ||
		SpeaksHTTP1(err)
}

// SpeaksHTTP1 reports whether err is an http:// server's answer in
// HTTP/1 to a client that speaks HTTP/2 without TLS (h2c), as jobwatch
// servers do: a server of another kind, or a proxy that does not pass
// HTTP/2 on. Go's HTTP/2 client reads the first bytes of "HTTP/1.1 400"
// as a frame, which it then finds malformed or too large.
func SpeaksHTTP1(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "frame header looked like an HTTP/1.1 header") ||
		strings.Contains(msg, "http2: frame too large")
}

// PublicError is implemented by errors whose message is safe to show to
// anyone who can see the job. A Worker sends a failed job's error message
// only when the handler's error (or one it wraps) implements it; every
// other error reaches callers as its type name alone, because messages
// tend to carry hostnames, SQL and customer data.
type PublicError interface {
	error
	// PublicMessage is the text callers see.
	PublicMessage() string
}

// Public marks err's own message as safe to show. The job's error type is
// still the type name of err.
func Public(err error) error {
	if err == nil {
		return nil
	}
	return &publicError{err}
}

type publicError struct{ err error }

func (e *publicError) Error() string         { return e.err.Error() }
func (e *publicError) Unwrap() error         { return e.err }
func (e *publicError) PublicMessage() string { return e.err.Error() }

// RetryableError is implemented by errors after which the job may run
// again (attempt + 1, after the queue's backoff) if attempts remain.
type RetryableError interface {
	error
	Retryable() bool
}

// Retryable marks err as worth another attempt.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err}
}

type retryableError struct{ err error }

func (e *retryableError) Error() string   { return e.err.Error() }
func (e *retryableError) Unwrap() error   { return e.err }
func (e *retryableError) Retryable() bool { return true }

// TypedError lets an error choose its error.type instead of its Go type
// name, such as an error that wraps a status code.
type TypedError interface {
	error
	ErrorType() string
}

// ErrorType is the error.type a Worker reports for err: an ErrorType()
// found in its chain, or else the Go type name (without package or
// pointer) of the first error in the chain that is not a mere wrapper
// (fmt.Errorf, Public, Retryable). A plain errors.New error, or an empty
// ErrorType(), is "Error" (jobtype.DefaultErrorType).
func ErrorType(err error) string {
	var typed TypedError
	if errors.As(err, &typed) {
		if t := typed.ErrorType(); t != "" {
			return t
		}
		return jobtype.DefaultErrorType // what the engine stores for an empty type
	}
	for err != nil {
		switch err.(type) {
		case *publicError, *retryableError:
			err = errors.Unwrap(err)
			continue
		}
		t := reflect.TypeOf(err)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		name := t.Name()
		if t.PkgPath() == "fmt" && strings.HasPrefix(name, "wrapError") {
			if next := errors.Unwrap(err); next != nil {
				err = next
				continue
			}
		}
		if name == "" || name == "errorString" || name == "wrapError" || name == "wrapErrors" {
			return "Error"
		}
		return name
	}
	return "Error"
}

// publicMessage is the message a Worker reports for err: only what a
// PublicError in its chain says.
func publicMessage(err error) string {
	var pub PublicError
	if errors.As(err, &pub) {
		return pub.PublicMessage()
	}
	return ""
}

func isRetryable(err error) bool {
	var r RetryableError
	return errors.As(err, &r) && r.Retryable()
}

// UndecodableJobError is a job the server sent that this client cannot
// decode, such as one whose payload nests deeper than protobuf's recursion
// limit (stored before the server refused such payloads). Calls that
// return a job return it wrapped; errors.As finds it. A Worker fails such
// a job with error.type "UndecodableJob" and goes on claiming the next.
type UndecodableJobError struct {
	JobID   string
	LeaseID string // the lease it was claimed under; "" if not a claim
	// Job is the rest of the job, without its payload and result: enough
	// to show it and to tell how it ended. Read from binary answers (the
	// default); nil from JSON ones, from the in-process backend, or if the
	// rest did not decode either.
	Job *jobwatchv1.Job
	Err error // why it could not be decoded
}

func (e *UndecodableJobError) Error() string {
	return "job " + e.JobID + " cannot be decoded: " + e.Err.Error()
}

func (e *UndecodableJobError) Unwrap() error { return e.Err }

// ErrorType is the error.type a Worker fails the job with.
func (e *UndecodableJobError) ErrorType() string { return "UndecodableJob" }

// PublicMessage says why, without the job's content.
func (e *UndecodableJobError) PublicMessage() string {
	return "the worker could not decode the job: " + e.Err.Error()
}
