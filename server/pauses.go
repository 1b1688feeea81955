package server

import (
	"context"
	"errors"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

// PauseQueue pauses a queue on every replica (package jobs, pause.go)
// and answers with its ListQueues row. Admin only (see may). An empty
// or malformed name is invalid_argument; a queue that no rule declares
// and no job is in (nor a pause) is not_found, most likely a typo.
// Pausing a paused queue changes nothing: paused_at and paused_by stay
// the first pause's.
func (h *queueService) PauseQueue(ctx context.Context, req *jobwatchv1.PauseQueueRequest) (*jobwatchv1.PauseQueueResponse, error) {
	if _, err := h.s.engine.Pause(ctx, req.GetQueue(), actor(ctx)); err != nil {
		return nil, h.pauseError(ctx, "pause queue", err)
	}
	row, err := h.queueRow(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.PauseQueueResponse{Queue: row}, nil
}

// ResumeQueue lets a queue hand out claims again, waking the claims
// parked for it on every replica, and answers with its ListQueues row.
// Resuming a queue that is not paused changes nothing (OK); an unknown
// one is not_found, as for PauseQueue.
func (h *queueService) ResumeQueue(ctx context.Context, req *jobwatchv1.ResumeQueueRequest) (*jobwatchv1.ResumeQueueResponse, error) {
	if _, err := h.s.engine.Resume(ctx, req.GetQueue(), actor(ctx)); err != nil {
		return nil, h.pauseError(ctx, "resume queue", err)
	}
	row, err := h.queueRow(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.ResumeQueueResponse{Queue: row}, nil
}

func (h *queueService) pauseError(ctx context.Context, op string, err error) error {
	if errors.Is(err, jobs.ErrUnknownQueue) {
		return connect.NewError(connect.CodeNotFound, err)
	}
	return h.s.toConnectError(ctx, op, err)
}

// queueRow is queue's row as ListQueues answers it, from the most
// queues it lists: a queue just resumed is no longer among the most
// pressing.
func (h *queueService) queueRow(ctx context.Context, queue string) (*jobwatchv1.Queue, error) {
	list, err := h.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{MaxQueues: maxMaxQueues})
	if err != nil {
		return nil, err
	}
	for _, q := range list.GetQueues() {
		if q.GetName() == queue {
			return q, nil
		}
	}
	// Known but idle and not paused (a queue of finished jobs only).
	return &jobwatchv1.Queue{Name: queue, Mode: jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL}, nil
}

// withPauses sets paused, paused_at and paused_by on ListQueues' rows,
// adding a row for a paused queue that has none (no job, no rule), so
// that what an operator paused stays in sight. rows are sorted by name,
// and stay so.
func (s *Server) withPauses(ctx context.Context, rows []*jobwatchv1.Queue) ([]*jobwatchv1.Queue, error) {
	pauses, err := s.engine.Paused(ctx)
	if err != nil {
		return nil, err
	}
	added := false
	for _, p := range pauses {
		i := slices.IndexFunc(rows, func(q *jobwatchv1.Queue) bool { return q.GetName() == p.Queue })
		if i < 0 {
			rows = append(rows, &jobwatchv1.Queue{Name: p.Queue, Mode: jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL})
			i, added = len(rows)-1, true
		}
		rows[i].Paused = true
		rows[i].PausedAt = timestamppb.New(p.PausedAt)
		rows[i].PausedBy = p.PausedBy
	}
	if added {
		slices.SortFunc(rows, func(a, b *jobwatchv1.Queue) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return rows, nil
}

// actor words who makes the call, for the records of operator actions
// (a queue's paused_by, a job history's by) and their log lines:
// auth.DescribeCaller, the one wording of who acted ("ops (admin)",
// "deploy-bot (client, tenant acme)", "anonymous" without a tokens
// file).
func actor(ctx context.Context) string { return auth.DescribeCaller(ctx) }
