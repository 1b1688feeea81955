package jobtype

import (
	"encoding/json"
	"fmt"
	"time"
)

// Defaults of a job that names no tenant or no queue.
const (
	DefaultTenant = "default"
	DefaultQueue  = "default"
)

// Rules are the per-queue rules the engine keeps, as read from the serve
// configuration file. They are replaced whole by jobs.Engine.SetRules (a
// reload): each decision reads the rules in effect once, so no decision
// mixes two versions of them. The zero Rules declares nothing: every queue takes
// the engine's defaults (jobs.Config).
type Rules struct {
	// Source names where the rules came from ("config /etc/jobwatch.yaml"),
	// for the refusals that depend on them.
	Source string
	// Retention, when positive, replaces jobs.Config.Retention.
	Retention time.Duration
	// Strict refuses a submission to a queue that Queues does not
	// declare, as invalid_argument naming the queue and Source.
	Strict bool
	// Queues holds the rules of each declared queue, by name. A queue not
	// in it is parallel and unbounded with the engine's defaults.
	Queues map[string]QueueRules
	// AlertWebhook, when set, is POSTed a JSON body (alerthook.Event)
	// each time a queue starts or stops alerting, retried with backoff.
	AlertWebhook string

	// Pools gives each pool's units: the RUNNING jobs of all the queues
	// that use a pool never number more than its units.
	Pools map[string]int

	// Schedules are the repeated jobs (see Schedule), in the file's
	// order; names are unique. A reload applies a changed Every to the
	// next run, and a removed schedule queues no more runs.
	Schedules []Schedule

	// Tenants holds the rules of each tenant that has any, by name (a
	// name CheckName accepts as a tenant). A tenant not in it has no
	// limits.
	Tenants map[string]TenantRules
}

// TenantRules are one tenant's rules. A zero field sets no limit.
type TenantRules struct {
	// MaxQueued bounds the tenant's jobs not yet running (in one of
	// QueuedStates) at once, across every replica sharing the database:
	// a submission, a batch or a retry by an operator that would take
	// them past it is refused whole with a *QuotaError. What the engine
	// queues on its own is never refused, but counts: a failed or lost
	// attempt queued again, a schedule's run. A bound lowered below what
	// is queued refuses until the tenant is back under it. 0: no limit.
	MaxQueued int
	// MaxRunning bounds the tenant's RUNNING jobs, in all queues
	// together, across every replica sharing the database: a claim
	// takes none of the tenant's jobs while it has that many running
	// (claims of its jobs wait, the other tenants' are served), and a
	// claim parked behind the bound is woken when one of them ends or
	// is queued again. It never refuses a submission. A bound lowered
	// below what runs stops nothing: claims wait until the tenant is
	// back under it. 0: no limit.
	MaxRunning int
	// Weight is the tenant's share of claims inside each queue it shares
	// with other tenants that have ready jobs: a tenant of weight 3 is
	// handed three jobs for each one a tenant of weight 1 is (fair
	// claiming, store.FairState). It decides between tenants only: a
	// tenant alone in a queue gets every claim whatever its weight, and
	// its own jobs keep the queue's order. 0: the default, 1; else 1 to
	// MaxTenantWeight.
	Weight int
}

// MaxTenantWeight bounds TenantRules.Weight. A share of more than a
// thousand to one is beyond what an operator means to set; a larger
// number is more likely a typo (a count of jobs, a quota) than a share.
const MaxTenantWeight = 1000

// QueuedStates are the states of a job not yet running, which
// TenantRules.MaxQueued bounds: held, waiting for its dependencies, or
// queued (also while it backs off before a retry, or waits for its
// RunAt).
var QueuedStates = []State{Pending, Waiting, Queued}

// CheckTenantRules refuses t as one tenant's rules, exactly as
// jobs.Engine.SetRules would: an *InvalidError whose Field names the
// rule at fault as the configuration file does ("max_queued",
// "max_running", "weight"). A Weight of 0 is the default, 1: the
// configuration file, where a weight is written only to be set,
// refuses 0 itself.
func CheckTenantRules(t TenantRules) error {
	switch {
	case t.MaxQueued < 0:
		return &InvalidError{Field: "max_queued", Reason: fmt.Sprintf("must not be negative, got %d", t.MaxQueued)}
	case t.MaxRunning < 0:
		return &InvalidError{Field: "max_running", Reason: fmt.Sprintf("must not be negative, got %d", t.MaxRunning)}
	case t.Weight < 0 || t.Weight > MaxTenantWeight:
		return &InvalidError{Field: "weight", Reason: fmt.Sprintf("must be 1 to %d (or 0 for the default, 1), got %d", MaxTenantWeight, t.Weight)}
	}
	return nil
}

// QuotaError refuses a write that would take a tenant's jobs not yet
// running past its TenantRules.MaxQueued. Its message names the tenant,
// the count and the bound, and nothing else of the store.
type QuotaError struct {
	Tenant    string
	MaxQueued int
	// Queued is how many of the tenant's jobs were not yet running when
	// the write was refused, counted up to MaxQueued + 1: more reads as
	// MaxQueued + 1, so the count never costs more than the bound.
	Queued int
	// Adding is how many jobs not yet running the refused write would
	// have added (a batch's, or 1).
	Adding int
}

func (e *QuotaError) Error() string {
	const wait = "wait for some to start or end"
	switch {
	case e.Queued > e.MaxQueued:
		return fmt.Sprintf("tenant %q has more than %s not yet running, its max_queued is %d: %s",
			e.Tenant, jobCount(e.MaxQueued), e.MaxQueued, wait)
	case e.Queued == e.MaxQueued:
		return fmt.Sprintf("tenant %q has %s not yet running, its max_queued is %d: %s",
			e.Tenant, jobCount(e.Queued), e.MaxQueued, wait)
	}
	return fmt.Sprintf("tenant %q has %s not yet running, its max_queued is %d: %d more would pass it; submit at most %d, or %s",
		e.Tenant, jobCount(e.Queued), e.MaxQueued, e.Adding, e.MaxQueued-e.Queued, wait)
}

// jobCount is "1 job" or "n jobs".
func jobCount(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

// QueueRules are one queue's rules. A zero field takes the engine's
// default (jobs.Config).
type QueueRules struct {
	// MaxAttempts is given to a submission to this queue that gives none.
	MaxAttempts int32
	// InitialBackoff and MaxBackoff bound the delay before a retry.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// LeaseTimeout is how long a RUNNING job of this queue may go without
	// a heartbeat.
	LeaseTimeout time.Duration

	// Serial: serial per tenant. Of each tenant's jobs in the queue at
	// most one is RUNNING across all workers, claimed in order of RunAt,
	// then submission, whatever the workers' kinds; the tenants' heads
	// are handed out fairly (TenantRules.Weight), and one tenant's head,
	// even of a kind no worker runs, never holds another tenant's jobs
	// back. With MaxRunning 1 as well, one job of the queue runs at a
	// time across all tenants, each tenant's still in its order. A job
	// retried after a failed or lost attempt goes back with a later
	// RunAt; with BlockOnFailure it stays its tenant's head and the
	// tenant's other jobs in the queue wait behind it until it succeeds
	// or runs out of attempts, without it the next job goes meanwhile.
	// A cancelled job never holds it.
	Serial         bool
	BlockOnFailure bool
	// MaxRunning bounds the queue's RUNNING jobs across all workers and
	// tenants; 0: unbounded. A serial queue takes 0 (one job per tenant
	// at a time) or 1 (one job at a time).
	MaxRunning int
	// MaxRunningPerTenant bounds each tenant's RUNNING jobs in the queue
	// across all workers, so that one tenant cannot take every slot of a
	// bounded queue: a claim passes over the jobs of a tenant that has
	// that many running there, and takes the other tenants'. 0: no
	// bound; at most MaxRunning when that is set (above it, it would
	// bound nothing). A serial queue runs one job per tenant at a time
	// already, so it takes 0 or 1, which mean the same.
	MaxRunningPerTenant int
	// Uses names the pools of which each RUNNING job holds one unit.
	Uses []string
	// Timeout, when positive, is how long one attempt may run: the sweep
	// ends an attempt running longer as jobs.TimeoutErrorType (retryable).
	// Zero: no limit (there is no server-wide default).
	Timeout time.Duration
	// AlertAfter, when positive, makes the queue alerting while it has
	// unfinished work and has not drained for longer (see jobs/alerts.go).
	// Zero: never alerting.
	AlertAfter time.Duration
	// Priority is given to a submission to this queue that gives none,
	// MinPriority to MaxPriority; zero is the most urgent, as for a
	// queue without rules. A serial queue takes its jobs in order
	// whatever their priority.
	Priority int32
	// MaxLogBytes bounds the lines each job of the queue keeps in its
	// log (LogLine.Size): past it the oldest lines are dropped.
	// 0: DefaultMaxLogBytes; else MinMaxLogBytes to MaxMaxLogBytes.
	MaxLogBytes int64
	// Rate caps how many of the queue's jobs start (are claimed) per
	// period across every worker and replica; the zero Rate: no cap.
	Rate Rate
}

// Rate is a queue's rate limit: at most Limit claims of its jobs in any
// window of length Per (a sliding window: every claim is kept in the
// store with its time until it is Per old). A retry's claim counts as
// a start, as the first does.
type Rate struct {
	Limit int
	Per   time.Duration
	// PerTenant keeps a window for each tenant: at most Limit claims of
	// each tenant's jobs in the queue per Per, the tenants not holding
	// each other back.
	PerTenant bool
}

// IsZero reports whether r caps nothing.
func (r Rate) IsZero() bool { return r.Limit == 0 && r.Per == 0 }

// Bounds of a Rate: the store keeps one row per start in the window, so
// a window holds at most MaxRateLimit; a window shorter than
// MinRatePer is below what claims' clocks can tell apart, one longer
// than MaxRatePer is a quota, not a rate.
const (
	MaxRateLimit = 1_000_000
	MinRatePer   = time.Millisecond
	MaxRatePer   = 24 * time.Hour
)

// The priorities a job may have, most urgent first: a claim takes the
// most urgent ready job, then the oldest (see jobtype.Job.Priority).
const (
	MinPriority = 0
	MaxPriority = 9
)

// CheckQueueRules refuses q as one queue's rules, with pools the pools
// declared, exactly as jobs.Engine.SetRules would: an *InvalidError
// whose Field names the rule at fault as the configuration file does
// ("max_running", "max_running_per_tenant", "max_backoff", "uses[1]"),
// the first of QueueRuleProblems.
func CheckQueueRules(q QueueRules, pools map[string]int) error {
	if ps := QueueRuleProblems(q, pools); len(ps) > 0 {
		return ps[0]
	}
	return nil
}

// QueueRuleProblems are all that CheckQueueRules refuses in q, at most
// one a rule. The configuration file checks each queue with it, so the
// file and the engine keep one rule, and the file reports every mistake
// at once.
func QueueRuleProblems(q QueueRules, pools map[string]int) []*InvalidError {
	var ps []*InvalidError
	problem := func(field, reason string, args ...any) {
		ps = append(ps, &InvalidError{Field: field, Reason: fmt.Sprintf(reason, args...)})
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"initial_backoff", q.InitialBackoff}, {"max_backoff", q.MaxBackoff}, {"lease_timeout", q.LeaseTimeout}, {"timeout", q.Timeout}, {"alert_after", q.AlertAfter}} {
		if d.v < 0 {
			problem(d.field, "must not be negative")
		}
	}
	if q.MaxAttempts < 0 {
		problem("max_attempts", "must not be negative")
	}
	if q.InitialBackoff > 0 && q.MaxBackoff > 0 && q.MaxBackoff < q.InitialBackoff {
		problem("max_backoff", "%v is below initial_backoff %v", q.MaxBackoff, q.InitialBackoff)
	}
	switch {
	case q.MaxRunning < 0:
		problem("max_running", "must not be negative")
	case q.Serial && q.MaxRunning > 1:
		problem("max_running", "a serial queue runs one job of each tenant at a time (0, or left out) or one job at a time across tenants (1), got %d", q.MaxRunning)
	}
	switch {
	case q.MaxRunningPerTenant < 0:
		problem("max_running_per_tenant", "must not be negative, got %d", q.MaxRunningPerTenant)
	case q.Serial && q.MaxRunningPerTenant > 1:
		problem("max_running_per_tenant", "a serial queue runs one job of each tenant at a time already: 0 or 1 (or left out), got %d", q.MaxRunningPerTenant)
	case q.MaxRunning > 0 && q.MaxRunningPerTenant > q.MaxRunning:
		problem("max_running_per_tenant", "%d is above the queue's max_running %d, so it would bound nothing: at most %d", q.MaxRunningPerTenant, q.MaxRunning, q.MaxRunning)
	}
	if q.Serial && q.Rate.PerTenant {
		problem("rate.per_tenant", "a serial queue runs one job of each tenant at a time: its rate is kept for the whole queue; leave per_tenant out")
	}
	if !q.Serial && q.BlockOnFailure {
		problem("block_on_failure", "only a serial queue blocks on failure")
	}
	switch {
	case q.Serial && q.Priority != MinPriority:
		// It would be of no use, silently: the queue's order is first
		// in, first out.
		problem("priority", "a serial queue runs its jobs first in, first out, whatever their priority: leave priority out (or 0), got %d", q.Priority)
	case q.Priority < MinPriority || q.Priority > MaxPriority:
		problem("priority", "must be %d to %d, got %d", MinPriority, MaxPriority, q.Priority)
	}
	if q.MaxLogBytes != 0 && (q.MaxLogBytes < MinMaxLogBytes || q.MaxLogBytes > MaxMaxLogBytes) {
		problem("max_log_bytes", "must be %d to %d, got %d", MinMaxLogBytes, MaxMaxLogBytes, q.MaxLogBytes)
	}
	if err := checkRate(q.Rate); err != nil {
		ps = append(ps, err)
	}
	for i, pool := range q.Uses {
		if _, ok := pools[pool]; !ok {
			problem(fmt.Sprintf("uses[%d]", i), "pool %q is not declared", pool)
		}
	}
	return ps
}

// checkRate refuses a rate that is set but could not be kept.
func checkRate(r Rate) *InvalidError {
	switch {
	case r.IsZero():
		return nil
	case r.Limit < 1 || r.Limit > MaxRateLimit:
		return &InvalidError{Field: "rate.limit", Reason: fmt.Sprintf("must be 1 to %d jobs, got %d", MaxRateLimit, r.Limit)}
	case r.Per < MinRatePer || r.Per > MaxRatePer:
		return &InvalidError{Field: "rate.per", Reason: fmt.Sprintf("must be %v to %v, got %v", MinRatePer, MaxRatePer, r.Per)}
	}
	return nil
}

// MinScheduleEvery is the shortest Every a schedule may have: the sweep
// that queues runs ticks about once a second, so a shorter period could
// not be kept.
const MinScheduleEvery = time.Second

// Schedule is one repeated job: a run of Kind, in Queue for Tenant, with
// Payload, queued Every after the previous run ended, or at the times of
// Cron in Timezone (exactly one of Every and Cron is set). An every
// schedule never run before (a new name) runs once at once; a cron
// schedule waits for its first time. How the engine keeps them is told
// in jobs/schedules.go.
type Schedule struct {
	Name     string // unique among the schedules; the store keeps its runs by it
	Kind     string
	Queue    string // "": DefaultQueue
	Tenant   string // "": DefaultTenant
	Every    time.Duration
	Cron     string          // a cron expression as ParseCron reads it; "": none
	Timezone string          // the IANA zone Cron is read in; "": UTC. Only with Cron
	Payload  json.RawMessage // nil: none
}
