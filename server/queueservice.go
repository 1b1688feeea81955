package server

import (
	"context"

	jobwatchv1 "jobwatch/gen/jobwatch/v1"
	"jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"jobwatch/store"
)

// queueService adapts QueueService to the engine.
type queueService struct{ s *Server }

var _ jobwatchv1connect.QueueServiceHandler = (*queueService)(nil)

// ListQueues reports the one "default" queue, counted over all jobs, until
// configured queues exist in the engine.
func (h *queueService) ListQueues(ctx context.Context, _ *jobwatchv1.ListQueuesRequest) (*jobwatchv1.ListQueuesResponse, error) {
	counts, err := h.s.engine.CountByState(ctx)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list queues", err)
	}
	return &jobwatchv1.ListQueuesResponse{Queues: []*jobwatchv1.Queue{{
		Name:    "default",
		Mode:    jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL,
		Queued:  counts[store.Queued],
		Running: counts[store.Running],
	}}}, nil
}
