package jobs

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// ClaimRequest says which jobs a worker may run.
//
// Tenants, Kinds and Queues each narrow the jobs it may claim; none lets
// it past a serial queue's order, which is each tenant's: a tenant's
// head it may not run (of another kind) gives it nothing more of that
// tenant's jobs in the queue until that head is taken, while the other
// tenants' heads stay its to take.
type ClaimRequest struct {
	WorkerID string // required: shown on the job as who runs it
	// Caller is who sends the claim (the server's token id; empty without
	// tokens). StopClaiming reaches a worker's claims only if it names
	// the same caller, so that a worker id, which anyone may read on a
	// job, cannot be used to stop someone else's workers.
	Caller  string
	Tenants []string // empty: any
	Kinds   []string // empty: any
	Queues  []string // empty: any
}

func (r ClaimRequest) validate() error {
	if err := jobtype.CheckName("worker_id", r.WorkerID); err != nil {
		return err
	}
	if err := validNames("tenants", r.Tenants); err != nil {
		return err
	}
	if err := validNames("kinds", r.Kinds); err != nil {
		return err
	}
	return validNames("queues", r.Queues)
}

// validNames checks a filter list: at most jobtype.MaxFilterItems names.
func validNames(field string, vs []string) error {
	if len(vs) > jobtype.MaxFilterItems {
		return &jobtype.InvalidError{Field: field, Reason: "must list at most " + strconv.Itoa(jobtype.MaxFilterItems) +
			" entries, got " + strconv.Itoa(len(vs))}
	}
	for i, v := range vs {
		if err := jobtype.CheckName(field+"["+strconv.Itoa(i)+"]", v); err != nil {
			return err
		}
	}
	return nil
}

// Claim gives the worker the oldest ready job it may run, RUNNING under a
// new lease (job.LeaseID, job.LeaseExpiresAt). With none ready it parks
// until one is, or until the deadline (zero: none), ctx's end or Shutdown,
// and then returns ErrNoJob. The deadline is on the monotonic clock: take
// it from time.Now or a context's deadline (see Wait).
//
// The first look of a call writes at once (store.ClaimJobs, one
// transaction on the single writer), because a worker that asks usually
// has work waiting; but that of a call whose deadline has passed, which
// may not park, reads first. Parking polls nothing: the claim is registered with
// its tenants, kinds and queues (claimers.go) from before that first
// look, and a new ready job wakes one registered claim that may run it,
// not every one; a job due later wakes one when its RunAt comes, by one
// timer for the whole engine; a job ending in a queue with limits wakes
// every claim that may take from the queues whose room it frees, and a
// job of a tenant with a bound on its running jobs ending wakes every
// claim that may take that tenant's jobs. A claim
// woken for one ready job in a queue without limits, the only one woken
// for it, claims at once. A
// claim woken otherwise (room freed, a time come due, a job it might have
// missed while looking) first reads whether a job it may run is ready
// (store.NextReady, on the read pool) and writes only if one is, so a
// wake that was not needed (the job was taken by another look, or its
// queue is full) costs one read, never a write queued in front of the
// next Submit or Complete.
//
// If ctx ends just after the store committed a claim, the job is RUNNING
// under a lease nobody holds; a caller that can tell its requester is gone
// gives it back with Release, else the lease reaper takes it back.
func (e *Engine) Claim(ctx context.Context, r ClaimRequest, deadline time.Time) (jobtype.Job, error) {
	js, err := e.ClaimJobs(ctx, r, 1, deadline)
	if err != nil {
		return jobtype.Job{}, err
	}
	return js[0], nil
}

// ClaimJobs is Claim for a worker with n free slots (1..MaxClaimJobs): it
// takes up to n ready jobs at once, in claim order, each RUNNING under a
// lease of its own, in one store write (one statement on PostgreSQL), so
// a busy worker pays a fraction of a claim per job, as River's producer
// fetches for all its free slots at once. It returns as soon as at least
// one is ready: it never waits for more. With none ready it parks as
// Claim does and returns ErrNoJob.
func (e *Engine) ClaimJobs(ctx context.Context, r ClaimRequest, n int, deadline time.Time) ([]jobtype.Job, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	if n < 1 || n > jobtype.MaxClaimJobs {
		return nil, &jobtype.InvalidError{Field: "max_jobs", Reason: "must be 0 (one job) to " + strconv.Itoa(jobtype.MaxClaimJobs) +
			", got " + strconv.Itoa(n)}
	}
	// Registered before the first look, so that a job queued during a
	// look wakes us (or, if the look sees it, is simply claimed), and
	// unregistered with the id of what we claimed, so that a wake we were
	// given for another job passes to another claimer.
	e.loadScheduled(ctx)
	c := e.addClaimer(r)
	var claimed []string
	defer func() { e.removeClaimer(c, claimed) }()

	// A claim that may not wait (its deadline has passed: the server's
	// parked calls are at their limit) looks with a read first. Each
	// claim's write queues behind the store's one writer on SQLite, so a
	// flood of such claims with nothing ready stalled every caller's
	// writes for seconds; a read costs the writer nothing.
	write, woken := deadline.IsZero() || time.Until(deadline) > 0, false
	for {
		if e.claimStopped(c) {
			return nil, jobtype.ErrNoJob // its worker is stopping (StopClaiming)
		}
		gen, byChange, owesJob := e.beginLook(c)
		woken = woken || byChange
		// Woken for one ready job, which no other claimer was: claim
		// it without reading first.
		write = write || owesJob

		// One reading of the clock for the claim and for the next
		// RunAt: with two, a job whose RunAt fell between them would be
		// neither claimed nor waited for.
		f := e.claimFilter(r)
		if write {
			js, err := e.claimOnce(ctx, f, r.WorkerID, n, woken)
			if !errors.Is(err, jobtype.ErrNoJob) {
				for _, j := range js {
					claimed = append(claimed, j.ID)
				}
				return js, err
			}
		}
		if ctx.Err() != nil {
			return nil, jobtype.ErrNoJob
		}
		runAt, ok, err := e.store.NextReady(ctx, f)
		if err != nil {
			if ctx.Err() != nil {
				return nil, jobtype.ErrNoJob
			}
			return nil, wrap("claim", "", err)
		}
		// Ready now: a job queued since the write looked, or the one a
		// wake was for. Look again with the write (after a lost race
		// the read says whether another is ready). Also past the
		// deadline and on shutdown, which stop parking, not work.
		if ok && !runAt.After(f.Now) {
			write = true
			continue
		}
		if e.shuttingDown() || (!deadline.IsZero() && time.Until(deadline) <= 0) {
			return nil, jobtype.ErrNoJob
		}

		// Park, with the earliest RunAt we could claim for the engine's
		// timer, or when a queue held by its rate has room again if that
		// is sooner (rates.go), unless a wake came during the look (or
		// that time has just passed): then look again, reading first.
		var due time.Time
		if ok {
			due = runAt
		}
		room, held, err := e.rateRoom(ctx, f)
		if err != nil {
			if ctx.Err() != nil {
				return nil, jobtype.ErrNoJob
			}
			return nil, wrap("claim", "", err)
		}
		if held && (due.IsZero() || room.Before(due)) {
			due = room
		}
		write = false
		if !e.park(c, gen, due) {
			continue
		}
		woken = false
		capped, stopCap := e.timerUntil(deadline)
		select {
		case <-c.wake:
		case <-capped:
		case <-ctx.Done():
		case <-e.done:
		}
		stopCap()
	}
}

// claimFilter carries the queue rules, the tenants' weights and their
// bounds on running jobs in effect to the store, which checks the rules
// and the bounds and takes fair claiming's turn in the transaction that
// claims: a replica-local count could not see the other replicas'
// claims.
func (e *Engine) claimFilter(r ClaimRequest) store.ClaimFilter {
	rules := e.rules.Load()
	return store.ClaimFilter{Tenants: r.Tenants, Kinds: r.Kinds, Queues: r.Queues, Now: e.now(), Limits: rules.limits, Pools: rules.Pools, Weights: rules.weights,
		TenantMaxRunning: rules.caps}
}

// claimOnce tries one claim of up to n jobs f selects, for workerID.
// woken says the try follows a wake by a commit, so that the wake-up
// latency is reported against the commit that queued the job.
func (e *Engine) claimOnce(ctx context.Context, f store.ClaimFilter, workerID string, n int, woken bool) ([]jobtype.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, jobtype.ErrNoJob
	}
	leases := make([]string, n)
	for i := range leases {
		leases[i] = newLeaseID()
	}
	claimed, err := e.store.ClaimJobs(ctx, f, store.Claim{
		WorkerID: workerID,
		LeaseIDs: leases,
		// The filter's time: a rate counts its window back from it and
		// records each claim at it, so it is the jobs' StartedAt too.
		Now:    f.Now,
		Clock:  e.now,
		Lease:  e.cfg.LeaseTimeout,
		Leases: e.rules.Load().leases,
	})
	switch {
	case errors.Is(err, jobtype.ErrNoJob):
		return nil, jobtype.ErrNoJob
	case err != nil:
		e.claimAnswerLost(err, leases, f.Now)
		return nil, wrap("claim", "", err)
	}
	js := make([]jobtype.Job, len(claimed))
	for i, c := range claimed {
		if woken {
			e.woke("claim", c.QueuedAt)
		}
		e.publish(c.Job)
		e.traceClaim(c.Job, c.QueuedAt, c.Job.UpdatedAt)
		js[i] = c.Job
	}
	return js, nil
}

func (e *Engine) shuttingDown() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Release gives back a job claimed under leaseID that its worker will not
// run, such as one granted to a claim whose caller had gone by the time
// it could be handed over: QUEUED again at once, as if never claimed,
// instead of RUNNING under a lease nobody holds until the reaper calls it
// LOST. The attempt is not counted, the lease and worker are cleared,
// progress starts over, RunAt is kept (the job keeps its place in the
// queue) and the version goes up like for any change. A lease that does
// not hold the job (cancelled, finished, lost, re-claimed) is
// ErrStaleLease and changes nothing.
func (e *Engine) Release(ctx context.Context, id, leaseID string) (jobtype.Job, error) {
	if err := validLease(id, leaseID); err != nil {
		return jobtype.Job{}, err
	}
	return e.update(ctx, "release", id, func(j *jobtype.Job, now time.Time) error {
		if err := checkLease(j, leaseID); err != nil {
			return err
		}
		giveBack(j)
		return nil
	})
}

// giveBack makes RUNNING j QUEUED again as if its claim had never been
// made: the attempt not counted, no progress, no lease, and the worker
// of the attempt before (from its history entry), if one ran.
func giveBack(j *jobtype.Job) {
	j.State = jobtype.Queued
	j.Attempt = max(j.Attempt-1, 0)
	if j.Attempt == 0 {
		j.StartedAt = time.Time{}
	}
	j.WorkerID = ""
	for _, h := range slices.Backward(j.History) {
		if h.Attempt == j.Attempt && h.WorkerID != "" {
			j.WorkerID = h.WorkerID
			break
		}
	}
	j.Percent = 0
	j.Step = ""
	releaseLease(j)
}
