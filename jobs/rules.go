package jobs

import (
	"fmt"
	"maps"
	"time"
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
		switch {
		case q.MaxAttempts < 0:
			return fmt.Errorf("queue %s: max_attempts must not be negative", name)
		case q.InitialBackoff < 0 || q.MaxBackoff < 0 || q.LeaseTimeout < 0 || q.Timeout < 0 || q.AlertAfter < 0:
			return fmt.Errorf("queue %s: durations must not be negative", name)
		case q.InitialBackoff > 0 && q.MaxBackoff > 0 && q.MaxBackoff < q.InitialBackoff:
			return fmt.Errorf("queue %s: max_backoff %v is below initial_backoff %v", name, q.MaxBackoff, q.InitialBackoff)
		}
	}
	return nil
}

// SetRules replaces the rules in effect, atomically: a decision already
// under way finishes with the rules it read, every later one reads r.
// Parked calls are not disturbed. Rules the engine cannot apply are
// refused and the old ones stay.
func (e *Engine) SetRules(r Rules) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("set rules: %w", err)
	}
	r.Queues = maps.Clone(r.Queues)
	e.rules.Store(&r)
	return nil
}

// Rules returns the rules in effect.
func (e *Engine) Rules() Rules {
	r := *e.rules.Load()
	r.Queues = maps.Clone(r.Queues)
	return r
}

// queueRules returns the rules of queue with Config's defaults filled in,
// as read from the rules in effect now.
func (e *Engine) queueRules(queue string) QueueRules {
	q := e.rules.Load().Queues[queue]
	if q.MaxAttempts <= 0 {
		q.MaxAttempts = e.cfg.DefaultMaxAttempts
	}
	if q.InitialBackoff <= 0 {
		q.InitialBackoff = e.cfg.RetryInitialBackoff
	}
	if q.MaxBackoff <= 0 {
		q.MaxBackoff = max(e.cfg.RetryMaxBackoff, q.InitialBackoff)
	}
	if q.LeaseTimeout <= 0 {
		q.LeaseTimeout = e.cfg.LeaseTimeout
	}
	return q
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
