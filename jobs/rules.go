package jobs

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// Rules are the per-queue rules the engine keeps, as read from the serve
// configuration file. They are replaced whole by SetRules (a reload): each
// decision reads the rules in effect once, so no decision mixes two
// versions of them. The zero Rules declares nothing: every queue takes
// Config's defaults.
type Rules struct {
	// Source names where the rules came from ("config /etc/jobwatch.yaml"),
	// for the refusals that depend on them.
	Source string
	// Retention, when positive, replaces Config.Retention.
	Retention time.Duration
	// Strict refuses a submission to a queue that Queues does not
	// declare, as invalid_argument naming the queue and Source.
	Strict bool
	// Queues holds the rules of each declared queue, by name. A queue not
	// in it is parallel and unbounded with Config's defaults.
	Queues map[string]QueueRules
	// AlertWebhook, when set, is POSTed a JSON body (alerthook.Event)
	// each time a queue starts or stops alerting, retried with backoff.
	AlertWebhook string

	// Pools gives each pool's units: the RUNNING jobs of all the queues
	// that use a pool never number more than its units.
	Pools map[string]int

	// Schedules are the repeated jobs (schedules.go), in the file's
	// order; names are unique. A reload applies a changed Every to the
	// next run, and a removed schedule queues no more runs.
	Schedules []Schedule

	// limits are Queues' claim rules as the store checks them, leases
	// the queues' own lease timeouts and backoffs their retry backoffs
	// (Config's defaults filled in), built by SetRules.
	limits   map[string]store.QueueLimit
	leases   map[string]time.Duration
	backoffs map[string]store.Backoff
}

// QueueRules are one queue's rules. A zero field takes Config's default.
type QueueRules struct {
	// MaxAttempts is given to a submission to this queue that gives none.
	MaxAttempts int32
	// InitialBackoff and MaxBackoff bound the delay before a retry.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// LeaseTimeout is how long a RUNNING job of this queue may go without
	// a heartbeat.
	LeaseTimeout time.Duration

	// Serial: at most one RUNNING job of the queue across all workers,
	// claimed in order of RunAt, then submission, whatever the workers'
	// kinds. A job retried after a failed or lost attempt goes back with
	// a later RunAt; with BlockOnFailure it stays the head and the queue
	// waits behind it until it succeeds or runs out of attempts, without
	// it the next job goes meanwhile. A cancelled job never holds it.
	Serial         bool
	BlockOnFailure bool
	// MaxRunning bounds the queue's RUNNING jobs across all workers
	// (parallel queues); 0: unbounded.
	MaxRunning int
	// Uses names the pools of which each RUNNING job holds one unit.
	Uses []string
	// Timeout, when positive, is how long one attempt may run: the sweep
	// ends an attempt running longer as TimeoutErrorType (retryable).
	// Zero: no limit (there is no server-wide default).
	Timeout time.Duration
	// AlertAfter, when positive, makes the queue alerting while it has
	// unfinished work and has not drained for longer (alerts.go). Zero:
	// never alerting.
	AlertAfter time.Duration
}

// validate refuses rules the engine could not apply as written.
func (r Rules) validate() error {
	if r.Retention < 0 {
		return fmt.Errorf("retention must not be negative, got %v", r.Retention)
	}
	for name, q := range r.Queues {
		if err := validName("queue", name); err != nil {
			return fmt.Errorf("queue %q: %w", name, err)
		}
		if err := CheckQueueRules(q, r.Pools); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
	}
	for pool, units := range r.Pools {
		if err := validName("pool", pool); err != nil {
			return fmt.Errorf("pool %q: %w", pool, err)
		}
		if units < 1 {
			return fmt.Errorf("pool %s: must have at least 1 unit, got %d", pool, units)
		}
	}
	return nil
}

// CheckQueueRules refuses q as one queue's rules, with pools the pools
// declared, exactly as SetRules would: an *InvalidError whose Field names
// the rule at fault as the configuration file does ("max_running",
// "max_backoff", "uses[1]"). The configuration file checks each queue
// with it, so the file and the engine keep one rule.
func CheckQueueRules(q QueueRules, pools map[string]int) error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"initial_backoff", q.InitialBackoff}, {"max_backoff", q.MaxBackoff}, {"lease_timeout", q.LeaseTimeout}, {"timeout", q.Timeout}, {"alert_after", q.AlertAfter}} {
		if d.v < 0 {
			return &InvalidError{Field: d.field, Reason: "must not be negative"}
		}
	}
	switch {
	case q.MaxAttempts < 0:
		return &InvalidError{Field: "max_attempts", Reason: "must not be negative"}
	case q.InitialBackoff > 0 && q.MaxBackoff > 0 && q.MaxBackoff < q.InitialBackoff:
		return &InvalidError{Field: "max_backoff", Reason: fmt.Sprintf("%v is below initial_backoff %v", q.MaxBackoff, q.InitialBackoff)}
	case q.MaxRunning < 0:
		return &InvalidError{Field: "max_running", Reason: "must not be negative"}
	case q.Serial && q.MaxRunning > 1:
		return &InvalidError{Field: "max_running", Reason: fmt.Sprintf("a serial queue runs one job at a time: 0 or 1, got %d", q.MaxRunning)}
	case !q.Serial && q.BlockOnFailure:
		return &InvalidError{Field: "block_on_failure", Reason: "only a serial queue blocks on failure"}
	}
	for i, pool := range q.Uses {
		if _, ok := pools[pool]; !ok {
			return &InvalidError{Field: fmt.Sprintf("uses[%d]", i), Reason: fmt.Sprintf("pool %q is not declared", pool)}
		}
	}
	return nil
}

// claimLimits are the queues' claim rules in the store's terms; queues
// with none are left out, as the store treats them as unbounded.
func (r Rules) claimLimits() map[string]store.QueueLimit {
	limits := map[string]store.QueueLimit{}
	for name, q := range r.Queues {
		l := store.QueueLimit{MaxRunning: q.MaxRunning, Serial: q.Serial, HoldRetry: q.BlockOnFailure, Pools: q.Uses}
		if q.Serial {
			l.MaxRunning = 1
		}
		if l.MaxRunning > 0 || l.Serial || len(l.Pools) > 0 {
			limits[name] = l
		}
	}
	return limits
}

// SetRules replaces the rules in effect, atomically: a decision already
// under way finishes with the rules it read, every later one reads r.
// Parked calls are not disturbed, but parked claims look again, under r.
// Rules the engine cannot apply are refused and the old ones stay.
func (e *Engine) SetRules(r Rules) error {
	err := r.validate()
	if err == nil {
		err = r.validateSchedules(e.cfg.MaxPayloadBytes)
	}
	if err != nil {
		return fmt.Errorf("set rules: %w", err)
	}
	r.Queues = maps.Clone(r.Queues)
	r.Pools = maps.Clone(r.Pools)
	r.Schedules = slices.Clone(r.Schedules)
	r.limits = r.claimLimits()
	r.leases = map[string]time.Duration{}
	r.backoffs = map[string]store.Backoff{}
	for name, q := range r.Queues {
		if q.LeaseTimeout > 0 {
			r.leases[name] = q.LeaseTimeout
		}
		if q.InitialBackoff > 0 || q.MaxBackoff > 0 {
			r.backoffs[name] = e.backoffOf(q)
		}
	}
	e.rules.Store(&r)
	// New limits may give room to claimers parked behind the old ones.
	e.wakeAllClaimers()
	return nil
}

// Rules returns the rules in effect.
func (e *Engine) Rules() Rules {
	r := *e.rules.Load()
	r.Queues = maps.Clone(r.Queues)
	r.Pools = maps.Clone(r.Pools)
	r.Schedules = slices.Clone(r.Schedules)
	r.limits, r.leases, r.backoffs = nil, nil, nil
	return r
}

// queueRules returns the rules of queue with Config's defaults filled in,
// as read from the rules in effect now.
func (e *Engine) queueRules(queue string) QueueRules {
	q := e.rules.Load().Queues[queue]
	if q.MaxAttempts <= 0 {
		q.MaxAttempts = e.cfg.DefaultMaxAttempts
	}
	b := e.backoffOf(q)
	q.InitialBackoff, q.MaxBackoff = b.Initial, b.Max
	if q.LeaseTimeout <= 0 {
		q.LeaseTimeout = e.cfg.LeaseTimeout
	}
	return q
}

// backoffOf is q's retry backoff with Config's defaults filled in.
func (e *Engine) backoffOf(q QueueRules) store.Backoff {
	b := store.Backoff{Initial: q.InitialBackoff, Max: q.MaxBackoff}
	if b.Initial <= 0 {
		b.Initial = e.cfg.RetryInitialBackoff
	}
	if b.Max <= 0 {
		b.Max = max(e.cfg.RetryMaxBackoff, b.Initial)
	}
	return b
}

// leaseRules are the rules in effect as store.WriteLeases takes them,
// at now.
func (e *Engine) leaseRules(now time.Time) store.LeaseRules {
	r := e.rules.Load()
	return store.LeaseRules{
		Now:      now,
		Lease:    e.cfg.LeaseTimeout,
		Leases:   r.leases,
		Backoff:  e.backoffOf(QueueRules{}),
		Backoffs: r.backoffs,
	}
}

// retention is how long terminal jobs are kept under the rules in effect.
func (e *Engine) retention() time.Duration {
	if r := e.rules.Load().Retention; r > 0 {
		return r
	}
	return e.cfg.Retention
}

// checkDeclared refuses a submission to an undeclared queue when the rules
// are strict.
func (e *Engine) checkDeclared(queue string) error {
	r := e.rules.Load()
	if !r.Strict {
		return nil
	}
	if _, ok := r.Queues[queue]; ok {
		return nil
	}
	source := r.Source
	if source == "" {
		source = "the rules"
	}
	return &InvalidError{Field: "queue", Reason: fmt.Sprintf("queue %q is not declared in %s, which is strict", queue, source)}
}
