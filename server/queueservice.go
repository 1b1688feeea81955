package server

import (
	"context"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

// queueService adapts QueueService to the engine.
type queueService struct{ s *Server }

var _ jobwatchv1connect.QueueServiceHandler = (*queueService)(nil)

// ListQueues reports one row per queue that has QUEUED or RUNNING jobs,
// and "default" always, sorted by name. oldest_queued_age is how long the
// oldest ready job has waited (unset when none waits: a job scheduled for
// later is not waiting).
//
// Queue configuration (serial mode, max_running, alert_after) comes in a
// later issue; until then every queue is reported PARALLEL with
// max_running 0 (no limit), which is how the engine runs them, and
// last_drained_at and alerting stay unset, because without an alert_after
// there is nothing to alert on and nothing records when a queue drained.
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
			MaxRunning: 0,
			Queued:     q.Queued,
			Running:    q.Running,
		}
		if q.Waiting() {
			row.OldestQueuedAge = durationpb.New(q.OldestQueuedAge)
		}
		queues = append(queues, row)
	}
	return &jobwatchv1.ListQueuesResponse{Queues: queues}, nil
}
