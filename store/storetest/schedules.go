package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

var scheduleCases = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a schedule never run starts its first run at once and records it", testScheduleFirstRun},
	{"a schedule never starts a run while its latest is unfinished", testScheduleNeverTwoAtOnce},
	{"the next run starts every after the latest ended, whatever its outcome", testScheduleNextAfterEnd},
	{"a retried latest run holds the next until its new end, which the next counts from", testScheduleRetriedRunHoldsTheNext},
	{"after a long gap a schedule starts one run, not one per missed period", testScheduleNoBurst},
	{"a run's end is kept after retention deletes its job", testScheduleEndOutlivesJob},
	{"concurrent ticks start one run of a schedule", testScheduleConcurrentTicks},
	{"schedules not passed to a tick are left as they are", testScheduleOthersUntouched},
	{"a new cron schedule is recorded as seen and starts its first run at its first time", testCronFirstRun},
	{"a cron schedule skips the times its unfinished run spans and starts one catch-up run after a gap", testCronSkipsAndCatchesUpOnce},
	{"concurrent ticks record a new cron schedule once and start one run at its time", testCronConcurrentTicks},
}

var runSeq atomic.Int64

// scheduleRun is the run of name that a tick at now would hand the store.
func scheduleRun(name string, every time.Duration, now time.Time) store.ScheduleRun {
	j := newJob(fmt.Sprintf("%s-run-%d", name, runSeq.Add(1)), now)
	j.Kind, j.Attempt = name, 0
	return store.ScheduleRun{Name: name, Every: every, Job: j}
}

// tick runs the schedules at now and returns the ids of the runs started.
func tick(t *testing.T, s store.Store, now time.Time, runs ...store.ScheduleRun) []string {
	t.Helper()
	created, err := s.RunSchedules(t.Context(), runs, now)
	if err != nil {
		t.Fatalf("run schedules at %v: %v", now, err)
	}
	return ids(created)
}

func scheduleState(t *testing.T, s store.Store, name string) (store.ScheduleState, bool) {
	t.Helper()
	states, err := s.Schedules(t.Context())
	if err != nil {
		t.Fatalf("schedules: %v", err)
	}
	for _, st := range states {
		if st.Name == name {
			return st, true
		}
	}
	return store.ScheduleState{}, false
}

// end ends job id in state at finished, as the engine would.
func end(t *testing.T, s store.Store, id string, state jobtype.State, finished time.Time) {
	t.Helper()
	if _, err := s.UpdateJob(t.Context(), id, func(j *jobtype.Job) error {
		j.State, j.FinishedAt, j.LeaseID = state, finished, ""
		return nil
	}); err != nil {
		t.Fatalf("end %s: %v", id, err)
	}
}

func testScheduleFirstRun(t *testing.T, s store.Store) {
	if _, ok := scheduleState(t, s, "nightly"); ok {
		t.Fatal("a schedule has state before its first run")
	}
	run := scheduleRun("nightly", time.Hour, at(0))
	started := tick(t, s, at(0), run)
	if len(started) != 1 || started[0] != run.Job.ID {
		t.Fatalf("first tick started %v, want %s", started, run.Job.ID)
	}
	sameJob(t, "the first run as stored", get(t, s, run.Job.ID), run.Job)
	st, ok := scheduleState(t, s, "nightly")
	want := store.ScheduleState{Name: "nightly", LastJobID: run.Job.ID, LastJobState: jobtype.Queued}
	if !ok || st != want {
		t.Errorf("state %+v, want %+v", st, want)
	}
}

func testScheduleNeverTwoAtOnce(t *testing.T, s store.Store) {
	first := scheduleRun("sync", time.Second, at(0))
	tick(t, s, at(0), first)
	// Long past every, the run is still queued, then running, then queued
	// again for a retry: no second run starts meanwhile.
	for i, state := range []jobtype.State{jobtype.Queued, jobtype.Running, jobtype.Queued} {
		if _, err := s.UpdateJob(t.Context(), first.Job.ID, func(j *jobtype.Job) error { j.State = state; return nil }); err != nil {
			t.Fatal(err)
		}
		now := at(100 * (i + 1))
		if started := tick(t, s, now, scheduleRun("sync", time.Second, now)); len(started) != 0 {
			t.Fatalf("tick while the run is %s started %v", state, started)
		}
		st, _ := scheduleState(t, s, "sync")
		if st.LastJobID != first.Job.ID || st.LastJobState != state || !st.LastEndedAt.IsZero() || !st.Unfinished() {
			t.Errorf("while the run is %s: state %+v", state, st)
		}
	}
}

func testScheduleNextAfterEnd(t *testing.T, s store.Store) {
	const every = 10 * time.Minute
	for i, outcome := range []jobtype.State{jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost} {
		t.Run(string(outcome), func(t *testing.T) {
			name := "every-" + string(outcome)
			start := at(i * 10000)
			run := scheduleRun(name, every, start)
			tick(t, s, start, run)
			ended := start.Add(3 * time.Minute)
			end(t, s, run.Job.ID, outcome, ended)

			st, _ := scheduleState(t, s, name)
			want := store.ScheduleState{Name: name, LastJobID: run.Job.ID, LastJobState: outcome, LastEndedAt: ended}
			if st != want {
				t.Errorf("after the run ended: state %+v, want %+v", st, want)
			}
			justBefore := ended.Add(every - time.Microsecond)
			if started := tick(t, s, justBefore, scheduleRun(name, every, justBefore)); len(started) != 0 {
				t.Fatalf("a tick before end+every started %v", started)
			}
			due := ended.Add(every)
			next := scheduleRun(name, every, due)
			if started := tick(t, s, due, next); len(started) != 1 || started[0] != next.Job.ID {
				t.Fatalf("the tick at end+every started %v, want %s", started, next.Job.ID)
			}
			st, _ = scheduleState(t, s, name)
			want = store.ScheduleState{Name: name, LastJobID: next.Job.ID, LastJobState: jobtype.Queued}
			if st != want {
				t.Errorf("after the next run started: state %+v, want %+v", st, want)
			}
		})
	}
}

// An operator's retry of the latest run (FAILED, CANCELLED or LOST, made
// QUEUED again) makes it the schedule's unfinished run once more: no
// second run starts beside it, and the next counts from its new end.
func testScheduleRetriedRunHoldsTheNext(t *testing.T, s store.Store) {
	const every = 10 * time.Minute
	run := scheduleRun("retried", every, at(0))
	tick(t, s, at(0), run)
	end(t, s, run.Job.ID, jobtype.Failed, at(60))
	if _, err := s.UpdateJob(t.Context(), run.Job.ID, func(j *jobtype.Job) error {
		j.State, j.FinishedAt = jobtype.Queued, time.Time{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, _ := scheduleState(t, s, "retried")
	if want := (store.ScheduleState{Name: "retried", LastJobID: run.Job.ID, LastJobState: jobtype.Queued}); st != want || !st.Unfinished() {
		t.Errorf("after the retry: state %+v, want %+v", st, want)
	}
	late := at(60).Add(3 * every)
	if started := tick(t, s, late, scheduleRun("retried", every, late)); len(started) != 0 {
		t.Fatalf("a tick while the retried run is queued started %v", started)
	}
	ended := late.Add(time.Minute)
	end(t, s, run.Job.ID, jobtype.Succeeded, ended)
	justBefore := ended.Add(every - time.Microsecond)
	if started := tick(t, s, justBefore, scheduleRun("retried", every, justBefore)); len(started) != 0 {
		t.Fatalf("a tick before the retried run's end+every started %v", started)
	}
	due := ended.Add(every)
	next := scheduleRun("retried", every, due)
	if started := tick(t, s, due, next); len(started) != 1 || started[0] != next.Job.ID {
		t.Fatalf("the tick at the retried run's end+every started %v, want %s", started, next.Job.ID)
	}
}

func testScheduleNoBurst(t *testing.T, s store.Store) {
	const every = time.Minute
	run := scheduleRun("hourly", every, at(0))
	tick(t, s, at(0), run)
	end(t, s, run.Job.ID, jobtype.Succeeded, at(1))
	// Fifty periods later (a server stopped meanwhile), ticks in a row
	// start one catch-up run, then wait for it.
	late := at(1).Add(50 * every)
	var started []string
	for i := range 5 {
		now := late.Add(time.Duration(i) * time.Second)
		started = append(started, tick(t, s, now, scheduleRun("hourly", every, now))...)
	}
	if len(started) != 1 {
		t.Errorf("after a gap of 50 periods, ticks started %v, want one run", started)
	}
}

func testScheduleEndOutlivesJob(t *testing.T, s store.Store) {
	const every = 48 * time.Hour // longer than the retention below
	run := scheduleRun("weekly", every, at(0))
	tick(t, s, at(0), run)
	end(t, s, run.Job.ID, jobtype.Failed, at(5))
	if n, err := s.DeleteFinishedBefore(t.Context(), at(5).Add(24*time.Hour), deleteAll); err != nil || n != 1 {
		t.Fatalf("retention: deleted %d, %v; want the run", n, err)
	}
	mustBeGone(t, s, run.Job.ID)
	st, _ := scheduleState(t, s, "weekly")
	want := store.ScheduleState{Name: "weekly", LastJobID: run.Job.ID, LastJobState: jobtype.Failed, LastEndedAt: at(5)}
	if st != want {
		t.Errorf("after its job was deleted: state %+v, want %+v", st, want)
	}
	now := at(5).Add(30 * time.Hour)
	if started := tick(t, s, now, scheduleRun("weekly", every, now)); len(started) != 0 {
		t.Fatalf("a tick before end+every started %v", started)
	}
	now = at(5).Add(every)
	if started := tick(t, s, now, scheduleRun("weekly", every, now)); len(started) != 1 {
		t.Fatalf("the tick at end+every started %v, want one run", started)
	}
}

func testScheduleConcurrentTicks(t *testing.T, s store.Store) {
	const ticks = 8
	for round, now := range []time.Time{at(0), at(100)} {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			started []string
		)
		for range ticks {
			wg.Go(func() {
				created, err := s.RunSchedules(t.Context(), []store.ScheduleRun{
					scheduleRun("a", time.Minute, now), scheduleRun("b", time.Minute, now),
				}, now)
				if err != nil {
					t.Errorf("run schedules: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				started = append(started, ids(created)...)
			})
		}
		wg.Wait()
		if len(started) != 2 {
			t.Fatalf("round %d: %d concurrent ticks started %v, want one run of each schedule", round, ticks, started)
		}
		for _, name := range []string{"a", "b"} {
			st, _ := scheduleState(t, s, name)
			end(t, s, st.LastJobID, jobtype.Succeeded, now.Add(time.Second))
		}
	}
}

func testScheduleOthersUntouched(t *testing.T, s store.Store) {
	kept := scheduleRun("kept", time.Minute, at(0))
	tick(t, s, at(0), kept)
	end(t, s, kept.Job.ID, jobtype.Succeeded, at(1))
	// A tick without "kept" (removed from the configuration) starts
	// nothing of it, however late, and keeps its state.
	later := at(1000)
	tick(t, s, later, scheduleRun("other", time.Minute, later))
	st, ok := scheduleState(t, s, "kept")
	want := store.ScheduleState{Name: "kept", LastJobID: kept.Job.ID, LastJobState: jobtype.Succeeded, LastEndedAt: at(1)}
	if !ok || st != want {
		t.Errorf("state of a schedule left out of ticks: %+v, want %+v", st, want)
	}
	if n, err := s.CountByState(t.Context()); err != nil || n[jobtype.Queued] != 1 {
		t.Errorf("queued jobs %v, %v; want only the other schedule's run", n, err)
	}
}

// cronRun is the run of name on a cron expression that a tick at now
// would hand the store.
func cronRun(t *testing.T, name, expr string, now time.Time) store.ScheduleRun {
	t.Helper()
	c, err := jobtype.ParseCron(expr, "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	run := scheduleRun(name, 0, now)
	run.Cron = c
	return run
}

// everyMinute is onMinute(0) (a whole minute) and each minute after.
const everyMinute = "* * * * *"

// onMinute is sec seconds after the first whole minute after base.
func onMinute(sec int) time.Time {
	return base.Truncate(time.Minute).Add(time.Minute + time.Duration(sec)*time.Second)
}

func testCronFirstRun(t *testing.T, s store.Store) {
	if started := tick(t, s, onMinute(10), cronRun(t, "minutely", everyMinute, onMinute(10))); len(started) != 0 {
		t.Fatalf("the first tick of a new cron schedule started %v, want none before its first time", started)
	}
	st, ok := scheduleState(t, s, "minutely")
	if want := (store.ScheduleState{Name: "minutely", LastEndedAt: onMinute(10)}); !ok || st != want {
		t.Fatalf("state after the first tick %+v, want %+v (first seen, no run)", st, want)
	}
	if started := tick(t, s, onMinute(59), cronRun(t, "minutely", everyMinute, onMinute(59))); len(started) != 0 {
		t.Fatalf("a tick before the first time started %v", started)
	}
	run := cronRun(t, "minutely", everyMinute, onMinute(60))
	started := tick(t, s, onMinute(60), run)
	if len(started) != 1 || started[0] != run.Job.ID {
		t.Fatalf("the tick at the first time started %v, want %s", started, run.Job.ID)
	}
	st, _ = scheduleState(t, s, "minutely")
	if want := (store.ScheduleState{Name: "minutely", LastJobID: run.Job.ID, LastJobState: jobtype.Queued}); st != want {
		t.Errorf("state after the first run %+v, want %+v", st, want)
	}
}

func testCronSkipsAndCatchesUpOnce(t *testing.T, s store.Store) {
	tick(t, s, onMinute(0), cronRun(t, "sync", everyMinute, onMinute(0)))
	first := cronRun(t, "sync", everyMinute, onMinute(60))
	tick(t, s, onMinute(60), first)
	// The run is unfinished over the times at 120 and 180: no run starts.
	for _, now := range []time.Time{onMinute(120), onMinute(180)} {
		if started := tick(t, s, now, cronRun(t, "sync", everyMinute, now)); len(started) != 0 {
			t.Fatalf("a tick at %v while the run is unfinished started %v", now, started)
		}
	}
	// It ends at 190: 120 and 180 are skipped, the next is 240.
	end(t, s, first.Job.ID, jobtype.Succeeded, onMinute(190))
	if started := tick(t, s, onMinute(239), cronRun(t, "sync", everyMinute, onMinute(239))); len(started) != 0 {
		t.Fatalf("a tick before the first time after the end started %v", started)
	}
	second := cronRun(t, "sync", everyMinute, onMinute(240))
	if started := tick(t, s, onMinute(240), second); len(started) != 1 {
		t.Fatalf("the tick at the first time after the end started %v, want one run", started)
	}
	end(t, s, second.Job.ID, jobtype.Succeeded, onMinute(250))
	// A day later (the server was down): one catch-up run, then none
	// until it ends.
	late := onMinute(250).Add(24 * time.Hour)
	var started []string
	for i := range 5 {
		now := late.Add(time.Duration(i) * time.Second)
		started = append(started, tick(t, s, now, cronRun(t, "sync", everyMinute, now))...)
	}
	if len(started) != 1 {
		t.Errorf("after a day's gap, ticks started %v, want one catch-up run", started)
	}
}

func testCronConcurrentTicks(t *testing.T, s store.Store) {
	const ticks = 8
	for round, now := range []time.Time{onMinute(30), onMinute(60)} {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			started []string
		)
		for range ticks {
			wg.Go(func() {
				created, err := s.RunSchedules(t.Context(), []store.ScheduleRun{cronRun(t, "c", everyMinute, now)}, now)
				if err != nil {
					t.Errorf("run schedules: %v", err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				started = append(started, ids(created)...)
			})
		}
		wg.Wait()
		if want := round; len(started) != want {
			t.Fatalf("round %d: %d concurrent ticks started %v, want %d runs", round, ticks, started, want)
		}
	}
}
