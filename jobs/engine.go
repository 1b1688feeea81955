// Package jobs is the engine of jobwatch: it decides every state change of
// a job (submit, start, claim, heartbeat, complete, fail, cancel, lease
// expiry, retention), commits it through a store.Store and then publishes
// the committed snapshot to a watch.Hub, which wakes parked waiters,
// watchers and claimers. It knows nothing of Connect, HTTP or SQL.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"jobwatch/store"
	"jobwatch/watch"
)

// Config tunes an Engine. Zero fields take the documented defaults.
type Config struct {
	// LeaseTimeout is how long a RUNNING job may go without a heartbeat
	// before it is LOST (or re-queued when attempts remain). Default 30s.
	LeaseTimeout time.Duration
	// SweepInterval is how often expired leases and old jobs are looked
	// for. Default 1s.
	SweepInterval time.Duration
	// Retention is how long terminal jobs are kept. Default 24h.
	Retention time.Duration
	// DefaultMaxAttempts applies when a submission says 0. Default 1.
	DefaultMaxAttempts int32
	// RetryInitialBackoff and RetryMaxBackoff bound the exponential,
	// jittered delay before a retryable failure runs again. Defaults 1s
	// and 1m.
	RetryInitialBackoff time.Duration
	RetryMaxBackoff     time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives the engine's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics observes the engine. Default: observes nothing.
	Metrics Metrics
}

// Metrics is what the engine reports; package server implements it with
// Prometheus.
type Metrics interface {
	// Woke is called when a parked wait ("wait"), watch ("watch") or
	// claim ("claim") wakes because of a change, with the time from the
	// change's commit to the wake-up.
	Woke(kind string, latency time.Duration)
}

// Errors the engine returns; package server maps them to Connect codes.
var (
	ErrNotFound   = store.ErrNotFound                            // not_found
	ErrNotStarted = errors.New("job is pending: start it first") // failed_precondition (wait on PENDING)
	// ErrStaleLease: the lease id does not hold the job any more (it was
	// cancelled, lost, re-claimed or finished). Nothing was changed.
	ErrStaleLease  = errors.New("lease is not held") // failed_precondition
	ErrNoJob       = store.ErrNoJob                  // claim cap passed
	ErrUnavailable = store.ErrUnavailable            // unavailable
)

// InvalidError is a request the engine refuses because of one field.
type InvalidError struct {
	Field  string // as named in the API, e.g. "kind"
	Reason string // e.g. "must not be empty"
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// StateError is a request that does not fit the job's current state, such
// as starting a job that has already ended. failed_precondition.
type StateError struct {
	JobID string
	State store.State
	Op    string // "start", "cancel", ...
}

func (e *StateError) Error() string {
	return "cannot " + e.Op + " job " + e.JobID + ": it is " + string(e.State)
}

// The conflict of SubmitJob is a *store.ConflictError (already_exists).

// Engine runs jobs. Create it with New; it is safe for concurrent use.
type Engine struct {
	store store.Store
	hub   *watch.Hub[store.Job]
	cfg   Config
	// TODO(jobs helper): shutdown channel, claim signal, tenant signals.
}

// New returns an engine over st.
func New(st store.Store, cfg Config) *Engine {
	panic("unimplemented")
}

// Run performs the periodic duties (lease expiry, retention) until ctx
// ends. It is safe to run on several replicas at once.
func (e *Engine) Run(ctx context.Context) error { panic("unimplemented") }

// Sweep runs the periodic duties once, now: expire stale leases, delete
// jobs past retention. Tests call it instead of waiting for Run.
func (e *Engine) Sweep(ctx context.Context) error { panic("unimplemented") }

// Shutdown makes every parked Wait, Watch, WatchTenant and Claim return at
// once (OK, with the latest state) and every later one return without
// parking. It is idempotent.
func (e *Engine) Shutdown() { panic("unimplemented") }

// Publish hands a snapshot committed elsewhere (another replica) to the
// local hub, as if this engine had committed it.
func (e *Engine) Publish(j store.Job) { panic("unimplemented") }

// SubmitRequest describes a new job. Zero fields take defaults.
type SubmitRequest struct {
	Tenant      string // "" : "default"
	Kind        string // required
	Queue       string // "" : "default"
	Payload     json.RawMessage
	UniqueKey   string
	Hold        bool
	RunAt       time.Time
	MaxAttempts int32
}

// Submit creates a job QUEUED (PENDING with Hold).
func (e *Engine) Submit(ctx context.Context, r SubmitRequest) (store.Job, error) {
	panic("unimplemented")
}

// Start moves a PENDING job to QUEUED.
func (e *Engine) Start(ctx context.Context, id string) (store.Job, error) { panic("unimplemented") }

// Get returns a job.
func (e *Engine) Get(ctx context.Context, id string) (store.Job, error) { panic("unimplemented") }

// List returns jobs newest first.
func (e *Engine) List(ctx context.Context, f store.ListFilter) ([]store.Job, string, error) {
	panic("unimplemented")
}

// Cancel makes an active job CANCELLED at once.
func (e *Engine) Cancel(ctx context.Context, id string) (store.Job, error) { panic("unimplemented") }

// Wait subscribes to the job, then reads it: a terminal job returns at
// once, a PENDING one ErrNotStarted, an unknown one ErrNotFound. Otherwise
// it waits for a terminal state until the deadline, ctx's end or Shutdown,
// and returns the latest state (nil error) in each of those cases.
func (e *Engine) Wait(ctx context.Context, id string, deadline time.Time) (store.Job, error) {
	panic("unimplemented")
}

// WatchOptions says how long to watch and where to send snapshots.
type WatchOptions struct {
	// AfterVersion: the first snapshot sent is the current one if its
	// version is above AfterVersion (always when 0), or when AfterVersion
	// is above the current version (a restored database).
	AfterVersion int64
	// Deadline ends the watch (nil error) at the stream lifetime limit.
	Deadline time.Time
	// Keepalive: Send(nil) after this long without a snapshot. 0: never.
	Keepalive time.Duration
	// Send delivers a snapshot, or nil for a keepalive. An error ends the
	// watch with that error.
	Send func(*store.Job) error
}

// Watch sends the job's snapshots as DESIGN.md says for WatchJob: current
// first, then each change (a slow Send skips to the latest), and returns
// nil right after sending a terminal snapshot, at the deadline, or on
// Shutdown. ErrNotFound for an unknown job.
func (e *Engine) Watch(ctx context.Context, id string, o WatchOptions) error {
	panic("unimplemented")
}

// TenantWatchOptions are WatchOptions for a whole tenant.
type TenantWatchOptions struct {
	// ResumeToken from the last batch; "" starts with the PageSize most
	// recent jobs.
	ResumeToken string
	PageSize    int
	Deadline    time.Time
	Keepalive   time.Duration
	// Send delivers the jobs changed since the last batch and the token
	// to resume after them; an empty batch is a keepalive.
	Send func(jobs []store.Job, resumeToken string) error
}

// WatchTenant sends batches of a tenant's changed jobs until the
// deadline, ctx's end or Shutdown.
func (e *Engine) WatchTenant(ctx context.Context, tenant string, o TenantWatchOptions) error {
	panic("unimplemented")
}

// ClaimRequest says which jobs a worker may run.
type ClaimRequest struct {
	WorkerID string
	Kinds    []string // empty: any
	Queues   []string // empty: any
}

// Claim gives the worker the oldest ready job it may run, RUNNING under a
// new lease (job.LeaseID, job.LeaseExpiresAt). With none ready it parks
// until one is, or until the deadline, ctx's end or Shutdown, and then
// returns ErrNoJob.
func (e *Engine) Claim(ctx context.Context, r ClaimRequest, deadline time.Time) (store.Job, error) {
	panic("unimplemented")
}

// Heartbeat extends the lease and records progress (percent clamped to
// 0..100 and never lowered; an empty step keeps the last). A job cancelled
// while the lease was held returns with State Cancelled and nil error, so
// the worker learns of it; any other lease mismatch is ErrStaleLease.
func (e *Engine) Heartbeat(ctx context.Context, id, leaseID string, percent int32, step string) (store.Job, error) {
	panic("unimplemented")
}

// Complete ends the job SUCCEEDED with result and percent 100.
func (e *Engine) Complete(ctx context.Context, id, leaseID string, result json.RawMessage) (store.Job, error) {
	panic("unimplemented")
}

// Fail ends the attempt. With retryable and attempts left the job is
// QUEUED again with Attempt+1 after a backoff (RunAt) and Error saying why
// the last attempt ended; otherwise it is FAILED.
func (e *Engine) Fail(ctx context.Context, id, leaseID string, jerr store.JobError, retryable bool) (store.Job, error) {
	panic("unimplemented")
}
