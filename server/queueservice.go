package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

// queueService adapts QueueService to the engine.
type queueService struct{ s *Server }

var _ jobwatchv1connect.QueueServiceHandler = (*queueService)(nil)

// ListQueues reports one row per queue that has QUEUED or RUNNING jobs,
// per queue the rules declare, and "default" always, sorted by name.
// oldest_queued_age is how long the oldest ready job has waited (unset
// when none waits: a job scheduled for later is not waiting).
//
// last_drained_at, alerting and alerting_since are kept for queues with
// an alert_after only (see package jobs, alerts.go): last_drained_at is
// now for an idle queue, the last drain the sweep saw for a busy one, and
// unset when none was ever seen; alerting_since is when the alert began
// (the last drain, or when this server began watching a queue never seen
// drained, plus alert_after), set only while alerting. All are unset for
// queues without alert_after, and so is alert_after.
//
// mode, max_running and pools are the queue's claim rules from the
// configuration file: a queue it does not declare is PARALLEL with
// max_running 0 (no limit) and no pools.
//
// depth_history is the queue's depth over the last 15 minutes as this
// server sampled it (one sample per depth_interval, kept in memory: see
// package jobs, depth.go), and last its depth in this answer.
func (h *queueService) ListQueues(ctx context.Context, _ *jobwatchv1.ListQueuesRequest) (*jobwatchv1.ListQueuesResponse, error) {
	stats, err := h.s.engine.QueueStats(ctx)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list queues", err)
	}
	queues := make([]*jobwatchv1.Queue, 0, len(stats))
	for _, q := range stats {
		row := &jobwatchv1.Queue{
			Name:       q.Name,
			Mode:       jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL,
			MaxRunning: int32(q.MaxRunning),
			Queued:     q.Queued,
			Running:    q.Running,
		}
		if q.Serial {
			row.Mode = jobwatchv1.QueueMode_QUEUE_MODE_SERIAL
		}
		for _, p := range q.Pools {
			row.Pools = append(row.Pools, &jobwatchv1.PoolUse{Name: p.Name, Units: int32(p.Units), InUse: p.InUse})
		}
		if q.Waiting() {
			row.OldestQueuedAge = durationpb.New(q.OldestQueuedAge)
		}
		if q.AlertAfter > 0 {
			row.AlertAfter = durationpb.New(q.AlertAfter)
		}
		if !q.LastDrainedAt.IsZero() {
			row.LastDrainedAt = timestamppb.New(q.LastDrainedAt)
		}
		row.Alerting = q.Alerting
		if q.Alerting {
			row.AlertingSince = timestamppb.New(q.AlertingSince)
		}
		row.DepthHistory = make([]*jobwatchv1.QueueDepth, 0, len(q.DepthHistory))
		for _, d := range q.DepthHistory {
			row.DepthHistory = append(row.DepthHistory, &jobwatchv1.QueueDepth{At: timestamppb.New(d.At), Queued: d.Queued, Running: d.Running})
		}
		queues = append(queues, row)
	}
	return &jobwatchv1.ListQueuesResponse{
		Queues:        queues,
		DepthInterval: durationpb.New(h.s.engine.Config().DepthInterval),
	}, nil
}

// ListSchedules is being built (issue 8): until then it says so.
func (h *queueService) ListSchedules(context.Context, *jobwatchv1.ListSchedulesRequest) (*jobwatchv1.ListSchedulesResponse, error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("schedules are not supported yet"))
}
