package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

const logsUsage = `Usage: jobwatch logs ID [-f] [flags]

Prints the lines the job's workers logged (the Go worker's Progress.Logf,
a worker --exec command's output), oldest first, as they were written.
Lines the server no longer keeps (the queue's max_log_bytes) show as one
line "… N lines dropped; resuming at S". With -f it then follows the log
as it grows, resuming after server restarts and dropped connections
without repeating a line, until the job has ended and its last line is
printed, and exits with the job's outcome; without -f it exits 0.
--json prints each line as a JSON object (seq, time, stream, attempt,
text; stream is left out for the lines a handler logged itself, as
Progress.Logf does), and a gap as {"gap": {...}}.

` + exitCodesHelp + `
  (logs without -f exits 0 or 1)

Flags:
`

// logs runs "jobwatch logs ID".
func logs(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var cf clientFlags
	defer func() { err = cf.timeoutUnanswered(err) }()
	var follow, times bool
	var timeout time.Duration
	fs := newFlagSet("logs", stderr)
	cf.register(fs)
	fs.Lookup("json").Usage = "print each line as a JSON object (seq, time, stream, attempt, text; no stream for a handler's own lines), a gap as {\"gap\": {...}}"
	fs.BoolVar(&follow, "f", false, "follow the log until the job has ended; exit with its outcome")
	fs.BoolVar(&follow, "follow", false, "the same as -f")
	fs.BoolVar(&times, "times", false, "start each line with its time, stream and attempt (#2)")
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 124); 0 follows as long as it takes")
	fs.Usage = func() { fmt.Fprint(stderr, logsUsage); fs.PrintDefaults() }
	pos, err := parseArgs(fs, args, 1, "ID")
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeout)
		defer cancel()
	}
	show := func(msg *jobwatchv1.WatchJobLogsResponse) error {
		return printLogs(stdout, msg, cf.json, times)
	}
	id := pos[0]
	if !follow {
		if err := pageLogs(ctx, c, id, show); err != nil {
			return jobCallError("logs", id, err)
		}
		return nil
	}
	var seen logSeen
	for msg, err := range c.WatchLogs(ctx, id, 0) {
		if err != nil {
			return jobCallError("logs", id, err)
		}
		seen.note(stderr, id, msg)
		if err := show(msg); err != nil {
			return err
		}
	}
	job, err := c.Get(ctx, id)
	if j := withoutValues(err, "logs", true, stderr); j != nil {
		job, err = j, nil
	}
	if err != nil {
		return jobCallError("logs", id, err)
	}
	return outcome(job)
}

// pageLogs prints every line of the job's log kept now, a page at a time.
func pageLogs(ctx context.Context, c *client.Client, id string, show func(*jobwatchv1.WatchJobLogsResponse) error) error {
	var after int64
	for {
		page, err := c.Logs(ctx, id, after, 0)
		if err != nil {
			return err
		}
		if page.GetGap() != nil || len(page.GetLines()) > 0 {
			if err := show(&jobwatchv1.WatchJobLogsResponse{Lines: page.GetLines(), Gap: page.GetGap()}); err != nil {
				return err
			}
		}
		if n := len(page.GetLines()); n > 0 {
			after = page.GetLines()[n-1].GetSeq()
		}
		if !page.GetMore() || len(page.GetLines()) == 0 {
			return nil
		}
	}
}

// printLogs prints lines of a job's log, after the marker of the gap
// before them if there is one: the text alone (with times, its time,
// stream and attempt first, so that where a retry begins shows), or one
// JSON object per line. Text is printable: its
// colours kept only for a terminal, nothing else a terminal acts on.
func printLogs(w io.Writer, msg *jobwatchv1.WatchJobLogsResponse, asJSON, times bool) error {
	colour := !asJSON && isTerminal(w)
	if g := msg.GetGap(); g != nil {
		var err error
		if asJSON {
			err = printJSON(w, &jobwatchv1.WatchJobLogsResponse{Gap: g})
		} else {
			_, err = fmt.Fprintln(w, gapLine(g))
		}
		if err != nil {
			return err
		}
	}
	for _, l := range msg.GetLines() {
		var err error
		switch {
		case asJSON:
			err = printJSON(w, l)
		case times:
			_, err = fmt.Fprintf(w, "%s %-6s #%d %s\n", l.GetTime().AsTime().Local().Format("2006-01-02T15:04:05.000Z07:00"),
				streamName(l.GetStream()), l.GetAttempt(), printable(l.GetText(), colour))
		default:
			_, err = fmt.Fprintln(w, printable(l.GetText(), colour))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// logSeen follows the last seq of a job's log shown, to say on stderr
// when the log goes back before it: client.WatchLogs then yields the
// server's log from its oldest line kept (its database was restored
// from an older copy), which would otherwise read as lines printed
// twice.
type logSeen struct{ last int64 }

func (s *logSeen) note(stderr io.Writer, id string, msg *jobwatchv1.WatchJobLogsResponse) {
	lines := msg.GetLines()
	if len(lines) == 0 {
		return
	}
	if first := lines[0].GetSeq(); first <= s.last {
		fmt.Fprintf(stderr, "jobwatch: the server's log of %s goes back to line %d, before the %d shown (a database restored from an older copy?): the server's lines from there follow\n",
			id, first, s.last)
	}
	s.last = lines[len(lines)-1].GetSeq()
}

// gapLine is the marker of lines the server no longer keeps.
func gapLine(g *jobwatchv1.LogGap) string {
	return fmt.Sprintf("… %d lines dropped; resuming at %d", g.GetSkipped(), g.GetResumeFrom())
}

// streamName is where a line came from, as people say it: "stdout",
// "stderr", or "log" for a handler's own line.
func streamName(s jobwatchv1.LogStream) string {
	if s == jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED {
		return "log"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "LOG_STREAM_"))
}
