package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// The decisions below are every backend's: a backend does in SQL what
// they decide, and decides nothing of its own about versions or
// schedules. A backend that decides in SQL itself (store/postgres's claims
// and lease writes) says which of these its statement states, and
// store/storetest holds it to them.

// Versioned is next as a write that makes old into next commits it: with
// old's Version, plus one when a watcher could see the change (next is
// not SameVisible as old). Whatever Version next carried is replaced:
// the version is the store's alone.
func Versioned(old, next jobtype.Job) jobtype.Job {
	next.Version = old.Version
	if !next.SameVisible(&old) {
		next.Version++
	}
	return next
}

// ScheduleStep is what RunSchedules does with one schedule, as
// ScheduleRun.Step decides it; the backend does it in the transaction
// that read the schedule's state.
type ScheduleStep struct {
	// RecordEnd: the latest run's job is gone without a recorded end.
	// Record that it ended at now (it ended no later), which is what the
	// schedule counts from; before Start, if both.
	RecordEnd bool
	// Start: create the run's Job and record it as the schedule's latest
	// run (the schedule's first record, when it has none).
	Start bool
	// RecordSeen: the cron schedule has no record; record it with no run,
	// first seen at now, which its first cron time counts from.
	RecordSeen bool
}

// Step decides what RunSchedules does at now with run, whose schedule's
// state is last (nil: the store has no record of it):
//   - no record: an every schedule starts; a cron schedule is recorded
//     as first seen at now, and starts at its first time after that;
//   - latest run unfinished: nothing (never two runs at once);
//   - latest run's job gone without a recorded end: record it ended at
//     now, then as below;
//   - latest run ended at E (for a cron schedule not yet run: first
//     seen at E): an every schedule starts if E + run.Every is at or
//     before now; a cron schedule starts if its first time after E is at
//     or before now. An every schedule with no run yet (a cron schedule
//     made an every one) starts.
//
// So a cron schedule's times that pass while a run is unfinished are
// skipped (the next counts from its end), and however many of its times
// passed since the latest run ended (the server was down, or the
// schedule was not declared), one run starts for all of them, at once;
// the next counts from that run's end. A cron schedule whose times the
// rules changed (run.Since) counts from then if that is later: an edit
// catches up on no time before it.
func (run ScheduleRun) Step(last *ScheduleState, now time.Time) ScheduleStep {
	switch {
	case last == nil && run.Cron != nil:
		return ScheduleStep{RecordSeen: true}
	case last == nil || (last.LastJobID == "" && run.Cron == nil):
		return ScheduleStep{Start: true}
	case last.Unfinished():
		return ScheduleStep{}
	}
	step := ScheduleStep{RecordEnd: last.LastEndedAt.IsZero()}
	ended := last.LastEndedAt
	if step.RecordEnd {
		ended = now
	}
	if run.Cron == nil {
		step.Start = !ended.Add(run.Every).After(now)
		return step
	}
	next := run.Cron.Next(laterOf(ended, run.Since))
	step.Start = !next.IsZero() && !next.After(now)
	return step
}

// laterOf is the later of two times.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// NextRun is when run's next run is due after state last (nil: the store
// has no record of it), as Step decides at now: zero while the latest
// run is unfinished (its end decides the next), or when a cron
// expression names no further time. It may be before now: the run is
// due and the next sweep starts it.
func (run ScheduleRun) NextRun(last *ScheduleState, now time.Time) time.Time {
	switch {
	case last != nil && last.Unfinished():
		return time.Time{}
	case last == nil && run.Cron != nil:
		return run.Cron.Next(now)
	case last == nil || (last.LastJobID == "" && run.Cron == nil):
		return now
	}
	from := last.LastEndedAt
	if from.IsZero() {
		from = now
	}
	if run.Cron == nil {
		return from.Add(run.Every)
	}
	return run.Cron.Next(laterOf(from, run.Since))
}

// Dependency is a job that a new job's After names, as the transaction
// that creates the new job reads it: its state and, for a WAITING one,
// how deep its own chain of WAITING jobs is.
type Dependency struct {
	State jobtype.State
	Depth int
}

// SettleDependencies decides what j, a new job WAITING for the jobs of
// j.After, is at its creation, from deps (those jobs as the creating
// transaction reads them, by id; an id of After missing from it does not
// exist for j's tenant): j as it is stored, the dependencies it still
// waits for (rows of the backend's table of them), and its depth (1 more
// than the deepest WAITING one it waits for). With none left to wait
// for it is QUEUED (from j.UpdatedAt at the earliest); with one ended
// other than SUCCEEDED and OnDependencyFailure cancel it is CANCELLED at
// once, with the error the backends' triggers give a job whose
// dependency fails later. An id not in deps is a *jobtype.MissingError;
// a chain deeper than jobtype.MaxDependencyDepth an *InvalidError.
func SettleDependencies(j jobtype.Job, deps map[string]Dependency) (settled jobtype.Job, waitFor []string, depth int, err error) {
	if j.State != jobtype.Waiting || len(j.After) == 0 {
		return j, nil, 0, nil
	}
	var failed string
	for _, id := range j.After {
		d, ok := deps[id]
		switch {
		case !ok:
			return j, nil, 0, &jobtype.MissingError{Field: "after", ID: id}
		case !d.State.Terminal():
			waitFor = append(waitFor, id)
			if d.State == jobtype.Waiting {
				depth = max(depth, d.Depth)
			}
		case d.State != jobtype.Succeeded && failed == "":
			failed = id
		}
	}
	if failed != "" && j.OnDependencyFailure != jobtype.RunOnDependencyFailure {
		j.State, j.FinishedAt = jobtype.Cancelled, j.UpdatedAt
		j.Error = &jobtype.JobError{Type: jobtype.DependencyFailedError,
			Message: DependencyFailedMessage(failed, deps[failed].State)}
		return j, nil, 0, nil
	}
	if len(waitFor) == 0 {
		j.State = jobtype.Queued
		if j.RunAt.Before(j.UpdatedAt) {
			j.RunAt = j.UpdatedAt
		}
		return j, nil, 0, nil
	}
	if err := chainTooDeep(depth + 1); err != nil {
		return j, nil, 0, err
	}
	return j, waitFor, depth + 1, nil
}

// chainTooDeep refuses a job that would be depth WAITING jobs deep.
func chainTooDeep(depth int) error {
	if depth > jobtype.MaxDependencyDepth {
		return &jobtype.InvalidError{Field: "after", Reason: fmt.Sprintf(
			"would make a chain of %d WAITING jobs, each after the next; at most %d", depth, jobtype.MaxDependencyDepth)}
	}
	return nil
}

// Rewaits reports whether a write that makes old into next puts a job
// with dependencies (After) back to WAITING after it had ended: a retry
// (jobs.Engine.Retry). The backend then settles next with SettleRetry,
// from its dependencies as the writing transaction reads them (locked
// as a creation's are), before it writes it.
func Rewaits(old, next jobtype.Job) bool {
	return next.State == jobtype.Waiting && old.State.Terminal() && len(next.After) > 0
}

// SettleRetry decides what j, a retried job going back to WAITING
// (Rewaits), is as it is written, from deps as SettleDependencies takes
// them: j as stored, the dependencies it waits for (rows of the
// backend's table of them; a row that is there already stays) and its
// depth. A retry never runs a job before its dependencies have
// succeeded: j waits again for each one that has not SUCCEEDED, whether
// it is still active or ended otherwise (then it must be retried in its
// turn, and its next end decides j's, as for any WAITING job: a bulk
// retry of a failed chain may retry its jobs in any order). With
// OnDependencyFailure run, only the active ones are waited for. An id
// missing from deps, a dependency deleted since or removed by retention,
// ended long ago and never ends again: it is not waited for. With none
// to wait for j is QUEUED. The retry's own History entry, the last, says
// which.
func SettleRetry(j jobtype.Job, deps map[string]Dependency) (settled jobtype.Job, waitFor []string, depth int, err error) {
	for _, id := range j.After {
		d, ok := deps[id]
		switch {
		case !ok, d.State == jobtype.Succeeded:
		case d.State.Terminal() && j.OnDependencyFailure == jobtype.RunOnDependencyFailure:
		default:
			waitFor = append(waitFor, id)
			if d.State == jobtype.Waiting {
				depth = max(depth, d.Depth)
			}
		}
	}
	if len(waitFor) == 0 {
		j.State = jobtype.Queued
		if j.RunAt.Before(j.UpdatedAt) {
			j.RunAt = j.UpdatedAt
		}
	} else if err := chainTooDeep(depth + 1); err != nil {
		return j, nil, 0, err
	}
	if n := len(j.History); n > 0 && j.History[n-1].State == jobtype.Waiting {
		j.History[n-1].State = j.State
	}
	if len(waitFor) == 0 {
		return j, nil, 0, nil
	}
	return j, waitFor, depth + 1, nil
}

// WaitersBelowLimit is how far below a retried job at depth (SettleRetry)
// a backend follows the WAITING jobs that wait for it, through its table
// of dependencies, to learn whether they now hang too deep: one level
// more than the bound allows.
func WaitersBelowLimit(depth int) int { return jobtype.MaxDependencyDepth - depth + 1 }

// WaitersTooDeep refuses a retry that puts a job back to WAITING at depth
// (SettleRetry) above WAITING jobs that wait for it, below levels deep:
// jobs retried before it, while it had ended, which counted it at depth
// 0. A bulk retry of a failed chain from its end would otherwise join
// WAITING chains of any length, which the cascade of a failure (each
// cancelled job cancelling the ones after it, in the backends' triggers)
// cannot end. Otherwise the backend raises those jobs' depth to depth
// plus their distance below it, so that a job submitted after one of
// them counts it.
func WaitersTooDeep(depth, below int) error {
	if below == 0 {
		return nil
	}
	// below stops one level past the bound (WaitersBelowLimit): the
	// chain may be longer still.
	if depth+below > jobtype.MaxDependencyDepth {
		return &jobtype.InvalidError{Field: "after", Reason: fmt.Sprintf(
			"would make a chain of more than %d WAITING jobs, each after the next, counting the jobs retried before it that wait after it",
			jobtype.MaxDependencyDepth)}
	}
	return nil
}

// DependencyFailedMessage is the error message of a job cancelled because
// job id, which it runs after, ended in state: the backends' triggers
// write the same words.
func DependencyFailedMessage(id string, state jobtype.State) string {
	return "job " + id + ", which it runs after, ended " + strings.ToUpper(string(state))
}
