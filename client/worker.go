package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/tracing"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Handler runs one job. It reports progress as it goes and returns the
// job's result (anything encoding/json can marshal, nil for none) or an
// error. Its ctx ends when the job is cancelled (cause ErrJobCancelled),
// the lease is lost (ErrLeaseLost) or the worker stops without waiting
// any longer (ErrWorkerStopped); what it returns then is not reported.
// The worker hears of a cancel (or of its queue's timeout) at its next
// heartbeat, within WorkerConfig.HeartbeatInterval, so a handler runs on
// for up to that long after the cancel; the server hands the job out
// again (a RetryJob) only once the cancelled attempt's lease has run out.
//
// A returned error fails the job with error.type set to the error's type
// name (see ErrorType) and a message only if the error is a PublicError;
// wrap it with Retryable to ask for another attempt. A result the server
// will not store (over its size limit), or one encoding/json cannot
// marshal (a func, a channel, a NaN), fails the job with error.type
// "ResultRejected" and the reason as the message ("the result is not
// JSON: json: unsupported type: chan int"); an error the server will not
// store as it is, with "ErrorRejected". A panic fails it with
// "PanicError" (see PanicError). A claimed job the worker cannot decode
// fails with "UndecodableJob" (see UndecodableJobError).
type Handler func(ctx context.Context, job *jobwatchv1.Job, progress Progress) (any, error)

// Progress records how far the job is: percent 0..100 (clamped; the
// server never lets it go backwards) and a step text such as
// "batch 5 of 11" ("" keeps the last step; longer than jobtype.MaxStepBytes
// is cut). It never blocks: the latest
// values reach the server with the next heartbeat, which a change brings
// forward.
//
// Its Logf and Log add lines to the job's log, which callers read with
// GetJobLogs and WatchJobLogs (jobwatch logs). They never block either:
// the Worker sends lines in batches (see LogFlushInterval and
// LogFlushBytes), and all of them before it reports the job's outcome.
// They reach the Worker through p itself, as calls with a percent far
// below zero that its Progress takes as log output; a Progress made by
// hand (a handler's unit test) receives them as such calls.
type Progress func(percent int, step string)

// Logf adds one line to the job's log, formatted as fmt.Sprintf does (a
// final newline is dropped; text with newlines in it is several lines).
// A line over jobtype.MaxLogLineBytes is cut there.
func (p Progress) Logf(format string, args ...any) {
	p(logCallBase+int(jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED), fmt.Sprintf(format, args...))
}

// Log is an io.Writer into the job's log: each line written becomes a
// line of the log, and a last line without its newline is added when the
// handler returns. A line is held until its newline for at most 64 KiB,
// then added in pieces of that size. Writes never fail or block. Give it
// to log.New, slog.NewTextHandler or an exec.Cmd's Stdout.
func (p Progress) Log() io.Writer { return p.LogTo(jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED) }

// LogTo is Log with its lines tagged as coming from stream s, as
// jobwatch worker --exec tags a command's stdout and stderr.
func (p Progress) LogTo(s jobwatchv1.LogStream) io.Writer { return progressLog{p: p, stream: s} }

// progressLog is the writer of Progress.Log.
type progressLog struct {
	p      Progress
	stream jobwatchv1.LogStream
}

func (l progressLog) Write(b []byte) (int, error) {
	l.p(logCallBase+logWriteCall+int(l.stream), string(b))
	return len(b), nil
}

// Log output reaches the Worker as a Progress call whose percent is
// logCallBase plus the line's stream, plus logWriteCall for what a
// writer wrote (to be split at its newlines, the rest held) rather than
// whole lines.
const (
	logCallBase  = math.MinInt
	logWriteCall = 8
)

// logCall decodes a Progress call that carries log output.
func logCall(percent int) (stream jobwatchv1.LogStream, write, ok bool) {
	if percent >= logCallBase+2*logWriteCall {
		return 0, false, false
	}
	n := percent - logCallBase
	if _, known := jobwatchv1.LogStream_name[int32(n%logWriteCall)]; !known {
		return 0, false, false
	}
	return jobwatchv1.LogStream(n % logWriteCall), n >= logWriteCall, true
}

// Lease is a claimed job and the lease under which the worker runs it.
type Lease struct {
	Job *jobwatchv1.Job
	ID  string
	// TTL is how long the lease lasts without a heartbeat, as the server
	// counts it; 0 if the backend did not say.
	TTL time.Duration
}

// WorkerBackend is where a Worker gets jobs and reports on them: a remote
// server (Client.WorkerBackend) or an embedded engine (package jobs/inproc).
type WorkerBackend interface {
	// Claim parks until a job of one of kinds (any kind if empty) in one
	// of queues (any if empty) is ready, and returns it RUNNING under a
	// new lease. When the backend's cap passes first it returns nil, nil.
	// A job claimed but not decodable is an *UndecodableJobError with
	// its LeaseID set (possibly wrapped), which the worker fails.
	Claim(ctx context.Context, workerID string, kinds, queues []string) (*Lease, error)
	// Heartbeat extends the lease and records progress. cancelled says
	// the job was cancelled and the worker should stop. ErrLeaseLost: the
	// lease is no longer held.
	Heartbeat(ctx context.Context, l *Lease, percent int32, step string) (cancelled bool, err error)
	// Complete ends the job SUCCEEDED with result (JSON, nil for none).
	// ErrLeaseLost: the lease is no longer held; nothing changed.
	Complete(ctx context.Context, l *Lease, result json.RawMessage) error
	// Fail ends the attempt with jerr. ErrLeaseLost as for Complete.
	Fail(ctx context.Context, l *Lease, jerr *jobwatchv1.JobError, retryable bool) error
}

// BatchClaimer is a WorkerBackend that can claim several jobs in one
// call (ClaimJob's max_jobs): a Worker with several free slots claims
// for all of them at once, so a busy worker pays a fraction of a claim
// per job.
type BatchClaimer interface {
	// ClaimJobs is Claim for up to max jobs: it returns as soon as at
	// least one is ready, each RUNNING under its own lease, or none when
	// the backend's cap passes. Jobs claimed but not decodable come back
	// in undecodable, with their lease ids, for the worker to fail.
	ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) (leases []*Lease, undecodable []*UndecodableJobError, err error)
}

// Releaser is a WorkerBackend that can give back a job it claimed and
// will not run (ReleaseJob): QUEUED again at once, its attempt not
// counted. A Worker gives back the jobs of a claim answered after it
// began to stop, rather than start them while it drains; without a
// Releaser it runs them.
type Releaser interface {
	// Release gives back the job l holds. ErrLeaseLost: the lease no
	// longer holds it (given back already, cancelled); nothing changed.
	Release(ctx context.Context, l *Lease) error
}

// ClaimStopper is a WorkerBackend that can have the server answer a
// worker's parked claims at once (StopClaiming). A Worker that is
// stopping asks it, so that it receives the answer of the claim it has
// in flight rather than cut the call after claimGrace, when an answer on
// its way would be lost with it.
type ClaimStopper interface {
	StopClaiming(ctx context.Context, workerID string) error
}

// WorkerConfig tunes a Worker. Zero fields take the documented defaults.
type WorkerConfig struct {
	// ID names the worker in claims and in the job's worker_id. Default:
	// hostname-pid-random.
	ID string
	// Concurrency is how many handlers run at once. Default 1. A job
	// gives up its slot when its handler returns, and its outcome is
	// reported while the slot runs the next job, as River's completer
	// does: at most Concurrency outcomes are on their way at once, and
	// Run returns only after every one of them has been answered.
	Concurrency int
	// Queues the worker claims from; empty means any.
	Queues []string
	// HeartbeatInterval is how often a running job's lease is extended.
	// Default 10s, and never more than a third of the lease's TTL, so two
	// heartbeats can fail before the lease is lost.
	HeartbeatInterval time.Duration
	// ProgressInterval is the least time between two heartbeats that a
	// progress change brings forward. Default 200ms.
	ProgressInterval time.Duration
	// DrainTimeout is how long Run waits for running handlers after its
	// ctx ends before it cancels them (cause ErrWorkerStopped) and fails
	// their jobs as retryable; Run then returns, at most drainGrace (1 s)
	// later, without waiting for a handler that ignores its context, which
	// runs on in the background with its outcome dropped (and its job may
	// be claimed again meanwhile: a handler should heed its context). 0
	// waits as long as they take.
	DrainTimeout time.Duration
	// Backoff spaces out retried claims and reports. Zero: the defaults.
	Backoff Backoff
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// LogBufferBytes bounds the bytes of log lines (Progress.Logf) one
	// running job may have waiting to be sent. Default
	// DefaultLogBufferBytes (1 MiB); at least 256 KiB. When the server
	// takes lines slower than the handler logs them, the oldest lines
	// waiting are dropped and a line "N lines dropped by the worker"
	// takes their place, so a chatty handler never blocks and never
	// grows the worker's memory.
	LogBufferBytes int
	// TracerProvider makes the span a handler runs in, for a job
	// submitted by a traced call (its traceparent): a child of that
	// call's span, named "jobwatch.job.handle", so the handler's own
	// spans join the submitter's trace. Default otel.GetTracerProvider(),
	// which makes no spans until the program sets one.
	TracerProvider trace.TracerProvider
}

// Worker claims jobs of the kinds it has handlers for and runs them.
type Worker struct {
	backend  WorkerBackend
	cfg      WorkerConfig
	log      *slog.Logger
	mu       sync.Mutex
	handlers map[string]Handler
	running  atomic.Bool // Run is under way
}

// NewWorker returns a worker over backend. Register handlers with Handle
// before Run. It panics on a nil backend, a mistake no run could survive.
func NewWorker(backend WorkerBackend, cfg WorkerConfig) *Worker {
	if backend == nil {
		panic("client: NewWorker with a nil backend (c.WorkerBackend(), or inproc.WorkerBackend beside an engine)")
	}
	if cfg.ID == "" {
		host, _ := os.Hostname()
		cfg.ID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.N(1<<16))
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogBufferBytes <= 0 {
		cfg.LogBufferBytes = DefaultLogBufferBytes
	}
	return &Worker{
		backend:  backend,
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.ID),
		handlers: make(map[string]Handler),
	}
}

// ID is the worker's id as the server sees it.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle makes the worker claim jobs of kind and run them with h. It
// panics on a nil h, as http.Handle does: the worker would claim jobs of
// kind only to fail them.
func (w *Worker) Handle(kind string, h Handler) {
	if h == nil {
		panic("client: Handle(" + strconv.Quote(kind) + ", nil)")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers[kind] = h
}

func (w *Worker) handler(kind string) (Handler, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kinds := make([]string, 0, len(w.handlers))
	for k := range w.handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return w.handlers[kind], kinds
}

// Run claims and runs jobs until ctx ends, then stops claiming and drains:
// it waits for the running handlers (see DrainTimeout) and reports their
// outcomes before it returns. It returns nil after a drain, or the error
// of a claim the backend refused for good (such as a bad token), also
// after draining. A Worker runs once at a time: a Run while another is
// under way returns an error at once.
func (w *Worker) Run(ctx context.Context) error {
	if _, kinds := w.handler(""); len(kinds) == 0 {
		return errors.New("worker: no handlers registered")
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: already running: a Worker runs once at a time (make another for more slots, or raise Concurrency)")
	}
	defer w.running.Store(false)
	// Handlers outlive ctx: shutdown means "stop claiming", and a job
	// half done should finish and be reported, not be abandoned.
	handlerCtx, stopHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopHandlers(nil)

	// A claim outlives ctx: a job the server handed out just as ctx ended
	// is on its way, and cutting the call would leave it RUNNING under a
	// lease nobody holds until it is LOST. So the worker asks the server
	// to answer its parked claims at once (StopClaiming) and lets the
	// claim end with its answer, cutting it only after stoppedClaimGrace
	// (a claim parked on a replica that did not hear of the stop); with a backend or a server
	// that cannot, after claimGrace. A job that comes so is given back,
	// not run (giveBack).
	claimCtx, stopClaims := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClaims()
	stopAfter := context.AfterFunc(ctx, func() {
		grace := claimGrace
		if cs, ok := w.backend.(ClaimStopper); ok {
			sctx, cancel := context.WithTimeout(context.Background(), stoppedClaimGrace)
			if cs.StopClaiming(sctx, w.cfg.ID) == nil {
				grace = stoppedClaimGrace
			}
			cancel()
		}
		time.AfterFunc(grace, stopClaims)
	})
	defer stopAfter()

	slots := make(chan struct{}, w.cfg.Concurrency)
	reports := make(chan struct{}, w.cfg.Concurrency)
	var running sync.WaitGroup
	r := &retrier{b: w.cfg.Backoff}
	claims := &failures{what: "claim"}
	var runErr error
claiming:
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break claiming
		}
		// Every other free slot is claimed for in the same call: only
		// this loop fills slots, so those free now stay free until it
		// fills them.
		n := 1
		for n < min(w.cfg.Concurrency, MaxClaimJobs) {
			select {
			case slots <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		_, kinds := w.handler("")
		asked := time.Now()
		leases, undecodable, err := w.claim(claimCtx, kinds, n)
		// Each job claimed keeps one slot until it is done; the rest go
		// back now.
		for range n - len(leases) - len(undecodable) {
			<-slots
		}
		for _, u := range undecodable {
			// A job no handler could be given: fail it as a handler
			// would have, so it ends now instead of when its lease
			// expires, and the worker goes on with the next.
			running.Add(1)
			go func() {
				defer running.Done()
				s := &slot{slots: slots, reports: reports}
				defer s.release()
				w.failUndecodable(handlerCtx, s, u)
			}()
		}
		for _, lease := range leases {
			running.Add(1)
			go func() {
				defer running.Done()
				s := &slot{slots: slots, reports: reports}
				defer s.release()
				if ctx.Err() != nil && w.giveBack(lease) {
					return
				}
				w.run(handlerCtx, s, lease)
			}()
		}
		if err != nil {
			if ctx.Err() != nil {
				break claiming
			}
			if !backendTransient(ctx, err) {
				runErr = fmt.Errorf("worker: claim: %w", err)
				break claiming
			}
			claims.failed(w.log, err)
			if r.wait(ctx, err) != nil {
				break claiming
			}
			continue
		}
		claims.worked(w.log)
		if len(leases)+len(undecodable) == 0 && time.Since(asked) < minPark && ctx.Err() == nil {
			// Nothing, at once: the server is shutting down.
			if r.wait(ctx, errNotParked) != nil {
				break claiming
			}
			continue
		}
		r.reset()
	}

	drained := make(chan struct{})
	go func() { running.Wait(); close(drained) }()
	if w.cfg.DrainTimeout > 0 {
		t := time.NewTimer(w.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			w.log.Warn("drain timeout passed; cancelling running jobs")
			stopHandlers(ErrWorkerStopped)
		}
	}
	<-drained
	return runErr
}

// giveBack gives back a job claimed after the worker began to stop (the
// claim in flight answered within claimGrace: ctx had ended by the time
// it returned), so that it neither starts while the worker drains nor
// spends an attempt failing at the drain timeout, and another worker
// takes it at once. It reports false, for the job to be run after all,
// when the backend cannot give jobs back or the release failed for a
// reason other than a lease that no longer holds.
func (w *Worker) giveBack(l *Lease) bool {
	r, ok := w.backend.(Releaser)
	if !ok {
		return false
	}
	log := w.log.With("job", l.Job.GetId(), "kind", l.Job.GetKind())
	timeout := releaseTimeout
	if w.cfg.DrainTimeout > 0 {
		timeout = min(timeout, w.cfg.DrainTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := r.Release(ctx, l)
	switch {
	case err == nil:
		log.Info("claimed as the worker stopped: given back to the queue, its attempt not counted")
		return true
	case errors.Is(err, ErrLeaseLost):
		log.Info("claimed as the worker stopped, and no longer this worker's (cancelled meanwhile)", "err", err)
		return true
	}
	log.Warn("claimed as the worker stopped, and could not be given back: running it", "err", err)
	return false
}

// releaseTimeout bounds giving back one job as the worker stops, and so
// does DrainTimeout when it is shorter.
const releaseTimeout = 5 * time.Second

// drainGrace is how long a handler cancelled at the drain timeout has to
// return before the Worker stops waiting for it.
const drainGrace = time.Second

// MaxClaimJobs is the most jobs a Worker claims in one call, however
// many slots it has free: the server's limit of ClaimJob's max_jobs.
const MaxClaimJobs = jobtype.MaxClaimJobs

// claim claims up to n jobs of kinds: through BatchClaimer if the
// backend has it and n is above one, else one through Claim. Jobs it
// claimed but cannot decode come back in undecodable, to be failed.
func (w *Worker) claim(ctx context.Context, kinds []string, n int) ([]*Lease, []*UndecodableJobError, error) {
	if bc, ok := w.backend.(BatchClaimer); ok && n > 1 {
		return bc.ClaimJobs(ctx, w.cfg.ID, kinds, w.cfg.Queues, n)
	}
	lease, err := w.backend.Claim(ctx, w.cfg.ID, kinds, w.cfg.Queues)
	if undecodable := (*UndecodableJobError)(nil); errors.As(err, &undecodable) && undecodable.LeaseID != "" {
		return nil, []*UndecodableJobError{undecodable}, nil
	}
	if err != nil || lease == nil {
		return nil, nil, err
	}
	return []*Lease{lease}, nil, nil
}

// claimGrace is how long a claim in flight may still answer after Run's
// ctx ended: ample for a reply already on the wire, short enough that an
// idle worker stops at once to a person's eye.
const claimGrace = 250 * time.Millisecond

// stoppedClaimGrace is how long a claim in flight may still answer after
// Run's ctx ended once the server has been asked to answer it at once
// (StopClaiming): it answers within milliseconds, unless it is parked
// on a replica that has not heard of the stop (its database connection
// was lost).
const stoppedClaimGrace = 2 * time.Second

// backendTransient reports whether a backend call is worth repeating:
// for a remote backend as transient says, for an in-process one unless
// the backend marked the error as a refusal.
func backendTransient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return transient(ctx, err)
	}
	return !errors.Is(err, ErrRefused)
}

// ErrRefused marks backend errors that retrying cannot fix: a request the
// engine or server refused as invalid. A WorkerBackend wraps such errors
// with it.
var ErrRefused = errors.New("refused")

// A slot is what one claimed job holds: a place among Concurrency
// while its handler runs, then, while its outcome is reported, a place
// among as many reports. A job whose handler has returned thus no longer
// keeps the next one waiting for the store's commit, and a backend that
// cannot take reports stops the claims once every report is taken.
type slot struct {
	slots, reports chan struct{}
	reporting      bool
}

// report trades the slot's place among handlers for one among reports,
// waiting for one if all are taken.
func (s *slot) report() {
	if s.reporting {
		return
	}
	s.reports <- struct{}{}
	<-s.slots
	s.reporting = true
}

// release gives up whichever place the slot holds.
func (s *slot) release() {
	if s.reporting {
		<-s.reports
	} else {
		<-s.slots
	}
}

// run runs one claimed job to its end and reports the outcome.
func (w *Worker) run(ctx context.Context, s *slot, lease *Lease) {
	job := lease.Job
	log := w.log.With("job", job.GetId(), "kind", job.GetKind(), "attempt", job.GetAttempt())
	h, _ := w.handler(job.GetKind())
	if h == nil {
		// Claims name only kinds with handlers; a handler removed since.
		w.report(ctx, log, s, lease, time.Time{}, nil, fmt.Errorf("no handler for kind %q", job.GetKind()))
		return
	}

	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	logs := w.startLogs(ctx, log, lease, cancel)
	prog := newProgressState()
	progress := func(percent int, step string) {
		stream, write, isLog := logCall(percent)
		switch {
		case !isLog:
			prog.set(percent, step)
		case logs == nil:
		case write:
			logs.write(stream, []byte(step))
		default:
			logs.addLines(stream, step)
		}
	}
	stop := make(chan struct{})
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		w.heartbeat(jobCtx, log, lease, prog, stop, cancel)
	}()

	log.Debug("job started")
	handleCtx, span := w.startSpan(jobCtx, job)
	type outcome struct {
		result any
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		result, err := callHandler(handleCtx, h, job, progress)
		done <- outcome{result, err}
	}()
	var result any
	var err error
	select {
	case o := <-done:
		result, err = o.result, o.err
	case <-ctx.Done():
		// Run's drain timeout passed (ErrWorkerStopped): the job is
		// failed as retryable now, whether or not the handler heeds its
		// context. A handler that heeds it has drainGrace to return (a
		// command's process to end on its SIGTERM); one that does not
		// runs on unwatched, its outcome dropped, so that Run returns
		// when DrainTimeout says.
		grace := time.NewTimer(drainGrace)
		defer grace.Stop()
		select {
		case o := <-done:
			result, err = o.result, o.err
		case <-grace.C:
			// Said here, not read from jobCtx below: ctx's Done is
			// closed before its children are cancelled, so jobCtx may
			// not yet carry the cause.
			result, err = nil, workerStoppedError{}
			log.Warn("handler did not return when the worker stopped; its job is failed as retryable and its outcome will be dropped")
		}
	}
	endSpan(span, err)
	close(stop)
	<-beats
	if pe := (*PanicError)(nil); errors.As(err, &pe) {
		log.Error("handler panicked; its job fails without a retry", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}

	switch cause := context.Cause(jobCtx); {
	case errors.Is(cause, ErrJobCancelled):
		logs.stop(nil)
		log.Info("the server stopped the job while it ran (it was cancelled, or its queue's timeout passed); its outcome is dropped")
		return
	case errors.Is(cause, ErrLeaseLost):
		logs.stop(nil)
		log.Warn("lease lost while running; outcome dropped")
		return
	case errors.Is(cause, ErrWorkerStopped):
		result, err = nil, workerStoppedError{}
	}
	// Every line logged goes before the outcome, so a reader of the log
	// who sees the job end has seen its last line.
	s.report()
	if cause := w.flushLogs(ctx, lease, logs, time.Unix(0, prog.leaseEnd.Load())); cause != nil {
		log.Info("job ended by the server while its log was sent; outcome dropped", "cause", cause)
		return
	}
	w.report(ctx, log, s, lease, time.Unix(0, prog.leaseEnd.Load()), result, err)
}

// startLogs starts the batcher of the job's log lines, or returns nil if
// the backend takes no logs. What the server answers to an append can
// end the job's ctx as a heartbeat's answer does.
func (w *Worker) startLogs(ctx context.Context, log *slog.Logger, lease *Lease, cancel context.CancelCauseFunc) *logBatcher {
	la, ok := w.backend.(LogAppender)
	if !ok {
		return nil
	}
	send := func(ctx context.Context, lines []*jobwatchv1.AppendLogLine) (bool, error) {
		return la.AppendLogs(ctx, lease, lines)
	}
	// Its retries come at least every sixth of the lease, so that lines
	// held through an outage go soon after the server is back, while
	// the lease still has room for the outcome (flushLogs).
	p := w.cfg.Backoff.policy()
	backoff := Backoff{Initial: p.Initial, Max: max(min(p.Max, leaseTTL(lease)/6), p.Initial)}
	return startLogBatcher(ctx, send, w.cfg.LogBufferBytes, cancel, backoff, leaseTTL(lease), log)
}

// flushLogs sends the lines the job's handler left, until a sixth of the
// lease is left of it (leaseEnd, as the heartbeats last extended it) for
// the outcome, and for a third of the lease at least: the last
// heartbeat extended it at most a third ago (see heartbeat). A server
// away for a while as the handler returns (a restart) so takes the lines
// once it is back, not only if it is back within a third of the lease.
// It returns why the server stopped the log (ErrJobCancelled,
// ErrLeaseLost), if it did: then no outcome will be taken either.
func (w *Worker) flushLogs(ctx context.Context, lease *Lease, logs *logBatcher, leaseEnd time.Time) error {
	ttl := leaseTTL(lease)
	deadline := leaseEnd.Add(-ttl / 6)
	if least := time.Now().Add(ttl / 3); deadline.Before(least) {
		deadline = least
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	return logs.close(ctx)
}

// timedOut reports whether err is a call that ran out of time.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded
}

// reportFloor is the least time an outcome is tried for, the lease
// having ended or not.
const reportFloor = 5 * time.Second

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// leaseTTL is the lease's TTL, or 30 s when the backend did not say.
func leaseTTL(l *Lease) time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return 30 * time.Second
}

// failUndecodable fails a job claimed under a lease that the backend
// could not decode, with error.type "UndecodableJob".
func (w *Worker) failUndecodable(ctx context.Context, s *slot, u *UndecodableJobError) {
	log := w.log.With("job", u.JobID)
	log.Error("claimed a job that cannot be decoded; failing it", "err", u.Err)
	w.report(ctx, log, s, &Lease{Job: &jobwatchv1.Job{Id: u.JobID}, ID: u.LeaseID}, time.Time{}, nil, u)
}

// report completes or fails the job, retrying transient failures for as
// long as the lease can still be held: until leaseEnd, as the heartbeats
// last extended it (zero: a whole lease from now), and for a few seconds
// at least, so that an outcome is always tried. It first hands s's place
// among handlers to the next job.
func (w *Worker) report(ctx context.Context, log *slog.Logger, s *slot, lease *Lease, leaseEnd time.Time, result any, herr error) {
	s.report()
	ttl := leaseTTL(lease)
	if leaseEnd.IsZero() {
		leaseEnd = time.Now().Add(ttl)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), latest(leaseEnd, time.Now().Add(min(ttl/3, reportFloor))))
	defer cancel()

	var raw json.RawMessage
	if herr == nil && result != nil {
		b, err := json.Marshal(result)
		if err != nil {
			// As a result the server refuses: the job fails saying why
			// (the Node worker says the same).
			herr = &resultRejectedError{msg: "the result is not JSON: " + err.Error()}
		}
		raw = b
	}
	// Tried again at most a tenth of the lease apart, as heartbeats are:
	// an outcome that met an outage reaches the server once it is back,
	// before the lease ends (an outside probe's outcomes, backed off to
	// 10 s apart, missed a server back for 6 s, and the jobs ran again).
	p := w.cfg.Backoff.policy()
	r := &retrier{b: Backoff{Initial: p.Initial, Max: max(min(p.Max, ttl/10), p.Initial)}}
	for {
		var err error
		if herr == nil {
			err = w.backend.Complete(ctx, lease, raw)
		} else {
			jerr := &jobwatchv1.JobError{
				Type:    truncate(ErrorType(herr), jobtype.MaxErrorTypeBytes),
				Message: truncate(publicMessage(herr), jobtype.MaxErrorMessageBytes),
			}
			err = w.backend.Fail(ctx, lease, jerr, isRetryable(herr))
		}
		switch {
		case err == nil && herr == nil:
			log.Debug("job succeeded")
			return
		case err == nil:
			log.Info("job failed", "type", ErrorType(herr), "err", herr)
			return
		case errors.Is(err, ErrLeaseLost):
			log.Warn("lease lost before the outcome was reported", "err", err)
			return
		case herr == nil && refused(err):
			// The result itself was refused (too large, not JSON): the
			// job must still end, and say why, rather than be LOST.
			log.Warn("result refused; failing the job", "err", err)
			herr = &resultRejectedError{msg: connectMessage(err)}
			continue
		case refused(err) && !errors.As(herr, new(*errorRejectedError)):
			// The error report itself was refused (a field the engine
			// will not take): end the job with the refusal instead, once,
			// rather than leave it RUNNING until the lease expires.
			log.Warn("error report refused; failing the job with the refusal", "type", ErrorType(herr), "err", err)
			herr = &errorRejectedError{msg: connectMessage(err), retryable: isRetryable(herr)}
			continue
		case !backendTransient(ctx, err) || refused(err):
			log.Error("outcome refused", "err", err)
			return
		}
		if r.wait(ctx, err) != nil {
			// The last answer may have been lost on its way back from a
			// write that was made (a database gone mid-commit): the
			// server may have it.
			log.Error("outcome not confirmed before the lease ran out: unless the server recorded it, the job is retried or LOST once its lease expires", "err", err)
			return
		}
	}
}

// heartbeat extends the lease until stop closes, sending progress as it
// changes. It cancels the job's ctx when the job is cancelled or the lease
// is lost (refused, or not renewed within its TTL).
func (w *Worker) heartbeat(ctx context.Context, log *slog.Logger, lease *Lease, prog *progressState,
	stop <-chan struct{}, cancel context.CancelCauseFunc) {
	interval := w.cfg.HeartbeatInterval
	if lease.TTL > 0 {
		interval = min(interval, lease.TTL/3)
	}
	minGap := min(w.cfg.ProgressInterval, interval)
	expires := time.Now().Add(lease.TTL)
	prog.leaseEnd.Store(expires.UnixNano())
	lastSent := time.Time{}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	// Failed beats are tried again at most a tenth of the lease apart
	// (and an interval): a server back after an outage that took most of
	// the lease is asked several times before the lease ends, not once
	// an interval later, after it (an outside probe's worker lost a job
	// to a 15 s outage of a server with 30 s leases: its next try, 10 s
	// after the last, came after the lease's end).
	retryMax := interval
	if lease.TTL > 0 {
		retryMax = max(min(interval, lease.TTL/10), minGap)
	}
	r := &retrier{b: Backoff{Initial: minGap, Max: retryMax}}
	beats := &failures{what: "heartbeat"}
	var lastFailure error // the last beat that failed
	// untilExpiry bounds a wait by the lease's end as this worker counts
	// it: a beat tried then fails at once on its expired deadline and
	// stops the handler there, not a wait later, when the server may
	// already have handed the job to another worker.
	untilExpiry := func(d time.Duration) time.Duration {
		if lease.TTL > 0 {
			return min(d, time.Until(expires))
		}
		return d
	}
	// The handler may report progress and return at once (a script's last
	// "progress" line, then its result): send what the server has not seen
	// yet before the outcome, so the job ends with the step it reached.
	var sentPercent int32
	var sentStep string
	flush := func() {
		if percent, step := prog.get(); ctx.Err() == nil && (percent != sentPercent || step != sentStep) {
			if _, err := w.beat(ctx, lease, expires, percent, step); err != nil {
				log.Debug("last progress not sent", "err", err)
			}
		}
	}
	for {
		select {
		case <-stop:
			flush()
			return
		case <-timer.C:
		case <-prog.changed:
			if gap := time.Since(lastSent); gap < minGap {
				select {
				case <-stop:
					flush()
					return
				case <-time.After(untilExpiry(minGap - gap)):
				}
			}
		}
		percent, step := prog.get()
		sentAt := time.Now()
		cancelled, err := w.beat(ctx, lease, expires, percent, step)
		lastSent = sentAt
		if err == nil {
			sentPercent, sentStep = percent, step
		}
		next := interval
		switch {
		case ctx.Err() != nil:
			return // the handler's context ended (drain timeout): nothing left to extend
		case err == nil && cancelled:
			// Said now: the handler may take a while to stop (a command
			// has its SIGTERM now, and its SIGKILL later).
			log.Info("the server stopped the job (it was cancelled, or its queue's timeout passed): its handler is told to stop")
			cancel(ErrJobCancelled)
			return
		case err == nil:
			r.reset()
			beats.worked(log)
			expires = sentAt.Add(lease.TTL)
			prog.leaseEnd.Store(expires.UnixNano())
		case errors.Is(err, ErrLeaseLost):
			cancel(ErrLeaseLost)
			return
		case lease.TTL > 0 && time.Now().After(expires):
			// The last beat ran into the lease's end, its own deadline:
			// a failure before it says why (connection refused, say).
			if lastFailure == nil || !timedOut(err) {
				lastFailure = err
			}
			log.Warn("heartbeats failed for the whole lease", "err", lastFailure)
			cancel(ErrLeaseLost)
			return
		default:
			// A beat that ran out of time says less than one refused.
			if lastFailure == nil || !timedOut(err) {
				lastFailure = err
			}
			beats.failed(log, err)
			next = untilExpiry(r.delay())
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence,
// after replacing invalid UTF-8, so a report fits the engine's limits
// (jobtype.MaxStepBytes, jobtype.MaxErrorTypeBytes, jobtype.MaxErrorMessageBytes)
// instead of having every heartbeat refused until the lease is lost.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// refused reports whether the backend refused a report for what it
// carried (too large, malformed): sending it again cannot succeed.
func refused(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted:
		return true
	}
	return errors.Is(err, ErrRefused)
}

// resultRejectedError fails a job whose handler succeeded but whose
// result the server would not store; the server's reason is the message.
type resultRejectedError struct{ msg string }

func (e *resultRejectedError) Error() string         { return "result rejected: " + e.msg }
func (e *resultRejectedError) ErrorType() string     { return "ResultRejected" }
func (e *resultRejectedError) PublicMessage() string { return e.msg }

// errorRejectedError fails a job whose handler's error the backend would
// not take as it was; the backend's reason is the message.
type errorRejectedError struct {
	msg       string
	retryable bool
}

func (e *errorRejectedError) Error() string         { return "error report rejected: " + e.msg }
func (e *errorRejectedError) ErrorType() string     { return "ErrorRejected" }
func (e *errorRejectedError) PublicMessage() string { return e.msg }
func (e *errorRejectedError) Retryable() bool       { return e.retryable }

// beat sends one heartbeat. A call still unanswered when the lease
// expires is abandoned: past that point the server may have handed the
// job to another worker, and the handler must not run on waiting for it.
func (w *Worker) beat(ctx context.Context, lease *Lease, expires time.Time, percent int32, step string) (bool, error) {
	if lease.TTL > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, expires)
		defer cancel()
	}
	return w.backend.Heartbeat(ctx, lease, percent, step)
}

// callHandler runs h, turning a panic into an error so one bad job cannot
// take the worker down.
func callHandler(ctx context.Context, h Handler, job *jobwatchv1.Job, p Progress) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = nil, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h(ctx, job, p)
}

// PanicError is how a handler's panic fails its job: error.type
// "PanicError", no message, and no retry, whatever attempts are left (a
// panic is a bug, which the next attempt would meet again). The worker
// logs it at error with the handler's stack.
type PanicError struct {
	Value any
	Stack []byte // the panicking goroutine's stack (runtime/debug.Stack)
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// progressState is the latest progress of a running job, and the end
// of its lease as the heartbeats that sent it last extended it; set
// never blocks.
type progressState struct {
	mu      sync.Mutex
	percent int32
	step    string
	// leaseEnd is when the lease ends as this worker counts it (the
	// claim's or the last heartbeat's time plus the TTL), in Unix
	// nanoseconds: what the log's last lines may take of it before the
	// outcome (flushLogs).
	leaseEnd atomic.Int64
	changed  chan struct{} // buffered 1: "something changed since the last send"
}

func newProgressState() *progressState {
	return &progressState{changed: make(chan struct{}, 1)}
}

func (p *progressState) set(percent int, step string) {
	percent = min(max(percent, 0), 100)
	p.mu.Lock()
	p.percent = int32(percent)
	if step != "" {
		p.step = truncate(step, jobtype.MaxStepBytes)
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *progressState) get() (int32, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.percent, p.step
}

// workerStoppedError fails a job its worker abandoned at shutdown, as
// retryable so another worker runs it again if attempts remain.
type workerStoppedError struct{}

func (workerStoppedError) Error() string         { return "worker stopped before the job ended" }
func (workerStoppedError) PublicMessage() string { return "worker stopped before the job ended" }
func (workerStoppedError) ErrorType() string     { return "WorkerStopped" }
func (workerStoppedError) Retryable() bool       { return true }

// startSpan starts the span job's handler runs in, a child of the trace
// context the job was submitted with; without one, ctx as it is and no
// span.
func (w *Worker) startSpan(ctx context.Context, job *jobwatchv1.Job) (context.Context, trace.Span) {
	if job.GetTraceparent() == "" {
		return ctx, nil
	}
	tp := w.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	parent := tracing.Context{Parent: job.GetTraceparent(), State: job.GetTracestate()}.Into(ctx)
	return tp.Tracer("github.com/jobwatch/jobwatch/client").Start(parent, "jobwatch.job.handle",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("jobwatch.job.id", job.GetId()), attribute.String("jobwatch.job.kind", job.GetKind()),
			attribute.String("jobwatch.job.queue", job.GetQueue()), attribute.Int("jobwatch.job.attempt", int(job.GetAttempt())),
			attribute.String("jobwatch.worker.id", w.cfg.ID)))
}

// endSpan ends a handler's span with its outcome.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, ErrorType(err))
	}
	span.End()
}

// failures logs a run of failed tries of one thing (a worker's claims, a
// job's heartbeats) as an operator wants to read it while a server is
// away: the first at warn, the rest at debug, and the first success after
// them at info, with how many failed and for how long. It is used by one
// goroutine.
type failures struct {
	what  string
	n     int
	since time.Time
}

func (f *failures) failed(log *slog.Logger, err error) {
	f.n++
	if f.n == 1 {
		f.since = time.Now()
		log.Warn(f.what+" failed; retrying with backoff (until one works, further failures are logged at debug)", "err", err)
		return
	}
	log.Debug(f.what+" failed; retrying", "err", err, "failures", f.n)
}

func (f *failures) worked(log *slog.Logger) {
	if f.n == 0 {
		return
	}
	log.Info(f.what+" works again", "failures", f.n, "after", time.Since(f.since).Round(time.Millisecond))
	f.n = 0
}
