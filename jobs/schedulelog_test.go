package jobs_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// The line a run's queueing logs names its schedule, so that the runs of
// two schedules of one kind can be told apart.
func TestAScheduledRunsLogLineNamesItsSchedule(t *testing.T) {
	clock := newFakeClock()
	logs := &lockedBuffer{}
	other := downloads
	other.Name = "update-downloads-eu"
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Rules: jobtype.Rules{Schedules: []jobtype.Schedule{downloads, other}}})
	sweep(t, e)
	logs.mu.Lock()
	text := logs.buf.String()
	logs.mu.Unlock()
	for _, j := range runs(t, e, "crates", "update_downloads") {
		found := false
		for line := range strings.Lines(text) {
			if strings.Contains(line, "schedule queued a run") && strings.Contains(line, "job_id="+j.ID) {
				found = true
				if !strings.Contains(line, "schedule=update-downloads ") && !strings.Contains(line, "schedule=update-downloads-eu ") {
					t.Errorf("the line of run %s names no schedule: %s", j.ID, line)
				}
			}
		}
		if !found {
			t.Errorf("no line for run %s:\n%s", j.ID, text)
		}
	}
	if n := logs.count("schedule queued a run"); n != 2 {
		t.Fatalf("%d runs logged, want 2:\n%s", n, text)
	}
}
