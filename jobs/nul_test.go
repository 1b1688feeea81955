package jobs_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A NUL in what a worker reports (binary output in a log line, a C
// string as a step or an error) is stored as U+FFFD on every backend:
// PostgreSQL's text cannot hold one, and refused, it would have lost the
// report and every other write of its batch.
func TestANulInAWorkersReportIsStoredAsAReplacementCharacter(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 5, "st\x00ep"); err != nil {
		t.Fatalf("heartbeat with a NUL in its step: %v", err)
	}
	if _, _, err := e.AppendLogs(ctx, j.ID, j.LeaseID, []jobtype.LogLine{{Text: "a\x00b"}}); err != nil {
		t.Fatalf("a log line with a NUL: %v", err)
	}
	if got := get(t, e, j.ID); got.Step != "st\uFFFDep" {
		t.Errorf("step = %q, want the NUL as U+FFFD", got.Step)
	}
	page, err := e.Logs(ctx, j.ID, 0, 10)
	if err != nil || len(page.Lines) != 1 || page.Lines[0].Text != "a\uFFFDb" {
		t.Errorf("logs = %+v, %v; want one line with the NUL as U+FFFD", page.Lines, err)
	}
	if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Bad\x00Type", Message: "m\x00m"}, false); err != nil {
		t.Fatalf("fail with NULs in its error: %v", err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Failed || got.Error == nil ||
		got.Error.Type != "Bad\uFFFDType" || got.Error.Message != "m\uFFFDm" {
		t.Errorf("after the failure: %s with %+v; want FAILED with the NULs as U+FFFD", got.State, got.Error)
	}
}

// NULs a report may carry up to its limits stay within the limits once
// replaced: each U+FFFD takes three bytes where the NUL took one, and
// what that pushes past the limit is cut.
func TestNulsReplacedKeepAReportWithinItsLimits(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 5, strings.Repeat("\x00", jobtype.MaxStepBytes)); err != nil {
		t.Fatalf("heartbeat with a step of NULs at its limit: %v", err)
	}
	if got := get(t, e, j.ID); len(got.Step) > jobtype.MaxStepBytes || !utf8.ValidString(got.Step) || !strings.HasPrefix(got.Step, "\uFFFD") {
		t.Errorf("step of %d bytes (valid UTF-8: %v); want at most %d, U+FFFD each", len(got.Step), utf8.ValidString(got.Step), jobtype.MaxStepBytes)
	}
	jerr := jobtype.JobError{Type: strings.Repeat("\x00", jobtype.MaxErrorTypeBytes), Message: strings.Repeat("\x00", jobtype.MaxErrorMessageBytes)}
	if _, err := e.Fail(ctx, j.ID, j.LeaseID, jerr, false); err != nil {
		t.Fatalf("fail with an error of NULs at its limits: %v", err)
	}
	got := get(t, e, j.ID)
	if got.Error == nil {
		t.Fatalf("the job ended %s without its error", got.State)
	}
	if len(got.Error.Type) > jobtype.MaxErrorTypeBytes || len(got.Error.Message) > jobtype.MaxErrorMessageBytes ||
		!utf8.ValidString(got.Error.Type) || !utf8.ValidString(got.Error.Message) {
		t.Errorf("error of %d and %d bytes; want at most %d and %d", len(got.Error.Type), len(got.Error.Message),
			jobtype.MaxErrorTypeBytes, jobtype.MaxErrorMessageBytes)
	}
}
