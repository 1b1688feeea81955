package jobs

// Jobs' logs: a worker appends lines under its lease (AppendLogs), a
// caller pages through them (Logs) or follows them (WatchLogs). Lines
// live in the store: each append publishes its lines to the job's cell
// of Engine.logs, and a watcher that has every line before them sends
// them from there, so a hundred watchers that keep up cost an append no
// read at all; a watcher that fell behind (or missed a publish) reads
// what it has not sent from the store, so a slow reader costs the server
// a cursor, never a buffer. A watcher on another replica hears of an
// append through the store's change notices (store.Change with
// LogChange, heard in listen.go); each of its watchers there reads the
// new lines from the store.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// logBatch is the lines of one append, in seq order, as Engine.logs
// carries them to the watchers of their job's log.
type logBatch struct{ lines []jobtype.LogLine }

// follows reports whether b's lines come right after seq after.
func (b *logBatch) follows(after int64) bool {
	return b != nil && len(b.lines) > 0 && b.lines[0].Seq == after+1
}

// sentBy reports whether b's last line is seq after.
func (b *logBatch) sentBy(after int64) bool {
	return b != nil && len(b.lines) > 0 && b.lines[len(b.lines)-1].Seq == after
}

// Bounds of reading a log.
const (
	// DefaultLogPage and MaxLogPage bound the lines of one Logs page.
	DefaultLogPage = 1000
	MaxLogPage     = 1000
	// MaxLogPageBytes bounds the text of one Logs page (at least one
	// line is always sent): 1,000 lines of 16 KiB would be a 16 MB
	// answer, four times what gRPC clients take by default.
	MaxLogPageBytes = 1 << 20
	// maxLogBatchBytes bounds the text of the lines one WatchLogs send
	// carries, well under a message's limit.
	maxLogBatchBytes = 256 << 10
)

// AppendLogs adds lines to the log of job id, which the worker holds
// under leaseID, and returns the seq of the job's last line. A line's
// text holding newlines is that many lines (splitLogLines); each line's
// text is cut to jobtype.MaxLogLineBytes (CutLogLine), and a line
// without a time gets the engine's now (one with a time must be within
// jobtype.MaxTimeOffset of it). More than
// jobtype.MaxLogLinesPerAppend lines, given or once split, is a
// *jobtype.InvalidError, so one call's cost stays bounded. As for
// Heartbeat, a job whose attempt the server ended while the lease was
// held answers cancelled (nothing appended), and any other lease
// mismatch is ErrStaleLease. When every line carries a time, the same
// lines sent again under the lease right after they were appended (the
// answer was lost) are answered as before and not appended twice
// (store.LogAppend.Resendable).
func (e *Engine) AppendLogs(ctx context.Context, id, leaseID string, lines []jobtype.LogLine) (last int64, cancelled bool, err error) {
	if err := validLease(id, leaseID); err != nil {
		return 0, false, err
	}
	if len(lines) > jobtype.MaxLogLinesPerAppend {
		return 0, false, &jobtype.InvalidError{Field: "lines",
			Reason: "must be at most " + strconv.Itoa(jobtype.MaxLogLinesPerAppend) + " a call, got " + strconv.Itoa(len(lines))}
	}
	now := e.now()
	// Lines that all carry their worker's times tell an append sent again
	// (its answer lost) from a new one: the store adds them once.
	resendable := true
	for i, l := range lines {
		if l.Time.IsZero() {
			resendable = false
			continue
		}
		if err := checkTime("lines["+strconv.Itoa(i)+"].time", l.Time, now); err != nil {
			return 0, false, err
		}
	}
	given := len(lines)
	lines = splitLogLines(lines)
	if len(lines) > jobtype.MaxLogLinesPerAppend {
		return 0, false, &jobtype.InvalidError{Field: "lines",
			Reason: "must be at most " + strconv.Itoa(jobtype.MaxLogLinesPerAppend) + " a call, a text holding newlines counting as the lines it holds: the " +
				strconv.Itoa(given) + " given hold " + strconv.Itoa(len(lines))}
	}
	for i := range lines {
		lines[i].Text = jobtype.CutLogLine(lines[i].Text)
		if lines[i].Time.IsZero() {
			lines[i].Time = now
		}
		lines[i].Time = lines[i].Time.UTC().Truncate(time.Microsecond) // as stored
	}
	rules := e.rules.Load()
	res, err := e.store.AppendLogs(ctx, store.LogAppend{JobID: id, LeaseID: leaseID, Lines: lines, Resendable: resendable,
		MaxBytes: func(queue string) int64 {
			if n := rules.Queues[queue].MaxLogBytes; n > 0 {
				return n
			}
			return jobtype.DefaultMaxLogBytes
		}})
	if err != nil {
		return 0, false, wrap("append logs", id, err)
	}
	if !res.Held {
		if endedUnder(&res.Job, leaseID) {
			return res.LastSeq, true, nil
		}
		return 0, false, ErrStaleLease
	}
	if n := int64(len(lines)); n > 0 && !res.Repeated {
		for i := range lines {
			lines[i].Seq, lines[i].Attempt = res.LastSeq-n+1+int64(i), res.Job.Attempt
		}
		e.logs.Publish(id, e.signalSeq.Add(1), &logBatch{lines: lines})
	}
	return res.LastSeq, false, nil
}

// splitLogLines makes each line of lines that holds a newline the lines
// it holds, each with its time and stream: a line is text without its
// newline, so "a\nb" is two lines (as the Go client's Logf writes it),
// never one that a reader would show as two, the second looking like a
// line of its own. A newline (or CRLF) at the end ends the line and
// adds none.
func splitLogLines(lines []jobtype.LogLine) []jobtype.LogLine {
	split := false
	for _, l := range lines {
		if strings.Contains(l.Text, "\n") {
			split = true
			break
		}
	}
	if !split {
		return lines
	}
	out := make([]jobtype.LogLine, 0, len(lines)+1)
	for _, l := range lines {
		text := strings.TrimSuffix(strings.TrimSuffix(l.Text, "\n"), "\r")
		for part := range strings.SplitSeq(text, "\n") {
			l.Text = strings.TrimSuffix(part, "\r")
			out = append(out, l)
		}
	}
	return out
}

// heardLogChange wakes the watchers here of a log another replica
// appended to; they read the new lines from the store.
func (e *Engine) heardLogChange(c store.Change) {
	e.logs.Publish(c.JobID, e.signalSeq.Add(1), nil)
}

// LogGap says that lines after a reader's last are no longer kept.
type LogGap struct {
	Skipped    int64
	ResumeFrom int64 // the seq of the first line kept after the gap
}

// LogPage is a page of a job's log.
type LogPage struct {
	Lines []jobtype.LogLine
	// Gap, if not nil: lines after the caller's last were dropped before
	// the first of Lines.
	Gap *LogGap
	// More lines are kept after Lines.
	More bool
	// JobEnded: the job had ended when the page was read, so no line
	// follows the last kept (until a retry runs it again).
	JobEnded bool
}

// Logs returns at most limit (0: DefaultLogPage; at most MaxLogPage) of
// job id's lines after afterSeq (0, or a seq past the job's last line:
// from the oldest kept; pastLastLine), oldest first, and no more than
// MaxLogPageBytes of their text (More says when lines were left for the
// next page).
func (e *Engine) Logs(ctx context.Context, id string, afterSeq int64, limit int) (LogPage, error) {
	if err := validID("job_id", id); err != nil {
		return LogPage{}, err
	}
	if afterSeq < 0 {
		return LogPage{}, &jobtype.InvalidError{Field: "after_seq", Reason: "must not be negative"}
	}
	if limit < 0 {
		return LogPage{}, &jobtype.InvalidError{Field: "limit", Reason: "must not be negative"}
	}
	if limit == 0 {
		limit = DefaultLogPage
	}
	limit = min(limit, MaxLogPage)
	p, err := e.store.JobLogs(ctx, id, afterSeq, limit)
	if err == nil && pastLastLine(afterSeq, p) {
		afterSeq = 0
		p, err = e.store.JobLogs(ctx, id, afterSeq, limit)
	}
	if err != nil {
		return LogPage{}, wrap("logs", id, err)
	}
	size := 0
	for i, l := range p.Lines {
		if size += len(l.Text); i > 0 && size > MaxLogPageBytes {
			p.Lines = p.Lines[:i]
			break
		}
	}
	out := LogPage{Lines: p.Lines, Gap: gapAfter(afterSeq, p), JobEnded: p.Job.State.Terminal()}
	if n := len(p.Lines); n > 0 {
		out.More = p.Lines[n-1].Seq < p.LastSeq
	}
	return out, nil
}

// pastLastLine reports whether afterSeq is past the last line of the job
// whose log p is, which a reader then reads from 0, every line kept: a
// caller's mistake, or a reader that resumes on a database restored from
// an older copy. So WatchJob reads an after_version past the job's
// version. Kept as it is, it would skip every line the job appends up to
// it, without a gap to say so.
func pastLastLine(afterSeq int64, p store.LogPage) bool { return afterSeq > p.LastSeq }

// gapAfter is the gap between afterSeq and the first line of p, or
// before the first line kept when p has none; nil if there is none.
func gapAfter(afterSeq int64, p store.LogPage) *LogGap {
	next := p.FirstSeq
	if len(p.Lines) > 0 {
		next = p.Lines[0].Seq
	} else if next > p.LastSeq {
		next = p.LastSeq + 1 // nothing kept: nothing after afterSeq is missing but what was dropped
	}
	if next-1 <= afterSeq { // not next <= afterSeq+1: afterSeq may be math.MaxInt64
		return nil
	}
	return &LogGap{Skipped: next - afterSeq - 1, ResumeFrom: next}
}

// LogWatchOptions are the options of WatchLogs.
type LogWatchOptions struct {
	// AfterSeq is the last seq the caller has; 0, or a seq past the
	// job's last line (pastLastLine), sends every line kept.
	AfterSeq  int64
	Deadline  time.Time // zero: no limit
	Keepalive time.Duration
	// Send delivers lines in order, with the gap before them if lines
	// after the last sent are no longer kept; no lines and no gap is a
	// keepalive.
	Send func(lines []jobtype.LogLine, gap *LogGap) error
	// Ended, if set, is called once, after the last line, when the
	// job has ended and every line it kept was sent: the watch then
	// returns what it returns. A watch that returns nil without calling
	// it ended at its deadline or at Shutdown.
	Ended func() error
}

// WatchLogs sends job id's lines after o.AfterSeq, then each line as it
// is appended, and returns nil once the job has ended and every line it
// kept was sent (calling o.Ended first), at the deadline or at Shutdown; ctx.Err() when ctx
// ends; ErrNotFound (wrapped) if the job does not exist or is deleted
// meanwhile.
//
// It subscribes to the job's log (Engine.logs) and its snapshots before
// its first read, so an append or the job's end that commits after a
// read always wakes it. Woken by an append whose lines come right after
// the last it sent, it sends them as published; otherwise (it missed a
// publish, the append was another replica's, or the job ended) it reads
// the store.
func (e *Engine) WatchLogs(ctx context.Context, id string, o LogWatchOptions) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	if o.AfterSeq < 0 {
		return &jobtype.InvalidError{Field: "after_seq", Reason: "must not be negative"}
	}
	logs := e.logs.Subscribe(id)
	defer logs.Close()
	job := e.hub.Subscribe(id)
	defer job.Close()

	deadline, stop := e.timerUntil(o.Deadline)
	defer stop()
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	after := o.AfterSeq
	// send sends lines, and gap before them, in batches of at most
	// maxLogBatchBytes of text, and moves after past them.
	send := func(lines []jobtype.LogLine, gap *LogGap) error {
		for len(lines) > 0 || gap != nil {
			n, size := 0, 0
			for n < len(lines) && (n == 0 || size+len(lines[n].Text) <= maxLogBatchBytes) {
				size += len(lines[n].Text)
				n++
			}
			if err := o.Send(lines[:n], gap); err != nil {
				return err
			}
			keepalive.reset()
			if gap != nil {
				after = gap.ResumeFrom - 1
				gap = nil
			}
			if n > 0 {
				after = lines[n-1].Seq
			}
			lines = lines[n:]
		}
		return nil
	}
	read := true // the first look reads the store
	for {
		batch, _, appended := logs.Latest()
		snap, _, changed := job.Latest()
		if snap != nil && snap.Gone {
			return wrap("watch logs", id, jobtype.ErrNotFound)
		}
		ended := snap != nil && snap.Job.State.Terminal()
		switch {
		case !read && !ended && batch.follows(after):
			// The append that woke this watch, and nothing was missed
			// before it: its lines as published, with no read.
			if err := send(batch.lines, nil); err != nil {
				return err
			}
		case !read && !ended && batch.sentBy(after):
			// Woken by a change of the job (progress), with every line
			// published here sent: nothing to read.
		default:
			p, err := e.store.JobLogs(ctx, id, after, MaxLogPage)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return wrap("watch logs", id, err)
			}
			if pastLastLine(after, p) { // only the caller's AfterSeq can be
				after = 0
				continue
			}
			if err := send(p.Lines, gapAfter(after, p)); err != nil {
				return err
			}
			if after < p.LastSeq && len(p.Lines) == MaxLogPage {
				continue // more kept than one read takes
			}
			if p.Job.State.Terminal() && after >= p.LastSeq {
				if o.Ended != nil {
					return o.Ended()
				}
				return nil
			}
		}
		read = false
		if err := e.parkLogs(ctx, appended, changed, deadline, keepalive, o.Send); err != nil {
			if errors.Is(err, errWatchOver) {
				return nil
			}
			return err
		}
	}
}

// errWatchOver ends a watch without an error: its deadline passed or
// the engine shut down.
var errWatchOver = errors.New("watch over")

// parkLogs waits for an append, a change of the job, a keepalive (sent
// from here) or the end of the watch.
func (e *Engine) parkLogs(ctx context.Context, appended, changed <-chan struct{}, deadline <-chan time.Time,
	keepalive *keepalive, send func([]jobtype.LogLine, *LogGap) error) error {
	for {
		select {
		case <-appended:
			return nil
		case <-changed:
			return nil
		case <-keepalive.c():
			if err := send(nil, nil); err != nil {
				return err
			}
			keepalive.reset()
		case <-deadline:
			return errWatchOver
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			return errWatchOver
		}
	}
}
