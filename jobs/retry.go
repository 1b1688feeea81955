package jobs

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Operators' actions on one job: Retry, Delete, and Cancel (submit.go).
// Each is recorded with who did it (the actor the caller put on the
// context, WithActor) in the job's History, and logged once at info.

// actorKey is the context key of WithActor.
type actorKey struct{}

// WithActor returns ctx carrying by, the words that name who acts
// (auth.Principal.Describe), for the operator actions made with it:
// Retry, Delete, Cancel and the bulk actions built on them. It travels
// on the context so that the bulk actions, which call the single-job
// ones, carry it without a parameter of their own.
func WithActor(ctx context.Context, by string) context.Context {
	return context.WithValue(ctx, actorKey{}, by)
}

// Actor returns the actor WithActor put on ctx, or "" if none.
func Actor(ctx context.Context) string {
	by, _ := ctx.Value(actorKey{}).(string)
	return by
}

// inBulkKey marks the context of a bulk action's single-job actions.
type inBulkKey struct{}

// logAction logs an operator's action on one job: at info, once, for a
// call on that job; at debug for each job of a bulk action, whose page is
// logged once at info by its caller (a bulk retry of 100,000 jobs is 100
// lines, not 100,000). Who did it is in the job's history either way.
func (e *Engine) logAction(ctx context.Context, msg string, attrs ...any) {
	level := slog.LevelInfo
	if ctx.Value(inBulkKey{}) != nil {
		level = slog.LevelDebug
	}
	e.log.Log(ctx, level, msg, attrs...)
}

// Retry puts a FAILED, CANCELLED or LOST job back in its queue, QUEUED
// with the same id, ready now (RunAt the time of the retry), without
// worker, lease, progress or end. A job cancelled while it ran is ready
// once the lease of the attempt it cancelled would have expired, if that
// is later: its worker hears of the cancel by then (at its next
// heartbeat), and until then the next attempt could run beside it. A job with dependencies (After) is
// WAITING again instead, for each of them that has not succeeded, until
// they have (store.SettleRetry): a retry never runs a job its
// dependencies have not allowed; with none left to wait for it is QUEUED. Its version keeps counting up, so
// waiters and watchers see it run again; its Error stays until an
// attempt succeeds, as between automatic retries.
//
// Attempts keep their numbers: the counter goes on (the next attempt of
// a job that failed its third is the fourth), so each attempt's number
// names one entry of the History, and the retry gives a fresh allowance
// by raising MaxAttempts to Attempt plus the queue's MaxAttempts (its
// rules, else Config.DefaultMaxAttempts). The retry itself is an entry of
// the History: the attempt it follows, QUEUED, the time as FinishedAt,
// and By.
//
// Any other state is a *StateError (failed_precondition). A retry that
// would make a second active job with the tenant's unique key is the
// store's *jobtype.ConflictError, as a submit's, and one that would take
// the tenant past its max_queued the *jobtype.QuotaError, as a submit's:
// the job it makes QUEUED counts.
func (e *Engine) Retry(ctx context.Context, id string) (jobtype.Job, error) {
	release, err := e.writeTurn(ctx, 1)
	if err != nil {
		return jobtype.Job{}, wrap("retry", id, err)
	}
	defer release()
	by := Actor(ctx)
	j, err := e.updateWithin(ctx, "retry", id, e.quota(), func(j *jobtype.Job, now time.Time) error {
		switch j.State {
		case jobtype.Failed, jobtype.Cancelled, jobtype.Lost:
		default:
			return &StateError{JobID: j.ID, State: j.State, Op: "retry",
				Hint: "only a FAILED, CANCELLED or LOST job can be retried"}
		}
		// A job cancelled (or timed out) while it ran: its worker hears
		// of the end at its next heartbeat, due before the lease
		// expires, and stops its handler then. Until that moment the
		// next attempt is not handed out, so two attempts of one job do
		// not run at once (as after a lost lease, whose worker stops by
		// its expiry). The ended attempt's lease stays on the row for it.
		ready := now
		if j.LeaseID != "" && j.LeaseExpiresAt.After(now) {
			ready = j.LeaseExpiresAt
		}
		j.State = jobtype.Queued
		if len(j.After) > 0 {
			// The store settles it (store.SettleRetry): WAITING for
			// the dependencies that have not succeeded, or QUEUED.
			j.State = jobtype.Waiting
		}
		j.MaxAttempts = addAttempts(j.Attempt, e.queueRules(j.Queue).MaxAttempts)
		j.RunAt = ready
		j.FinishedAt = time.Time{}
		j.Percent, j.Step = 0, ""
		j.WorkerID = ""
		releaseLease(j)
		j.AddHistory(jobtype.HistoryEntry{Attempt: j.Attempt, FinishedAt: now, State: j.State, By: by})
		return nil
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	e.logAction(ctx, "job retried", "job_id", j.ID, "tenant", j.Tenant, "queue", j.Queue,
		"attempt", j.Attempt, "max_attempts", j.MaxAttempts, "by", by)
	return j, nil
}

// Delete removes a terminal job at once; afterwards it is ErrNotFound to
// every read, and every waiter and watcher of it, here and on other
// replicas (the store's change notice), ends with ErrNotFound. A job
// that has not ended is a *StateError (cancel it first), and so is one
// that a WAITING job waits for (a job retried to run after it, which
// would otherwise wait for ever; retention keeps such a job too). Who deleted it
// is logged at info: the job, and so its History, is gone.
func (e *Engine) Delete(ctx context.Context, id string) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	release, err := e.writeTurn(ctx, 1)
	if err != nil {
		return wrap("delete", id, err)
	}
	defer release()
	j, deleted, err := e.store.DeleteJob(ctx, id)
	if wf := (*jobtype.WaitedForError)(nil); errors.As(err, &wf) {
		return &StateError{JobID: id, State: j.State, Op: "delete",
			Hint: "job " + wf.Waiter + " runs after it and waits for it to succeed: retry it, or cancel " + wf.Waiter + " first"}
	}
	if err != nil {
		return wrap("delete", id, err)
	}
	if !deleted {
		return &StateError{JobID: j.ID, State: j.State, Op: "delete", Hint: "cancel it first"}
	}
	e.publishGone(j)
	e.logAction(ctx, "job deleted", "job_id", j.ID, "tenant", j.Tenant, "queue", j.Queue,
		"state", j.State, "by", Actor(ctx))
	return nil
}

// publishGone tells the waiters and watchers of deleted job j, and the
// feeds of its tenant, that it is gone: a snapshot one version past its
// last, marked Gone, which ends each wait and watch with ErrNotFound.
func (e *Engine) publishGone(j jobtype.Job) {
	j.Version++
	e.hub.Publish(j.ID, j.Version, &Snapshot{Job: j, shared: true, Gone: true})
	e.signals.Publish(tenantSignal(j.Tenant), e.signalSeq.Add(1), struct{}{})
}

// addAttempts is attempt plus allowance, held at math.MaxInt32 rather
// than wrapping round: a queue may allow that many attempts, and a retry
// of its job after its first must not leave it an allowance below zero.
func addAttempts(attempt, allowance int32) int32 {
	if sum := int64(attempt) + int64(allowance); sum < math.MaxInt32 {
		return int32(sum)
	}
	return math.MaxInt32
}
