package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

const watchUsage = `Usage: jobwatch watch ID [flags]
       jobwatch watch --batch NAME [--tenant TENANT] [flags]

Follows a job until it ends. On a terminal it draws a live progress bar
with the percent, the step text and the elapsed time; otherwise (a pipe,
a file, --json) it prints one line per new snapshot. It resumes after
server restarts and dropped connections without repeating a snapshot.
With --logs it also prints the job's log as it grows, every line kept
from the first (above the bar on a terminal; "TIME | text" between the
snapshot lines; with --json, {"lines": [...]} objects between the jobs),
and shows the job's end after its last line.

With --batch it follows every job of the batch on one stream until all of
them have ended: on a terminal one bar for the whole batch (how many jobs
have ended, and how, and how many are still running or queued), then a
line for each job that did not succeed; otherwise one line (or JSON
object) per new snapshot of any of its jobs. The snapshots are summaries,
without payload or result ("jobwatch wait --batch" prints the results).
Jobs submitted to the batch while it watches are followed too.

` + exitCodesHelp + `

Flags:
`

// watch runs "jobwatch watch ID" and "jobwatch watch --batch NAME".
func watch(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var cf clientFlags
	defer func() { err = cf.timeoutUnanswered(err) }()
	var timeout time.Duration
	var display, batch, tenant string
	var withLogs bool
	fs := newFlagSet("watch", stderr)
	cf.register(fs)
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 124); 0 watches as long as it takes")
	fs.StringVar(&display, "progress", "auto", "`how` to show snapshots: bar, lines, or auto (bar on a terminal)")
	fs.BoolVar(&withLogs, "logs", false, "print the job's log lines too, as they come")
	fs.StringVar(&batch, "batch", "", "follow the jobs of this batch `name` (jobwatch submit --batch) until all have ended")
	fs.StringVar(&tenant, "tenant", "", "the batch's `tenant` (default: the server's \"default\")")
	fs.Usage = func() { fmt.Fprint(stderr, watchUsage); fs.PrintDefaults() }
	pos, err := parseAnyArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case batch != "" && len(pos) > 0:
		return usageError{fmt.Sprintf("watch takes an ID or --batch, not both (got --batch %q and %q)", batch, pos)}
	case batch != "" && withLogs:
		return usageError{"--logs follows one job's log: jobwatch watch ID --logs"}
	case batch == "" && tenant != "":
		return usageError{"--tenant names the batch's tenant: it goes with --batch"}
	case batch == "" && len(pos) != 1:
		return usageError{"usage: jobwatch watch ID [flags], or jobwatch watch --batch NAME [flags]"}
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
		cause := errTimeout
		if batch != "" {
			cause = errTimeoutMany
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, cause)
		defer cancel()
	}
	if batch != "" {
		return watchBatch(ctx, c, tenant, batch, display, cf.json, stdout)
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
	} else {
		var seen logSeen
		shownLogs := showLogs
		showLogs = func(m *jobwatchv1.WatchJobLogsResponse) error {
			seen.note(stderr, pos[0], m)
			return shownLogs(m)
		}
	}
	// A held job stays PENDING until someone starts it: say so once, so
	// that a watch that shows nothing more does not look stuck.
	held := false
	shown := show
	show = func(j *jobwatchv1.Job) error {
		if j.GetState() == jobwatchv1.JobState_JOB_STATE_PENDING && !held {
			held = true
			fmt.Fprintf(stderr, "jobwatch: watch: job %s is held (PENDING): it waits until it is started (jobwatch start %s)\n", j.GetId(), j.GetId())
		}
		return shown(j)
	}

	last, err := follow(ctx, c, pos[0], show, showLogs, tick)
	if j := withoutValues(err, "watch", true, stderr); j != nil {
		last, err = j, show(j)
	}
	if display == "bar" && !cf.json && last != nil {
		fmt.Fprintln(stdout)
		if e := last.GetError(); e != nil {
			fmt.Fprintln(stdout, "error: "+errorText(e))
		}
		if r := valueJSON(last.GetResult()); r != "" {
			fmt.Fprintln(stdout, "result:", r)
		}
	}
	if err != nil {
		return jobCallError("watch", pos[0], err)
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
	outer := ctx
	var running sync.WaitGroup
	defer running.Wait() // nothing of this watch writes after it returns
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan item)
	var gaveUp error // what the watch said as ctx ended; read once items is closed
	running.Go(func() {
		defer close(items)
		for j, err := range c.Watch(ctx, id) {
			select {
			case items <- item{j, err}:
			case <-ctx.Done():
				gaveUp = err
				return
			}
		}
	})
	var logItems chan logItem // nil: no logs, and this case never fires
	if showLogs != nil {
		logItems = make(chan logItem)
		running.Go(func() {
			defer close(logItems)
			for m, err := range c.WatchLogs(ctx, id, 0) {
				select {
				case logItems <- logItem{m, err}:
				case <-ctx.Done():
					return
				}
			}
		})
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
	if last == nil || !client.Terminal(last.GetState()) {
		// The watches stop early only when ctx ends (--timeout, a
		// signal): the job has not ended, and the exit code must not
		// say it succeeded.
		if err := context.Cause(outer); err != nil {
			if errors.Is(gaveUp, err) {
				err = gaveUp // it says what the last try met
			}
			return last, err
		}
		return last, errors.New("the watch ended before the job did")
	}
	return last, nil
}

// printLogLines prints log lines between snapshot lines: each line's time
// (as printLine prints a snapshot's), "|" and its text, printable as
// printLogs prints it. The marker of lines dropped takes the time of the
// line after it, so that the times read in order; without one, none.
func printLogLines(w io.Writer, m *jobwatchv1.WatchJobLogsResponse) error {
	colour := isTerminal(w)
	if g := m.GetGap(); g != nil {
		at := "        "
		if len(m.GetLines()) > 0 {
			at = m.GetLines()[0].GetTime().AsTime().Local().Format("15:04:05")
		}
		if _, err := fmt.Fprintf(w, "%s | %s\n", at, gapLine(g)); err != nil {
			return err
		}
	}
	for _, l := range m.GetLines() {
		if _, err := fmt.Fprintf(w, "%s | %s\n", l.GetTime().AsTime().Local().Format("15:04:05"), printable(l.GetText(), colour)); err != nil {
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
		j.GetPercent(), stateName(j.GetState()), formatElapsed(b.elapsed()), plain(j.GetStep()))
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
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 {
		return 80
	}
	return cols
}

// isTerminal reports whether w is a terminal. A character device is not
// enough: /dev/null is one, and it is the stdin of cron jobs and systemd
// units, which must not be asked a bulk action's question.
func isTerminal(w io.Writer) bool {
	if l, ok := w.(*lockedWriter); ok {
		w = l.w
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watchBatch follows the jobs of a batch until every one has ended, on
// one WatchJobs stream filtered to the batch, and exits as wait does for
// several jobs. The stream starts with the batch's most recent jobs only
// (at most a page, 500), so once it has answered (from then on it brings
// every change) the batch is listed whole, for the older jobs and the
// order they were submitted in.
func watchBatch(ctx context.Context, c *client.Client, tenant, batch, display string, asJSON bool, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type item struct {
		msg *jobwatchv1.WatchJobsResponse
		err error
	}
	items := make(chan item)
	go func() {
		defer close(items)
		req := &jobwatchv1.WatchJobsRequest{Tenant: tenant, Batch: batch, PageSize: jobs.MaxPageSize}
		for m, err := range c.WatchJobs(ctx, req) {
			select {
			case items <- item{m, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	type listing struct {
		jobs []*jobwatchv1.Job // oldest first
		err  error
	}
	var listed chan listing // nil until the stream has answered, and again once read

	v := &batchView{jobs: map[string]*jobwatchv1.Job{}}
	useBar := display == "bar" && !asJSON
	b := &batchBar{w: stdout, width: terminalWidth(stdout), view: v, now: time.Now}
	// The bar is drawn once the batch is listed: before, its counts
	// would be those of the most recent jobs only.
	draw := func() {
		if useBar && v.listed {
			b.draw()
		}
	}
	show := func(j *jobwatchv1.Job) error { return printLine(stdout, j) }
	switch {
	case asJSON:
		show = func(j *jobwatchv1.Job) error { return printJSON(stdout, j) }
	case useBar:
		show = func(*jobwatchv1.Job) error { return nil }
	}
	update := func(js []*jobwatchv1.Job) error {
		for _, j := range js {
			if !v.update(j) {
				continue
			}
			if err := show(j); err != nil {
				return err
			}
		}
		draw()
		return nil
	}
	fail := func(err error) error {
		if useBar && v.listed {
			fmt.Fprintln(stdout) // below the bar
		}
		return err
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for !v.listed || !v.allEnded() {
		select {
		case it, ok := <-items:
			if !ok {
				return fail(callError("watch", context.Cause(ctx)))
			}
			if it.err != nil {
				return fail(callError("watch", it.err))
			}
			if it.msg.GetStartedOver() {
				// The server could not resume the stream (its database
				// restored from an older copy, say): what it held may be
				// gone or at higher versions than the server's now. List
				// the batch again, and drop a listing still on its way.
				v.startOver()
				listed = nil
			}
			if err := update(it.msg.GetJobs()); err != nil {
				return fail(err)
			}
			for _, id := range it.msg.GetDeletedJobIds() {
				v.remove(id)
			}
			if listed == nil && !v.listed {
				listed = make(chan listing, 1)
				go func() {
					js, err := listBatch(ctx, c, tenant, batch)
					listed <- listing{js, err}
				}()
			}
		case l := <-listed:
			listed = nil
			if l.err != nil {
				return fail(callError("watch", l.err))
			}
			if err := update(l.jobs); err != nil { // before setListed: not yet in the order
				return fail(err)
			}
			v.setListed(l.jobs)
			if len(v.jobs) == 0 {
				return fmt.Errorf("watch: batch %q holds no job", batch)
			}
			draw()
		case <-ticker.C:
			draw()
		}
	}
	ended := v.inOrder()
	if !asJSON {
		if useBar {
			fmt.Fprintln(stdout)
			for _, j := range ended {
				if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
					fmt.Fprintln(stdout, summary(j))
				}
			}
		}
		fmt.Fprintf(stdout, "batch %s: %s\n", batch, v.counts())
	}
	return outcomes(ended)
}

// listBatch is every job of the batch (summaries), oldest first.
func listBatch(ctx context.Context, c *client.Client, tenant, batch string) ([]*jobwatchv1.Job, error) {
	req := &jobwatchv1.ListJobsRequest{Tenant: tenant, Batch: batch, PageSize: jobs.MaxPageSize}
	var all []*jobwatchv1.Job
	for {
		resp, err := c.JobService().ListJobs(ctx, req)
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetJobs()...)
		if resp.GetNextPageToken() == "" || len(resp.GetJobs()) == 0 {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	slices.Reverse(all) // ListJobs is newest first
	return all, nil
}

// batchView is what watch --batch knows of a batch: the latest snapshot
// of each of its jobs, and once it is listed, their submission order.
type batchView struct {
	jobs   map[string]*jobwatchv1.Job
	order  []string // the listed jobs oldest first, then those seen since
	listed bool
}

// update keeps j if it is newer than the snapshot held, and says so.
func (v *batchView) update(j *jobwatchv1.Job) bool {
	old, known := v.jobs[j.GetId()]
	if known && old.GetVersion() >= j.GetVersion() {
		return false
	}
	v.jobs[j.GetId()] = j
	if !known && v.listed {
		v.order = append(v.order, j.GetId())
	}
	return true
}

// startOver forgets every job, and the listing: the stream has started
// over (WatchJobsResponse.started_over).
func (v *batchView) startOver() {
	clear(v.jobs)
	v.order, v.listed = nil, false
}

// remove forgets a deleted job.
func (v *batchView) remove(id string) {
	if _, ok := v.jobs[id]; !ok {
		return
	}
	delete(v.jobs, id)
	v.order = slices.DeleteFunc(v.order, func(o string) bool { return o == id })
}

// setListed takes the order of the batch's listing, oldest first: its
// jobs first, then those the stream brought that it does not hold (newer
// ones, by creation time).
func (v *batchView) setListed(oldestFirst []*jobwatchv1.Job) {
	in := make(map[string]bool, len(oldestFirst))
	for _, j := range oldestFirst {
		in[j.GetId()] = true
		v.order = append(v.order, j.GetId())
	}
	var rest []*jobwatchv1.Job
	for id, j := range v.jobs {
		if !in[id] {
			rest = append(rest, j)
		}
	}
	slices.SortFunc(rest, func(a, b *jobwatchv1.Job) int {
		return a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime())
	})
	for _, j := range rest {
		v.order = append(v.order, j.GetId())
	}
	v.listed = true
}

func (v *batchView) allEnded() bool {
	for _, j := range v.jobs {
		if !client.Terminal(j.GetState()) {
			return false
		}
	}
	return true
}

// inOrder is the jobs in submission order.
func (v *batchView) inOrder() []*jobwatchv1.Job {
	out := make([]*jobwatchv1.Job, 0, len(v.order))
	for _, id := range v.order {
		if j, ok := v.jobs[id]; ok {
			out = append(out, j)
		}
	}
	return out
}

// counts says how many jobs there are and how many are in each state:
// "40 jobs, 12 ended: 10 succeeded, 2 failed; 8 running, 20 queued".
func (v *batchView) counts() string {
	by := map[jobwatchv1.JobState]int{}
	ended := 0
	for _, j := range v.jobs {
		by[j.GetState()]++
		if client.Terminal(j.GetState()) {
			ended++
		}
	}
	var done, active []string
	for _, s := range slices.Sorted(maps.Keys(by)) {
		part := fmt.Sprintf("%d %s", by[s], strings.ToLower(stateName(s)))
		if client.Terminal(s) {
			done = append(done, part)
		} else {
			active = append(active, part)
		}
	}
	text := fmt.Sprintf("%d jobs, %d ended", len(v.jobs), ended)
	if len(done) > 0 {
		text += ": " + strings.Join(done, ", ")
	}
	if len(active) > 0 {
		text += "; " + strings.Join(active, ", ")
	}
	return text
}

// batchBar draws a batch's progress on one terminal line, redrawn in
// place: the share of its jobs that have ended, and the counts.
//
//	[############..................]  40 jobs, 12 ended: 10 succeeded, 2 failed; 28 running  0:12
type batchBar struct {
	w     io.Writer
	width int
	view  *batchView
	now   func() time.Time
}

func (b *batchBar) draw() {
	v := b.view
	ended := 0
	var start, end time.Time
	for _, j := range v.jobs {
		if c := j.GetCreatedAt(); c != nil && (start.IsZero() || c.AsTime().Before(start)) {
			start = c.AsTime()
		}
		if !client.Terminal(j.GetState()) {
			continue
		}
		ended++
		if f := j.GetFinishedAt(); f != nil && f.AsTime().After(end) {
			end = f.AsTime()
		}
	}
	filled := 0
	if len(v.jobs) > 0 {
		filled = ended * barWidth / len(v.jobs)
	}
	if ended < len(v.jobs) || end.IsZero() {
		end = b.now()
	}
	elapsed := time.Duration(0)
	if !start.IsZero() {
		elapsed = max(end.Sub(start), 0)
	}
	line := fmt.Sprintf("[%s%s]  %s  %s", strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		v.counts(), formatElapsed(elapsed))
	if r := []rune(line); b.width > 1 && len(r) > b.width-1 {
		line = string(r[:b.width-2]) + "…"
	}
	fmt.Fprintf(b.w, "\r\x1b[K%s", line)
}
