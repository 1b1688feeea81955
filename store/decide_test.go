package store_test

import (
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestAWriteRaisesTheVersionByOneOnlyWhenAWatcherCouldSeeIt(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := jobtype.Job{ID: "j", State: jobtype.Running, Version: 7, Percent: 40, Step: "batch 4 of 10", Attempt: 1, WorkerID: "w", LeaseID: "l"}
	tests := []struct {
		name   string
		change func(*jobtype.Job)
		want   int64
	}{
		{"nothing changed keeps the version", func(*jobtype.Job) {}, 7},
		{"a longer lease alone keeps the version", func(j *jobtype.Job) { j.LeaseExpiresAt = now }, 7},
		{"a new UpdatedAt alone keeps the version", func(j *jobtype.Job) { j.UpdatedAt = now }, 7},
		{"progress raises it by one", func(j *jobtype.Job) { j.Percent = 50 }, 8},
		{"a new step raises it by one", func(j *jobtype.Job) { j.Step = "batch 5 of 10" }, 8},
		{"a new state raises it by one", func(j *jobtype.Job) { j.State = jobtype.Succeeded }, 8},
		{"a result raises it by one", func(j *jobtype.Job) { j.Result = []byte(`"ok"`) }, 8},
		{"an error raises it by one", func(j *jobtype.Job) { j.Error = &jobtype.JobError{Type: "X"} }, 8},
		{"a new attempt raises it by one", func(j *jobtype.Job) { j.Attempt = 2 }, 8},
		{"a new worker raises it by one", func(j *jobtype.Job) { j.WorkerID = "w2" }, 8},
		{"a new run_at raises it by one", func(j *jobtype.Job) { j.RunAt = now }, 8},
		{"many visible changes at once raise it by one", func(j *jobtype.Job) { j.State, j.Percent, j.Step = jobtype.Failed, 0, "" }, 8},
		{"a version the caller set is ignored", func(j *jobtype.Job) { j.Version = 100 }, 7},
		{"a version the caller set with a visible change is old's plus one", func(j *jobtype.Job) { j.Version, j.Percent = 100, 41 }, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := old.Clone()
			tt.change(&next)
			if got := store.Versioned(old, next).Version; got != tt.want {
				t.Errorf("version %d, want %d", got, tt.want)
			}
		})
	}
}

func TestAScheduleStartsItsNextRunEveryAfterTheLastEndedAndNeverTwoAtOnce(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	run := store.ScheduleRun{Name: "nightly", Every: time.Hour}
	ended := func(at time.Time) *store.ScheduleState {
		return &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Succeeded, LastEndedAt: at}
	}
	tests := []struct {
		name string
		last *store.ScheduleState
		want store.ScheduleStep
	}{
		{"a schedule that never ran starts", nil, store.ScheduleStep{Start: true}},
		{"a queued run holds the next", &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Queued}, store.ScheduleStep{}},
		{"a running run holds the next", &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Running}, store.ScheduleStep{}},
		{"a held run holds the next", &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Pending}, store.ScheduleStep{}},
		{"a run that ended less than every ago waits", ended(now.Add(-time.Hour + time.Microsecond)), store.ScheduleStep{}},
		{"a run that ended exactly every ago starts the next", ended(now.Add(-time.Hour)), store.ScheduleStep{Start: true}},
		{"a run that ended long ago starts the next", ended(now.Add(-48 * time.Hour)), store.ScheduleStep{Start: true}},
		{"a failed run counts as ended too", &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Failed, LastEndedAt: now.Add(-time.Hour)},
			store.ScheduleStep{Start: true}},
		{"a run whose job is gone without a recorded end is recorded as ended now, and waits",
			&store.ScheduleState{Name: "nightly", LastJobID: "j1"}, store.ScheduleStep{RecordEnd: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run.Step(tt.last, now); got != tt.want {
				t.Errorf("Step = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("a run whose job is gone unrecorded starts the next at once when every is 0", func(t *testing.T) {
		got := store.ScheduleRun{Name: "busy"}.Step(&store.ScheduleState{Name: "busy", LastJobID: "j1"}, now)
		if want := (store.ScheduleStep{RecordEnd: true, Start: true}); got != want {
			t.Errorf("Step = %+v, want %+v", got, want)
		}
	})
}

func mustCron(t *testing.T, expr, zone string) *jobtype.Cron {
	t.Helper()
	c, err := jobtype.ParseCron(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestACronScheduleStartsAtItsFirstTimeAfterTheLatestRunEndedAndNeverTwoAtOnce(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	nightly := store.ScheduleRun{Name: "nightly", Cron: mustCron(t, "0 2 * * *", "Europe/Berlin")}
	ended := func(e time.Time) *store.ScheduleState {
		return &store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Succeeded, LastEndedAt: e}
	}
	seen := func(e time.Time) *store.ScheduleState { return &store.ScheduleState{Name: "nightly", LastEndedAt: e} }
	tests := []struct {
		name     string
		last     *store.ScheduleState
		now      time.Time
		want     store.ScheduleStep
		wantNext time.Time
	}{
		{"a cron schedule with no record is recorded as seen now and waits for its first time",
			nil, at("2026-06-01 12:00:00"), store.ScheduleStep{RecordSeen: true}, at("2026-06-02 02:00:00")},
		{"a schedule first seen waits until its first time",
			seen(at("2026-06-01 12:00:00")), at("2026-06-02 01:59:59"), store.ScheduleStep{}, at("2026-06-02 02:00:00")},
		{"a schedule first seen starts at its first time",
			seen(at("2026-06-01 12:00:00")), at("2026-06-02 02:00:00"), store.ScheduleStep{Start: true}, at("2026-06-02 02:00:00")},
		{"a run that ended waits for the next time",
			ended(at("2026-06-02 02:03:00")), at("2026-06-02 23:00:00"), store.ScheduleStep{}, at("2026-06-03 02:00:00")},
		{"a run that ended starts the next at the next time",
			ended(at("2026-06-02 02:03:00")), at("2026-06-03 02:00:01"), store.ScheduleStep{Start: true}, at("2026-06-03 02:00:00")},
		{"a queued run holds the next, however many times pass",
			&store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Queued}, at("2026-06-09 02:00:00"), store.ScheduleStep{}, time.Time{}},
		{"a running run holds the next",
			&store.ScheduleState{Name: "nightly", LastJobID: "j1", LastJobState: jobtype.Running}, at("2026-06-09 02:00:00"), store.ScheduleStep{}, time.Time{}},
		{"a run unfinished at a time skips it: the next is the first time after its end",
			ended(at("2026-06-03 05:00:00")), at("2026-06-03 05:00:01"), store.ScheduleStep{}, at("2026-06-04 02:00:00")},
		{"a run unfinished exactly at a time skips it",
			ended(at("2026-06-03 02:00:00")), at("2026-06-03 02:00:01"), store.ScheduleStep{}, at("2026-06-04 02:00:00")},
		{"after a week down, the times missed start one run at once",
			ended(at("2026-06-01 02:10:00")), at("2026-06-08 09:00:00"), store.ScheduleStep{Start: true}, at("2026-06-02 02:00:00")},
		{"a run whose job is gone without a recorded end is recorded as ended now, and waits for the next time",
			&store.ScheduleState{Name: "nightly", LastJobID: "j1"}, at("2026-06-03 12:00:00"), store.ScheduleStep{RecordEnd: true}, at("2026-06-04 02:00:00")},
		{"on the day the clocks go forward 02:00 does not exist and runs at 03:00 summer time",
			ended(at("2026-03-28 02:05:00")), at("2026-03-29 03:00:00"), store.ScheduleStep{Start: true}, at("2026-03-29 03:00:00")},
		{"on the day the clocks go forward nothing runs in the hour before",
			ended(at("2026-03-28 02:05:00")), at("2026-03-29 01:59:59"), store.ScheduleStep{}, at("2026-03-29 03:00:00")},
		{"on the day the clocks go back 02:00 runs at its first occurrence, summer time",
			ended(at("2026-10-24 02:05:00")), time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), store.ScheduleStep{Start: true}, time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)},
		{"on the day the clocks go back 02:00 does not run again an hour later, winter time",
			ended(time.Date(2026, 10, 25, 0, 10, 0, 0, time.UTC)), time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC), store.ScheduleStep{}, at("2026-10-26 02:00:00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nightly.Step(tt.last, tt.now); got != tt.want {
				t.Errorf("Step = %+v, want %+v", got, tt.want)
			}
			if got := nightly.NextRun(tt.last, tt.now); !got.Equal(tt.wantNext) {
				t.Errorf("NextRun = %v, want %v", got, tt.wantNext.UTC())
			}
		})
	}
}

func TestAnEveryScheduleRecordedOnlyAsSeenStartsAtOnce(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// A cron schedule made an every one before its first run.
	got := store.ScheduleRun{Name: "s", Every: time.Hour}.Step(&store.ScheduleState{Name: "s", LastEndedAt: now.Add(-time.Minute)}, now)
	if want := (store.ScheduleStep{Start: true}); got != want {
		t.Errorf("Step = %+v, want %+v", got, want)
	}
}
