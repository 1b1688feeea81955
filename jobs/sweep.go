package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Run performs the periodic duties (jobs of claims whose answer was lost,
// lease expiry, timeouts, schedules, retention, alerting) every
// SweepInterval until ctx ends, then returns nil. A failed sweep is logged
// and tried again at the next tick. It is safe to run on several replicas
// at once: every change is re-checked inside its own transaction.
func (e *Engine) Run(ctx context.Context) error {
	ticker := time.NewTicker(e.cfg.SweepInterval)
	defer ticker.Stop()
	var clockTicks <-chan time.Time
	if e.clock != nil {
		t := time.NewTicker(clockSync)
		defer t.Stop()
		clockTicks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			e.storeIdleSightings() // see alerts.go: a stop loses no drain
			return nil
		case <-clockTicks:
			if err := e.clock.sync(ctx); err != nil {
				e.log.Debug("read the database's clock", "err", err)
			}
		case <-ticker.C:
			err := e.Sweep(ctx)
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, jobtype.ErrUnavailable):
				// The store logs each episode of unavailability once;
				// a warning per tick would repeat it every second.
				e.log.Debug("sweep failed", "err", err)
			default:
				e.log.Warn("sweep failed", "err", err)
			}
		}
	}
}

// Sweep runs the periodic duties once, now: give back the jobs of claims
// whose answer was lost (lostclaims.go), expire stale leases, end
// attempts past their queue's timeout, queue the schedules' due runs
// (after the expiries, so a run that just ended counts), record drained
// queues and log alerts starting and ending, and, last, delete a part of
// the jobs past retention (deleteExpired). Tests call it instead of
// waiting for Run.
func (e *Engine) Sweep(ctx context.Context) error {
	return errors.Join(e.releaseLostClaims(ctx), e.expireLeases(ctx), e.timeOutAttempts(ctx), e.runSchedules(ctx), e.watchQueues(ctx), e.deleteExpired(ctx))
}

// expireLeases ends the attempt of every RUNNING job whose worker has not
// heartbeaten within its queue's lease timeout: LOST, or QUEUED again when attempts
// remain; or gives the job back, the attempt not counted, when its claim
// was made just before the server stopped and never answered
// (unansweredBeforeStart). The list of candidates may be stale by the time each one is
// updated (a heartbeat, a completion or another replica's sweep came
// first), so the expiry is checked again under the row lock.
func (e *Engine) expireLeases(ctx context.Context) error {
	ids, err := e.store.ExpiredLeases(ctx, e.now())
	if err != nil {
		return wrap("expire leases of", "", err)
	}
	var errs []error
	for _, id := range ids {
		expired, givenBack := false, false
		var worker string
		j, err := e.update(ctx, "expire lease of", id, func(j *jobtype.Job, now time.Time) error {
			// The store may run this again on a newer read (another
			// replica's sweep came first): only the last run says.
			expired, givenBack = false, false
			if j.State != jobtype.Running || !j.LeaseExpiresAt.Before(now) {
				return errUnchanged
			}
			expired = true
			if e.unansweredBeforeStart(j) {
				givenBack, worker = true, j.WorkerID
				giveBack(j)
				return nil
			}
			j.Error = leaseExpiredError(e.queueRules(j.Queue).LeaseTimeout)
			if j.Attempt < j.MaxAttempts {
				e.requeue(j, now)
			} else {
				j.State = jobtype.Lost
				j.FinishedAt = now
				releaseLease(j)
			}
			j.EndAttempt(now, "")
			return nil
		})
		switch {
		case isNotFound(err):
		case err != nil:
			errs = append(errs, err)
		case givenBack:
			e.log.Warn("queued again, the attempt not counted: claimed just before the server stopped, and its worker never answered",
				"job_id", j.ID, "queue", j.Queue, "worker_id", worker)
		case expired:
			e.log.Info("lease expired", "job_id", j.ID, "worker_id", j.WorkerID, "attempt", j.Attempt, "state", j.State)
			e.traceAttemptEnd(j)
		}
	}
	return errors.Join(errs...)
}

// How much of a backlog of jobs past retention one sweep deletes. A
// sweep runs its duties one after another, so a deletion that ran until
// the backlog was gone (a retention shortened, a long stop: a million
// jobs took 45 s on SQLite) held up lease expiry, timeouts, schedules
// and alerts for as long. A sweep deletes batches of retentionBatch jobs
// until retentionBudget has passed, at least one batch, and leaves the
// rest to the next sweep: the other duties wait at most about the
// budget, and a backlog still goes at a fifth of the writer's time or
// more (about 4,000 jobs a second at 45 ms a batch). Each batch is a
// transaction of its own, so other writes take turns with it on
// SQLite's single writer.
const (
	retentionBatch  = 1000
	retentionBudget = 200 * time.Millisecond
)

// retentionPace is how much of a backlog one sweep deletes: batches of
// batch jobs (retentionBatch if zero) until budget has passed
// (retentionBudget if zero), at least one. Tests set it smaller.
type retentionPace struct {
	batch  int
	budget time.Duration
}

// deleteExpired deletes terminal jobs that finished more than the
// retention in effect (Rules, else Config) ago, as many as one sweep's
// pace allows; afterwards they are ErrNotFound.
func (e *Engine) deleteExpired(ctx context.Context) error {
	batch, budget := e.retention.batch, e.retention.budget
	if batch <= 0 {
		batch = retentionBatch
	}
	if budget <= 0 {
		budget = retentionBudget
	}
	before := e.now().Add(-e.Retention())
	deadline := time.Now().Add(budget)
	deleted := 0
	for {
		n, err := e.store.DeleteFinishedBefore(ctx, before, batch)
		deleted += n
		if err != nil {
			return wrap("delete expired", "", err)
		}
		if n < batch {
			break // caught up
		}
		if !time.Now().Before(deadline) {
			e.log.Debug("retention deleted jobs, more at the next sweep", "count", deleted)
			return nil
		}
	}
	if deleted > 0 {
		e.log.Debug("retention deleted jobs", "count", deleted)
	}
	return nil
}
