package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// get runs "jobwatch get ID": the job, one field per line. A WAITING
// job's dependencies are shown with their states (the first
// maxDependencyStates of them), so that one can see which it waits for.
//
// A QUEUED job is shown with what of its queue holds it back, where the
// token may read the queues (an admin's, or none on a server without
// tokens): "held: queue render runs at most 4 jobs at once, and 4 are
// running".
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var states map[string]string
	held := ""
	return jobCommand(ctx, "get", args, stdout, stderr, func(c *client.Client, ctx context.Context, id string) (*jobwatchv1.Job, error) {
		j, err := c.Get(ctx, id)
		switch {
		case err == nil && j.GetState() == jobwatchv1.JobState_JOB_STATE_WAITING:
			states = dependencyStates(ctx, c, j.GetAfter())
		case err == nil && j.GetState() == jobwatchv1.JobState_JOB_STATE_QUEUED:
			held = queueHold(ctx, c, j)
		}
		return j, err
	}, func(w io.Writer, j *jobwatchv1.Job, asJSON bool) error {
		return printJobWith(w, j, asJSON, states, held)
	})
}

// queueHold is what of its queue holds QUEUED job j back (holdText),
// read with ListQueues; "" when nothing does, or the token may not read
// the queues, or the answer leaves the queue or the job's tenant out.
// Its default bound on queues is enough: a queue that holds jobs back
// (paused, held by its rate, or with bounds, which the configuration
// sets) is among the most pressing it keeps first. Tenants are asked for
// at the most, as the job's may be any of the queue's.
func queueHold(ctx context.Context, c *client.Client, j *jobwatchv1.Job) string {
	resp, err := c.QueueService().ListQueues(ctx, &jobwatchv1.ListQueuesRequest{TenantsPerQueue: 100})
	if err != nil {
		return ""
	}
	for _, q := range resp.GetQueues() {
		if q.GetName() == j.GetQueue() {
			return holdText(q, j.GetTenant(), time.Since(j.GetRunAt().AsTime()))
		}
	}
	return ""
}

// clockMargin is how much longer than a job's own wait its tenant's
// oldest ready job must have waited to count as ahead of it: the two
// waits are read on different clocks (the server's for the tenant's,
// this machine's for the job's), and the job may be that oldest one.
const clockMargin = time.Second

// holdText says what of queue q holds back a QUEUED job of tenant that
// has waited wait since its run_at: paused, held by its rate, running its
// max_running, a pool it uses all in use, running the tenant's
// max_running_per_tenant, or serial and running a job of the tenant, or
// serial with an older job of the tenant queued ahead of it (one no
// worker takes never starts, and holds every later job of its tenant);
// "" when none of these. The page says the same (waitingReason,
// web/src/queues.ts).
func holdText(q *jobwatchv1.Queue, tenant string, wait time.Duration) string {
	name := q.GetName()
	jobs := func(n int32) string {
		if n == 1 {
			return "1 job"
		}
		return fmt.Sprintf("%d jobs", n)
	}
	are := func(n int64) string {
		if n == 1 {
			return "is"
		}
		return "are"
	}
	rate := q.GetRate()
	if q.GetPaused() {
		return fmt.Sprintf("queue %s is paused since %s by %s (jobwatch resume %s)", name, q.GetPausedAt().AsTime().UTC().Format(time.RFC3339), q.GetPausedBy(), name)
	}
	if rate.GetHeldUntil() != nil && !rate.GetPerTenant() {
		return fmt.Sprintf("queue %s is held by its rate (%s)", name, rateCell(rate))
	}
	if bound := q.GetMaxRunning(); bound > 0 && q.GetRunning() >= int64(bound) {
		return fmt.Sprintf("queue %s runs at most %s at once, and %d %s running", name, jobs(bound), q.GetRunning(), are(q.GetRunning()))
	}
	for _, p := range q.GetPools() {
		if p.GetUnits() > 0 && p.GetInUse() >= int64(p.GetUnits()) {
			return fmt.Sprintf("each job of queue %s takes a unit of pool %s, and all %d are in use", name, p.GetName(), p.GetUnits())
		}
	}
	for _, d := range q.GetTenants() {
		if d.GetTenant() != tenant {
			continue
		}
		if bound := q.GetMaxRunningPerTenant(); bound > 0 && d.GetRunning() >= int64(bound) {
			return fmt.Sprintf("queue %s runs at most %s of a tenant at once, and %d of tenant %s's %s running", name, jobs(bound), d.GetRunning(), tenant, are(d.GetRunning()))
		}
		if q.GetMode() == jobwatchv1.QueueMode_QUEUE_MODE_SERIAL && d.GetRunning() > 0 {
			return fmt.Sprintf("queue %s is serial, and a job of tenant %s is running", name, tenant)
		}
		if age := d.GetOldestQueuedAge(); q.GetMode() == jobwatchv1.QueueMode_QUEUE_MODE_SERIAL && age != nil && age.AsDuration() > wait+clockMargin {
			return fmt.Sprintf("queue %s is serial, and an older job of tenant %s is queued ahead of it (waiting %s): it runs first; "+
				"a job no worker takes holds the tenant's later ones (cancel it, or run a worker of its kind)", name, tenant, waited(age))
		}
	}
	if rate.GetHeldUntil() != nil {
		return fmt.Sprintf("perhaps the rate of queue %s, which holds some tenant (%s)", name, rateCell(rate))
	}
	return ""
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
