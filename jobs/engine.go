// Package jobs is the engine of jobwatch: it decides every state change of
// a job (submit, start, claim, heartbeat, complete, fail, cancel, lease
// expiry, retention), commits it through a store.Store and then publishes
// the committed snapshot: to a watch.Hub, which wakes parked waiters and
// watchers, and to the registry of parked claims, which wakes one claim
// that may run a job newly ready (claimers.go). It knows nothing of
// Connect, HTTP or SQL, and it must never publish a change before the
// store has committed it.
//
// A job's path through the files of this package, in order: submit.go
// (Submit, Start, Get, List, Cancel), claim.go (Claim) and claimers.go
// (whom a change wakes), lease.go (Heartbeat, Complete, Fail), sweep.go
// (lease expiry, retention; with timeout.go, schedules.go and alerts.go
// for the other periodic duties), wait.go (Wait) and watch.go (Watch,
// WatchTenant), which hand on the Snapshot a publish shares among every
// call it wakes (snapshot.go); rules.go holds the per-queue rules read from the
// configuration file (Rules, SetRules, swapped whole on a reload);
// limits.go holds every limit
// on what callers send, for the server and the client to map and trim
// to. This file holds what they share: configuration, errors, publishing
// and shutdown.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/watch"
)

// Defaults that callers of the engine show or share.
const (
	// DefaultLeaseTimeout is Config.LeaseTimeout's default.
	DefaultLeaseTimeout = 30 * time.Second
	// DefaultClaimCap is how long a parked claim waits for a job before
	// it answers with none, unless told otherwise: the server's
	// ClaimCap and in-process workers (jobs/inproc) default to it. The
	// engine itself takes each claim's deadline from its caller.
	DefaultClaimCap = 30 * time.Second
)

// Config tunes an Engine. Zero fields take the documented defaults.
type Config struct {
	// LeaseTimeout is how long a RUNNING job may go without a heartbeat
	// before it is LOST (or re-queued when attempts remain). Default
	// DefaultLeaseTimeout (30s).
	LeaseTimeout time.Duration
	// SweepInterval is how often expired leases and old jobs are looked
	// for. Default 1s.
	SweepInterval time.Duration
	// Retention is how long terminal jobs are kept. Default 24h.
	Retention time.Duration
	// DepthInterval is how often the sweep samples each queue's depth for
	// ListQueues' history (see depth.go): DepthWindow / DepthInterval
	// samples per queue. Default 15s (60 samples cover 15 minutes).
	DepthInterval time.Duration
	// DefaultMaxAttempts applies when a submission says 0. Default 1.
	DefaultMaxAttempts int32
	// RetryInitialBackoff and RetryMaxBackoff bound the exponential,
	// jittered delay before a retryable failure runs again. Defaults 1s
	// and 1m.
	RetryInitialBackoff time.Duration
	RetryMaxBackoff     time.Duration
	// WriteTurnWait bounds how long a caller's write waits for its turn
	// (fairwrites.go) before it is refused unavailable. Default
	// DefaultWriteTurnWait.
	WriteTurnWait time.Duration
	// MaxPayloadBytes bounds a job's payload and a worker's result as
	// JSON; larger ones are a *jobtype.TooLargeError. Default
	// jobtype.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Now is the wall clock, read for what is stored or shown: the
	// stamps of a job, its RunAt, its lease's expiry, retention. Default:
	// the database's clock (store.Store.Now), read through an offset
	// from this machine's that Run measures again every 30 s, so that
	// replicas agree on time. The deadlines of parked calls never read it: they are
	// instants on the monotonic clock (see Wait), so neither a fake clock
	// nor a step of the system's clock can stretch a cap.
	Now func() time.Time
	// Logger receives the engine's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics observes the engine. Default: observes nothing.
	Metrics Metrics
	// Rules are the per-queue rules in effect at start; SetRules
	// replaces them. The zero Rules declares no queue.
	Rules jobtype.Rules
	// Alerts delivers a queue's alert starting and ending to
	// Rules.AlertWebhook (alerts.go); the engine knows no HTTP, so it is
	// given the sender: serve gives it an *alerthook.Hook. Default nil:
	// changes are logged, and a webhook in the rules is logged as not
	// sent.
	Alerts AlertSender
	// Tracer, when set, records the spans of jobs that carry a trace
	// context (jobs/trace.go); nil records none and costs nothing.
	Tracer trace.Tracer
}

func (c Config) withDefaults() Config {
	if c.LeaseTimeout <= 0 {
		c.LeaseTimeout = DefaultLeaseTimeout
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.DepthInterval <= 0 {
		c.DepthInterval = 15 * time.Second
	}
	if c.DefaultMaxAttempts <= 0 {
		c.DefaultMaxAttempts = 1
	}
	if c.RetryInitialBackoff <= 0 {
		c.RetryInitialBackoff = time.Second
	}
	if c.RetryMaxBackoff <= 0 {
		c.RetryMaxBackoff = time.Minute
	}
	if c.RetryMaxBackoff < c.RetryInitialBackoff {
		c.RetryMaxBackoff = c.RetryInitialBackoff
	}
	if c.WriteTurnWait <= 0 {
		c.WriteTurnWait = DefaultWriteTurnWait
	}
	if c.MaxPayloadBytes <= 0 {
		c.MaxPayloadBytes = jobtype.DefaultMaxPayloadBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	return c
}

// Metrics is what the engine reports; package server implements it with
// Prometheus.
type Metrics interface {
	// Woke is called when a parked wait ("wait"), watch ("watch") or
	// claim ("claim") wakes because of a change, with the time from the
	// change's commit to the wake-up.
	Woke(kind string, latency time.Duration)
}

type noMetrics struct{}

func (noMetrics) Woke(string, time.Duration) {}

// Errors the engine returns, possibly wrapped (use errors.Is); package
// server maps them to Connect codes. Besides these, the engine returns the
// store's: jobtype.ErrNotFound (not_found), jobtype.ErrNoJob (a claim's
// cap passed) and jobtype.ErrUnavailable (unavailable).
var (
	ErrNotStarted = errors.New("job is pending: start it first") // failed_precondition (wait on PENDING)
	// ErrStaleLease: the lease id does not hold the job any more (it was
	// cancelled, lost, re-claimed or finished). Nothing was changed.
	ErrStaleLease = errors.New("lease is not held") // failed_precondition
)

// A request the engine refuses because of one field is a
// *jobtype.InvalidError, and a payload or result over
// Config.MaxPayloadBytes a *jobtype.TooLargeError, both returned
// unwrapped.

// StateError is a request that does not fit the job's current state, such
// as starting a job that has already ended. failed_precondition. It is
// returned unwrapped.
type StateError struct {
	JobID string
	State jobtype.State
	Op    string // "start", "cancel", ...
	// Hint, when set, says what would let Op succeed ("cancel it first").
	Hint string
}

func (e *StateError) Error() string {
	is := "it is "
	switch e.State {
	case jobtype.Succeeded, jobtype.Failed:
		is = "it has "
	case jobtype.Cancelled, jobtype.Lost:
		is = "it was "
	}
	msg := "cannot " + e.Op + " job " + e.JobID + ": " + is + string(e.State)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// The conflict of SubmitJob is a *jobtype.ConflictError (already_exists),
// returned unwrapped.

// Engine runs jobs. Create it with New; it is safe for concurrent use.
type Engine struct {
	store store.Store
	cfg   Config
	log   *slog.Logger
	// retention paces the deletion of jobs past retention (sweep.go).
	retention retentionPace

	// rules are the Rules in effect; SetRules swaps them whole, and each
	// decision loads them once.
	rules atomic.Pointer[ruleSet]

	// hub holds each watched job's latest committed snapshot, keyed by id:
	// one *Snapshot per publish, shared by every call it wakes.
	hub *watch.Hub[*Snapshot]
	// rereads shares the read of a job between the waits of it that end
	// at once (Shutdown ends them all), and shutdownReads keeps each such
	// read after Shutdown a while for the waits that come to it later:
	// see rereadSnapshot.
	rereads       singleflight.Group
	shutdownReads sync.Map // job id → *Snapshot
	// hearing marks the batches of heard changes being published to hub
	// one job at a time (listen.go).
	hearing hearing
	// signals carries no values, only "look again": the key
	// tenantSignal(t) wakes WatchTenant streams of tenant t. Each publish
	// takes the next value of signalSeq as its version, so it is always
	// newer than whatever a cell holds.
	signals   *watch.Hub[struct{}]
	signalSeq atomic.Int64
	// logs wakes the watchers of a job's log, keyed by job id (logs.go):
	// each publish carries the lines an append added when the engine
	// knows them (nil: look in the store), and takes the next value of
	// signalSeq as its version.
	logs *watch.Hub[*logBatch]
	// claimers are the Claims in progress, which publish wakes one at a
	// time (claimers.go).
	claimers claimers
	// alerts remembers what the sweep needs to log alerts once;
	// Config.Alerts posts their changes to Rules.AlertWebhook.
	alerts alertState
	// depth is each queue's recent depth, sampled by the sweep.
	depth depthHistory

	// lostClaims are the leases of claims whose answer was lost, whose
	// jobs the sweep gives back (lostclaims.go).
	lostClaims lostClaims
	// started is when New made the engine; soleServer, whether the store
	// serves this process alone: with both, the sweep knows a lease from
	// before started for one that a stopped process handed out
	// (unansweredBeforeStart, lostclaims.go).
	started    time.Time
	soleServer bool
	// leaseWriter combines the writes of workers holding leases
	// (leasewrites.go).
	leaseWriter leaseWriter
	// deadlines are the caps of parked calls, shared (deadlines.go).
	deadlines *deadlines
	// changeReads shares the reads of WatchTenant's windows among a
	// tenant's streams (changereads.go).
	changeReads changeReads
	// heldWakes are other replicas' queued jobs waiting to wake a
	// claimer here (listen.go).
	heldWakes heldWakes
	// clock is the database's clock (listen.go), nil when Config.Now
	// was given.
	clock *storeClock
	// listenCtx lives while the engine hears the store's changes
	// (listen.go); stopListening ends it.
	listenCtx     context.Context
	stopListening context.CancelFunc
	// turns gives callers' reads their turns by reader (fairreads.go),
	// writeTurns their writes by writer (fairwrites.go).
	turns, writeTurns *turns
	// done is closed by Shutdown; every parked call selects on it.
	done     chan struct{}
	shutdown sync.Once
}

func tenantSignal(tenant string) string { return "tenant/" + tenant }

// New returns an engine over st. Rules in cfg that SetRules would refuse
// are logged and replaced by the zero Rules; package config refuses such
// a file earlier, with the line at fault.
func New(st store.Store, cfg Config) *Engine {
	var clock *storeClock
	if cfg.Now == nil {
		clock = &storeClock{st: st}
		cfg.Now = clock.now
	}
	cfg = cfg.withDefaults()
	reads := newTurns(DefaultReads)
	if r, ok := st.(interface{ ReadConns() int }); ok {
		reads = newTurns(r.ReadConns())
	}
	e := &Engine{
		store:      fairReads{Store: st, turns: reads},
		turns:      reads,
		writeTurns: newTurns(writePlaces),
		cfg:        cfg,
		log:        cfg.Logger,
		hub:        watch.NewHub[*Snapshot](),
		signals:    watch.NewHub[struct{}](),
		logs:       watch.NewHub[*logBatch](),
		deadlines:  newDeadlines(),
		done:       make(chan struct{}),
		clock:      clock,
	}
	if clock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := clock.sync(ctx); err != nil {
			e.log.Warn("cannot read the database's clock; using this machine's until it answers", "err", err)
		}
		cancel()
	}
	e.started = e.now()
	if s, ok := st.(interface{ SoleServer() bool }); ok {
		e.soleServer = s.SoleServer()
	}
	e.startListening()
	e.rules.Store(&ruleSet{})
	if err := e.SetRules(cfg.Rules); err != nil {
		e.log.Error("rules refused: no queue is declared", "err", err)
	}
	e.cfg.Rules = jobtype.Rules{}
	return e
}

// Config returns the configuration in effect, defaults filled in, with
// the Rules in effect now.
func (e *Engine) Config() Config {
	c := e.cfg
	c.Rules = e.Rules()
	return c
}

// Shutdown makes every parked Wait, Watch, WatchTenant and Claim return at
// once (OK, with the latest state) and every later one return without
// parking. It is idempotent.
func (e *Engine) Shutdown() {
	e.shutdown.Do(func() {
		close(e.done)
		e.stopListening()
		e.stopDueTimer()
	})
}

// publish wakes everyone who may care about the committed snapshot j: its
// waiters and watchers, its tenant's feeds, and the claimers it may give
// work or room to. It must only be called after the commit, so that
// whoever wakes and reads the store sees at least j.
func (e *Engine) publish(j jobtype.Job) {
	e.hub.Publish(j.ID, j.Version, &Snapshot{Job: j, shared: true})
	e.signals.Publish(tenantSignal(j.Tenant), e.signalSeq.Add(1), struct{}{})
	e.wakeClaimers(j)
}

// now is the wall-clock time for stamps. UTC drops the monotonic
// reading, which a stored or shown time has no use for; deadlines are
// never compared with it (see timerUntil).
func (e *Engine) now() time.Time { return e.cfg.Now().UTC() }

// woke reports a wake-up caused by the change committed at changedAt.
func (e *Engine) woke(kind string, changedAt time.Time) {
	d := e.now().Sub(changedAt)
	if d < 0 {
		d = 0
	}
	e.cfg.Metrics.Woke(kind, d)
}

// errUnchanged, returned by an update function, leaves the job as it is
// and makes update return the job as read, with a nil error.
var errUnchanged = errors.New("unchanged")

// update changes job id in one store transaction and publishes the result
// if a watcher could see the difference. change gets the job as stored and
// the time of the change; it returns errUnchanged to change nothing, or
// another error to refuse. UpdatedAt is set here, only for visible changes,
// so that it always says when the version last went up.
func (e *Engine) update(ctx context.Context, op, id string, change func(j *jobtype.Job, now time.Time) error) (jobtype.Job, error) {
	return e.updateWithin(ctx, op, id, store.Quota{}, change)
}

// updateWithin is update under q: a change that makes the job not yet
// running again is refused with the *jobtype.QuotaError when its tenant
// is at its bound (store.Store.UpdateJobWithin).
func (e *Engine) updateWithin(ctx context.Context, op, id string, q store.Quota, change func(j *jobtype.Job, now time.Time) error) (jobtype.Job, error) {
	if err := validID("job_id", id); err != nil {
		return jobtype.Job{}, err
	}
	write := e.store.UpdateJob
	if len(q.MaxQueued) > 0 {
		write = func(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
			return e.store.UpdateJobWithin(ctx, id, q, update)
		}
	}
	var before jobtype.Job
	j, err := write(ctx, id, func(j *jobtype.Job) error {
		before = *j
		now := e.now()
		if err := change(j, now); err != nil {
			return err
		}
		if !j.SameVisible(&before) {
			j.UpdatedAt = now
		}
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged):
		return before, nil
	case err != nil:
		return jobtype.Job{}, wrap(op, id, err)
	}
	if j.Version != before.Version {
		e.publish(j)
	}
	return j, nil
}

// wrap says what was being done, except for the typed errors that callers
// read fields of: those go through as they are.
func wrap(op, id string, err error) error {
	var (
		invalid  *jobtype.InvalidError
		tooLarge *jobtype.TooLargeError
		state    *StateError
		conflict *jobtype.ConflictError
		quota    *jobtype.QuotaError
	)
	if errors.As(err, &invalid) || errors.As(err, &tooLarge) || errors.As(err, &state) || errors.As(err, &conflict) ||
		errors.As(err, &quota) {
		return err
	}
	if id == "" {
		return fmt.Errorf("%s job: %w", op, err)
	}
	return fmt.Errorf("%s job %s: %w", op, id, err)
}

// timerUntil returns a channel that fires at the deadline t, at most a
// 64th of the wait (and 16ms) late, never early, and a stop function. The
// zero t never fires. Parked calls share one timer per slot of deadlines
// (see deadlines), not one each.
//
// A deadline is an instant taken from time.Now (or a context's deadline,
// which is one) plus the time allowed, so it carries a monotonic reading
// and the wait is measured by the monotonic clock: a step of the wall
// clock, or an engine clock (Config.Now) that is not the wall clock,
// cannot stretch or cut it.
func (e *Engine) timerUntil(t time.Time) (<-chan time.Time, func()) {
	return e.deadlines.until(t)
}
