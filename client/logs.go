package client

// Jobs' logs: reading them (Logs, WatchLogs) and a Worker's batcher that
// sends what a handler logs (logBatcher).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Logs is JobService.GetJobLogs: at most limit (0: the server's 1,000)
// of job id's lines after afterSeq (0: from the oldest kept), oldest
// first. The answer's More says to ask again with afterSeq the last
// line's seq; its Gap that lines after afterSeq are no longer kept. An
// unknown job (or another tenant's) is ErrJobNotFound.
func (c *Client) Logs(ctx context.Context, id string, afterSeq int64, limit int) (*jobwatchv1.GetJobLogsResponse, error) {
	resp, err := c.jobs.GetJobLogs(ctx, &jobwatchv1.GetJobLogsRequest{JobId: id, AfterSeq: afterSeq, Limit: int32(limit)})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp, nil
}

// WatchLogs yields job id's log after afterSeq (0: every line kept) as
// the server sends it, a batch of lines at a time, each batch with the
// gap before it if lines were dropped (the queue's max_log_bytes)
// before the reader got them; it never yields a line twice or out of
// order, nor a keepalive, but for one case: when it resumes after a seq
// past the end of the server's log (a database restored from an older
// copy), the server sends the log from its oldest line kept, and it
// yields those lines, though their seqs go back, rather than skip them
// as seen. It ends after the job has ended and its last line was
// yielded.
//
// It follows WatchJobLogs streams as Watch follows WatchJob: when a
// stream ends before the job did (the server's stream lifetime, a
// restart, a dropped connection) it opens another with after_seq the
// last seq yielded, backing off only when the server could not be
// reached. A stream that ended cleanly without job_ended (so also one
// from a server older than that field) is followed by a GetJobLogs that
// tells whether the job has ended. It ends by yielding an error when the
// server refuses the watch (ErrJobNotFound for an unknown job) and ctx's
// cause when ctx ends; breaking out of the loop closes the stream.
func (c *Client) WatchLogs(ctx context.Context, id string, afterSeq int64) iter.Seq2[*jobwatchv1.WatchJobLogsResponse, error] {
	return func(yield func(*jobwatchv1.WatchJobLogsResponse, error) bool) {
		r := c.retrier()
		last := afterSeq
		for {
			asked := time.Now()
			done, received, err := c.watchLogsOnce(ctx, id, &last, yield)
			if done {
				return
			}
			if received {
				r.answered() // as resume does
			}
			if err == nil {
				// A clean end without job_ended: the stream's lifetime
				// passed, the server shut down, or a server older than
				// job_ended saw the job end. Ask which.
				var page *jobwatchv1.GetJobLogsResponse
				page, err = c.jobs.GetJobLogs(ctx, &jobwatchv1.GetJobLogsRequest{JobId: id, AfterSeq: last, Limit: 1})
				if err == nil {
					r.answered()
				}
				if err == nil && page.GetJobEnded() && len(page.GetLines()) == 0 && page.GetGap() == nil {
					return
				}
				if err == nil && (received || time.Since(asked) >= minPark || nearDeadline(ctx, asked)) {
					// More to come, after a stream that lived (its
					// lifetime, the caller's deadline): resume at once.
					r.reset()
					continue
				}
				if err == nil {
					err = errEmptyStream
				}
			}
			if ctx.Err() != nil {
				// As WaitForJob and Watch say it: what the tries were
				// waiting out, if the deadline passed while one to a
				// server that could not be reached was under way.
				yield(nil, r.ended(ctx, err))
				return
			}
			if received {
				r.reset()
			}
			r.failedAfter(asked)
			if lerr := logsError(id, err); lerr != nil {
				yield(nil, lerr)
				return
			}
			if err := r.wait(ctx, err); err != nil {
				yield(nil, err)
				return
			}
		}
	}
}

// watchLogsOnce runs one WatchJobLogs stream after *last. done says
// WatchLogs is over: the consumer broke out of its loop, or the server
// said the job ended and its last line was sent; received that the
// stream delivered anything (lines or a keepalive), so the server is up.
func (c *Client) watchLogsOnce(ctx context.Context, id string, last *int64,
	yield func(*jobwatchv1.WatchJobLogsResponse, error) bool) (done, received bool, err error) {
	req := &jobwatchv1.WatchJobLogsRequest{JobId: id, AfterSeq: *last}
	gotLines := false
	return stream(ctx, c.longJobs.WatchJobLogs, req, func(msg *jobwatchv1.WatchJobLogsResponse) bool {
		if msg.GetJobEnded() {
			return false
		}
		lines := msg.GetLines()
		if !gotLines && len(lines) > 0 && lines[len(lines)-1].GetSeq() < *last {
			// A stream's first lines all before the after_seq it was
			// opened with: the server's log ends before that seq (a
			// database restored from an older copy), so it sends its
			// log from the oldest line kept, which this reader has not
			// seen (a line of that seq it had was another), and the
			// gap before it, if any.
			*last = 0
		}
		gotLines = gotLines || len(lines) > 0
		for len(lines) > 0 && lines[0].GetSeq() <= *last {
			lines = lines[1:] // already yielded (a server that resent them)
		}
		gap := msg.GetGap()
		if gap != nil && gap.GetResumeFrom() <= *last+1 {
			gap = nil
		}
		if len(lines) == 0 && gap == nil {
			return true // a keepalive
		}
		if gap != nil {
			*last = gap.GetResumeFrom() - 1
		}
		if n := len(lines); n > 0 {
			*last = lines[n-1].GetSeq()
		}
		return yield(&jobwatchv1.WatchJobLogsResponse{Lines: lines, Gap: gap}, nil)
	})
}

// logsError is the error a read of job id's logs returns for err, or nil
// when err is transient and the call should be retried.
func logsError(id string, err error) error {
	if connect.CodeOf(err) == connect.CodeNotFound {
		// The server's *connect.Error stays behind the sentinel, as for
		// Watch and WaitForJob: connect.CodeOf reads not_found.
		return &sentinelError{sentinel: ErrJobNotFound, answer: err, text: "watch logs of job " + id + ": " + ErrJobNotFound.Error()}
	}
	if errors.Is(err, errEmptyStream) || transient(context.Background(), err) {
		return nil
	}
	return fmt.Errorf("watch logs of job %s: %w", id, err)
}

// LogAppender is a WorkerBackend that takes jobs' log lines. The remote
// backend (Client.WorkerBackend) is one; with a backend that is not, what
// a handler logs is discarded.
type LogAppender interface {
	// AppendLogs adds lines to the log of the job l holds (at most
	// jobtype.MaxLogLinesPerAppend). cancelled says the job was ended
	// meanwhile and nothing was appended; ErrLeaseLost that the lease is
	// no longer held.
	AppendLogs(ctx context.Context, l *Lease, lines []*jobwatchv1.AppendLogLine) (cancelled bool, err error)
}

// AppendLogs implements LogAppender with WorkerService.AppendJobLogs.
func (b remoteBackend) AppendLogs(ctx context.Context, l *Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	resp, err := b.c.workers.AppendJobLogs(ctx, &jobwatchv1.AppendJobLogsRequest{
		JobId: l.Job.GetId(), LeaseId: l.ID, Lines: lines,
	})
	if err != nil {
		return false, leaseError(err)
	}
	return resp.GetCancelled(), nil
}

// How a Worker sends what its handlers log.
const (
	// LogFlushInterval is the longest a logged line waits in the worker
	// before it is sent, when the server takes lines as fast as they come.
	LogFlushInterval = 200 * time.Millisecond
	// LogFlushBytes of lines waiting are sent at once, without waiting
	// for LogFlushInterval; it also bounds the lines of one call (as does
	// jobtype.MaxLogLinesPerAppend), well under a server's request limit.
	LogFlushBytes = 64 << 10
	// DefaultLogBufferBytes is WorkerConfig.LogBufferBytes's default.
	DefaultLogBufferBytes = 1 << 20
	// minLogBufferBytes keeps room for a call's lines and a few more.
	minLogBufferBytes = 4 * LogFlushBytes
)

// logLineOverhead is what a line costs beyond its text, in the bound of
// the bytes a batcher holds (as jobtype.LogLine.Size counts it).
const logLineOverhead = 16

// droppedMarker is the line that stands for n lines the worker dropped.
func droppedMarker(n int) string {
	if n == 1 {
		return "1 line dropped by the worker"
	}
	return strconv.Itoa(n) + " lines dropped by the worker"
}

// logBatcher sends one job's log lines: a call LogFlushInterval after the
// oldest line waiting, or at once when LogFlushBytes are waiting, one at
// a time, retrying transient failures. It holds at most limit bytes: when
// the server is slower than the handler logs, the oldest lines not yet
// on their way go, and a line "N lines dropped by the worker" takes
// their place. Adding a line never blocks.
type logBatcher struct {
	send  func(ctx context.Context, lines []*jobwatchv1.AppendLogLine) (cancelled bool, err error)
	limit int
	// ended is called once if the server says the job ended
	// (ErrJobCancelled) or the lease is lost (ErrLeaseLost).
	ended   func(cause error)
	backoff Backoff
	callTTL time.Duration // bounds one call
	log     *slog.Logger

	mu sync.Mutex
	// pending are the lines not yet acknowledged, oldest first; the
	// first inflight of them are on their way, or, resend, were sent by
	// a call that got no answer and are to be sent again as they were.
	pending  []pendingLine
	inflight int
	resend   bool
	bytes    int
	// marker is the line that counts dropped lines, while it is the
	// first of pending not on its way.
	marker   *jobwatchv1.AppendLogLine
	dropped  int
	partial  [3][]byte // a writer's line without its newline yet, by stream
	closing  bool      // no more lines: send what is held, then stop
	stopped  bool      // the lease is gone: send nothing more
	endCause error     // why the server stopped the batcher, if it did

	wake   chan struct{} // buffered 1: a line was added, or closing
	done   chan struct{} // closed when run returns
	cancel context.CancelFunc
}

type pendingLine struct {
	line *jobwatchv1.AppendLogLine
	at   time.Time // when it was added, on the monotonic clock
}

// startLogBatcher starts a batcher that sends with send, each call
// bounded by callTTL. It runs until close or stop, whatever becomes of
// ctx, which only carries its values.
func startLogBatcher(ctx context.Context, send func(context.Context, []*jobwatchv1.AppendLogLine) (bool, error),
	limit int, ended func(error), backoff Backoff, callTTL time.Duration, log *slog.Logger) *logBatcher {
	b := &logBatcher{
		send: send, limit: max(limit, minLogBufferBytes), ended: ended, backoff: backoff, callTTL: callTTL, log: log,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go b.run(ctx)
	return b
}

// addLines adds text, split at its newlines (a final newline ends the
// last line), as lines of stream.
func (b *logBatcher) addLines(stream jobwatchv1.LogStream, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	text = trimNewline(text)
	for {
		line, rest, more := cutLine(text)
		b.addLocked(stream, line)
		if !more {
			return
		}
		text = rest
	}
}

// write adds p to what a writer of stream wrote: each complete line is
// added, and the rest is held until its newline or close. A line longer
// than maxPartialLine bytes is added in pieces of that size, as
// worker --exec copies a command's stderr, so a writer that never writes
// a newline cannot grow the worker's memory.
func (b *logBatcher) write(stream jobwatchv1.LogStream, p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	buf := b.partial[stream]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		end := i
		if i < 0 {
			end = len(p)
		}
		take := min(maxPartialLine-len(buf), end)
		buf = append(buf, p[:take]...)
		p = p[take:]
		switch {
		case take == i: // the line's end
			p = p[1:]
			b.addLocked(stream, string(bytes.TrimSuffix(buf, []byte("\r"))))
			buf = buf[:0]
		case len(buf) == maxPartialLine:
			// A character cut in two goes whole into the next piece.
			end := jobtype.PieceEnd(buf)
			b.addLocked(stream, string(buf[:end]))
			buf = append(buf[:0], buf[end:]...)
		}
	}
	b.partial[stream] = buf
}

// maxPartialLine is the most of one line a writer's lines are held to.
const maxPartialLine = 64 << 10

// addLocked queues one line; b.mu is held.
func (b *logBatcher) addLocked(stream jobwatchv1.LogStream, text string) {
	if b.closing || b.stopped {
		return
	}
	now := time.Now()
	text = jobtype.CutLogLine(text)
	b.pending = append(b.pending, pendingLine{
		line: &jobwatchv1.AppendLogLine{Text: text, Stream: stream, Time: timestamppb.New(now)},
		at:   now,
	})
	b.bytes += len(text) + logLineOverhead
	if b.bytes > b.limit {
		b.dropOldestLocked()
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// dropOldestLocked drops the oldest lines not on their way until what is
// held fits the limit again, counting them on the marker line that takes
// their place. The newest line always stays.
func (b *logBatcher) dropOldestLocked() {
	at := b.inflight
	if len(b.pending)-at < 2 {
		return // nothing but the newest line is not on its way
	}
	if b.marker == nil || at >= len(b.pending) || b.pending[at].line != b.marker {
		b.marker, b.dropped = &jobwatchv1.AppendLogLine{Time: b.pending[at].line.GetTime()}, 0
		b.pending = append(b.pending, pendingLine{})
		copy(b.pending[at+1:], b.pending[at:])
		b.pending[at] = pendingLine{line: b.marker, at: b.pending[at+1].at}
		b.bytes += logLineOverhead // its text is counted below
	} else {
		b.bytes -= len(b.marker.Text)
	}
	first, n := at+1, 0
	for b.bytes > b.limit && first+n < len(b.pending)-1 {
		b.bytes -= len(b.pending[first+n].line.GetText()) + logLineOverhead
		n++
	}
	b.pending = append(b.pending[:first], b.pending[first+n:]...)
	b.dropped += n
	b.marker.Text = droppedMarker(b.dropped)
	b.bytes += len(b.marker.Text)
}

// run sends lines until close has had them all sent, or stop.
func (b *logBatcher) run(ctx context.Context) {
	defer close(b.done)
	r := &retrier{b: b.backoff}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		batch, wait, over := b.next()
		if over {
			return
		}
		if batch == nil {
			if wait > 0 {
				timer.Reset(wait)
			}
			select {
			case <-b.wake:
			case <-timer.C:
			case <-ctx.Done():
				return
			}
			timer.Stop()
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, b.callTTL)
		cancelled, err := b.send(callCtx, batch)
		cancel()
		switch {
		case ctx.Err() != nil:
			return // stopped
		case err == nil && cancelled:
			b.stop(ErrJobCancelled)
			return
		case err == nil:
			r.reset()
			b.acknowledge()
		case errors.Is(err, ErrLeaseLost):
			b.stop(ErrLeaseLost)
			return
		case refused(err) || !backendTransient(ctx, err):
			// Lines the server will not take as they are: sending them
			// again cannot help, and the job should not fail for its log.
			b.log.Warn("log lines refused; dropped", "lines", len(batch), "err", err)
			b.acknowledge()
		default:
			b.log.Debug("sending log lines failed; retrying", "err", err)
			b.retry()
			select {
			case <-time.After(r.delay()):
			case <-ctx.Done():
				return
			}
		}
	}
}

// next is the batch to send now, or else how long until one is due (0:
// until a line is added); over says the batcher is done.
func (b *logBatcher) next() (batch []*jobwatchv1.AppendLogLine, wait time.Duration, over bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || b.closing && len(b.pending) == 0 {
		return nil, 0, true
	}
	if len(b.pending) == 0 {
		return nil, 0, false
	}
	if b.resend {
		// The same lines as the call whose answer did not come, and no
		// more: had the server taken them, it knows them as the same
		// append (every line carries its time) and adds them once.
		batch = make([]*jobwatchv1.AppendLogLine, b.inflight)
		for i := range batch {
			batch[i] = b.pending[i].line
		}
		return batch, 0, false
	}
	size, n := 0, 0
	for n < len(b.pending) && n < jobtype.MaxLogLinesPerAppend {
		l := len(b.pending[n].line.GetText()) + logLineOverhead
		if n > 0 && size+l > LogFlushBytes {
			break
		}
		size += l
		n++
	}
	// A batch that cannot take the next line is as full as a call gets.
	full := n < len(b.pending) || size >= LogFlushBytes
	if !b.closing && !full {
		if due := time.Until(b.pending[0].at.Add(LogFlushInterval)); due > 0 {
			return nil, due, false
		}
	}
	batch = make([]*jobwatchv1.AppendLogLine, n)
	for i := range n {
		batch[i] = b.pending[i].line
	}
	b.inflight = n
	return batch, 0, false
}

// acknowledge forgets the lines that were on their way.
func (b *logBatcher) acknowledge() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	for _, p := range b.pending[:b.inflight] {
		b.bytes -= len(p.line.GetText()) + logLineOverhead
	}
	b.pending = append(b.pending[:0], b.pending[b.inflight:]...)
	b.inflight, b.resend = 0, false
}

// retry makes the lines on their way the next batch again, alone.
func (b *logBatcher) retry() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.resend = b.inflight > 0
}

// stop drops every line held and ends the batcher, cutting a call in
// flight; a cause (the server's answer: ErrJobCancelled, ErrLeaseLost)
// goes to ended. Only the first stop counts.
func (b *logBatcher) stop(cause error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	first := !b.stopped
	if first {
		b.stopped, b.pending, b.inflight, b.resend, b.bytes, b.endCause = true, nil, 0, false, 0, cause
	}
	b.mu.Unlock()
	b.cancel()
	if first && cause != nil && b.ended != nil {
		b.ended(cause)
	}
}

// close adds the lines writers left without a newline, stops taking
// lines and waits until every line held is sent, the lease is gone or
// ctx ends (then what is left is dropped). It returns why the server
// stopped the batcher (ErrJobCancelled, ErrLeaseLost), if it did.
func (b *logBatcher) close(ctx context.Context) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	for s, buf := range b.partial {
		if len(buf) > 0 {
			b.addLocked(jobwatchv1.LogStream(s), string(buf))
			b.partial[s] = nil
		}
	}
	b.closing = true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		b.mu.Lock()
		n := len(b.pending)
		b.mu.Unlock()
		b.log.Warn("log lines not sent before the job's outcome; dropped", "lines", n)
		b.stop(nil)
		<-b.done
	}
	b.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.endCause
}

// trimNewline drops one final "\n" (or "\r\n") from text.
func trimNewline(text string) string {
	if n := len(text); n > 0 && text[n-1] == '\n' {
		text = text[:n-1]
		if n := len(text); n > 0 && text[n-1] == '\r' {
			text = text[:n-1]
		}
	}
	return text
}

// cutLine is the first line of text and the rest after its newline; more
// says there was a newline.
func cutLine(text string) (line, rest string, more bool) {
	i := strings.IndexByte(text, '\n')
	if i < 0 {
		return text, "", false
	}
	return trimNewline(text[:i+1]), text[i+1:], true
}
