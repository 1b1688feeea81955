// Package store defines what jobwatch asks of a database: the Store
// interface every backend implements, the filters, claims and lease
// writes it takes, and the decisions every backend shares (the version
// rule, a schedule's next step, a lease write's effect, write-health
// logging, page tokens), so that no backend decides them alone. The job
// itself, its states and the errors a store returns are package
// jobtype's. store decides nothing about job life cycles (that is package
// jobs) and knows nothing of RPC. The backends, store/sqlite and
// store/postgres, both pass the shared suite in store/storetest.
//
// Every write is atomic and returns once it is committed, with the
// committed snapshot and its new version, so the caller can publish
// exactly what was stored. A backend may commit the writes of several
// callers in one transaction (group commit) if each still succeeds or
// fails alone and sees the writes committed before it, as serial
// transactions would; store/storetest holds every backend to that.
package store

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/internal/backoff"
	"github.com/jobwatch/jobwatch/jobtype"
)

// ListFilter selects jobs for ListJobs. Zero fields do not filter.
type ListFilter struct {
	Tenant string
	States []jobtype.State
	Kind   string
	Queue  string
	// Kinds and Queues keep the jobs of any of them (a bulk action's
	// filter); with Kind or Queue set as well, a job must match both.
	Kinds, Queues []string
	// CreatedBefore keeps the jobs created before it; zero: no filter.
	CreatedBefore time.Time
	// Batch keeps the jobs of that batch (jobtype.Job.Batch); "": no
	// filter.
	Batch string
	// ChangedSince, a cursor from ChangeCursor, keeps the jobs whose
	// Version went up in a write committed after ChangeCursor returned it
	// (and maybe some committed shortly before: a reader must expect to
	// see a version again). A cursor the backend did not issue returns
	// ErrInvalidPageToken. "": no filter. With it the list comes in
	// change order, oldest change first, not newest first, and its page
	// tokens are for that order.
	ChangedSince string
	// Limit is the page size; the backend caps nothing, the caller does.
	Limit int
	// PageToken is the NextPageToken of the previous page.
	PageToken string
	// Full also reads Payload and Result. Without it the jobs are
	// summaries: Payload and Result are nil, and the backend does not read
	// them at all, so listing large jobs costs what listing small ones does.
	Full bool
	// MaxBytes bounds a page by size as well as by Limit: the page ends
	// before the job that would take the sum of its jobs' Size past
	// MaxBytes, with a NextPageToken, and the backend reads no row after
	// that one. A page always holds its first job, however large, so that
	// paging moves on. 0: no bound.
	MaxBytes int
}

// JobRead says what ReadJob reads of one job. The zero JobRead reads the
// whole job, whatever its tenant, as GetJob does.
type JobRead struct {
	// Tenant, when not "", scopes the read to that tenant's jobs: it is
	// in the statement's WHERE, so a job of another tenant is not found
	// and none of its columns (its payload and result least of all) is
	// read or sent.
	Tenant string
	// Summary leaves Payload, Result and History out (nil, as
	// jobtype.Job.Summarize does) and the backend does not read them, so that a check of a job's tenant, kind or state
	// costs the same for a job of 256 KiB as for one of ten bytes.
	Summary bool
	// States reads only each job's ID, State and Version, every other
	// field left zero: what a wait on many jobs needs to learn which of
	// them have ended, at a fraction of a summary's cost (ReadJobs only).
	States bool
}

// ClaimFilter selects the jobs a worker may claim. Empty lists mean any.
// Inside a queue, the ready jobs of several tenants are handed out fairly
// (see FairState), in proportion to Weights.
type ClaimFilter struct {
	Tenants []string
	Kinds   []string
	Queues  []string
	// Now: only jobs whose RunAt is at or before it are ready.
	Now time.Time
	// Limits are the claim rules of the queues that have any, by queue
	// name; a queue not in it is unbounded. Pools gives each pool's size.
	// The store decides none of them: it checks them in SQL, in the
	// transaction that claims, so that replicas sharing a database
	// enforce them together.
	Limits map[string]QueueLimit
	Pools  map[string]int
	// Weights are the tenants' weights in fair claiming (Weight): a
	// tenant missing weighs 1.
	Weights map[string]int
	// TenantMaxRunning bounds each tenant's RUNNING jobs across every
	// queue at once: a claim takes no job of a tenant that has as many
	// running (missing or 0: no bound). With any bound, each queue's
	// jobs are sought tenant by tenant, and claims on PostgreSQL take
	// one advisory lock for the bounds, so they count one at a time.
	TenantMaxRunning map[string]int
}

// Ruled reports whether a claim under f must respect a rule: a queue it
// may take from (any, when it names none) has one in Limits, or a
// tenant has a bound on its running jobs. The rules of queues it does
// not take from (Limits holds every queue's) are no reason to take the
// slower ways of a ruled claim: a pool they share with a queue it takes
// from is in that queue's rule too.
func (f ClaimFilter) Ruled() bool {
	for q := range f.Limits {
		if len(f.Queues) == 0 || slices.Contains(f.Queues, q) {
			return true
		}
	}
	for _, n := range f.TenantMaxRunning {
		if n > 0 {
			return true
		}
	}
	return false
}

// QueueLimit is what a claim must respect for one queue.
type QueueLimit struct {
	// MaxRunning bounds the queue's RUNNING jobs; 0: unbounded.
	MaxRunning int
	// Serial: of each tenant's jobs in the queue, only its head (its
	// QUEUED job first by RunAt, then creation order, whatever its kind)
	// may be claimed, and only while none of its jobs in the queue runs:
	// each tenant's jobs run one at a time, in order, and one tenant's
	// head (of a kind no worker runs, say) never blocks another's. With
	// MaxRunning 1 as well, one job of the queue runs at a time.
	Serial bool
	// HoldRetry (serial only): a QUEUED job that has run before (Attempt
	// above 0, backing off before a retry) is the head whatever its RunAt,
	// so the queue waits behind it.
	HoldRetry bool
	// MaxRunningPerTenant bounds each tenant's RUNNING jobs in the
	// queue; 0: unbounded. The queue's jobs are then sought tenant by
	// tenant.
	MaxRunningPerTenant int
	// Pools names the pools of which each RUNNING job of the queue holds
	// one unit; a job is claimed only when every one has a free unit.
	Pools []string
	// Rate caps the queue's claims per window (jobtype.Rate): a claim
	// takes at most Limit less the claims of the last Per, and records
	// each job it takes with the claim's time (see RateWindows).
	Rate jobtype.Rate
}

// StartsKept is how long past its window a claim's record in a
// rate-limited queue is kept. A claim reads its time before it waits
// for the writer or the queue's lock, so a claim that commits later may
// carry an earlier time than one that committed before it; it counts
// every record after its own time less Per, and one deleted by the
// later-timed claim as out of that claim's window (a start 999.49 ms
// after another of the same tenant, under a limit of 2 a second, in
// TestARatePerTenantHoldsEachTenantApart on PostgreSQL) would be
// missing from its count. Records younger than Per plus StartsKept
// stay, so a claim whose time is up to StartsKept behind another's
// still counts them.
const StartsKept = time.Minute

// RateWindow is one rate-limited queue's window as RateWindows reads it.
type RateWindow struct {
	// Started counts the queue's claims in the window that ends now.
	Started int
	// HeldUntil, when Started has reached the limit, is when the window
	// next has room (the claim that then leaves it is Per old); zero
	// otherwise.
	HeldUntil time.Time
}

// QueueStats is one queue's unfinished work, as QueueStats reads it.
type QueueStats struct {
	Name string
	// Queued counts every QUEUED job, also those whose RunAt is still in
	// the future (scheduled, or backing off before a retry).
	Queued int64
	// Running counts RUNNING jobs.
	Running int64
	// OldestReadyRunAt is the earliest RunAt among the queue's QUEUED jobs
	// that are ready (RunAt at or before now): since when the longest
	// waiting job could have run. The zero time means nothing waits; a
	// job scheduled for later is not waiting.
	OldestReadyRunAt time.Time
}

// TenantDepth is one tenant's unfinished work in one queue, as
// TenantDepths reads it: QueueStats split by tenant.
type TenantDepth struct {
	Queue, Tenant string
	// Queued counts every QUEUED job, also those whose RunAt is still in
	// the future (scheduled, or backing off before a retry).
	Queued int64
	// Running counts RUNNING jobs.
	Running int64
	// OldestReadyRunAt is the earliest RunAt among the tenant's ready
	// QUEUED jobs in the queue (RunAt at or before now); zero: none
	// waits.
	OldestReadyRunAt time.Time
}

// ScheduledJob is a QUEUED job waiting for its RunAt, as ScheduledJobs
// reads it: enough to wake a claimer that may run it (its tenant, kind
// and queue) when it is due.
type ScheduledJob struct {
	ID, Tenant, Kind, Queue string
	RunAt                   time.Time
	Version                 int64
}

// Claim is what ClaimJobs sets on each job it takes: State RUNNING,
// Attempt + 1, WorkerID, LeaseID, LeaseExpiresAt = Now + the queue's
// lease, StartedAt = Now if it was unset, UpdatedAt = Now, Version + 1.
// It is data, not a function, so that a backend can claim in one
// statement.
type Claim struct {
	WorkerID string
	LeaseID  string
	// LeaseIDs are the leases of ClaimJobs, one per job it may take: it
	// takes at most len(LeaseIDs) jobs and gives the i-th it takes (in
	// claim order) LeaseIDs[i]. ClaimOne uses LeaseID instead.
	LeaseIDs []string
	// Now is the time of the claim, on the database's clock as the
	// engine reads it (see Store.Now).
	Now time.Time
	// Clock, if set, reads that time again. A store that makes a claim
	// wait before it may claim (PostgreSQL: for its turn at a ruled
	// queue) reads it after the wait, and uses it for Now and the
	// filter's Now: the jobs' leases, their StartedAt and a rate's
	// record of them count from when the claim took effect.
	Clock func() time.Time
	// Lease is how long the lease lasts in a queue not in Leases.
	Lease time.Duration
	// Leases gives the lease of the queues that have their own.
	Leases map[string]time.Duration
}

// Apply makes j what claiming it under c makes it, but for Version,
// which the store raises.
func (c Claim) Apply(j *jobtype.Job) {
	j.State = jobtype.Running
	j.Attempt++
	j.WorkerID, j.LeaseID = c.WorkerID, c.LeaseID
	j.LeaseExpiresAt = c.Now.Add(c.LeaseFor(j.Queue))
	if j.StartedAt.IsZero() {
		j.StartedAt = c.Now
	}
	j.UpdatedAt = c.Now
}

// LeaseFor returns how long a lease of queue lasts.
func (c Claim) LeaseFor(queue string) time.Duration {
	if d, ok := c.Leases[queue]; ok {
		return d
	}
	return c.Lease
}

// Claimed is one job ClaimJobs took: the job as committed and when it
// was queued (its UpdatedAt before the claim).
type Claimed struct {
	Job      jobtype.Job
	QueuedAt time.Time
}

// ClaimOne is ClaimJobs of one job, under c.LeaseID: the job and when
// it was queued, or ErrNoJob.
func ClaimOne(ctx context.Context, s Store, f ClaimFilter, c Claim) (jobtype.Job, time.Time, error) {
	c.LeaseIDs = []string{c.LeaseID}
	claimed, err := s.ClaimJobs(ctx, f, c)
	if err != nil {
		return jobtype.Job{}, time.Time{}, err
	}
	return claimed[0].Job, claimed[0].QueuedAt, nil
}

// LeaseOp is what a LeaseWrite does.
type LeaseOp int

const (
	// Heartbeat raises Percent to the write's (never lowers it), sets
	// Step unless the write's is "", and extends the lease to Now plus
	// the queue's lease.
	Heartbeat LeaseOp = iota + 1
	// Complete ends the job SUCCEEDED with Result, Percent 100, no Error,
	// FinishedAt Now.
	Complete
	// Fail sets Error and, if Retry and Attempt < MaxAttempts, makes the
	// job QUEUED again at Now plus its queue's backoff for Attempt, with
	// Percent 0 and Step ""; else FAILED with FinishedAt Now.
	Fail
)

// LeaseWrite is one write by the worker holding a job's lease: a
// heartbeat or the end of the attempt. It is data, not a function, so
// that a backend checks the lease and makes the change in one statement,
// and many writes in one statement (River's JobSetStateIfRunningMany).
type LeaseWrite struct {
	Op      LeaseOp
	JobID   string
	LeaseID string
	Percent int32             // Heartbeat, 0..100
	Step    string            // Heartbeat
	Result  json.RawMessage   // Complete; nil: none
	Error   *jobtype.JobError // Fail
	Retry   bool              // Fail: another attempt if attempts remain
	// Jitter, in [0, 1), picks the retry's delay within its backoff step
	// ("full jitter"): the delay is Jitter * (step + 1µs), floored to the
	// microsecond. Drawn by the caller so every backend computes the
	// same RunAt.
	Jitter float64
}

// Backoff is a queue's retry delay: Initial doubled per attempt after
// the first, capped at Max, with full jitter (package internal/backoff,
// the one policy every retry in jobwatch uses).
type Backoff struct {
	Initial, Max time.Duration
}

// Step is the backoff step after attempt (1 for the first attempt), in
// whole microseconds as every backend stores times.
func (b Backoff) Step(attempt int32) time.Duration {
	return backoff.Policy(b).Step(int(attempt))
}

// Delay is the delay before the attempt after attempt, for a jitter in
// [0, 1): uniform over [0, Step(attempt)] in microseconds.
func (b Backoff) Delay(attempt int32, jitter float64) time.Duration {
	return backoff.Policy(b).Delay(int(attempt), jitter)
}

// LeaseRules are what LeaseWrites need of the queue rules, by queue: a
// backend reads a job's queue in the statement that writes it, so the
// caller, who has only the job's id, cannot pick them itself.
type LeaseRules struct {
	// Now is the time of the writes, on the database's clock as the
	// engine reads it.
	Now time.Time
	// Lease and Backoff apply to queues not in Leases and Backoffs.
	Lease    time.Duration
	Leases   map[string]time.Duration
	Backoff  Backoff
	Backoffs map[string]Backoff
}

// LeaseFor returns how long a lease of queue lasts.
func (r LeaseRules) LeaseFor(queue string) time.Duration {
	if d, ok := r.Leases[queue]; ok {
		return d
	}
	return r.Lease
}

// BackoffFor returns queue's backoff.
func (r LeaseRules) BackoffFor(queue string) Backoff {
	if b, ok := r.Backoffs[queue]; ok {
		return b
	}
	return r.Backoff
}

// Apply makes j what w makes it under r, and reports whether w's lease
// holds j (j RUNNING under w.LeaseID); if not, j is left as it is. A
// Complete or Fail ends the attempt and appends its entry to j's History
// (jobtype.Job.EndAttempt, with j.AttemptStartedAt as its start). It
// leaves the ended lease's id on j, with no expiry, until the next claim
// or a retry replaces it: the same report sent again (its answer lost to
// a restart, or sent to the next server) finds the job ended under that
// lease, and the engine answers it as made (jobs.Engine.Complete).
// UpdatedAt becomes r.Now when a watcher could see the change; Version
// is the store's to raise (see Versioned).
// Backends that write in SQL must do exactly this; store/storetest
// compares them with it.
func (w LeaseWrite) Apply(j *jobtype.Job, r LeaseRules) (held bool) {
	if j.State != jobtype.Running || j.LeaseID != w.LeaseID {
		return false
	}
	before := j.Clone()
	switch w.Op {
	case Heartbeat:
		j.Percent = max(j.Percent, min(max(w.Percent, 0), 100))
		if w.Step != "" {
			j.Step = w.Step
		}
		j.LeaseExpiresAt = r.Now.Add(r.LeaseFor(j.Queue))
	case Complete:
		j.State = jobtype.Succeeded
		j.Percent = 100
		j.Result = w.Result
		j.Error = nil // an earlier attempt's error is history once one succeeds
		j.FinishedAt = r.Now
		j.LeaseExpiresAt = time.Time{} // LeaseID stays: see Apply
	case Fail:
		e := *w.Error
		j.Error = &e
		j.LeaseExpiresAt = time.Time{}
		if w.Retry && j.Attempt < j.MaxAttempts {
			// Progress starts over with the next attempt: carrying the
			// last attempt's percent over would pin the new attempt's
			// reports below it.
			j.State = jobtype.Queued
			j.RunAt = r.Now.Add(r.BackoffFor(j.Queue).Delay(j.Attempt, w.Jitter))
			j.Percent = 0
			j.Step = ""
			break
		}
		j.State = jobtype.Failed
		j.FinishedAt = r.Now
	}
	if w.Op != Heartbeat {
		// The attempt ended: its entry joins the history in this same
		// write (jobtype.Job.EndAttempt), so the history costs no
		// statement of its own.
		j.EndAttempt(r.Now, "")
	}
	if !j.SameVisible(&before) {
		j.UpdatedAt = r.Now
	}
	return true
}

// LeaseResult is the outcome of one LeaseWrite.
type LeaseResult struct {
	// Job is the job as committed by the write when Held, else as it
	// is (the write changed nothing). Zero when Err is set.
	Job  jobtype.Job
	Held bool
	// Err is ErrNotFound for a job that does not exist, else nil.
	Err error
}

// Change is one committed change to a job, as a listener hears of it:
// enough to decide whether anyone local cares (waiters of the job,
// watchers of the tenant, claimers of the kind and queue) before
// reading the job itself.
type Change struct {
	JobID   string
	Version int64
	Tenant  string
	Kind    string
	Queue   string
	State   jobtype.State
	RunAt   time.Time
	// Local: the write was made through the Store that hears it, whose
	// caller has the committed job already (an engine owns its Store).
	Local bool
	// Released: the backend itself made this change, in the transaction
	// of a write that ended one of the job's dependencies (Job.After):
	// the job left WAITING (QUEUED, or CANCELLED), or was looked at. The
	// writer's caller does not have it, Local or not.
	Released bool
	// QueueChange: this is no job's change (JobID is "") but Queue's
	// pause (Paused) or resume (!Paused), committed by PauseQueue or
	// ResumeQueue; Local as for a job's.
	QueueChange bool
	Paused      bool
	// LogChange: this is an append to JobID's log (AppendLogs), not a
	// change of the job; LogSeq is the seq of its last line, Tenant the
	// job's; Local as for a job's change.
	LogChange bool
	LogSeq    int64
	// StopClaiming: this is no job's change but Worker's stop, asked by
	// Caller, as AnnounceStopClaiming sent it; Local as for a job's.
	StopClaiming   bool
	Worker, Caller string
}

// LogAppend is the input of AppendLogs.
type LogAppend struct {
	JobID, LeaseID string
	// Lines to append; Seq and Attempt are the store's to set.
	Lines []jobtype.LogLine
	// MaxBytes gives the bound of the lines a job of a queue keeps; it
	// must be positive. (The store knows the job's queue only once it
	// has read the job in the append's transaction.)
	MaxBytes func(queue string) int64
	// Resendable: every line carries the time its worker saw it, so an
	// append sent again after its answer was lost (a server restarted
	// between its commit and its answer, a client's failover) is told
	// from a new one: when the job's last lines are Lines, of the
	// lease's attempt (Repeats), the store adds nothing and answers
	// Held, Repeated and the log's LastSeq, as the first append did.
	Resendable bool
}

// Repeats says whether tail, the last len(a.Lines) lines of a job's log
// in order, are a.Lines appended under attempt: time, stream and text
// alike. Times are compared to the microsecond, as stored.
func (a LogAppend) Repeats(tail []jobtype.LogLine, attempt int32) bool {
	if !a.Resendable || len(tail) != len(a.Lines) || len(tail) == 0 {
		return false
	}
	for i, l := range a.Lines {
		if !sameLine(tail[i], l, attempt) {
			return false
		}
	}
	return true
}

// Kept is a as a log whose kept lines are first to last would hold it
// if a were its last append: all of a.Lines, or, when the log's bound
// dropped some of them, the newest last-first+1, which are then all the
// log keeps. A store tells an append sent again by those (EndsLike,
// Repeats). ok is false when a holds no line or the log keeps none.
func (a LogAppend) Kept(first, last int64) (kept LogAppend, ok bool) {
	n, k := int64(len(a.Lines)), last-first+1
	if n == 0 || k <= 0 {
		return a, false
	}
	if k < n {
		a.Lines = a.Lines[n-k:]
	}
	return a, true
}

// EndsLike says whether last, the last line of a job's log, is a.Lines'
// last of attempt: the look a store takes before it reads the other
// lines Repeats compares.
func (a LogAppend) EndsLike(last jobtype.LogLine, attempt int32) bool {
	return a.Resendable && len(a.Lines) > 0 && sameLine(last, a.Lines[len(a.Lines)-1], attempt)
}

// sameLine says whether stored, a line of a log, is l appended under
// attempt: time (to the microsecond, as stored), stream and text alike.
func sameLine(stored, l jobtype.LogLine, attempt int32) bool {
	return stored.Attempt == attempt && stored.Stream == l.Stream && stored.Text == l.Text &&
		stored.Time.Truncate(time.Microsecond).Equal(l.Time.Truncate(time.Microsecond))
}

// LogAppended is what AppendLogs did.
type LogAppended struct {
	// Held: the lease held and the lines were appended (or, Repeated,
	// had been by the same append sent before).
	Held bool
	// Repeated: the append was one sent again (LogAppend.Resendable);
	// nothing was added.
	Repeated bool
	// Job is the job's summary as it was read.
	Job jobtype.Job
	// LastSeq is the seq of the job's last line (after the append, if
	// it was made).
	LastSeq int64
}

// LogPage is a page of a job's log, as JobLogs reads it.
type LogPage struct {
	// Job is the job's summary, read before the lines.
	Job   jobtype.Job
	Lines []jobtype.LogLine
	// FirstSeq is the seq of the oldest line kept (LastSeq+1 when none
	// is), LastSeq that of the last line appended (0: none ever was).
	FirstSeq, LastSeq int64
}

// DeletedFilter selects a page of JobsDeleted.
type DeletedFilter struct {
	Tenant string
	// Batch keeps the deletions of jobs of that batch only (and those
	// recorded before deletions noted their job's batch); "": every
	// batch's, and those of jobs in none.
	Batch string
	// Since is a cursor from ChangeCursor.
	Since string
	// PageToken is the next of the page before; "" starts at Since.
	PageToken string
	// Limit bounds the page; it must be positive.
	Limit int
}

// QueuePause is a paused queue: since when, and who paused it.
type QueuePause struct {
	Queue    string
	PausedAt time.Time
	// PausedBy says who paused it, as the engine words it.
	PausedBy string
}

// Attempt names one attempt of a RUNNING job: the job and its lease.
type Attempt struct {
	JobID   string
	LeaseID string
}

// ScheduleRun is one schedule as RunSchedules sees it: its name, its
// period or its cron times, and the job to create as its next run if it
// is due.
type ScheduleRun struct {
	Name  string
	Every time.Duration
	// Cron, when set, is when runs are due instead of Every: at its
	// times, as Step tells.
	Cron *jobtype.Cron
	// Since, when set, is when the rules last changed Cron: its times
	// before then are not caught up.
	Since time.Time
	// Job is the next run, complete as CreateJob takes it (the caller
	// sets ID, State QUEUED, Version 1, times and RunAt); it is created
	// only if the schedule is due. It should carry no UniqueKey.
	Job jobtype.Job
}

// ScheduleState is what the store keeps of one schedule: its latest run.
// It outlives the run's job, which retention may delete. A cron schedule
// is kept from the time it was first seen, before its first run: then
// LastJobID and LastJobState are "" and LastEndedAt is that time, which
// its first cron time counts from.
type ScheduleState struct {
	Name string
	// LastJobID is the latest run's job id; "" before the first run.
	LastJobID string
	// LastJobState is that job's state: PENDING, QUEUED or RUNNING while it
	// is unfinished, the state it ended in afterwards (also once the job
	// is deleted). "" only for a run whose job was deleted unfinished.
	LastJobState jobtype.State
	// LastEndedAt is when the latest run ended (its FinishedAt, as
	// committed with its end); zero while it is unfinished. Before the
	// first run, when the schedule was first seen.
	LastEndedAt time.Time
}

// Unfinished reports whether the latest run has not ended: its job
// exists and is not terminal.
func (s ScheduleState) Unfinished() bool {
	return s.LastEndedAt.IsZero() && s.LastJobState != "" && !s.LastJobState.Terminal()
}

// Quota bounds, by tenant, the jobs not yet running (in one of
// jobtype.QueuedStates) that CreateJobsWithin and UpdateJobWithin may
// leave a tenant with. The store checks it in the transaction that
// writes, ordered behind every other write checking the same tenant (on
// every Store sharing the database), so two writes can never both take
// a tenant's last place. The zero Quota bounds nothing.
type Quota struct {
	// MaxQueued is each bounded tenant's jobtype.TenantRules.MaxQueued;
	// a tenant not in it, or with 0, is not bounded.
	MaxQueued map[string]int
}

// QuotaCharge is what one write adds to one tenant bounded by a Quota.
type QuotaCharge struct {
	Tenant    string
	MaxQueued int
	// Adding is how many jobs not yet running the write adds.
	Adding int
}

// Charges returns what creating jobs adds to each tenant q bounds,
// sorted by tenant; nil if it adds to none. A job created RUNNING or
// ended adds nothing.
func (q Quota) Charges(jobs []jobtype.Job) []QuotaCharge {
	var out []QuotaCharge
	for _, j := range jobs {
		bound := q.MaxQueued[j.Tenant]
		if bound <= 0 || !slices.Contains(jobtype.QueuedStates, j.State) {
			continue
		}
		i := slices.IndexFunc(out, func(c QuotaCharge) bool { return c.Tenant == j.Tenant })
		if i < 0 {
			out = append(out, QuotaCharge{Tenant: j.Tenant, MaxQueued: bound})
			i = len(out) - 1
		}
		out[i].Adding++
	}
	slices.SortFunc(out, func(a, b QuotaCharge) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// ChangeCharges returns what changing a job from old to next adds to its
// tenant, if q bounds it: one job when next is not yet running and old
// was (RUNNING, or ended: a retry), else nil.
func (q Quota) ChangeCharges(old, next jobtype.Job) []QuotaCharge {
	if slices.Contains(jobtype.QueuedStates, old.State) {
		return nil
	}
	return q.Charges([]jobtype.Job{next})
}

// Refusal is the *jobtype.QuotaError that refuses c when its tenant has
// queued jobs not yet running (counted up to c.MaxQueued + 1), or nil
// when those and c.Adding fit in c.MaxQueued.
func (c QuotaCharge) Refusal(queued int) error {
	if queued+c.Adding <= c.MaxQueued {
		return nil
	}
	return &jobtype.QuotaError{Tenant: c.Tenant, MaxQueued: c.MaxQueued, Queued: queued, Adding: c.Adding}
}

// Store persists jobs. Implementations are safe for concurrent use.
//
// Each method says whether a caller may retry it after an error that
// leaves the outcome unknown (ErrUnavailable, a lost connection):
// "retry: safe" means running it again cannot do anything twice.
// Decisions that depend on the row (state, lease, version) are checked
// in the write itself, so no backend holds a row lock while Go code runs
// between round trips; the one exception is an UpdateJob that lost its
// compare-and-swap to other writers too often (below).
type Store interface {
	// CreateJob inserts j as given (the caller sets ID, State, Version 1
	// and times) and returns the stored job. If j.UniqueKey is set and
	// another job of j.Tenant in an active state has the same key, it
	// returns a *jobtype.ConflictError and stores nothing.
	// Retry: not blindly. A create that did commit fails when run again
	// (its id is taken); a caller that retries reads j.ID first.
	CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error)

	// CreateJobs is CreateJob for several jobs in one transaction: every
	// one is stored, or none is. A unique key that an active job (stored
	// or earlier in jobs) holds fails the whole call with the
	// *ConflictError of the first job that cannot be stored; the caller
	// refuses two jobs of jobs with one key before. It returns the stored
	// jobs in the order given.
	// Retry: as CreateJob.
	CreateJobs(ctx context.Context, jobs []jobtype.Job) ([]jobtype.Job, error)

	// CreateJobsWithin is CreateJobs under q: in the same transaction,
	// before anything is stored, it counts the jobs not yet running of
	// each tenant that jobs add to and q bounds (Quota.Charges), and if
	// those and the ones jobs add would pass its bound it fails the whole
	// call with the *jobtype.QuotaError of the first such tenant
	// (QuotaCharge.Refusal) and stores nothing. Writes under a quota of
	// one tenant take turns (see Quota). The count reads at most the
	// bound plus one entries of an index on (tenant, state), so it costs
	// what the bound allows, not what the tenant has. With nothing
	// bounded it is CreateJobs.
	// Retry: as CreateJob.
	CreateJobsWithin(ctx context.Context, jobs []jobtype.Job, q Quota) ([]jobtype.Job, error)

	// ReadJobs returns the jobs of ids that exist, as ReadJob reads each
	// (r.Tenant scopes, r.Summary leaves Payload and Result out), in no
	// particular order, in one statement. An id that no job of the scope
	// has is left out. Retry: safe.
	ReadJobs(ctx context.Context, ids []string, r JobRead) ([]jobtype.Job, error)

	// GetJob returns the job with id, or ErrNotFound. It is ReadJob with
	// a zero JobRead. Retry: safe.
	GetJob(ctx context.Context, id string) (jobtype.Job, error)

	// ReadJob returns the job with id as r says: only if it belongs to
	// r.Tenant (when set), and without Payload and Result with
	// r.Summary. A job of another tenant is ErrNotFound, as one that does
	// not exist, and the statement reads nothing of its row but its key
	// and tenant, so neither the answer nor its cost tells a caller
	// confined to one tenant that the job exists. Retry: safe.
	ReadJob(ctx context.Context, id string, r JobRead) (jobtype.Job, error)

	// ListJobs returns jobs matching f, newest first (by CreatedAt, ties
	// by creation order, later first), and a token for the next page (""
	// on the last page), which ends at f.Limit jobs or f.MaxBytes,
	// whichever comes first. Only with f.Full do the jobs carry their
	// Payload and Result. A token that the backend did not issue returns
	// ErrInvalidPageToken. Paging is by key, not offset: jobs created
	// while a caller pages never shift later pages, so there are no gaps
	// and no duplicates. Retry: safe.
	ListJobs(ctx context.Context, f ListFilter) (jobs []jobtype.Job, nextPageToken string, err error)

	// UpdateJob reads job id, lets update change it, and commits the
	// change only if the job is still as update saw it; otherwise it
	// reads it again and calls update again. So update may run more than
	// once and must decide from the job it is given alone. If update
	// returns an error nothing is written and the error is returned as it
	// is. If the change is visible (see SameVisible) Version goes up by
	// one; the caller sets UpdatedAt. update may change any field but ID
	// and Version, which the store owns.
	// It returns the committed job, or ErrNotFound.
	// It tries a bounded number of times: a backend whose writes compare
	// and swap locks the row for its last try (PostgreSQL after 8), so a
	// job that keeps changing delays the update, never starves it.
	// The engine uses it for the rarer changes (start, cancel, release,
	// the sweeps); a worker's reports go through WriteLeases.
	// Retry: safe when update checks what it expects (a lease, a state),
	// as every engine update does; the write is conditional on the row.
	UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error)

	// UpdateJobWithin is UpdateJob under q: a change that makes a job of
	// a tenant q bounds not yet running again (Quota.ChangeCharges: a
	// retry of an ended job) is refused with the *jobtype.QuotaError of
	// CreateJobsWithin, and writes nothing, when the tenant is at its
	// bound; the count and the write are in one transaction, taking
	// turns with the tenant's other writes under a quota. Other changes,
	// and those of unbounded tenants, are UpdateJob's.
	// Retry: as UpdateJob.
	UpdateJobWithin(ctx context.Context, id string, q Quota, update func(*jobtype.Job) error) (jobtype.Job, error)

	// ClaimJobs picks the most urgent ready QUEUED jobs matching f, then
	// the oldest (by Priority, 0 first, then RunAt, then creation order),
	// up to len(c.LeaseIDs) of them, no more of any
	// queue or pool than f.Limits and f.Pools leave room for (one of a
	// serial queue: its head, its first job by RunAt then creation
	// whatever its priority: a serial queue stays first-in first-out; the
	// head competes with other queues' jobs by its own priority), makes
	// each RUNNING under c with its own
	// lease (see Claim), and commits, in one statement. Two concurrent
	// claims never get the same job, and never together take a queue or
	// pool past its limit. It returns the claimed jobs in claim order,
	// each with when it was queued (its UpdatedAt before the claim), or
	// ErrNoJob when nothing is ready. Its cost does not depend on how
	// many jobs wait: a few index seeks per queue (and kind) with work,
	// and the jobs taken, whatever the database's statistics say.
	// Retry: not safe. A claim that committed but whose answer was lost
	// holds jobs under leases only the caller knows: it finds them with
	// HeldLeases once the store answers again.
	ClaimJobs(ctx context.Context, f ClaimFilter, c Claim) ([]Claimed, error)

	// WriteLeases makes each of ws, in order, if its lease holds the job
	// (see LeaseWrite.Apply), each checked and made in the statement that
	// writes it, without a read before, and all of ws in one transaction
	// (one statement where the backend can). Results are in ws's order.
	// A write whose lease does not hold changes nothing. An error fails
	// every write: none is committed. Retry: safe (a write whose lease
	// held once does not hold again, except a Heartbeat, which sets what
	// it set).
	WriteLeases(ctx context.Context, ws []LeaseWrite, r LeaseRules) ([]LeaseResult, error)

	// NextReady returns the earliest RunAt among QUEUED jobs matching f's
	// tenants, kinds and queues that ClaimJobs could take once that time
	// comes (their queue and pools have room now, and a serial queue's job
	// is its head), whatever their priority, whether it is past or not,
	// and ok false if none does.
	// It is a read, so a parked claim that wakes can learn whether
	// ClaimJobs, a write, would find a job (runAt at or before now) and, if
	// not, when it should look again. Retry: safe.
	NextReady(ctx context.Context, f ClaimFilter) (runAt time.Time, ok bool, err error)

	// RateWindows reads, for each queue of rates, its claims in the
	// window of the queue's Per that ends at now, and when a queue at its
	// limit next has room. A queue held by its rate offers NextReady no
	// job, so a parked claim learns from here when to look again. Queues
	// never claimed under a rate read as zero. Retry: safe.
	RateWindows(ctx context.Context, now time.Time, rates map[string]jobtype.Rate) (map[string]RateWindow, error)

	// ScheduledJobs returns the QUEUED jobs whose RunAt is after now,
	// earliest first (ties in creation order), at most limit of them. The
	// engine reads it once at start, to wake a claimer when each is due
	// without any claimer polling; it learns of later ones as they are
	// committed. Retry: safe.
	ScheduledJobs(ctx context.Context, now time.Time, limit int) ([]ScheduledJob, error)

	// ExpiredLeases returns the ids of RUNNING jobs whose lease expired
	// before now. Retry: safe.
	ExpiredLeases(ctx context.Context, now time.Time) ([]string, error)

	// HeldLeases returns the RUNNING jobs that one of leaseIDs holds,
	// each with its lease, in no particular order; leases that hold no
	// job are left out. It reads only RUNNING jobs, so its cost follows
	// how many run, not how many wait. The engine asks it after a claim
	// whose answer was lost, to find what that claim took. Retry: safe.
	HeldLeases(ctx context.Context, leaseIDs []string) ([]Attempt, error)

	// TimedOut returns the RUNNING jobs of queue whose current attempt
	// began (the commit that made them RUNNING, as its UpdatedAt) before
	// startedBefore, each with the lease of that attempt, so the caller
	// can end exactly that attempt and no later one. Retry: safe.
	TimedOut(ctx context.Context, queue string, startedBefore time.Time) ([]Attempt, error)

	// MarkDrained records that each of queues had no QUEUED or RUNNING
	// job at t. A later time already stored is kept, so replicas sweeping
	// at once never move a queue's drain back. Retry: safe.
	MarkDrained(ctx context.Context, queues []string, t time.Time) error

	// SetAlerting records whether queue is alerting, as of at, and
	// reports whether this call changed what was recorded: of several
	// callers (replicas) recording the same change at once, exactly one
	// is told changed, and it alone announces the change (the alert
	// webhook), so each episode is announced once whichever replicas saw
	// it. A queue never recorded counts as not alerting: recording false
	// for it changes nothing. Retry: safe, but a retry of a call that
	// committed is told unchanged.
	SetAlerting(ctx context.Context, queue string, alerting bool, at time.Time) (changed bool, err error)

	// LastDrained returns, by queue, the latest time MarkDrained recorded;
	// a queue never marked is absent. Retry: safe.
	LastDrained(ctx context.Context) (map[string]time.Time, error)

	// PauseQueue records p.Queue as paused at p.PausedAt by p.PausedBy,
	// unless it is paused already: then the pause stays as it was. It
	// returns the pause as stored. From its commit on, no ClaimJobs of
	// any Store sharing the database takes a job of the queue, and
	// NextReady passes over its jobs: both check the pauses in their own
	// statement. Every Store sharing the database hears of it (Listen:
	// a Change with QueueChange set). Retry: safe.
	PauseQueue(ctx context.Context, p QueuePause) (QueuePause, error)

	// ResumeQueue removes queue's pause and reports whether it was
	// paused; a queue not paused is left as it is. Every Store sharing
	// the database hears of a resume (Listen), so that claims parked on
	// the queue look again. Retry: safe.
	ResumeQueue(ctx context.Context, queue string) (resumed bool, err error)

	// QueuePauses returns every paused queue, sorted by name.
	// Retry: safe.
	QueuePauses(ctx context.Context) ([]QueuePause, error)

	// AnnounceStopClaiming tells every other Store sharing the database
	// that worker stops claiming, as caller asked (Listen: a Change with
	// StopClaiming set, Worker and Caller naming them), so that the engine
	// there answers the claims caller's worker has parked with it (its load balancer may have sent them to
	// any replica). It writes nothing, and a Store that is not listening
	// when it is sent never hears it. Retry: safe.
	AnnounceStopClaiming(ctx context.Context, worker, caller string) error

	// QueueHasJobs reports whether queue holds any job, in any state.
	// Retry: safe.
	QueueHasJobs(ctx context.Context, queue string) (bool, error)

	// DeleteJob deletes job id if it is terminal, checked in the
	// statement that deletes it, and returns the job as it was; a job
	// that is not terminal is left as it is and returned with deleted
	// false. ErrNotFound if there is no such job; a *jobtype.WaitedForError,
	// with the job as it is, if a WAITING job waits for it. Every Store sharing the
	// database hears of the deletion (Listen: a Change of the job, at
	// its version plus one, whose reading finds nothing).
	// Retry: safe (a job deleted already is ErrNotFound).
	DeleteJob(ctx context.Context, id string) (j jobtype.Job, deleted bool, err error)

	// JobsDeleted pages through the ids of the jobs DeleteJob deleted in
	// writes committed after a change cursor, in the order they were
	// deleted, so that a feed of changes (ListFilter.ChangedSince) can
	// tell its readers to drop them. A deletion may be listed again for a
	// later cursor taken while it was in flight, as a change may. The
	// record of a deletion is kept until DeleteFinishedBefore passes its
	// time; retention's own deletions are not recorded. Retry: safe.
	JobsDeleted(ctx context.Context, f DeletedFilter) (ids []string, next string, err error)

	// AppendLogs appends a.Lines to the log of job a.JobID if a.LeaseID
	// holds it (RUNNING under that lease), numbering them after the
	// job's last line and stamping them with its attempt, and then drops
	// the job's oldest lines while the lines kept add up to more than
	// a.MaxBytes of its queue (LogLine.Size), all in one transaction. A lease that does
	// not hold is answered with Held false and the job's summary as it
	// is, and changes nothing. Every Store sharing the database hears of
	// the append (Listen: a Change with LogChange). ErrNotFound if there
	// is no such job. Retry: not safe (lines would repeat).
	AppendLogs(ctx context.Context, a LogAppend) (LogAppended, error)

	// JobLogs reads the summary of job id, then (so that lines appended
	// before the job was seen ended are all there) at most limit of its
	// lines after afterSeq, oldest first, with the bounds of what is
	// kept. ErrNotFound if there is no such job. Retry: safe.
	JobLogs(ctx context.Context, id string, afterSeq int64, limit int) (LogPage, error)

	// DeleteFinishedBefore deletes at most limit terminal jobs whose
	// FinishedAt is before t, and at most limit of the records of
	// deletions (JobsDeleted) made before t, and reports how many jobs it
	// deleted: fewer than limit when no more were due. It writes in
	// transactions of a bounded size of its own, so that other writes
	// take turns with a large deletion; a caller deleting a backlog calls
	// again for the rest. Retry: safe.
	DeleteFinishedBefore(ctx context.Context, t time.Time, limit int) (int, error)

	// CountByState returns how many jobs are in each state, for metrics.
	// Retry: safe.
	CountByState(ctx context.Context) (map[jobtype.State]int64, error)

	// QueueStats returns, for each queue with at least one QUEUED or
	// RUNNING job, its counts and the RunAt of its oldest ready job as of
	// now, sorted by name. Queues with nothing unfinished are absent.
	// It reads every unfinished job once, so backends should answer it
	// from an index rather than the table. Retry: safe.
	QueueStats(ctx context.Context, now time.Time) ([]QueueStats, error)

	// BusyQueues returns those of queues that hold at least one QUEUED
	// or RUNNING job (what QueueStats would list), in any order: what
	// the alert sweep asks each second of the queues it watches, so
	// backends answer it with one index seek per queue, whatever the
	// queues' depth. Retry: safe.
	BusyQueues(ctx context.Context, queues []string) ([]string, error)

	// TenantDepths returns, for each (queue, tenant) with at least one
	// QUEUED or RUNNING job, its counts and the RunAt of its oldest ready
	// job as of now, sorted by queue, then tenant. Pairs with nothing
	// unfinished are absent. Like QueueStats it reads every unfinished
	// job once, so backends answer it from an index that holds queue,
	// tenant, state and run_at. Retry: safe.
	TenantDepths(ctx context.Context, now time.Time) ([]TenantDepth, error)

	// Schedules returns the state of every schedule that RunSchedules
	// ever started a run of, sorted by name. It is a read, so a caller
	// can learn cheaply whether RunSchedules would do anything.
	// Retry: safe.
	Schedules(ctx context.Context) ([]ScheduleState, error)

	// RunSchedules starts the runs that are due, in one transaction that
	// reads each schedule's state again, so that callers running it at
	// once (replicas sharing the database) never start two runs of one
	// schedule. For each of runs, by Name, as ScheduleRun.Step decides:
	//   - never run: run.Job is created and becomes its latest run; a
	//     cron schedule instead is recorded as first seen at now;
	//   - latest run unfinished: nothing (never two runs at once);
	//   - latest run ended at E: if E + run.Every (for cron: its first
	//     time after E) is at or before now, run.Job is created and
	//     becomes its latest run. A run whose job is gone without a
	//     recorded end counts as ended at now, and that is recorded.
	// It returns the jobs it created, as stored. The end of a run is
	// recorded in the same transaction as the change that ended its job
	// (whatever made it: UpdateJob, WriteLeases, a sweep), so it
	// survives the job's deletion. State of schedules not in runs is
	// kept as it is. Retry: safe (a run created already makes the
	// schedule unfinished or not yet due).
	RunSchedules(ctx context.Context, runs []ScheduleRun, now time.Time) ([]jobtype.Job, error)

	// ChangeCursor returns a cursor for ListFilter.ChangedSince that
	// means the same on every Store sharing the database: a later list
	// with it returns every job whose Version went up in a write that
	// committed after ChangeCursor returned. It comes from the database
	// (a change sequence stamped on every write), not from a clock, so
	// nothing is skipped or guessed. At most 64 bytes of URL-safe text.
	// Retry: safe.
	ChangeCursor(ctx context.Context) (string, error)

	// CursorAhead reports whether cursor, as ChangeCursor returns one,
	// is later than the database's changes: one this database never
	// issued (a caller's own, or one from before a restore of the
	// database from a backup), which a list would answer with nothing
	// until the database caught up with it; or one another database
	// issued (each has an identity its cursors carry), from which no
	// change of this one follows, the other backend's cursors among
	// them (CursorBackend). A cursor of no store's form is
	// jobtype.ErrInvalidPageToken. Retry: safe.
	CursorAhead(ctx context.Context, cursor string) (bool, error)

	// Listen calls fn with the changes committed to the database from
	// the time Listen returns until ctx ends: every write whose Version
	// went up, by this Store or any other sharing the database, in
	// batches, from one goroutine, in commit order for each job (a job
	// may appear more than once in a batch; its highest Version is the
	// latest). fn must not block for long. If the backend may have
	// missed changes (it lost its connection to the database and has it
	// again), it calls fn with missed true: the caller must read again
	// whatever it watches. Listen returns once listening has begun, or
	// the error that stopped it from starting.
	Listen(ctx context.Context, fn func(changes []Change, missed bool)) error

	// Now reads the database's clock. Every replica sharing a database
	// takes the times that decide anything (leases, RunAt, retention,
	// UpdatedAt) from it, through the engine's clock, not from its own
	// machine's clock. Retry: safe.
	Now(ctx context.Context) (time.Time, error)

	// Close releases the database.
	Close() error
}
