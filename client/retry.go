package client

import (
	"context"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// Retry is JobService.RetryJob returning the job, QUEUED again: a
// FAILED, CANCELLED or LOST job runs again with the same id and a fresh
// allowance of attempts; one cancelled while it ran is not handed out
// before the cancelled attempt's lease would have expired (its RunAt),
// so that attempt's handler, told of the cancel at its next heartbeat,
// does not run beside the next. Any other state is a failed_precondition
// *connect.Error; a unique key another active job holds is
// ErrJobAlreadyActive (ActiveJob names that job), and one past the
// tenant's max_queued ErrQuotaExceeded, as for Submit. An unknown job
// (or another tenant's) is ErrJobNotFound.
func (c *Client) Retry(ctx context.Context, id string) (*jobwatchv1.Job, error) {
	resp, err := c.jobs.RetryJob(ctx, &jobwatchv1.RetryJobRequest{JobId: id})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJob(), nil
}

// Delete is JobService.DeleteJob: it removes a terminal job; an active
// one is a failed_precondition *connect.Error (cancel it first).
func (c *Client) Delete(ctx context.Context, id string) error {
	_, err := c.jobs.DeleteJob(ctx, &jobwatchv1.DeleteJobRequest{JobId: id})
	return mapJobError(err)
}
