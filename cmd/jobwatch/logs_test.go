package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// appendLogLines appends texts to the log of job j, claimed by the test.
func (s *cliServer) appendLogLines(t *testing.T, j jobtype.Job, texts ...string) {
	t.Helper()
	lines := make([]jobtype.LogLine, len(texts))
	for i, text := range texts {
		lines[i] = jobtype.LogLine{Text: text, Stream: jobtype.LogStream(i % 3)}
	}
	if _, cancelled, err := s.Engine.AppendLogs(context.Background(), j.ID, j.LeaseID, lines); err != nil || cancelled {
		t.Fatalf("append logs: %v (cancelled %v)", err, cancelled)
	}
}

// logs prints the lines kept, oldest first, and exits 0 whatever the
// job's state; -f follows until the job ends and exits with its outcome.
func TestLogsPrintsAJobsLinesAndFollowsThemToItsEnd(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "chatty"})
	j := s.claim(t, "chatty")
	s.appendLogLines(t, j, "one", "two")

	code, out, errOut := runInProcess(t, "logs", "--server", s.URL, id)
	if code != 0 || out != "one\ntwo\n" {
		t.Fatalf("logs of a running job = exit %d, %q (%s); want 0 and its two lines", code, out, errOut)
	}
	code, out, _ = runInProcess(t, "logs", "--server", s.URL, "--times", id)
	if code != 0 || !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d) log +#1 one\n.* stdout +#1 two\n$`).MatchString(out) {
		t.Fatalf("logs --times = exit %d, %q; want each line's time, stream and attempt", code, out)
	}

	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { done <- run(ctx, []string{"logs", "-f", "--server", s.URL, id}, &stdout, &stderr) }()
	waitFor(t, "logs -f to print the lines kept", func() bool { return stdout.String() == "one\ntwo\n" })
	s.appendLogLines(t, j, "three")
	waitFor(t, "logs -f to print a new line", func() bool { return strings.HasSuffix(stdout.String(), "three\n") })
	s.appendLogLines(t, j, "four")
	if _, err := s.Engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Boom"}, false); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitFailed || stdout.String() != "one\ntwo\nthree\nfour\n" {
			t.Fatalf("logs -f = exit %d, %q (%s); want %d (FAILED) after all four lines", code, stdout.String(), stderr.String(), exitFailed)
		}
	case <-ctx.Done():
		t.Fatal("logs -f did not end with the job")
	}

	code, out, _ = runInProcess(t, "logs", "--server", s.URL, "--json", id)
	var first struct{ Seq, Text string }
	if code != 0 || strings.Count(out, "\n") != 4 || json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first) != nil ||
		first.Seq != "1" || first.Text != "one" {
		t.Fatalf("logs --json = exit %d, %q; want four JSON lines, the first seq 1 and text one", code, out)
	}

	code, _, errOut = runInProcess(t, "logs", "--server", s.URL, "j_nosuchjob")
	if code != exitError || !strings.Contains(errOut, "logs: not_found: j_nosuchjob: job not found") {
		t.Fatalf("logs of an unknown job = exit %d, %q; want 1 and not found", code, errOut)
	}
}

// Lines the queue's max_log_bytes dropped show as one marker line.
func TestLogsMarksTheLinesTheServerDropped(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	if err := s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		jobtype.DefaultQueue: {MaxLogBytes: jobtype.MinMaxLogBytes},
	}}); err != nil {
		t.Fatal(err)
	}
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "flood"})
	j := s.claim(t, "flood")
	for i := range 100 { // 100 KiB, over the 64 KiB kept
		s.appendLogLines(t, j, fmt.Sprintf("%03d %s", i, strings.Repeat("x", 1020)))
	}
	for _, args := range [][]string{{"logs"}, {"logs", "-f"}} {
		if len(args) == 2 {
			if _, err := s.Engine.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := runInProcess(t, append(args, "--server", s.URL, id)...)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		m := regexp.MustCompile(`^… (\d+) lines dropped; resuming at (\d+)$`).FindStringSubmatch(lines[0])
		if code != 0 || m == nil {
			t.Fatalf("%v = exit %d (%s), first line %q; want 0 and the marker of the lines dropped", args, code, errOut, lines[0])
		}
		skipped, resume, kept := mustAtoi(m[1]), mustAtoi(m[2]), len(lines)-1
		if resume != skipped+1 || skipped+kept != 100 || !strings.HasPrefix(lines[1], fmt.Sprintf("%03d ", skipped)) ||
			!strings.HasPrefix(lines[kept], "099 ") {
			t.Fatalf("%v: %d dropped, resuming at %d, then %d lines from %.4q to %.4q; want the lines kept after the marker, to the last",
				args, skipped, resume, kept, lines[1], lines[kept])
		}
	}
}

func mustAtoi(s string) int {
	var n int
	_, _ = fmt.Sscan(s, &n)
	return n
}

// watch --logs prints the log's lines between the snapshots, and the
// job's end after its last line.
func TestWatchWithLogsInterleavesLinesAndSnapshots(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "chatty"})
	j := s.claim(t, "chatty")
	s.appendLogLines(t, j, "before the watch")

	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { done <- run(ctx, []string{"watch", "--logs", "--server", s.URL, id}, &stdout, &stderr) }()
	waitFor(t, "watch --logs to print the line kept", func() bool { return strings.Contains(stdout.String(), "| before the watch\n") })
	if _, err := s.Engine.Heartbeat(ctx, j.ID, j.LeaseID, 50, "half"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "watch --logs to print the new snapshot", func() bool { return strings.Contains(stdout.String(), `50% "half"`) })
	s.appendLogLines(t, j, "the last line")
	if _, err := s.Engine.Complete(ctx, j.ID, j.LeaseID, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		out := stdout.String()
		last := strings.Index(out, "| the last line\n")
		end := strings.Index(out, " SUCCEEDED ")
		if code != 0 || last < 0 || end < last || !regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d \| before the watch$`).MatchString(out) {
			t.Fatalf("watch --logs = exit %d:\n%s%s\nwant every line, and SUCCEEDED after the last", code, out, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("watch --logs did not end with the job")
	}

	code, out, _ := runInProcess(t, "watch", "--logs", "--json", "--server", s.URL, id)
	if code != 0 || !strings.Contains(out, `{"lines":[{"seq":"1"`) || !strings.Contains(out, `"text":"the last line"`) ||
		!strings.Contains(out, `"state":"JOB_STATE_SUCCEEDED"`) {
		t.Fatalf("watch --logs --json of an ended job = exit %d:\n%s\nwant its lines and its end as JSON", code, out)
	}
}

func TestLogsExplainsItself(t *testing.T) {
	if !strings.Contains(usage, "\n  logs ") {
		t.Error("jobwatch's usage does not list logs")
	}
	code, out, errOut := runInProcess(t, "help", "logs")
	if code != 0 || !strings.HasPrefix(out, "Usage: jobwatch logs ID ") || !strings.Contains(out, "-follow") {
		t.Fatalf("jobwatch help logs = exit %d, %q, %q; want 0 and its usage with the ID and -f", code, out, errOut)
	}
	if code, _, errOut := runInProcess(t, "logs"); code != exitUsage || !strings.Contains(errOut, "usage: jobwatch logs ID") {
		t.Fatalf("logs without an ID = exit %d, %q; want a usage error", code, errOut)
	}
}

// What a job's command wrote reaches a person's terminal as text: the
// escape sequences in its step, its error and its log
// (a title set, the screen cleared, a line rewritten) are never printed
// by get, list, watch or watch --logs.
func TestOutputNeverCarriesAJobsEscapeSequences(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	const hostile = "\x1b]0;owned\x07\x1b[2J\rdone\x1b[31m red\x1b[0m\ttab\u202e"
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "sly"})
	ctx := context.Background()
	j, err := s.Engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"sly"}}, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s.appendLogLines(t, j, "log "+hostile)
	if _, err := s.Engine.Heartbeat(ctx, j.ID, j.LeaseID, 50, "step "+hostile); err != nil {
		t.Fatal(err)
	}
	running := map[string][]string{
		"get":  {"get", "--server", s.URL, id},
		"list": {"list", "--server", s.URL},
	}
	for name, args := range running {
		code, out, errOut := runInProcess(t, args...)
		if code != 0 || strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, "done red tab") {
			t.Fatalf("%s of a running job = exit %d (%s):\n%q\nwant its step as text, without its escape sequences", name, code, errOut, out)
		}
	}
	if _, err := s.Engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Boom" + hostile, Message: "error " + hostile}, false); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"get", "--server", s.URL, id},
		{"wait", "--server", s.URL, id},
		{"list", "--server", s.URL},
		{"watch", "--logs", "--server", s.URL, id},
		{"watch", "--progress", "bar", "--server", s.URL, id},
		{"logs", "--server", s.URL, id},
	} {
		code, out, _ := runInProcess(t, args...)
		if args[1] == "--progress" { // the bar redraws its own line
			out = strings.ReplaceAll(out, "\r\x1b[K[", "[")
		}
		if code == exitError || strings.ContainsAny(out, "\x1b\x07\r\u202e") || !strings.Contains(out, "done red") {
			t.Fatalf("%v of the failed job = exit %d:\n%q\nwant its words without its escape sequences", args, code, out)
		}
	}

	// A result is shown as JSON, whose escapes leave a right-to-left
	// override as it is: it is escaped too.
	done := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "sly"})
	j, err = s.Engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"sly"}}, time.Now().Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Engine.Complete(ctx, j.ID, j.LeaseID, []byte(`{"r":"a\u001b[2Jb\u202ec"}`)); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"get", "wait"} {
		code, out, _ := runInProcess(t, cmd, "--server", s.URL, done)
		if code != 0 || strings.ContainsAny(out, "\x1b\u202e") || !strings.Contains(out, `a\u001b[2Jb\u202ec`) {
			t.Fatalf("%s of a job whose result holds escapes = exit %d:\n%q\nwant the result with them escaped", cmd, code, out)
		}
	}
}

// watch --logs prints the marker of lines dropped with the time of the
// line after it, so that the times read in order: it used to print the
// time it was printed, minutes after the lines that follow it.
func TestWatchLogsMarksAGapWithTheTimeOfTheLineAfterIt(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 30, 15, 0, time.Local)
	var out strings.Builder
	err := printLogLines(&out, &jobwatchv1.WatchJobLogsResponse{
		Gap:   &jobwatchv1.LogGap{Skipped: 7, ResumeFrom: 8},
		Lines: []*jobwatchv1.LogLine{{Seq: 8, Text: "kept", Time: timestamppb.New(at)}},
	})
	if want := "09:30:15 | … 7 lines dropped; resuming at 8\n09:30:15 | kept\n"; err != nil || out.String() != want {
		t.Fatalf("printed %q (%v), want %q", out.String(), err, want)
	}
}

// When the lines a follow shows go back before the last shown (the
// server's database restored from an older copy, whose log the client
// then yields from its oldest line), stderr says so once, where they
// read as lines printed twice.
func TestAFollowedLogThatGoesBackSaysSo(t *testing.T) {
	var stderr strings.Builder
	var seen logSeen
	batch := func(from, to int64) *jobwatchv1.WatchJobLogsResponse {
		m := &jobwatchv1.WatchJobLogsResponse{}
		for s := from; s <= to; s++ {
			m.Lines = append(m.Lines, &jobwatchv1.LogLine{Seq: s})
		}
		return m
	}
	seen.note(&stderr, "j_1", batch(1, 20))
	seen.note(&stderr, "j_1", &jobwatchv1.WatchJobLogsResponse{}) // a keepalive
	seen.note(&stderr, "j_1", batch(21, 22))
	if stderr.Len() != 0 {
		t.Fatalf("stderr %q for a log that goes on", stderr.String())
	}
	seen.note(&stderr, "j_1", batch(1, 10))
	seen.note(&stderr, "j_1", batch(11, 12))
	want := "jobwatch: the server's log of j_1 goes back to line 1, before the 22 shown (a database restored from an older copy?): the server's lines from there follow\n"
	if stderr.String() != want {
		t.Fatalf("stderr %q, want %q", stderr.String(), want)
	}
}
