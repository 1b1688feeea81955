package server

// The calls of jobs' logs: a worker's AppendJobLogs, a caller's
// GetJobLogs and WatchJobLogs (engine: jobs/logs.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

func (h *workerService) AppendJobLogs(ctx context.Context, req *jobwatchv1.AppendJobLogsRequest) (*jobwatchv1.AppendJobLogsResponse, error) {
	lines := make([]jobtype.LogLine, len(req.GetLines()))
	for i, l := range req.GetLines() {
		stream, ok := logStreamFromWire(l.GetStream())
		if !ok {
			return nil, invalid(fmt.Sprintf("lines[%d].stream", i), fmt.Sprintf("%v is not a log stream", l.GetStream()))
		}
		lines[i] = jobtype.LogLine{Text: l.GetText(), Stream: stream}
		if l.GetTime() != nil {
			if err := l.GetTime().CheckValid(); err != nil {
				return nil, invalid(fmt.Sprintf("lines[%d].time", i), notATime)
			}
			lines[i].Time = l.GetTime().AsTime()
			// A time sent is checked here: the zero time it may be is
			// the engine's "unset".
			if err := h.s.engine.CheckTime(fmt.Sprintf("lines[%d].time", i), lines[i].Time); err != nil {
				return nil, h.s.toConnectError(ctx, "append job logs", err)
			}
		}
	}
	if err := h.s.checkWorkerJob(ctx, "append job logs", req.GetJobId()); err != nil {
		return nil, err
	}
	last, cancelled, err := h.s.engine.AppendLogs(ctx, req.GetJobId(), req.GetLeaseId(), lines)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "append job logs", ofJob(req.GetJobId(), err))
	}
	return &jobwatchv1.AppendJobLogsResponse{LastSeq: last, Cancelled: cancelled}, nil
}

func (h *jobService) GetJobLogs(ctx context.Context, req *jobwatchv1.GetJobLogsRequest) (*jobwatchv1.GetJobLogsResponse, error) {
	if err := checkAfterSeq(req.GetAfterSeq()); err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 {
		return nil, invalid("limit", "must not be negative")
	}
	if err := h.s.checkClientJob(ctx, "get job logs", req.GetJobId()); err != nil {
		return nil, err
	}
	p, err := h.s.engine.Logs(ctx, req.GetJobId(), req.GetAfterSeq(), int(req.GetLimit()))
	if err != nil {
		return nil, h.s.toConnectError(ctx, "get job logs", ofJob(req.GetJobId(), err))
	}
	return &jobwatchv1.GetJobLogsResponse{Lines: logLinesToWire(p.Lines), Gap: logGapToWire(p.Gap), More: p.More, JobEnded: p.JobEnded}, nil
}

func (h *jobService) WatchJobLogs(ctx context.Context, req *jobwatchv1.WatchJobLogsRequest, stream *connect.ServerStream[jobwatchv1.WatchJobLogsResponse]) error {
	s := h.s
	if err := checkAfterSeq(req.GetAfterSeq()); err != nil {
		return err
	}
	deadline, done, err := openJobStream(ctx, s, "watch job logs", req.GetJobId(), stream)
	if err != nil {
		return err
	}
	defer done()
	w := &logWatch{s: s, id: req.GetJobId(), stream: stream, after: req.GetAfterSeq(), deadline: deadline}
	w.admitted, _ = stream.Conn().(*admittedStream) // innermost (codec.go); absent without a send budget
	return s.toConnectError(ctx, "watch job logs", ofJob(req.GetJobId(), w.run(ctx)))
}

// What a WatchJobLogs stream holds while it cannot send is bounded by the
// send budget, and beyond it by one small message: lines it must read
// from the store it reads a page at a time, each page only once the send
// budget has admitted the most the page and its messages can hold
// (catchUp); the engine's watch, which reads pages of its own that
// nothing admits, may send only lines that are all it read and hold too
// little to count, and hands anything larger back to catchUp (sendLive).
// So streams whose clients do not read wait for the budget holding
// nothing, instead of each holding the page it read.
const (
	// logMessageBytes bounds the text of the lines of one message, as
	// the engine's batches are bounded.
	logMessageBytes = 256 << 10
	// logLineWireBytes bounds what a line adds to its message's encoding
	// beside its text (seq, time, stream, attempt and framing take 27
	// bytes for an attempt under 2^21).
	logLineWireBytes = 48
	// logLineHeldBytes is what a line read holds beside its text, until
	// its page is sent: jobtype.LogLine (56 bytes), jobwatchv1.LogLine
	// (80) and its Timestamp (56), and a pointer, with the allocator's
	// rounding.
	logLineHeldBytes = 256
	// logPageHeldBytes is the most a page read holds (its text and
	// lines) and logMessageWireBytes the most one of its messages'
	// encodings take: the page is sent one message at a time.
	logPageHeldBytes    = jobs.MaxLogPageBytes + jobs.MaxLogPage*logLineHeldBytes
	logMessageWireBytes = logMessageBytes + jobs.MaxLogPage*logLineWireBytes
	// liveHeldBytes bounds what the lines the engine's watch hands
	// sendLive hold: under admittedAnswerBytes, which the budget deems
	// too small to count. The engine hands lines it read in batches of
	// 256 KiB of text, so lines that hold less are all it read.
	liveHeldBytes = admittedAnswerBytes
)

// errLogsBehind ends the engine's watch of a log when it hands sendLive
// more lines than it sends: catchUp reads them again, under the budget.
var errLogsBehind = errors.New("watch job logs: behind")

// logWatch is one WatchJobLogs stream.
type logWatch struct {
	s        *Server
	id       string
	stream   *connect.ServerStream[jobwatchv1.WatchJobLogsResponse]
	admitted *admittedStream // nil: no send budget
	deadline time.Time       // the stream's lifetime; zero: none
	after    int64           // the last seq sent (or skipped by a gap)
}

// run catches up with the log, then follows it with the engine's watch,
// and catches up again whenever that hands it more than sendLive sends.
func (w *logWatch) run(ctx context.Context) error {
	for {
		over, err := w.catchUp(ctx)
		if err != nil || over {
			return err
		}
		err = w.s.engine.WatchLogs(ctx, w.id, jobs.LogWatchOptions{
			AfterSeq:  w.after,
			Deadline:  w.deadline,
			Keepalive: w.s.cfg.Keepalive,
			Send:      w.sendLive,
			Ended:     w.ended,
		})
		if !errors.Is(err, errLogsBehind) {
			return err
		}
	}
}

// catchUp sends the lines kept after w.after, reading each page once the
// budget has admitted the most it can hold. over says the stream is
// over: the job ended and its last line is sent (then job_ended too), or
// the stream's lifetime passed.
func (w *logWatch) catchUp(ctx context.Context) (over bool, err error) {
	for {
		if !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
			return true, nil
		}
		var took int64
		if w.admitted != nil {
			if took, err = w.admitted.admitRead(logPageHeldBytes + w.admitted.encodings()*logMessageWireBytes); err != nil {
				return false, err
			}
		}
		p, err := w.s.engine.Logs(ctx, w.id, w.after, jobs.MaxLogPage)
		if err == nil {
			// The page's lines without those read past its byte bound,
			// which its array would keep while it waits.
			err = w.sendPage(slices.Clone(p.Lines), p.Gap, took)
		} else {
			w.give(took)
		}
		switch {
		case err != nil:
			return false, err
		case p.More:
		case p.JobEnded:
			return true, w.ended()
		default:
			return false, nil
		}
	}
}

// sendPage sends a page of lines, and the gap before them, in messages of
// at most logMessageBytes of text, holding took bytes of the budget
// (none: the messages are admitted as they are sent) and keeping of them
// what the page holds.
func (w *logWatch) sendPage(lines []jobtype.LogLine, gap *jobs.LogGap, took int64) error {
	var msgs []*jobwatchv1.WatchJobLogsResponse
	held, encoded := int64(0), 0
	for len(lines) > 0 || gap != nil {
		n, size := 0, 0
		for n < len(lines) && (n == 0 || size+len(lines[n].Text) <= logMessageBytes) {
			size += len(lines[n].Text)
			held += int64(len(lines[n].Text)) + logLineHeldBytes
			n++
		}
		msg := &jobwatchv1.WatchJobLogsResponse{Lines: logLinesToWire(lines[:n]), Gap: logGapToWire(gap)}
		msgs = append(msgs, msg)
		encoded = max(encoded, proto.Size(msg))
		lines, gap = lines[n:], nil
	}
	if w.admitted == nil || took == 0 {
		return w.sendEach(msgs, false)
	}
	if need := held + w.admitted.encodings()*int64(encoded); need < took {
		w.admitted.give(took - need)
		took = need
	}
	defer w.admitted.give(took)
	return w.sendEach(msgs, true)
}

// sendEach sends msgs in order, moving w.after past each: admitted as
// they are sent, or held already (sendHeld).
func (w *logWatch) sendEach(msgs []*jobwatchv1.WatchJobLogsResponse, held bool) error {
	for _, msg := range msgs {
		var err error
		if held {
			err = w.admitted.sendHeld(msg)
		} else {
			err = w.stream.Send(msg)
		}
		if err != nil {
			return err
		}
		if g := msg.GetGap(); g != nil {
			w.after = g.GetResumeFrom() - 1
		}
		if ls := msg.GetLines(); len(ls) > 0 {
			w.after = ls[len(ls)-1].GetSeq()
		}
	}
	return nil
}

// sendLive sends what the engine's watch hands it when it holds less
// than liveHeldBytes, and otherwise leaves it to catchUp: the engine may
// hold more lines it read behind these.
func (w *logWatch) sendLive(lines []jobtype.LogLine, gap *jobs.LogGap) error {
	held := 0
	for _, l := range lines {
		if held += len(l.Text) + logLineHeldBytes; held >= liveHeldBytes {
			return errLogsBehind
		}
	}
	return w.sendEach([]*jobwatchv1.WatchJobLogsResponse{{Lines: logLinesToWire(lines), Gap: logGapToWire(gap)}}, false)
}

// give returns took bytes admitted for a page that is not sent.
func (w *logWatch) give(took int64) {
	if w.admitted != nil {
		w.admitted.give(took)
	}
}

func (w *logWatch) ended() error {
	return w.stream.Send(&jobwatchv1.WatchJobLogsResponse{JobEnded: true})
}

// checkAfterSeq refuses a negative after_seq before the job is looked
// up, so that a bad argument is told as such whether or not the job
// exists (the engine checks it too).
func checkAfterSeq(after int64) error {
	if after < 0 {
		return invalid("after_seq", "must not be negative")
	}
	return nil
}

func logStreamFromWire(s jobwatchv1.LogStream) (jobtype.LogStream, bool) {
	switch s {
	case jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED:
		return jobtype.LogHandler, true
	case jobwatchv1.LogStream_LOG_STREAM_STDOUT:
		return jobtype.LogStdout, true
	case jobwatchv1.LogStream_LOG_STREAM_STDERR:
		return jobtype.LogStderr, true
	}
	return 0, false
}

func logLinesToWire(lines []jobtype.LogLine) []*jobwatchv1.LogLine {
	out := make([]*jobwatchv1.LogLine, len(lines))
	for i, l := range lines {
		out[i] = &jobwatchv1.LogLine{Seq: l.Seq, Time: wire.Timestamp(l.Time), Stream: jobwatchv1.LogStream(l.Stream),
			Attempt: l.Attempt, Text: l.Text}
	}
	return out
}

func logGapToWire(g *jobs.LogGap) *jobwatchv1.LogGap {
	if g == nil {
		return nil
	}
	return &jobwatchv1.LogGap{Skipped: g.Skipped, ResumeFrom: g.ResumeFrom}
}
