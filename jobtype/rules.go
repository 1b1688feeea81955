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
}

// The priorities a job may have, most urgent first: a claim takes the
// most urgent ready job, then the oldest (see jobtype.Job.Priority).
const (
	MinPriority = 0
	MaxPriority = 9
)

// CheckQueueRules refuses q as one queue's rules, with pools the pools
// declared, exactly as jobs.Engine.SetRules would: an *InvalidError
// whose Field names the rule at fault as the configuration file does
// ("max_running", "max_backoff", "uses[1]"). The configuration file checks each queue
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
	case q.Priority < MinPriority || q.Priority > MaxPriority:
		return &InvalidError{Field: "priority", Reason: fmt.Sprintf("must be %d to %d, got %d", MinPriority, MaxPriority, q.Priority)}
	case q.MaxLogBytes != 0 && (q.MaxLogBytes < MinMaxLogBytes || q.MaxLogBytes > MaxMaxLogBytes):
		return &InvalidError{Field: "max_log_bytes", Reason: fmt.Sprintf("must be %d to %d, got %d", MinMaxLogBytes, MaxMaxLogBytes, q.MaxLogBytes)}
	}
	for i, pool := range q.Uses {
		if _, ok := pools[pool]; !ok {
			return &InvalidError{Field: fmt.Sprintf("uses[%d]", i), Reason: fmt.Sprintf("pool %q is not declared", pool)}
		}
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
