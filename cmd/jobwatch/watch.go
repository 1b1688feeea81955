package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

const watchUsage = `Usage: jobwatch watch ID [flags]

Follows a job until it ends. On a terminal it draws a live progress bar
with the percent, the step text and the elapsed time; otherwise (a pipe,
a file, --json) it prints one line per new snapshot. It resumes after
server restarts and dropped connections without repeating a snapshot.
With --logs it also prints the job's log as it grows, every line kept
from the first (above the bar on a terminal; "TIME | text" between the
snapshot lines; with --json, {"lines": [...]} objects between the jobs),
and shows the job's end after its last line.

` + exitCodesHelp + `

Flags:
`

// watch runs "jobwatch watch ID".
func watch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var timeout time.Duration
	var display string
	var withLogs bool
	fs := newFlagSet("watch", stderr)
	cf.register(fs)
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 1); 0 watches as long as it takes")
	fs.StringVar(&display, "progress", "auto", "`how` to show snapshots: bar, lines, or auto (bar on a terminal)")
	fs.BoolVar(&withLogs, "logs", false, "print the job's log lines too, as they come")
	fs.Usage = func() { fmt.Fprint(stderr, watchUsage); fs.PrintDefaults() }
	pos, err := parseArgs(fs, args, 1, "ID")
	if err != nil {
		return err
	}
	switch display {
	case "auto":
		display = "lines"
		if !cf.json && isTerminal(stdout) {
			display = "bar"
		}
	case "bar", "lines":
	default:
		return usageError{fmt.Sprintf("--progress %q: want bar, lines or auto", display)}
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

	var show func(*jobwatchv1.Job) error
	var showLogs func(*jobwatchv1.WatchJobLogsResponse) error
	var tick func()
	switch {
	case cf.json:
		show = func(j *jobwatchv1.Job) error { return printJSON(stdout, j) }
		showLogs = func(m *jobwatchv1.WatchJobLogsResponse) error { return printJSON(stdout, m) }
	case display == "bar":
		b := &bar{w: stdout, width: terminalWidth(stdout), now: time.Now}
		show = func(j *jobwatchv1.Job) error { b.job = j; b.draw(); return nil }
		showLogs = func(m *jobwatchv1.WatchJobLogsResponse) error {
			// The lines scroll above the bar: clear it, print them, draw
			// it again below them.
			fmt.Fprint(stdout, "\r\x1b[K")
			if err := printLogs(stdout, m, false, false); err != nil {
				return err
			}
			if b.job != nil {
				b.draw()
			}
			return nil
		}
		tick = func() {
			if b.job != nil {
				b.draw()
			}
		}
	default:
		show = func(j *jobwatchv1.Job) error { return printLine(stdout, j) }
		showLogs = func(m *jobwatchv1.WatchJobLogsResponse) error { return printLogLines(stdout, m) }
	}
	if !withLogs {
		showLogs = nil
	}

	last, err := follow(ctx, c, pos[0], show, showLogs, tick)
	if j := withoutValues(err, "watch", true, stderr); j != nil {
		last, err = j, show(j)
	}
	if display == "bar" && !cf.json && last != nil {
		fmt.Fprintln(stdout)
		if e := last.GetError(); e != nil {
			fmt.Fprintln(stdout, strings.TrimSuffix("error: "+e.GetType()+": "+e.GetMessage(), ": "))
		}
		if r := valueJSON(last.GetResult()); r != "" {
			fmt.Fprintln(stdout, "result:", r)
		}
	}
	if err != nil {
		return callError("watch", err)
	}
	return outcome(last)
}

// follow shows each snapshot of the job until the terminal one, calling
// tick every second in between (the bar's elapsed time must move while
// nothing else does). With showLogs it also shows the job's log from its
// first line kept, and holds the terminal snapshot until the log's last
// line is shown, so the end comes after the output. It returns the last
// snapshot shown.
func follow(ctx context.Context, c *client.Client, id string, show func(*jobwatchv1.Job) error,
	showLogs func(*jobwatchv1.WatchJobLogsResponse) error, tick func()) (*jobwatchv1.Job, error) {
	type item struct {
		job *jobwatchv1.Job
		err error
	}
	type logItem struct {
		msg *jobwatchv1.WatchJobLogsResponse
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item)
	go func() {
		defer close(items)
		for j, err := range c.Watch(ctx, id) {
			select {
			case items <- item{j, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var logItems chan logItem // nil: no logs, and this case never fires
	if showLogs != nil {
		logItems = make(chan logItem)
		go func() {
			defer close(logItems)
			for m, err := range c.WatchLogs(ctx, id, 0) {
				select {
				case logItems <- logItem{m, err}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var last, terminal *jobwatchv1.Job
	for items != nil || logItems != nil {
		select {
		case it, ok := <-items:
			if !ok {
				items = nil
				continue
			}
			if it.err != nil {
				return last, it.err
			}
			if logItems != nil && client.Terminal(it.job.GetState()) {
				terminal = it.job // shown once the log's last line is
				continue
			}
			last = it.job
			if err := show(it.job); err != nil {
				return last, err
			}
		case it, ok := <-logItems:
			if !ok {
				logItems = nil
				continue
			}
			if it.err != nil {
				return last, it.err
			}
			if err := showLogs(it.msg); err != nil {
				return last, err
			}
		case <-ticker.C:
			if tick != nil {
				tick()
			}
		}
	}
	if terminal != nil {
		return terminal, show(terminal)
	}
	return last, nil
}

// printLogLines prints log lines between snapshot lines: each line's time
// (as printLine prints a snapshot's), "|" and its text.
func printLogLines(w io.Writer, m *jobwatchv1.WatchJobLogsResponse) error {
	if g := m.GetGap(); g != nil {
		if _, err := fmt.Fprintf(w, "%s | %s\n", time.Now().Format("15:04:05"), gapLine(g)); err != nil {
			return err
		}
	}
	for _, l := range m.GetLines() {
		if _, err := fmt.Fprintf(w, "%s | %s\n", l.GetTime().AsTime().Local().Format("15:04:05"), l.GetText()); err != nil {
			return err
		}
	}
	return nil
}

// printLine prints one snapshot as a line a log reader can follow.
func printLine(w io.Writer, j *jobwatchv1.Job) error {
	_, err := fmt.Fprintf(w, "%s v%d %s\n", time.Now().Format("15:04:05"), j.GetVersion(), summary(j))
	return err
}

// bar draws a job's progress on one terminal line, redrawn in place:
//
//	[############............]  45%  RUNNING  batch 5 of 11  0:12
type bar struct {
	w     io.Writer
	width int // the terminal's columns; the line stays shorter, or it wraps
	job   *jobwatchv1.Job
	now   func() time.Time
}

const barWidth = 30

func (b *bar) draw() {
	j := b.job
	filled := int(j.GetPercent()) * barWidth / 100
	line := fmt.Sprintf("[%s%s] %3d%%  %-9s  %s  %s",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		j.GetPercent(), stateName(j.GetState()), formatElapsed(b.elapsed()), j.GetStep())
	// A line as wide as the terminal would wrap, and \r could then no
	// longer redraw it in place.
	if r := []rune(line); b.width > 1 && len(r) > b.width-1 {
		line = string(r[:b.width-2]) + "…"
	}
	// \r returns to the line's start and \x1b[K clears what a longer
	// previous line left behind.
	fmt.Fprintf(b.w, "\r\x1b[K%s", line)
}

// elapsed is how long the job has been running (or ran), by the server's
// timestamps where it can, so it is right however late the watch began.
func (b *bar) elapsed() time.Duration {
	j := b.job
	start := j.GetStartedAt()
	if start == nil {
		start = j.GetCreatedAt()
	}
	if start == nil {
		return 0
	}
	end := b.now()
	if f := j.GetFinishedAt(); f != nil {
		end = f.AsTime()
	}
	return max(end.Sub(start.AsTime()), 0)
}

func formatElapsed(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	if h > 0 {
		return fmt.Sprintf("%d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%d:%02d", m, s)
}

// terminalWidth is w's width in columns if it is a terminal that says,
// else 80.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 80
	}
	var ws struct{ rows, cols, x, y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 || ws.cols == 0 {
		return 80
	}
	return int(ws.cols)
}

// isTerminal reports whether w is a terminal (a character device), which
// is all the bar needs to know; it writes only \r and one ANSI code.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
