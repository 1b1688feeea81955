package jobs

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// ruleSet is the jobtype.Rules in effect with what SetRules derives from
// them: limits are the queues' claim rules as the store checks them,
// weights the tenants' weights in fair claiming (those set only), caps
// the tenants' bounds on their running jobs (those set only), leases
// the queues' own lease timeouts and backoffs their retry backoffs
// (Config's defaults filled in).
type ruleSet struct {
	jobtype.Rules
	limits   map[string]store.QueueLimit
	weights  map[string]int
	caps     map[string]int
	leases   map[string]time.Duration
	backoffs map[string]store.Backoff
	crons    map[string]*jobtype.Cron // by schedule name, each cron schedule's times (schedules.go)
	// cronSince is, by schedule name, when SetRules last changed a cron
	// schedule's times (schedules.go, cronChanges).
	cronSince map[string]time.Time
}

// namedQueues are the queues the rules name: the default queue, every
// declared queue and every schedule's (possibly with repeats), listed by
// ListQueues and /metrics while empty and paused ahead of their first
// job.
func (r *ruleSet) namedQueues() []string {
	names := []string{jobtype.DefaultQueue}
	for name := range r.Queues {
		names = append(names, name)
	}
	for _, s := range r.Schedules {
		if s.Queue != "" {
			names = append(names, s.Queue)
		}
	}
	return names
}

// NamedQueues are the queues the rules in effect name (ruleSet.namedQueues),
// possibly with repeats.
func (e *Engine) NamedQueues() []string { return e.rules.Load().namedQueues() }

// validateRules refuses rules the engine could not apply as written.
func validateRules(r jobtype.Rules) error {
	if r.Retention < 0 {
		return fmt.Errorf("retention must not be negative, got %v", r.Retention)
	}
	for name, q := range r.Queues {
		if err := jobtype.CheckName("queue", name); err != nil {
			return fmt.Errorf("queue %q: %w", name, err)
		}
		if err := jobtype.CheckQueueRules(q, r.Pools); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
	}
	for name, t := range r.Tenants {
		if err := jobtype.CheckName("tenant", name); err != nil {
			return fmt.Errorf("tenant %q: %w", name, err)
		}
		if err := jobtype.CheckTenantRules(t); err != nil {
			return fmt.Errorf("tenant %s: %w", name, err)
		}
	}
	for pool, units := range r.Pools {
		if err := jobtype.CheckName("pool", pool); err != nil {
			return fmt.Errorf("pool %q: %w", pool, err)
		}
		if units < 1 {
			return fmt.Errorf("pool %s: must have at least 1 unit, got %d", pool, units)
		}
	}
	return nil
}

// claimLimits are the queues' claim rules in the store's terms; queues
// with none are left out, as the store treats them as unbounded. A
// serial queue is serial per tenant (store.QueueLimit.Serial); only its
// own max_running 1 makes it one job at a time across tenants. Its
// max_running_per_tenant (1 at most) bounds nothing more, so the store
// is not given it: a per-tenant bound makes the store seek the queue's
// jobs tenant by tenant.
func claimLimits(r jobtype.Rules) map[string]store.QueueLimit {
	limits := map[string]store.QueueLimit{}
	for name, q := range r.Queues {
		l := store.QueueLimit{MaxRunning: q.MaxRunning, Serial: q.Serial, HoldRetry: q.BlockOnFailure, Pools: q.Uses, Rate: heldRate(q.Rate)}
		if !q.Serial {
			l.MaxRunningPerTenant = q.MaxRunningPerTenant
		}
		if l.MaxRunning > 0 || l.Serial || len(l.Pools) > 0 || !l.Rate.IsZero() || l.MaxRunningPerTenant > 0 {
			limits[name] = l
		}
	}
	return limits
}

// claimWeights are the tenants' weights in the store's terms
// (store.ClaimFilter.Weights): the tenants whose weight is set; nil when
// none is, as every tenant then weighs 1.
func claimWeights(r jobtype.Rules) map[string]int {
	var weights map[string]int
	for name, t := range r.Tenants {
		if t.Weight > 0 {
			if weights == nil {
				weights = map[string]int{}
			}
			weights[name] = t.Weight
		}
	}
	return weights
}

// claimCaps are the tenants' bounds on their running jobs in the
// store's terms (store.ClaimFilter.TenantMaxRunning): the tenants whose
// bound is set; nil when none is, as the store then seeks no queue
// tenant by tenant for them.
func claimCaps(r jobtype.Rules) map[string]int {
	var caps map[string]int
	for name, t := range r.Tenants {
		if t.MaxRunning > 0 {
			if caps == nil {
				caps = map[string]int{}
			}
			caps[name] = t.MaxRunning
		}
	}
	return caps
}

// SetRules replaces the rules in effect, atomically: a decision already
// under way finishes with the rules it read, every later one reads
// rules. Parked calls are not disturbed, but parked claims look again,
// under the new rules.
// Rules the engine cannot apply are refused and the old ones stay.
func (e *Engine) SetRules(rules jobtype.Rules) error {
	err := validateRules(rules)
	if err == nil {
		err = validateSchedules(rules, e.cfg.MaxPayloadBytes)
	}
	if err != nil {
		return fmt.Errorf("set rules: %w", err)
	}
	rules.Queues = maps.Clone(rules.Queues)
	rules.Pools = maps.Clone(rules.Pools)
	rules.Schedules = slices.Clone(rules.Schedules)
	rules.Tenants = maps.Clone(rules.Tenants)
	r := ruleSet{
		Rules:    rules,
		limits:   claimLimits(rules),
		weights:  claimWeights(rules),
		caps:     claimCaps(rules),
		leases:   map[string]time.Duration{},
		backoffs: map[string]store.Backoff{},
		crons:    cronsOf(rules),
	}
	r.cronSince = cronChanges(e.rules.Load(), rules, e.now())
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
func (e *Engine) Rules() jobtype.Rules {
	r := e.rules.Load().Rules
	r.Queues = maps.Clone(r.Queues)
	r.Pools = maps.Clone(r.Pools)
	r.Schedules = slices.Clone(r.Schedules)
	r.Tenants = maps.Clone(r.Tenants)
	return r
}

// queueRules returns the rules of queue with Config's defaults filled in,
// as read from the rules in effect now.
func (e *Engine) queueRules(queue string) jobtype.QueueRules {
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
func (e *Engine) backoffOf(q jobtype.QueueRules) store.Backoff {
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
		Backoff:  e.backoffOf(jobtype.QueueRules{}),
		Backoffs: r.backoffs,
	}
}

// Retention is how long terminal jobs are kept under the rules in effect:
// the rules' retention, else Config.Retention.
func (e *Engine) Retention() time.Duration {
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
	return &jobtype.InvalidError{Field: "queue", Reason: fmt.Sprintf("queue %q is not declared in %s, which is strict", queue, source)}
}
