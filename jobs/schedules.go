package jobs

// Schedules are the repeated jobs of the configuration file. A
// schedule's next run is queued Every after its previous run ended,
// whatever the outcome (succeeded, failed, cancelled, lost), and never
// while a run is unfinished: a run retried after a failed attempt is
// still the same run. The store keeps each schedule's latest run, so a
// restart neither forgets a schedule nor queues a run per period it was
// down: after a gap it queues one catch-up run, and the next counts from
// that one's end.
//
// A cron schedule's runs are queued at the times of its expression in
// its time zone (jobtype.Cron tells how daylight saving is read), never
// while a run is unfinished: a time that passes while the latest run is
// unfinished is skipped, and the next run is at the first time after
// that run's end. After a gap (the server was down) in which one or more
// times passed, it queues one catch-up run at once, and then follows the
// expression from that run's end. A new cron schedule is recorded by the
// first tick that sees it, and waits for its first time after that: it
// does not run at once. store.ScheduleRun.Step decides all this, for
// every backend.
//
// The sweep ticks them every second. The tick reads first and writes only
// when a run may be due; the write (Store.RunSchedules) decides again in
// one transaction, so engines sharing a database, ticking at once, queue
// one run between them.

import (
	"context"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// validateSchedules refuses schedules that could never queue a run as
// written: each field is checked as a submission's would be.
func validateSchedules(r jobtype.Rules, maxPayloadBytes int) error {
	seen := map[string]bool{}
	for _, s := range r.Schedules {
		if err := jobtype.CheckName("schedule", s.Name); err != nil {
			return fmt.Errorf("schedule %q: %w", s.Name, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("schedule %s: declared twice", s.Name)
		}
		seen[s.Name] = true
		if err := jobtype.CheckName("kind", s.Kind); err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if err := validOptionalName("queue", s.Queue); err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if err := validOptionalName("tenant", s.Tenant); err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if err := validateScheduleTimes(s); err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if err := jobtype.CheckJSON("payload", s.Payload, maxPayloadBytes); err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		if _, declared := r.Queues[scheduleQueue(s)]; r.Strict && !declared {
			return fmt.Errorf("schedule %s: queue %q is not declared, and the rules are strict", s.Name, scheduleQueue(s))
		}
	}
	return nil
}

// validateScheduleTimes refuses a schedule without exactly one of Every
// and Cron, or whose cron or timezone does not parse.
func validateScheduleTimes(s jobtype.Schedule) error {
	switch {
	case s.Cron != "" && s.Every != 0:
		return fmt.Errorf("give every or cron, not both")
	case s.Cron != "":
		_, err := jobtype.ParseCron(s.Cron, s.Timezone)
		return err
	case s.Timezone != "":
		return fmt.Errorf("timezone applies to cron schedules only")
	case s.Every < jobtype.MinScheduleEvery:
		return fmt.Errorf("every must be at least %v, got %v", jobtype.MinScheduleEvery, s.Every)
	}
	return nil
}

// cronsOf parses each cron schedule of r once, for the rules in effect;
// validateSchedules has refused those that do not parse.
func cronsOf(r jobtype.Rules) map[string]*jobtype.Cron {
	crons := map[string]*jobtype.Cron{}
	for _, s := range r.Schedules {
		if s.Cron == "" {
			continue
		}
		if c, err := jobtype.ParseCron(s.Cron, s.Timezone); err == nil {
			crons[s.Name] = c
		}
	}
	return crons
}

// cronChanges is, by schedule name, when the cron schedules of rules had
// their times changed from those of the rules before (prev): now for a
// schedule whose cron expression or time zone rules change, or that they
// make a cron schedule, the time prev kept for one they leave as it was.
// A cron schedule counts its next time from then, not from its latest
// run, so that an edit by reload (02:00 made 12:00, at 15:00) starts no
// run for a time before the edit. A schedule new to these rules has
// none: added by a reload, its store record starts it; declared again
// after a restart or a removal, it catches up on its latest run, as
// after downtime.
func cronChanges(prev *ruleSet, rules jobtype.Rules, now time.Time) map[string]time.Time {
	before := make(map[string]jobtype.Schedule, len(prev.Schedules))
	for _, s := range prev.Schedules {
		before[s.Name] = s
	}
	since := map[string]time.Time{}
	for _, s := range rules.Schedules {
		p, ok := before[s.Name]
		switch {
		case s.Cron == "" || !ok:
		case p.Cron != s.Cron || p.Timezone != s.Timezone:
			since[s.Name] = now
		case !prev.cronSince[s.Name].IsZero():
			since[s.Name] = prev.cronSince[s.Name]
		}
	}
	return since
}

// scheduleRun is s as the store's decision (store.ScheduleRun.Step) reads
// it under the rules r, with job as its next run.
func scheduleRun(r *ruleSet, s jobtype.Schedule, job jobtype.Job) store.ScheduleRun {
	return store.ScheduleRun{Name: s.Name, Every: s.Every, Cron: r.crons[s.Name], Since: r.cronSince[s.Name], Job: job}
}

// scheduleQueue is the queue s's runs go to.
func scheduleQueue(s jobtype.Schedule) string {
	if s.Queue == "" {
		return jobtype.DefaultQueue
	}
	return s.Queue
}

// scheduleTenant is the tenant s's runs belong to.
func scheduleTenant(s jobtype.Schedule) string {
	if s.Tenant == "" {
		return jobtype.DefaultTenant
	}
	return s.Tenant
}

// ScheduleInfo is a schedule of the rules in effect with the state of its
// runs, as Engine.Schedules reports it.
type ScheduleInfo struct {
	jobtype.Schedule // Queue and Tenant with their defaults filled in
	// NextRunAt is when the next run is queued, in UTC: the latest run's
	// end plus Every, or the first cron time after it (in the past when
	// the sweep has yet to queue it); for a schedule never run, now
	// (every) or its first cron time. Zero while a run is unfinished:
	// its end decides the next.
	NextRunAt time.Time
	// Location is the zone a cron schedule's times are read in (UTC
	// when it names none); nil for an every schedule.
	Location *time.Location
	// LastJobID, LastJobState and LastEndedAt describe the latest run:
	// unfinished, or the last that ended (its state and end are kept
	// after retention deletes its job). Empty before the first run.
	LastJobID    string
	LastJobState jobtype.State
	LastEndedAt  time.Time
}

// Schedules returns the schedules of the rules in effect, in their
// order, each with the state of its runs. A schedule removed from the
// rules is not listed, though the store keeps its state: declared again
// under the same name, it goes on from its latest run.
func (e *Engine) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	r := e.rules.Load()
	if len(r.Schedules) == 0 {
		return nil, nil
	}
	states, err := e.scheduleStates(ctx)
	if err != nil {
		return nil, err
	}
	now := e.now()
	infos := make([]ScheduleInfo, 0, len(r.Schedules))
	for _, s := range r.Schedules {
		info := ScheduleInfo{Schedule: s}
		info.Queue, info.Tenant = scheduleQueue(s), scheduleTenant(s)
		run := scheduleRun(r, s, jobtype.Job{})
		if run.Cron != nil {
			info.Location = run.Cron.Location()
		}
		var last *store.ScheduleState
		if st, ok := states[s.Name]; ok {
			last = &st
			// Before a cron schedule's first run its record holds when
			// it was first seen, not a run.
			if st.LastJobID != "" {
				info.LastJobID, info.LastJobState, info.LastEndedAt = st.LastJobID, st.LastJobState, st.LastEndedAt
			}
		}
		info.NextRunAt = run.NextRun(last, now)
		infos = append(infos, info)
	}
	return infos, nil
}

func (e *Engine) scheduleStates(ctx context.Context) (map[string]store.ScheduleState, error) {
	list, err := e.store.Schedules(ctx)
	if err != nil {
		return nil, fmt.Errorf("read schedules: %w", err)
	}
	states := make(map[string]store.ScheduleState, len(list))
	for _, st := range list {
		states[st.Name] = st
	}
	return states, nil
}

// runSchedules queues the runs that are due under the rules in effect
// and publishes them, so parked claimers and tenant feeds see them. With
// nothing due it only reads: a write transaction a second would hold the
// single SQLite writer for nothing.
func (e *Engine) runSchedules(ctx context.Context) error {
	r := e.rules.Load()
	if len(r.Schedules) == 0 {
		return nil
	}
	states, err := e.scheduleStates(ctx)
	if err != nil {
		return err
	}
	var due []jobtype.Schedule
	readAt := e.now()
	for _, s := range r.Schedules {
		var last *store.ScheduleState
		if st, ok := states[s.Name]; ok {
			last = &st
		}
		if scheduleRun(r, s, jobtype.Job{}).Step(last, readAt) != (store.ScheduleStep{}) {
			due = append(due, s)
		}
	}
	if len(due) == 0 {
		return nil
	}
	now := e.now()
	runs := make([]store.ScheduleRun, 0, len(due))
	for _, s := range due {
		runs = append(runs, scheduleRun(r, s, e.scheduledRun(r, s, now)))
	}
	created, err := e.store.RunSchedules(ctx, runs, now)
	if err != nil {
		return fmt.Errorf("run schedules: %w", err)
	}
	names := make(map[string]string, len(runs)) // job id → schedule
	for _, run := range runs {
		names[run.Job.ID] = run.Name
	}
	for _, j := range created {
		e.publish(j)
		e.log.Info("schedule queued a run", "schedule", names[j.ID], "job_id", j.ID, "kind", j.Kind, "queue", j.Queue, "tenant", j.Tenant)
	}
	return nil
}

// scheduledRun is the job a run of s would be, queued at now, as Submit
// would make it from s's fields under the rules r.
func (e *Engine) scheduledRun(r *ruleSet, s jobtype.Schedule, now time.Time) jobtype.Job {
	maxAttempts := r.Queues[scheduleQueue(s)].MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = e.cfg.DefaultMaxAttempts
	}
	return jobtype.Job{
		ID:          newJobID(now),
		Tenant:      scheduleTenant(s),
		Kind:        s.Kind,
		Queue:       scheduleQueue(s),
		State:       jobtype.Queued,
		Version:     1,
		Payload:     s.Payload,
		MaxAttempts: maxAttempts,
		CreatedAt:   now,
		UpdatedAt:   now,
		RunAt:       now,
	}
}
