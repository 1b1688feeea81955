package server

// The calls of jobs' logs: a worker's AppendJobLogs, a caller's
// GetJobLogs and WatchJobLogs (engine: jobs/logs.go).

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

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
	err = s.engine.WatchLogs(ctx, req.GetJobId(), jobs.LogWatchOptions{
		AfterSeq:  req.GetAfterSeq(),
		Deadline:  deadline,
		Keepalive: s.cfg.Keepalive,
		Send: func(lines []jobtype.LogLine, gap *jobs.LogGap) error {
			return stream.Send(&jobwatchv1.WatchJobLogsResponse{Lines: logLinesToWire(lines), Gap: logGapToWire(gap)})
		},
		Ended: func() error {
			return stream.Send(&jobwatchv1.WatchJobLogsResponse{JobEnded: true})
		},
	})
	return s.toConnectError(ctx, "watch job logs", ofJob(req.GetJobId(), err))
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
