package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// logWatch runs WatchLogs on e in the background and hands each line it
// sends (and each gap, as a line of seq 0 whose text says it) to lines.
func logWatch(ctx context.Context, e *jobs.Engine, id string, after int64) (<-chan jobtype.LogLine, <-chan error) {
	lines, done := make(chan jobtype.LogLine, 1000), make(chan error, 1)
	go func() {
		done <- e.WatchLogs(ctx, id, jobs.LogWatchOptions{AfterSeq: after, Deadline: soon(), Send: func(ls []jobtype.LogLine, gap *jobs.LogGap) error {
			if gap != nil {
				lines <- jobtype.LogLine{Text: fmt.Sprintf("gap %d resume %d", gap.Skipped, gap.ResumeFrom)}
			}
			for _, l := range ls {
				lines <- l
			}
			return nil
		}})
	}()
	return lines, done
}

func nextLine(t *testing.T, lines <-chan jobtype.LogLine) jobtype.LogLine {
	t.Helper()
	select {
	case l := <-lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line within 10s")
		return jobtype.LogLine{}
	}
}

func appendText(t *testing.T, e *jobs.Engine, j jobtype.Job, texts ...string) int64 {
	t.Helper()
	lines := make([]jobtype.LogLine, len(texts))
	for i, text := range texts {
		lines[i].Text = text
	}
	last, cancelled, err := e.AppendLogs(context.Background(), j.ID, j.LeaseID, lines)
	if err != nil || cancelled {
		t.Fatalf("append %v: cancelled %v, %v", texts, cancelled, err)
	}
	return last
}

func TestAWatchOfLogsHearsEachAppendAndEndsWithTheJob(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	appendText(t, e, j, "before")
	lines, done := logWatch(context.Background(), e, j.ID, 0)
	if l := nextLine(t, lines); l.Seq != 1 || l.Text != "before" || l.Attempt != 1 || l.Time.IsZero() {
		t.Fatalf("first line %+v; want seq 1 %q of attempt 1 with a time", l, "before")
	}
	appendText(t, e, j, "after")
	if l := nextLine(t, lines); l.Seq != 2 || l.Text != "after" {
		t.Fatalf("the parked watch got %+v; want seq 2 %q", l, "after")
	}
	if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watch ended with %v after the job ended; want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10s of its job's end")
	}
	if _, cancelled, err := e.AppendLogs(context.Background(), j.ID, j.LeaseID, []jobtype.LogLine{{Text: "late"}}); err == nil && !cancelled {
		t.Errorf("an append after the end was taken; want it refused")
	}
}

func TestAWatchOfLogsResumesAfterItsSeqAndAnnouncesDroppedLines(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	for i := range 3 {
		appendText(t, e, j, fmt.Sprint("line ", i+1))
	}
	lines, _ := logWatch(t.Context(), e, j.ID, 2)
	if l := nextLine(t, lines); l.Seq != 3 {
		t.Fatalf("a watch after seq 2 began with %+v; want seq 3", l)
	}

	// A bound of 64 KiB: 100 lines of 1 KiB each drop the oldest.
	rules := jobtype.Rules{Queues: map[string]jobtype.QueueRules{"default": {MaxLogBytes: jobtype.MinMaxLogBytes}}}
	if err := e.SetRules(rules); err != nil {
		t.Fatal(err)
	}
	big := make([]string, 100)
	for i := range big {
		big[i] = fmt.Sprintf("%04d %01000d", i+4, 0)
	}
	last := appendText(t, e, j, big...)
	page, err := e.Logs(context.Background(), j.ID, 0, 0)
	if err != nil || page.Gap == nil || page.Gap.ResumeFrom != page.Lines[0].Seq || page.Lines[len(page.Lines)-1].Seq != last {
		t.Fatalf("a page from the start after the bound: gap %+v, %d lines, %v; want a gap up to the first kept line and the last line %d", page.Gap, len(page.Lines), err, last)
	}
	late, _ := logWatch(t.Context(), e, j.ID, 0)
	if l := nextLine(t, late); l.Seq != 0 || l.Text != fmt.Sprintf("gap %d resume %d", page.Gap.Skipped, page.Gap.ResumeFrom) {
		t.Fatalf("a new watch from 0 began with %+v; want the gap %+v", l, page.Gap)
	}
}

// A reader resuming after a seq past the job's last line (it read them
// from a database since restored from an older copy) reads from the
// oldest line kept, then hears each new one: the lines appended up to its
// seq are not skipped unseen.
func TestAWatchOfLogsAfterASeqPastTheLastLineReadsFromTheStart(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	appendText(t, e, j, "one", "two")
	lines, _ := logWatch(t.Context(), e, j.ID, 2600)
	for _, want := range []int64{1, 2} {
		if l := nextLine(t, lines); l.Seq != want {
			t.Fatalf("a watch after seq 2600 of a log of 2 lines sent %+v; want seq %d", l, want)
		}
	}
	appendText(t, e, j, "three")
	if l := nextLine(t, lines); l.Seq != 3 || l.Text != "three" {
		t.Fatalf("then got %+v; want the new line, seq 3", l)
	}
	page, err := e.Logs(t.Context(), j.ID, 99999, 0)
	if err != nil || len(page.Lines) != 3 || page.Lines[0].Seq != 1 || page.Gap != nil {
		t.Fatalf("a page after seq 99999 of a log of 3 lines: %+v, %v; want all 3", page, err)
	}
}

func TestLogsRefuseBadInput(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	var inv *jobtype.InvalidError
	if _, _, err := e.AppendLogs(context.Background(), j.ID, j.LeaseID, make([]jobtype.LogLine, jobtype.MaxLogLinesPerAppend+1)); !errors.As(err, &inv) || inv.Field != "lines" {
		t.Errorf("too many lines: %v; want invalid lines", err)
	}
	if _, _, err := e.AppendLogs(context.Background(), j.ID, "another-lease", []jobtype.LogLine{{Text: "x"}}); !errors.Is(err, jobs.ErrStaleLease) {
		t.Errorf("another lease: %v; want ErrStaleLease", err)
	}
	if _, err := e.Logs(context.Background(), j.ID, -1, 0); !errors.As(err, &inv) || inv.Field != "after_seq" {
		t.Errorf("negative after_seq: %v", err)
	}
	if err := e.WatchLogs(context.Background(), "j_nosuchjob", jobs.LogWatchOptions{Deadline: soon(),
		Send: func([]jobtype.LogLine, *jobs.LogGap) error { return nil }}); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("a watch of no job: %v; want not found", err)
	}
}

// Lines appended on one replica reach a watcher on another.
func TestLogsAppendedOnOneReplicaReachAWatcherOnAnother(t *testing.T) {
	a, b := replicas(t)
	j := running(t, a, jobs.SubmitRequest{})
	lines, _ := logWatch(t.Context(), b, j.ID, 0)
	for i := range 3 {
		appendText(t, a, j, fmt.Sprint("line ", i+1))
		if l := nextLine(t, lines); l.Seq != int64(i+1) {
			t.Fatalf("the other replica's watch got %+v; want seq %d", l, i+1)
		}
	}
}

// A page of long lines stops at MaxLogPageBytes of text, with More set,
// and the next page takes up after it: 200 lines of 16 KiB are 3.2 MB,
// which one answer would carry whole without the bound.
func TestAPageOfLogsIsBoundedInBytes(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"default": {MaxLogBytes: 64 << 20}}}); err != nil {
		t.Fatal(err)
	}
	j := running(t, e, jobs.SubmitRequest{})
	long := strings.Repeat("x", jobtype.MaxLogLineBytes)
	for range 2 {
		batch := make([]string, 100)
		for i := range batch {
			batch[i] = long
		}
		appendText(t, e, j, batch...)
	}
	var after int64
	seen := 0
	for pages := 0; ; pages++ {
		page, err := e.Logs(context.Background(), j.ID, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, l := range page.Lines {
			size += len(l.Text)
		}
		if size > jobs.MaxLogPageBytes || len(page.Lines) == 0 {
			t.Fatalf("page %d: %d lines, %d bytes of text; want 1 MiB at most, one line at least", pages, len(page.Lines), size)
		}
		seen += len(page.Lines)
		after = page.Lines[len(page.Lines)-1].Seq
		if !page.More {
			break
		}
	}
	if seen != 200 {
		t.Fatalf("the pages held %d lines, want all 200", seen)
	}
}
