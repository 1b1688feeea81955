package jobs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A claim whose store answer was lost (ErrUnavailable once the claim was
// sent: PostgreSQL stopped or its connection cut) may have committed:
// its jobs would then be RUNNING under leases that only this engine
// knows, and no worker runs them. Rather than leave them to the lease's
// expiry, where a job without attempts left ends LOST, the engine keeps
// such a claim's leases and the sweep gives back whatever they hold
// (Release: QUEUED again, the attempt not counted) once the store
// answers again. A lease that holds nothing is looked for again at each
// sweep until it would have expired, as a claim cut off by a network
// fault may still commit after the error; from then on it is the
// reaper's, as before.

// maxLostClaimLeases bounds the leases kept: a long outage of failed
// claims, most of which committed nothing, must not grow without end.
// A lease not kept is left to its expiry.
const maxLostClaimLeases = 10_000

// lostClaims are the leases of claims whose answer was lost, each with
// when it would expire.
type lostClaims struct {
	mu     sync.Mutex
	leases map[string]time.Time
}

// add keeps leases until they would expire at until.
func (l *lostClaims) add(leases []string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leases == nil {
		l.leases = map[string]time.Time{}
	}
	for _, id := range leases {
		if len(l.leases) >= maxLostClaimLeases {
			return
		}
		l.leases[id] = until
	}
}

// pending forgets the leases that have expired by now and returns the
// rest.
func (l *lostClaims) pending(now time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, until := range l.leases {
		if until.Before(now) {
			delete(l.leases, id)
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

func (l *lostClaims) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.leases, id)
}

// claimAnswerLost keeps the leases of a claim that failed with err, if
// err leaves its outcome unknown.
func (e *Engine) claimAnswerLost(err error, leases []string, at time.Time) {
	if !errors.Is(err, jobtype.ErrUnavailable) {
		return
	}
	e.lostClaims.add(leases, at.Add(e.longestLease()))
}

// longestLease is the longest lease any queue gives.
func (e *Engine) longestLease() time.Duration {
	longest := e.cfg.LeaseTimeout
	for _, d := range e.rules.Load().leases {
		longest = max(longest, d)
	}
	return longest
}

// releaseLostClaims gives back the jobs that claims whose answer was
// lost took: QUEUED again, as if never claimed.
func (e *Engine) releaseLostClaims(ctx context.Context) error {
	leases := e.lostClaims.pending(e.now())
	if len(leases) == 0 {
		return nil
	}
	held, err := e.store.HeldLeases(ctx, leases)
	if err != nil {
		return wrap("find the jobs of lost claims in", "", err)
	}
	var errs []error
	for _, a := range held {
		j, err := e.Release(ctx, a.JobID, a.LeaseID)
		switch {
		case err == nil:
			e.log.Info("released a job whose claim's answer was lost", "job_id", j.ID, "queue", j.Queue)
		case isNotFound(err) || errors.Is(err, ErrStaleLease):
			// Deleted, or ended by another write since the read.
		default:
			errs = append(errs, err)
			continue
		}
		e.lostClaims.forget(a.LeaseID)
	}
	return errors.Join(errs...)
}

// A claim made just before the server stopped (killed, crashed, the
// machine lost) may have committed while its answer never reached the
// worker: its jobs are RUNNING under leases nobody holds, and the engine
// that made it, with its lostClaims, is gone. With a store that one
// server alone uses (store/sqlite, whose lock on the file keeps a second
// process out), a lease from before this engine started was handed out
// by a process that has stopped. If, by the time it expires, its worker
// has never been heard from (no heartbeat extended it), the sweep gives
// the job back as Release does: QUEUED, the attempt not counted, rather
// than spending an attempt on a run that never began, which with one
// attempt (the default) would end the job LOST. A worker that did get
// the answer heartbeats within the lease (the Go Worker, and so jobwatch
// worker, every third of it at most) and keeps its job. A run that ended
// unheard (its worker died too, or stopped it when no heartbeat got
// through for a whole lease, as the Go Worker does while the server is
// down) is run again, the attempt not counted. With PostgreSQL the claim
// may have come from another replica, alive or not: there the lease's
// expiry spends the attempt (docs/OPERATING.md).

// unansweredBeforeStart reports whether RUNNING j, whose lease has
// expired, was claimed from this store before the engine started, by a
// server that has since stopped, and its worker never heard from since:
// its lease still ends where the claim set it, the lease the claim
// granted after the attempt began. The store keeps that lease
// (jobtype.Job.AttemptLease, SQLite's migration 28), so whatever lease
// timeout this server gives, a heartbeat that moved the lease's end (and
// nothing a watcher sees: store.LeaseWrite.Apply) tells the two apart.
// An attempt begun before that migration has none kept: its queue's
// lease timeout in effect now stands for it, and one changed across the
// restart judges it wrongly (a claim under a longer lease than now's
// looks extended; a lease extended under a shorter one looks unextended).
func (e *Engine) unansweredBeforeStart(j *jobtype.Job) bool {
	if !e.soleServer || j.AttemptStartedAt.IsZero() || !j.AttemptStartedAt.Before(e.started) {
		return false
	}
	granted := j.AttemptLease
	if granted <= 0 {
		granted = e.queueRules(j.Queue).LeaseTimeout
	}
	return !j.LeaseExpiresAt.After(j.AttemptStartedAt.Add(granted))
}
