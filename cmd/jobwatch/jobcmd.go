package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// get runs "jobwatch get ID": the job, one field per line. A WAITING
// job's dependencies are shown with their states (the first
// maxDependencyStates of them), so that one can see which it waits for.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var states map[string]string
	return jobCommand(ctx, "get", args, stdout, stderr, func(c *client.Client, ctx context.Context, id string) (*jobwatchv1.Job, error) {
		j, err := c.Get(ctx, id)
		if err == nil && j.GetState() == jobwatchv1.JobState_JOB_STATE_WAITING {
			states = dependencyStates(ctx, c, j.GetAfter())
		}
		return j, err
	}, func(w io.Writer, j *jobwatchv1.Job, asJSON bool) error {
		return printJobWith(w, j, asJSON, states)
	})
}

// maxDependencyStates is how many of a WAITING job's dependencies get
// looks up, one GetJob each.
const maxDependencyStates = 20

// dependencyStates reads the states of the first maxDependencyStates of
// ids: a state's name, or "gone" for a job deleted since; one that could
// not be read is left out.
func dependencyStates(ctx context.Context, c *client.Client, ids []string) map[string]string {
	states := map[string]string{}
	for _, id := range ids[:min(len(ids), maxDependencyStates)] {
		j, err := c.Get(ctx, id)
		switch {
		case err == nil:
			states[id] = stateName(j.GetState())
		case errors.Is(err, client.ErrJobNotFound):
			states[id] = "gone"
		}
	}
	return states
}

// cancel runs "jobwatch cancel ID": the job becomes CANCELLED at once; a
// worker running it learns so from its next heartbeat. With filter flags
// instead of an ID it cancels every active job they match (oneOrMany).
func cancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return oneOrMany(ctx, "cancel", "cancel", args, stdout, stderr, (*client.Client).Cancel, (*client.Client).CancelJobs)
}

// retry runs "jobwatch retry ID": a FAILED, CANCELLED or LOST job is
// QUEUED again under the same id, with a fresh allowance of attempts, or
// WAITING again for the jobs it runs after that have not succeeded,
// which it then says on stderr. With filter flags instead of an ID it
// retries every such job they match.
func retry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return oneOrMany(ctx, "retry", "retry", args, stdout, stderr, func(c *client.Client, ctx context.Context, id string) (*jobwatchv1.Job, error) {
		j, err := c.Retry(ctx, id)
		if j.GetState() == jobwatchv1.JobState_JOB_STATE_WAITING {
			fmt.Fprintf(stderr, "jobwatch: retry: job %s waits again for the jobs it runs after that have not succeeded (jobwatch get %s lists them); retry any that failed\n", id, id)
		}
		return j, err
	}, (*client.Client).RetryJobs)
}

// deleteJob runs "jobwatch delete ID": an ended job is removed at once.
// With filter flags instead of an ID it deletes every ended job they
// match.
func deleteJob(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return oneOrMany(ctx, "delete", "delete", args, stdout, stderr, func(c *client.Client, ctx context.Context, id string) (*jobwatchv1.Job, error) {
		return nil, c.Delete(ctx, id)
	}, (*client.Client).DeleteJobs)
}

// start runs "jobwatch start ID": a PENDING (held) job becomes QUEUED.
func start(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return jobCommand(ctx, "start", args, stdout, stderr, (*client.Client).Start, printOutcome)
}

// jobCommand runs a command that takes one job id: it calls op on the
// server and prints the job it answers with.
func jobCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	op func(*client.Client, context.Context, string) (*jobwatchv1.Job, error),
	print func(io.Writer, *jobwatchv1.Job, bool) error,
) error {
	return actOnJobs(ctx, name, "", args, stdout, stderr, op, print, nil)
}
