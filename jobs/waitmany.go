package jobs

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jobwatch/jobwatch/internal/shallow"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/watch"
)

// MaxWaitManyBytes bounds the jobs a WaitMany with Full returns whole:
// past it, by the sum of their jobtype.Job.Size, the rest come as
// summaries (jobtype.Job.Summarize).
const MaxWaitManyBytes = 8 * MaxPageBytes

// WaitManyRequest names the jobs WaitMany waits for: IDs, or the jobs of
// Batch in Tenant.
type WaitManyRequest struct {
	// IDs are the jobs, at most jobtype.MaxBatchJobs; a repeated id
	// counts once.
	IDs []string
	// Batch, with no IDs, waits for the jobs of that batch in Tenant as
	// they are when the call starts (at most jobtype.MaxBatchJobs).
	Batch string
	// Tenant is Batch's tenant ("": jobtype.DefaultTenant), and confines
	// IDs to that tenant when Confined: another tenant's job is then
	// ErrNotFound, as one that does not exist.
	Tenant   string
	Confined bool
	// Any returns once one job has ended; without it, once all have.
	Any bool
	// Full returns Payload, Result and History (up to MaxWaitManyBytes
	// in all); without it every job is a summary (jobtype.Job.Summarize).
	Full bool
	// Ended, if set, is called from WaitMany's own goroutine with each
	// job the moment WaitMany first sees it ended: on its way in for the
	// jobs ended already, while parked for the rest. Without Full the job
	// is a summary, as in the result. It lets a
	// caller prepare its answer job by job while the wait lasts (the
	// server encodes each for the wire), so the end that completes the
	// wait costs one job's work, not all of them. A job seen here may
	// still be missing from the result (deleted, or retried, meanwhile):
	// match by ID and Version.
	Ended func(j *jobtype.Job)
	// Park, if set, is called once the jobs are known and before
	// WaitMany parks for them, with how many it waits for (a wait whose
	// jobs have ended on its way in never parks). Not ok answers with
	// the jobs as they are, at once (a parked-call limit is full);
	// otherwise release is called when the wait ends.
	Park func(jobs int) (release func(), ok bool)
}

// A JobRefError refuses a call about several jobs (WaitMany) because of
// one of them: Err is ErrNotFound (it does not exist, or the caller may
// not see it: the two read alike) or ErrNotStarted.
type JobRefError struct {
	ID  string
	Err error
}

func (e *JobRefError) Error() string { return "job " + e.ID + ": " + e.Err.Error() }
func (e *JobRefError) Unwrap() error { return e.Err }

// WaitManyResult is what WaitMany returns: the jobs that have ended and
// the ids of those that have not, each in the request's order (IDs) or
// submission order (Batch).
//
// The ended jobs may be shared with the wait's other readers (the jobs
// its Ended saw, the hub's snapshots): they are not to be modified.
type WaitManyResult struct {
	Ended      []*jobtype.Job
	Unfinished []string
}

// WaitMany is Wait for several jobs: it subscribes to every job, then
// reads them all in one store read, and returns at once if the request
// is met already (every job ended, or one with Any); otherwise it waits
// until it is, or until the deadline, ctx's end or Shutdown, and returns
// what has ended by then (nil error in each of those cases). A job that
// does not exist, or is outside the tenant when Confined, is
// ErrNotFound naming it; a PENDING one is ErrNotStarted, as for Wait,
// since it would never end on its own.
//
// While parked it holds one watch.Group (a subscription per job, one
// wake channel) and each job's latest snapshot, stripped of payload and
// result until it ends: about what as many parked Waits hold in the hub,
// without their goroutines. A job deleted meanwhile (only an ended job
// can be) counts as ended and is left out of Ended.
func (e *Engine) WaitMany(ctx context.Context, r WaitManyRequest, deadline time.Time) (WaitManyResult, error) {
	ids, err := e.waitManyIDs(ctx, r)
	if err != nil {
		return WaitManyResult{}, err
	}
	g := e.hub.SubscribeGroup(ids)
	answered := false
	defer func() {
		if answered {
			// Closing a thousand subscriptions takes a fifth of a
			// millisecond, which the answer need not wait for.
			go g.Close()
		} else {
			g.Close()
		}
	}()

	read := store.JobRead{Summary: !r.Full}
	if r.Confined {
		read.Tenant = r.Tenant
	}
	latest, err := e.firstLook(ctx, ids, read, r.Any)
	if err != nil {
		return WaitManyResult{}, wrap("wait for", "", err)
	}
	// held[i] is latest[i]'s job as the result holds it, once it has
	// ended: the summary made for Ended is not made again for the result.
	held := make([]*jobtype.Job, len(ids))
	ended := 0
	for i, snap := range latest {
		switch {
		case snap == nil:
			return WaitManyResult{}, &JobRefError{ID: ids[i], Err: jobtype.ErrNotFound}
		case snap.Job.State == jobtype.Pending:
			return WaitManyResult{}, &JobRefError{ID: ids[i], Err: ErrNotStarted}
		case snap.Job.State.Terminal():
			ended++
			held[i] = r.ended(snap)
		default:
			// Parked, a job keeps no payload or result (see Wait).
			snap.Job.Payload, snap.Job.Result = nil, nil
		}
	}
	if !met(r.Any, ended, len(ids)) {
		park, release := true, func() {}
		if r.Park != nil {
			if release, park = r.Park(len(ids)); !park {
				release = func() {}
			}
		}
		if park {
			if e.waitGroup(ctx, g, latest, held, r, ended, deadline) {
				e.rereadUnfinished(ctx, ids, latest, held, r, read)
			}
		}
		release()
	}
	answered = true
	return r.result(ids, latest, held), nil
}

// firstLook reads the jobs of a wait on its way in, as read says, each
// one's newest snapshot in latest (nil for a job not found). With
// statesFirst (Any) it reads the state of every job first
// (store.JobRead's States), then only those that have ended, which the
// answer holds: a WAIT_MODE_ANY loop calls again with the ids still
// unfinished, so each of its turns reads every job it follows, and a
// state costs a fraction of a summary. Without Any an answer at once
// holds every job, and one read of them all costs less than two. The
// snapshot of a job read by its state only has its ID, State and
// Version, all that a parked wait compares (a publish brings the rest);
// one that ended and is gone by the second read (deleted) is Gone.
func (e *Engine) firstLook(ctx context.Context, ids []string, read store.JobRead, statesFirst bool) ([]*Snapshot, error) {
	readJobs := func(ids []string, read store.JobRead) ([]jobtype.Job, error) {
		return shallow.Call(func() ([]jobtype.Job, error) {
			first, cancel := detached(ctx)
			defer cancel()
			return e.store.ReadJobs(first, ids, read)
		})
	}
	first := read
	first.States = statesFirst
	found, err := readJobs(ids, first)
	if err != nil {
		return nil, err
	}
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	latest := make([]*Snapshot, len(ids))
	var ended []string
	for _, j := range found {
		latest[at[j.ID]] = newSnapshot(j)
		if j.State.Terminal() {
			ended = append(ended, j.ID)
		}
	}
	if !statesFirst || len(ended) == 0 {
		return latest, nil
	}
	whole, err := readJobs(ended, read)
	if err != nil {
		return nil, err
	}
	reread := make(map[string]bool, len(whole))
	for _, j := range whole {
		latest[at[j.ID]] = newSnapshot(j)
		reread[j.ID] = true
	}
	for _, id := range ended {
		if !reread[id] {
			latest[at[id]].Gone = true
		}
	}
	return latest, nil
}

// ended returns snap's job, just ended, as the result will hold it (nil
// if it is gone), and calls r.Ended, if set, with it.
func (r *WaitManyRequest) ended(snap *Snapshot) *jobtype.Job {
	if snap.Gone {
		return nil
	}
	j := r.held(snap)
	if r.Ended != nil {
		r.Ended(j)
	}
	return j
}

// held is snap's job as the result holds it: a summary without Full,
// else the snapshot's own job.
func (r *WaitManyRequest) held(snap *Snapshot) *jobtype.Job {
	if r.Full {
		return &snap.Job
	}
	j := snap.Job
	j.Summarize()
	return &j
}

// met reports whether a wait for n jobs, ended of them ended, is over:
// all ended, or one with anyEnded.
func met(anyEnded bool, ended, n int) bool {
	return ended == n || (anyEnded && ended > 0)
}

// waitGroup waits until met, the deadline, ctx's end or Shutdown,
// keeping latest up to date from g: each key's newest snapshot. ended is
// how many of latest have ended; each job that ends meanwhile goes to
// r.Ended and to held. It reports whether it ended at the deadline or
// Shutdown, unmet.
func (e *Engine) waitGroup(ctx context.Context, g *watch.Group[*Snapshot], latest []*Snapshot, held []*jobtype.Job, r WaitManyRequest, ended int, deadline time.Time) (unmet bool) {
	timer, stop := e.timerUntil(deadline)
	defer stop()
	for {
		select {
		case <-g.Changed():
		case <-timer:
			return true
		case <-ctx.Done():
			return false // nobody reads it
		case <-e.done:
			return true
		}
		ended += e.lookAgain(g, latest, held, r)
		if met(r.Any, ended, len(latest)) {
			if r.Any {
				// The change that woke it may be one of a batch that
				// ended several: answer with all of them.
				e.hearing.settled(ctx)
				e.lookAgain(g, latest, held, r)
			}
			return false
		}
	}
}

// lookAgain advances latest to g's newer snapshots and returns by how
// much that changed the count of jobs ended.
func (e *Engine) lookAgain(g *watch.Group[*Snapshot], latest []*Snapshot, held []*jobtype.Job, r WaitManyRequest) (ended int) {
	for i := range latest {
		if snap, version := g.Latest(i); version > latest[i].Job.Version {
			ended += e.advance(latest, held, r, i, snap, true)
		}
	}
	return ended
}

// advance puts snap, newer than latest[i], in its place, and returns by
// how much that changes the count of jobs ended: 1 for a job that ended
// (it goes to r.Ended and to held; woken: a publish told the wait so,
// whose delay jobwatch_wake_latency_seconds counts), -1 for one retried
// since it ended (it ends again, or the wait waits for it still).
func (e *Engine) advance(latest []*Snapshot, held []*jobtype.Job, r WaitManyRequest, i int, snap *Snapshot, woken bool) int {
	was := latest[i].Gone || latest[i].Job.State.Terminal()
	now := snap.Gone || snap.Job.State.Terminal()
	latest[i] = snap
	switch {
	case !was && now:
		if woken {
			e.woke("wait", snap.Job.UpdatedAt)
		}
		held[i] = r.ended(snap)
		return 1
	case was && !now:
		held[i] = nil
		return -1
	}
	return 0
}

// rereadUnfinished reads again, in one store read, the jobs of a wait
// that ended at its deadline or Shutdown unmet and have not ended as far
// as latest says: a change another replica committed may not have
// reached this one yet, and the answer says what the database has. A
// job the read does not find was deleted. A read that fails leaves
// latest as it is: the wait still answers OK, with what this server saw.
func (e *Engine) rereadUnfinished(ctx context.Context, ids []string, latest []*Snapshot, held []*jobtype.Job, r WaitManyRequest, read store.JobRead) {
	var unfinished []string
	at := map[string]int{}
	for i, snap := range latest {
		if !snap.Gone && !snap.Job.State.Terminal() {
			unfinished = append(unfinished, ids[i])
			at[ids[i]] = i
		}
	}
	limit := rereadBound(ctx)
	jobs, err := shallow.Call(func() ([]jobtype.Job, error) {
		bounded, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
		defer cancel()
		return e.store.ReadJobs(bounded, unfinished, read)
	})
	if err != nil {
		e.log.Debug("read again the jobs of a wait at its cap", "jobs", len(unfinished), "err", err)
		return
	}
	found := make(map[int]bool, len(jobs))
	for _, j := range jobs {
		i := at[j.ID]
		found[i] = true
		if j.Version > latest[i].Job.Version {
			e.advance(latest, held, r, i, newSnapshot(j), false)
		}
	}
	for _, i := range at {
		if !found[i] {
			e.advance(latest, held, r, i, &Snapshot{Job: latest[i].Job, Gone: true}, false)
		}
	}
}

// result sorts latest (by ids) into ended jobs and unfinished ids; with
// Full, ended jobs keep Payload and Result while their sizes sum to at
// most MaxWaitManyBytes. held holds the ended jobs as the wait first saw
// them end.
func (r *WaitManyRequest) result(ids []string, latest []*Snapshot, held []*jobtype.Job) WaitManyResult {
	var res WaitManyResult
	bytes := 0
	for i, snap := range latest {
		switch {
		case snap.Gone:
		case snap.Job.State.Terminal():
			j := held[i]
			if j == nil || j.Version != snap.Job.Version {
				j = r.held(snap)
			}
			bytes += j.Size()
			if r.Full && bytes > MaxWaitManyBytes {
				summary := *j
				summary.Summarize()
				j = &summary
			}
			res.Ended = append(res.Ended, j)
		default:
			res.Unfinished = append(res.Unfinished, ids[i])
		}
	}
	return res
}

// waitManyIDs checks r and returns the ids it waits for, distinct, in
// order: r.IDs, or the jobs of r.Batch oldest first.
func (e *Engine) waitManyIDs(ctx context.Context, r WaitManyRequest) ([]string, error) {
	if r.Tenant == "" {
		r.Tenant = jobtype.DefaultTenant
	}
	if err := jobtype.CheckName("tenant", r.Tenant); err != nil {
		return nil, err
	}
	switch {
	case len(r.IDs) > 0 && r.Batch != "":
		return nil, &jobtype.InvalidError{Field: "batch", Reason: "must be empty when job_ids are given: wait for ids or for a batch"}
	case len(r.IDs) == 0 && r.Batch == "":
		return nil, &jobtype.InvalidError{Field: "job_ids", Reason: "must name at least one job, or give a batch"}
	case r.Batch != "":
		return e.batchIDs(ctx, r.Tenant, r.Batch)
	}
	for i, id := range r.IDs {
		if err := validID("job_ids["+strconv.Itoa(i)+"]", id); err != nil {
			return nil, err
		}
	}
	ids := distinctIDs(r.IDs)
	if len(ids) > jobtype.MaxBatchJobs {
		return nil, &jobtype.InvalidError{Field: "job_ids", Reason: fmt.Sprintf("must name at most %d jobs, got %d", jobtype.MaxBatchJobs, len(ids))}
	}
	return ids, nil
}

// batchIDs returns the ids of batch's jobs in tenant, oldest first: a
// batch that holds no job is a *BatchNotFoundError, and one of more than
// jobtype.MaxBatchJobs an *InvalidError.
func (e *Engine) batchIDs(ctx context.Context, tenant, batch string) ([]string, error) {
	if err := jobtype.CheckName("batch", batch); err != nil {
		return nil, err
	}
	f := store.ListFilter{Tenant: tenant, Batch: batch, Limit: jobtype.MaxBatchJobs + 1}
	var ids []string
	for {
		jobs, next, err := e.store.ListJobs(ctx, f)
		if err != nil {
			return nil, wrap("wait for batch", "", err)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		if len(ids) > jobtype.MaxBatchJobs {
			return nil, &jobtype.InvalidError{Field: "batch", Reason: fmt.Sprintf(
				"%q holds more than %d jobs: wait for them by job_ids, %d at a time", batch, jobtype.MaxBatchJobs, jobtype.MaxBatchJobs)}
		}
		if next == "" {
			break
		}
		f.PageToken, f.Limit = next, jobtype.MaxBatchJobs+1-len(ids)
	}
	if len(ids) == 0 {
		return nil, &jobtype.BatchNotFoundError{Tenant: tenant, Batch: batch}
	}
	slices.Reverse(ids) // ListJobs is newest first
	return ids, nil
}
