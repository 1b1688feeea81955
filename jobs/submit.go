package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Defaults for List; a submission's tenant and queue default to
// jobtype.DefaultTenant and jobtype.DefaultQueue.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// MaxPageBytes bounds every page List returns and every batch WatchTenant
// sends, by the sum of its jobs' jobtype.Job.Size (their text and JSON), as
// MaxPageSize bounds them by count: 600 jobs of 250 KB must not make one
// answer of 150 MB. A page that reaches it ends early with a token for
// the rest; a single larger job still comes, alone. Text and JSON take
// about as many bytes in a JSON or protobuf answer as they count here;
// JSON made mostly of small numbers takes a few times more in protobuf.
const MaxPageBytes = 1 << 20

// SubmitRequest describes a new job. Zero fields take defaults.
type SubmitRequest struct {
	Tenant      string          // "" : "default"
	Kind        string          // required
	Queue       string          // "" : "default"
	Payload     json.RawMessage // at most Config.MaxPayloadBytes and jobtype.MaxJSONDepth deep
	UniqueKey   string
	Hold        bool
	RunAt       time.Time // zero: now; else within jobtype.MaxTimeOffset of now
	MaxAttempts int32     // 0: the queue's Rules, else Config.DefaultMaxAttempts
	// Priority is jobtype.MinPriority (most urgent) to
	// jobtype.MaxPriority; nil takes the queue's Rules
	// (QueueRules.Priority), 0 for a queue without rules.
	Priority *int32
	// Batch labels the job ("": none), a name like Tenant's: WaitMany,
	// WatchTenant and List can keep a batch's jobs.
	Batch string
	// After are jobs of the tenant, already submitted, that must all
	// succeed before this one runs (at most jobtype.MaxBatchJobs; a
	// repeated id counts once): until then it is Waiting. Not with Hold.
	After []string
	// OnDependencyFailure says what a job of After that ends other than
	// Succeeded does to this one: "" or jobtype.CancelOnDependencyFailure
	// cancels it, jobtype.RunOnDependencyFailure runs it once all have
	// ended.
	OnDependencyFailure jobtype.DependencyFailure
	// TraceParent and TraceState are the W3C trace context of the traced
	// call that submits the job ("" for none), kept with it for the
	// worker that runs it.
	TraceParent, TraceState string
}

func (r SubmitRequest) validate() error {
	if err := jobtype.CheckName("kind", r.Kind); err != nil {
		return err
	}
	if err := validOptionalName("tenant", r.Tenant); err != nil {
		return err
	}
	if err := validOptionalName("queue", r.Queue); err != nil {
		return err
	}
	if err := validOptionalName("batch", r.Batch); err != nil {
		return err
	}
	if err := jobtype.CheckUniqueKey(r.UniqueKey); err != nil {
		return err
	}
	if r.MaxAttempts < 0 {
		return &jobtype.InvalidError{Field: "max_attempts", Reason: "must not be negative"}
	}
	for i, id := range r.After {
		if err := validID("after["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
	}
	// A repeated id counts once, as in WaitJobs (and as it is stored).
	if n := len(distinctIDs(r.After)); n > jobtype.MaxBatchJobs {
		return &jobtype.InvalidError{Field: "after", Reason: fmt.Sprintf("must name at most %d jobs, got %d", jobtype.MaxBatchJobs, n)}
	}
	if len(r.After) > 0 && r.Hold {
		return &jobtype.InvalidError{Field: "after", Reason: "cannot be given with hold: a held job waits for StartJob, one with after for its dependencies"}
	}
	if err := jobtype.CheckLen("traceparent", r.TraceParent, jobtype.MaxNameBytes); err != nil {
		return err
	}
	if err := jobtype.CheckLen("tracestate", r.TraceState, jobtype.MaxTokenBytes); err != nil {
		return err
	}
	switch r.OnDependencyFailure {
	case "", jobtype.CancelOnDependencyFailure, jobtype.RunOnDependencyFailure:
	default:
		return &jobtype.InvalidError{Field: "on_dependency_failure", Reason: fmt.Sprintf("must be %q or %q, got %q",
			jobtype.CancelOnDependencyFailure, jobtype.RunOnDependencyFailure, r.OnDependencyFailure)}
	}
	if r.OnDependencyFailure != "" && len(r.After) == 0 {
		return &jobtype.InvalidError{Field: "on_dependency_failure", Reason: "applies only to a job with after: name the jobs it runs after, or leave it out"}
	}
	if p := r.Priority; p != nil && (*p < jobtype.MinPriority || *p > jobtype.MaxPriority) {
		return &jobtype.InvalidError{Field: "priority", Reason: fmt.Sprintf("must be %d (most urgent) to %d, got %d",
			jobtype.MinPriority, jobtype.MaxPriority, *p)}
	}
	return nil
}

// Submit creates a job QUEUED (PENDING with Hold). Under strict Rules a
// queue they do not declare is a *jobtype.InvalidError. A tenant's second
// active job with the same unique key is refused with the
// *jobtype.ConflictError naming the active one, and a job that would
// take its tenant past its max_queued (jobtype.TenantRules) with the
// *jobtype.QuotaError.
func (e *Engine) Submit(ctx context.Context, r SubmitRequest) (jobtype.Job, error) {
	j, err := e.newJob(r, e.now())
	if err != nil {
		return jobtype.Job{}, err
	}
	release, err := e.writeTurn(ctx, 1)
	if err != nil {
		return jobtype.Job{}, wrap("submit", "", err)
	}
	defer release()
	if j, err = e.create(ctx, j); err != nil {
		return jobtype.Job{}, wrap("submit", "", err)
	}
	e.publish(j)
	return j, nil
}

// create stores j, under its tenant's max_queued if the rules in effect
// give it one: the store counts and inserts in one transaction
// (store.Store.CreateJobsWithin), so replicas sharing the database keep
// the bound together.
func (e *Engine) create(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	q := e.tenantQuota(j.Tenant)
	if len(q.MaxQueued) == 0 {
		return e.store.CreateJob(ctx, j)
	}
	jobs, err := e.store.CreateJobsWithin(ctx, []jobtype.Job{j}, q)
	if err != nil {
		return jobtype.Job{}, err
	}
	return jobs[0], nil
}

// tenantQuota is tenant's max_queued under the rules in effect, as the
// store takes it; the zero Quota if it has none.
func (e *Engine) tenantQuota(tenant string) store.Quota {
	if n := e.rules.Load().Tenants[tenant].MaxQueued; n > 0 {
		return store.Quota{MaxQueued: map[string]int{tenant: n}}
	}
	return store.Quota{}
}

// quota is every tenant's max_queued under the rules in effect, as the
// store takes it, for a write whose job's tenant is not known before the
// store reads it (Retry); the zero Quota if no tenant has one.
func (e *Engine) quota() store.Quota {
	var q store.Quota
	for tenant, t := range e.rules.Load().Tenants {
		if t.MaxQueued > 0 {
			if q.MaxQueued == nil {
				q.MaxQueued = map[string]int{}
			}
			q.MaxQueued[tenant] = t.MaxQueued
		}
	}
	return q
}

// SubmitMany creates up to jobtype.MaxBatchJobs jobs of one tenant in one
// store transaction: every one, returned in the order of rs, or none. Each
// request is checked as Submit checks it, and a refusal names the request
// (jobs[i].field); two requests with one unique key are refused before
// anything is stored, and a key an active job holds is the
// *jobtype.ConflictError of Submit. A batch that would take the tenant
// past its max_queued is refused whole with the *jobtype.QuotaError,
// which says how many would fit.
func (e *Engine) SubmitMany(ctx context.Context, rs []SubmitRequest) ([]jobtype.Job, error) {
	if len(rs) == 0 || len(rs) > jobtype.MaxBatchJobs {
		return nil, &jobtype.InvalidError{Field: "jobs", Reason: fmt.Sprintf("must hold 1 to %d jobs, got %d", jobtype.MaxBatchJobs, len(rs))}
	}
	now := e.now()
	jobs := make([]jobtype.Job, len(rs))
	keys := make(map[string]int)
	for i, r := range rs {
		j, err := e.newJob(r, now)
		if err != nil {
			return nil, atIndex(i, err)
		}
		if j.Tenant != jobs[0].Tenant && i > 0 {
			return nil, &jobtype.InvalidError{Field: fmt.Sprintf("jobs[%d].tenant", i),
				Reason: fmt.Sprintf("must be jobs[0]'s, %q: one call submits one tenant's jobs", jobs[0].Tenant)}
		}
		if j.UniqueKey != "" {
			if first, ok := keys[j.UniqueKey]; ok {
				return nil, &jobtype.InvalidError{Field: fmt.Sprintf("jobs[%d].unique_key", i),
					Reason: fmt.Sprintf("is jobs[%d]'s too: two active jobs cannot share one", first)}
			}
			keys[j.UniqueKey] = i
		}
		jobs[i] = j
	}
	release, err := e.writeTurn(ctx, len(jobs))
	if err != nil {
		return nil, wrap("submit", "", err)
	}
	defer release()
	if q := e.tenantQuota(jobs[0].Tenant); len(q.MaxQueued) > 0 {
		jobs, err = e.store.CreateJobsWithin(ctx, jobs, q)
	} else {
		jobs, err = e.store.CreateJobs(ctx, jobs)
	}
	if err != nil {
		return nil, wrap("submit", "", conflictAt(keys, missingAt(rs, err)))
	}
	for _, j := range jobs {
		e.publish(j)
	}
	return jobs, nil
}

// conflictAt names, in a *jobtype.ConflictError of a SubmitMany, the
// request that carried the key (keys: each key's request), as its other
// refusals name theirs.
func conflictAt(keys map[string]int, err error) error {
	var ce *jobtype.ConflictError
	if !errors.As(err, &ce) {
		return err
	}
	i, ok := keys[ce.UniqueKey]
	if !ok {
		return err
	}
	named := *ce
	named.Field = fmt.Sprintf("jobs[%d]", i)
	return &named
}

// missingAt names, in a *jobtype.MissingError of a SubmitMany, the first
// request whose After holds the missing job (jobs[i].after), as its other
// refusals name theirs.
func missingAt(rs []SubmitRequest, err error) error {
	var me *jobtype.MissingError
	if !errors.As(err, &me) {
		return err
	}
	for i, r := range rs {
		if slices.Contains(r.After, me.ID) {
			return &jobtype.MissingError{Field: fmt.Sprintf("jobs[%d].%s", i, me.Field), ID: me.ID}
		}
	}
	return err
}

// atIndex names request i of a SubmitMany in an *InvalidError's field.
func atIndex(i int, err error) error {
	var inv *jobtype.InvalidError
	if errors.As(err, &inv) {
		named := *inv
		named.Field = fmt.Sprintf("jobs[%d].%s", i, inv.Field)
		return &named
	}
	return err
}

// newJob checks r and makes the job it asks for, stamped now, with the
// queue's defaults: what Submit and SubmitMany store.
func (e *Engine) newJob(r SubmitRequest, now time.Time) (jobtype.Job, error) {
	if err := r.validate(); err != nil {
		return jobtype.Job{}, err
	}
	if err := jobtype.CheckJSON("payload", r.Payload, e.cfg.MaxPayloadBytes); err != nil {
		return jobtype.Job{}, err
	}
	if !r.RunAt.IsZero() {
		if err := checkTime("run_at", r.RunAt, now); err != nil {
			return jobtype.Job{}, err
		}
	}
	j := jobtype.Job{
		ID:          newJobID(now),
		Tenant:      r.Tenant,
		Kind:        r.Kind,
		Queue:       r.Queue,
		State:       jobtype.Queued,
		Version:     1,
		Payload:     r.Payload,
		MaxAttempts: r.MaxAttempts,
		UniqueKey:   r.UniqueKey,
		Batch:       r.Batch,
		TraceParent: r.TraceParent,
		TraceState:  r.TraceState,
		CreatedAt:   now,
		UpdatedAt:   now,
		RunAt:       r.RunAt.UTC(),
	}
	if j.Tenant == "" {
		j.Tenant = jobtype.DefaultTenant
	}
	if j.Queue == "" {
		j.Queue = jobtype.DefaultQueue
	}
	if err := e.checkDeclared(j.Queue); err != nil {
		return jobtype.Job{}, err
	}
	// One read of the rules, so that a reload cannot give the job one
	// version's attempts and another's priority.
	rules := e.queueRules(j.Queue)
	if j.MaxAttempts == 0 {
		j.MaxAttempts = rules.MaxAttempts
	}
	j.Priority = rules.Priority
	if r.Priority != nil {
		j.Priority = *r.Priority
	}
	if r.RunAt.IsZero() {
		j.RunAt = now
	}
	if r.Hold {
		j.State = jobtype.Pending
	}
	if len(r.After) > 0 {
		// The store settles it (store.SettleDependencies): Waiting, or
		// already Queued or Cancelled by dependencies that have ended.
		j.State, j.After = jobtype.Waiting, distinctIDs(r.After)
		j.OnDependencyFailure = r.OnDependencyFailure
		if j.OnDependencyFailure == "" {
			j.OnDependencyFailure = jobtype.CancelOnDependencyFailure
		}
	}
	return j, nil
}

// distinctIDs is ids with repeats left out, in order.
func distinctIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Start moves a PENDING job to QUEUED, and logs who did at info. A job
// already QUEUED or RUNNING is returned unchanged, so a retried Start is
// harmless; an ended job, or a WAITING one (it starts once its
// dependencies end), is a *StateError.
func (e *Engine) Start(ctx context.Context, id string) (jobtype.Job, error) {
	started := false
	j, err := e.update(ctx, "start", id, func(j *jobtype.Job, now time.Time) error {
		started = false
		switch {
		case j.State == jobtype.Pending:
			started = true
			j.State = jobtype.Queued
			if j.RunAt.Before(now) {
				// RunAt said "not before"; a held job runs from its start.
				j.RunAt = now
			}
			return nil
		case j.State.Terminal():
			return &StateError{JobID: j.ID, State: j.State, Op: "start"}
		case j.State == jobtype.Waiting:
			// Not started, and no start of a caller's can start it.
			return &StateError{JobID: j.ID, State: j.State, Op: "start",
				Hint: "it is queued on its own once the jobs it runs after have all succeeded, and cancelled if one does not " +
					"(with on_dependency_failure RUN, queued once they have all ended): see its after"}
		default:
			return errUnchanged // started already
		}
	})
	if err == nil && started {
		e.logAction(ctx, "job started", "job_id", j.ID, "tenant", j.Tenant, "queue", j.Queue, "by", Actor(ctx))
	}
	return j, err
}

// Get returns a job, or ErrNotFound.
func (e *Engine) Get(ctx context.Context, id string) (jobtype.Job, error) {
	if err := validID("job_id", id); err != nil {
		return jobtype.Job{}, err
	}
	j, err := e.store.GetJob(ctx, id)
	if err != nil {
		return jobtype.Job{}, wrap("get", id, err)
	}
	return j, nil
}

// ListRequest selects one page of a tenant's jobs for List. Zero fields
// do not filter.
type ListRequest struct {
	Tenant string
	Batch  string
	States []jobtype.State
	Kind   string
	Queue  string
	// Limit is the page size: 0 means DefaultPageSize, and more than
	// MaxPageSize is cut to it.
	Limit int
	// PageToken is the previous page's next-page token.
	PageToken string
	// Full also returns Payload and Result; without it the jobs are
	// summaries.
	Full bool
	// MaxBytes may lower MaxPageBytes, the bound on a page's size.
	MaxBytes int
}

// List returns one page of a tenant's jobs, newest first. An empty
// f.Tenant means jobtype.DefaultTenant, as in Submit and WatchTenant. f.Limit is
// the page size: 0 means DefaultPageSize, and more than MaxPageSize is cut
// to it; the page also ends at MaxPageBytes (f.MaxBytes may only lower
// it). The jobs are summaries (no Payload or Result) unless f.Full.
func (e *Engine) List(ctx context.Context, r ListRequest) ([]jobtype.Job, string, error) {
	f := store.ListFilter{Tenant: r.Tenant, Batch: r.Batch, States: r.States, Kind: r.Kind, Queue: r.Queue,
		Limit: r.Limit, PageToken: r.PageToken, Full: r.Full, MaxBytes: r.MaxBytes}
	switch f.Tenant {
	case AllTenants: // every tenant's jobs, newest first (an admin's view: see server)
		f.Tenant = ""
	case "":
		f.Tenant = jobtype.DefaultTenant
	}
	if err := validOptionalName("tenant", f.Tenant); err != nil {
		return nil, "", err
	}
	if err := validOptionalName("kind", f.Kind); err != nil {
		return nil, "", err
	}
	if err := validOptionalName("queue", f.Queue); err != nil {
		return nil, "", err
	}
	if err := validOptionalName("batch", f.Batch); err != nil {
		return nil, "", err
	}
	if len(f.States) > jobtype.MaxFilterItems {
		return nil, "", &jobtype.InvalidError{Field: "states", Reason: "must list at most " + strconv.Itoa(jobtype.MaxFilterItems) +
			" entries, got " + strconv.Itoa(len(f.States))}
	}
	if err := jobtype.CheckLen("page_token", f.PageToken, jobtype.MaxTokenBytes); err != nil {
		return nil, "", err
	}
	if f.Limit < 0 {
		return nil, "", &jobtype.InvalidError{Field: "page_size", Reason: "must not be negative"}
	}
	f.Limit = pageSize(f.Limit)
	if f.MaxBytes <= 0 || f.MaxBytes > MaxPageBytes {
		f.MaxBytes = MaxPageBytes
	}
	jobs, next, err := e.store.ListJobs(ctx, f)
	if err != nil {
		return nil, "", wrap("list", "", err)
	}
	return jobs, next, nil
}

func pageSize(n int) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return n
}

// Cancel makes an active job CANCELLED at once. A RUNNING job keeps its
// LeaseID on the row, so the worker holding it hears "cancelled" from its
// next Heartbeat while its Complete or Fail is refused as ErrStaleLease.
// Cancelling a job that is already CANCELLED returns it unchanged (a
// retried cancel is harmless); one that ended otherwise is a *StateError,
// because the caller's belief that it was still running is wrong.
//
// The cancel is an entry of the job's History, with who cancelled it
// (Actor): the end of the attempt, with its worker and start, for a
// RUNNING job; the action alone for one that was waiting. A cancel made
// by an actor is logged at info.
func (e *Engine) Cancel(ctx context.Context, id string) (jobtype.Job, error) {
	j, _, err := e.cancel(ctx, id)
	return j, err
}

// cancel is Cancel, saying whether this call cancelled the job (false
// for a job CANCELLED already, by this caller or another).
func (e *Engine) cancel(ctx context.Context, id string) (j jobtype.Job, changed bool, err error) {
	release, err := e.writeTurn(ctx, 1)
	if err != nil {
		return jobtype.Job{}, false, wrap("cancel", id, err)
	}
	defer release()
	by := Actor(ctx)
	j, err = e.update(ctx, "cancel", id, func(j *jobtype.Job, now time.Time) error {
		changed = false // run again on a newer read: only the last run says
		switch {
		case j.State == jobtype.Cancelled:
			return errUnchanged
		case j.State.Terminal():
			return &StateError{JobID: j.ID, State: j.State, Op: "cancel"}
		}
		running := j.State == jobtype.Running
		j.State = jobtype.Cancelled
		j.FinishedAt = now
		if running {
			j.EndAttempt(now, by)
		} else {
			j.AddHistory(jobtype.HistoryEntry{Attempt: j.Attempt, FinishedAt: now, State: jobtype.Cancelled, By: by})
		}
		changed = true
		return nil
	})
	if err == nil && changed && by != "" {
		e.logAction(ctx, "job cancelled", "job_id", j.ID, "tenant", j.Tenant, "queue", j.Queue, "by", by)
	}
	return j, changed && err == nil, err
}

// isNotFound reports whether err means the job does not exist.
func isNotFound(err error) bool { return errors.Is(err, jobtype.ErrNotFound) }
