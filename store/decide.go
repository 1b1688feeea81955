package store

import (
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
	// run (the schedule's first record, when it never ran).
	Start bool
}

// Step decides what RunSchedules does at now with run, whose schedule's
// state is last (nil: the schedule never ran):
//   - never run: start;
//   - latest run unfinished: nothing (never two runs at once);
//   - latest run's job gone without a recorded end: record it ended at
//     now, then as below;
//   - latest run ended at E: start if E + run.Every is at or before now.
func (run ScheduleRun) Step(last *ScheduleState, now time.Time) ScheduleStep {
	switch {
	case last == nil:
		return ScheduleStep{Start: true}
	case last.Unfinished():
		return ScheduleStep{}
	}
	step := ScheduleStep{RecordEnd: last.LastEndedAt.IsZero()}
	ended := last.LastEndedAt
	if step.RecordEnd {
		ended = now
	}
	step.Start = !ended.Add(run.Every).After(now)
	return step
}
