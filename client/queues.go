package client

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// ErrQueueNotFound is PauseQueue's and ResumeQueue's error for a queue
// the server does not know: no rule declares it and no job is in it.
var ErrQueueNotFound = errors.New("queue not found")

// PauseQueue is QueueService.PauseQueue returning the queue's row: the
// queue hands out no claims, on any replica, until ResumeQueue; jobs are
// still accepted and running ones finish. Pausing a paused queue changes
// nothing (paused_at and paused_by stay the first pause's). Admin only:
// another token is a permission_denied *connect.Error. An unknown queue
// is ErrQueueNotFound.
func (c *Client) PauseQueue(ctx context.Context, queue string) (*jobwatchv1.Queue, error) {
	resp, err := c.queues.PauseQueue(ctx, &jobwatchv1.PauseQueueRequest{Queue: queue})
	if err != nil {
		return nil, mapQueueError(err)
	}
	return resp.GetQueue(), nil
}

// ResumeQueue is QueueService.ResumeQueue returning the queue's row: the
// queue hands out claims again, and the claims parked for it wake.
// Resuming a queue that is not paused changes nothing. Admin only; an
// unknown queue is ErrQueueNotFound.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (*jobwatchv1.Queue, error) {
	resp, err := c.queues.ResumeQueue(ctx, &jobwatchv1.ResumeQueueRequest{Queue: queue})
	if err != nil {
		return nil, mapQueueError(err)
	}
	return resp.GetQueue(), nil
}

// ListQueues is QueueService.ListQueues: every queue with unfinished
// jobs, declared by the configuration, or paused, and the default
// queue, sorted by name. Admin only.
func (c *Client) ListQueues(ctx context.Context) ([]*jobwatchv1.Queue, error) {
	resp, err := c.queues.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		return nil, err
	}
	return resp.GetQueues(), nil
}

func mapQueueError(err error) error {
	if connect.CodeOf(err) == connect.CodeNotFound {
		return asSentinel(ErrQueueNotFound, err)
	}
	return err
}
