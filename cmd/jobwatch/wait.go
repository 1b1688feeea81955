package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

const waitUsage = `Usage: jobwatch wait ID [ID...] [flags]
       jobwatch wait --batch NAME [--tenant TENANT] [flags]

Waits until the job ends, prints it and exits with its outcome, so a shell
script can branch on it. It keeps waiting across server restarts and
dropped connections (saying so on stderr) until --timeout. A job still
QUEUED and never started 10 s into the wait gets one line on stderr asking
whether a worker runs its kind, unless another job of the kind is running
(for several jobs or a batch, one line for those of 20 of them still
QUEUED: the first IDs, a batch's newest); the wait goes on.

With several IDs, or --batch, it waits until all the jobs have ended (with
--any, until the first has), any number of them (in WaitJobs calls of up
to 1,000), and prints one line per ended job in the order given (a
batch's: submitted), or with --json one JSON array of them. A batch is the jobs that hold its label when the wait
starts; jobs submitted to it later are not waited for.

` + exitCodesHelp + `

Flags:
`

// wait runs "jobwatch wait ID [ID...]" and "jobwatch wait --batch NAME".
func wait(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var cf clientFlags
	defer func() { err = cf.timeoutUnanswered(err) }()
	var timeout time.Duration
	var batch, tenant string
	var anyEnded bool
	fs := newFlagSet("wait", stderr)
	cf.register(fs)
	fs.Lookup("json").Usage = "print the ended job as JSON; with several IDs or --batch, one JSON array of the ended jobs"
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 124); 0 waits as long as it takes")
	fs.StringVar(&batch, "batch", "", "wait for the jobs of this batch `name` (jobwatch submit --batch) instead of IDs")
	fs.StringVar(&tenant, "tenant", "", "the batch's `tenant` (default: the server's \"default\"); with IDs, only jobs of this tenant")
	fs.BoolVar(&anyEnded, "any", false, "return once any one of the jobs has ended, not all")
	fs.Usage = func() { fmt.Fprint(stderr, waitUsage); fs.PrintDefaults() }
	ids, err := parseAnyArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case batch != "" && len(ids) > 0:
		return usageError{fmt.Sprintf("wait takes IDs or --batch, not both (got --batch %q and %q)", batch, ids)}
	case batch == "" && len(ids) == 0:
		return usageError{"usage: jobwatch wait ID [ID...] [flags], or jobwatch wait --batch NAME [flags]"}
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()
	if timeout > 0 {
		cause := errTimeout
		if len(ids) != 1 {
			cause = errTimeoutMany
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, cause)
		defer cancel()
	}
	// One job (with --any or not) is printed as it always was, not in a
	// list; without --tenant, waited for with WaitJob.
	single := len(ids) == 1
	if single {
		stop := hintWhileQueued(ctx, c, ids[0], stderr)
		defer stop()
	} else {
		stop := hintWhileQueuedMany(ctx, c, ids, tenant, batch, stderr)
		defer stop()
	}
	if single && tenant == "" {
		job, err := c.WaitForJob(ctx, ids[0])
		if j := withoutValues(err, "wait", true, stderr); j != nil {
			job, err = j, nil // its outcome is known all the same
		}
		if err != nil {
			return jobCallError("wait", ids[0], err)
		}
		if err := printOutcome(stdout, job, cf.json); err != nil {
			return err
		}
		return outcome(job)
	}

	req := &jobwatchv1.WaitJobsRequest{JobIds: ids, Batch: batch, Tenant: tenant, View: jobwatchv1.JobView_JOB_VIEW_FULL}
	if anyEnded {
		req.Mode = jobwatchv1.WaitMode_WAIT_MODE_ANY
	}
	resp, err := waitMany(ctx, c, req)
	if errors.Is(err, client.ErrJobNotFound) || errors.Is(err, client.ErrJobNotStarted) {
		// "wait: not_found: ID: job not found", as for one id, not the
		// client's "wait: wait for jobs: ID: job not found"; a job not
		// started likewise, with failed_precondition.
		msg := strings.TrimPrefix(err.Error(), "wait for jobs: ")
		if id, ok := strings.CutSuffix(msg, ": "+client.ErrJobNotFound.Error()); ok && !strings.ContainsAny(id, " :") {
			return notFoundError("wait", id)
		}
		if id, ok := strings.CutSuffix(msg, ": "+client.ErrJobNotStarted.Error()); ok && !strings.ContainsAny(id, " :") {
			return notStartedError("wait", id)
		}
		if errors.Is(err, client.ErrJobNotFound) {
			return fmt.Errorf("wait: %s: %s", connect.CodeNotFound, msg)
		}
		return fmt.Errorf("wait: %s: %s", connect.CodeFailedPrecondition, msg)
	}
	if err != nil {
		return callError("wait", err)
	}
	if single && len(resp.GetJobs()) == 1 {
		job := resp.GetJobs()[0]
		if err := printOutcome(stdout, job, cf.json); err != nil {
			return err
		}
		return outcome(job)
	}
	if err := printOutcomes(stdout, resp.GetJobs(), cf.json); err != nil {
		return err
	}
	return outcomes(resp.GetJobs())
}

// waitMany is WaitForJobs for any number of jobs: more ids than one
// WaitJobs takes (client.MaxBatchJobs), or a batch that holds more, are
// waited for a WaitJobs of at most that many at a time, one after the
// other for all of them, side by side for the first (WAIT_MODE_ANY). A
// batch is its jobs when the wait starts, in submission order, as
// WaitJobs reads it.
func waitMany(ctx context.Context, c *client.Client, req *jobwatchv1.WaitJobsRequest) (*jobwatchv1.WaitJobsResponse, error) {
	ids := req.GetJobIds()
	if len(ids) <= client.MaxBatchJobs {
		resp, err := c.WaitForJobs(ctx, req)
		if req.GetBatch() == "" || connect.CodeOf(err) != connect.CodeInvalidArgument {
			return resp, err
		}
		// Refused: by its size when the batch holds more jobs than one
		// WaitJobs takes, else for what the refusal says.
		all, lerr := batchIDs(ctx, c, req.GetTenant(), req.GetBatch())
		if lerr != nil || len(all) <= client.MaxBatchJobs {
			return nil, err
		}
		ids = all
	}
	var chunks []*jobwatchv1.WaitJobsRequest
	for chunk := range slices.Chunk(ids, client.MaxBatchJobs) {
		chunks = append(chunks, &jobwatchv1.WaitJobsRequest{JobIds: chunk, Tenant: req.GetTenant(), Mode: req.GetMode(), View: req.GetView()})
	}
	if req.GetMode() != jobwatchv1.WaitMode_WAIT_MODE_ANY {
		all := &jobwatchv1.WaitJobsResponse{}
		for _, chunk := range chunks {
			resp, err := c.WaitForJobs(ctx, chunk)
			if err != nil {
				return nil, err
			}
			all.Jobs = append(all.Jobs, resp.GetJobs()...)
		}
		return all, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		resp *jobwatchv1.WaitJobsResponse
		err  error
	}
	answers := make(chan answer, len(chunks))
	for _, chunk := range chunks {
		go func() {
			resp, err := c.WaitForJobs(ctx, chunk)
			answers <- answer{resp, err}
		}()
	}
	a := <-answers // the first to end, or the first refusal
	return a.resp, a.err
}

// batchIDs lists the ids of a batch's jobs in submission order.
func batchIDs(ctx context.Context, c *client.Client, tenant, batch string) ([]string, error) {
	var ids []string
	req := &jobwatchv1.ListJobsRequest{Tenant: tenant, Batch: batch, PageSize: 500}
	for {
		resp, err := c.JobService().ListJobs(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, j := range resp.GetJobs() {
			ids = append(ids, j.GetId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	slices.Reverse(ids) // ListJobs answers newest first
	return ids, nil
}

// queuedHintAfter is how long a wait goes on, its jobs QUEUED and never
// started, before hintWhileQueued says that perhaps no worker runs their
// kind; tests shorten it.
var queuedHintAfter = 10 * time.Second

// hintWhileQueued says once on stderr, when the wait for job id has gone
// on for queuedHintAfter and the job is ready, QUEUED and was never
// claimed, that it waits for a worker of its kind and where to see what
// else holds it: a kind that no worker runs (a typo, a worker not
// started) otherwise waits in silence for ever. It is a hint, not an
// error: the wait goes on. A job not ready yet (run_at ahead, or WAITING
// for the jobs it runs after) is looked at again later; one that has
// started never is, and nor is one whose kind a worker runs, busy with
// another job of it. stop ends the looking, and returns once nothing
// more will be written; call it when the wait is done.
func hintWhileQueued(ctx context.Context, c *client.Client, id string, stderr io.Writer) (stop func()) {
	return hintQueued(ctx, c, stderr, func(ctx context.Context) ([]*jobwatchv1.Job, error) {
		j, err := c.Get(ctx, id)
		return []*jobwatchv1.Job{j}, err
	})
}

// hintedJobs bounds how many of a wait's many jobs hintWhileQueuedMany
// looks at: the first ids given, or a batch's newest QUEUED jobs.
const hintedJobs = 20

// hintWhileQueuedMany is hintWhileQueued for a wait of several jobs, or
// of a batch: it looks at hintedJobs of them (the first ids; a batch's
// newest QUEUED ones, and as many of those a worker took) and says once
// how many of those no worker has taken, and their kinds, leaving out
// the kinds of which a job looked at has started, or a job of the
// tenant is running: a worker runs those, and the jobs wait their turn.
func hintWhileQueuedMany(ctx context.Context, c *client.Client, ids []string, tenant, batch string, stderr io.Writer) (stop func()) {
	return hintQueued(ctx, c, stderr, func(ctx context.Context) ([]*jobwatchv1.Job, error) {
		if batch != "" {
			var jobs []*jobwatchv1.Job
			for _, states := range [][]jobwatchv1.JobState{{jobwatchv1.JobState_JOB_STATE_QUEUED}, {jobwatchv1.JobState_JOB_STATE_RUNNING,
				jobwatchv1.JobState_JOB_STATE_SUCCEEDED, jobwatchv1.JobState_JOB_STATE_FAILED, jobwatchv1.JobState_JOB_STATE_LOST}} {
				resp, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: tenant, Batch: batch,
					States: states, PageSize: hintedJobs})
				if err != nil {
					return nil, err
				}
				jobs = append(jobs, resp.GetJobs()...)
			}
			return jobs, nil
		}
		var jobs []*jobwatchv1.Job
		for _, id := range ids[:min(len(ids), hintedJobs)] {
			j, err := c.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, j)
		}
		return jobs, nil
	})
}

// hintQueued runs the looking of hintWhileQueued and hintWhileQueuedMany,
// with look reading the jobs to look at.
func hintQueued(ctx context.Context, c *client.Client, stderr io.Writer, look func(context.Context) ([]*jobwatchv1.Job, error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := queuedHintAfter
		for {
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			next = queuedHintAfter
			lookCtx, cancelLook := context.WithTimeout(ctx, 5*time.Second)
			jobs, err := look(lookCtx)
			cancelLook()
			if err != nil {
				if _, _, refused := refusal(err); refused {
					return // the wait says so
				}
				continue // unreachable for now: the wait's retries say so
			}
			var (
				stuck []*jobwatchv1.Job
				run   []string // kinds of which a job has started
			)
			for _, job := range jobs {
				if job.GetStartedAt() != nil && !slices.Contains(run, job.GetKind()) {
					run = append(run, job.GetKind())
				}
			}
			later := false
			soonest := time.Duration(-1) // until the first run_at ahead
			for _, job := range jobs {
				state := job.GetState()
				switch {
				case job.GetStartedAt() != nil || (state != jobwatchv1.JobState_JOB_STATE_QUEUED && state != jobwatchv1.JobState_JOB_STATE_WAITING):
					// a worker took it, or it ended
				case state == jobwatchv1.JobState_JOB_STATE_WAITING, slices.Contains(run, job.GetKind()):
					later = true // not ready yet, or its kind's worker is busy
				case job.GetRunAt() != nil && time.Until(job.GetRunAt().AsTime()) > 0:
					later = true
					if u := time.Until(job.GetRunAt().AsTime()); soonest < 0 || u < soonest {
						soonest = u
					}
				default:
					stuck = append(stuck, job)
				}
			}
			askCtx, cancelAsk := context.WithTimeout(ctx, 5*time.Second)
			busy := busyKinds(askCtx, c, stuck)
			cancelAsk()
			if ctx.Err() != nil {
				// The wait ended while the hint asked: an ask cut by
				// that is no answer, and the hint no longer helps.
				return
			}
			if len(busy) > 0 {
				stuck = slices.DeleteFunc(stuck, func(j *jobwatchv1.Job) bool { return slices.Contains(busy, j.GetTenant()+"\x00"+j.GetKind()) })
				later = true // their worker is busy: look again
			}
			if len(stuck) == 0 {
				if later {
					if soonest >= 0 {
						next += soonest
					}
					continue
				}
				return
			}
			fmt.Fprintln(stderr, queuedHint(stuck, len(jobs)))
			return
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// busyKinds is which of the stuck jobs' kinds a worker runs, busy with
// another job of the kind and tenant (RUNNING), as "tenant\x00kind": those
// jobs wait their turn. A kind it cannot ask about counts as not busy.
func busyKinds(ctx context.Context, c *client.Client, stuck []*jobwatchv1.Job) []string {
	var asked, busy []string
	for _, j := range stuck {
		key := j.GetTenant() + "\x00" + j.GetKind()
		if slices.Contains(asked, key) {
			continue
		}
		asked = append(asked, key)
		resp, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: j.GetTenant(), Kind: j.GetKind(),
			States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_RUNNING}, PageSize: 1, View: jobwatchv1.JobView_JOB_VIEW_SUMMARY})
		if err == nil && len(resp.GetJobs()) > 0 {
			busy = append(busy, key)
		}
	}
	return busy
}

// queuedHint is the hint of hintQueued about the jobs stuck, of the
// looked jobs looked at.
func queuedHint(stuck []*jobwatchv1.Job, looked int) string {
	if looked == 1 {
		job := stuck[0]
		id := job.GetId()
		return fmt.Sprintf("jobwatch: %s is still QUEUED after %v (kind %s, queue %s): does a worker run kind %s? "+
			"\"jobwatch get %s\" shows what holds a queued job; still waiting",
			id, queuedHintAfter, job.GetKind(), job.GetQueue(), job.GetKind(), id)
	}
	var kinds, queues []string
	for _, j := range stuck {
		if !slices.Contains(kinds, j.GetKind()) {
			kinds = append(kinds, j.GetKind())
		}
		if !slices.Contains(queues, j.GetQueue()) {
			queues = append(queues, j.GetQueue())
		}
	}
	return fmt.Sprintf("jobwatch: %d of the %d jobs looked at are still QUEUED after %v, never started (kinds %s; queues %s): "+
		"does a worker run those kinds? \"jobwatch get %s\" shows what holds a queued job; still waiting",
		len(stuck), looked, queuedHintAfter, strings.Join(kinds, ", "), strings.Join(queues, ", "), stuck[0].GetId())
}

var (
	errTimeout     = errors.New("--timeout passed before the job ended")
	errTimeoutMany = errors.New("--timeout passed before the jobs ended")
)

// timedOut reports whether err is a command's --timeout passing while the
// server answered (exit 124), not while it could not be reached (1).
func timedOut(err error) bool {
	return (errors.Is(err, errTimeout) || errors.Is(err, errTimeoutMany)) && client.LastTry(err) == nil
}

// printOutcomes prints ended jobs: a summary line each, or one JSON array.
func printOutcomes(w io.Writer, jobs []*jobwatchv1.Job, asJSON bool) error {
	if !asJSON {
		for _, j := range jobs {
			if _, err := fmt.Fprintln(w, summary(j)); err != nil {
				return err
			}
		}
		return nil
	}
	b := []byte{'['}
	for i, j := range jobs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = (protojson.MarshalOptions{}).MarshalAppend(b, j); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%s]\n", b)
	return err
}

// outcomes is the exit status for several ended jobs: that of the first
// that did not succeed, or nil if every one did.
func outcomes(jobs []*jobwatchv1.Job) error {
	for _, j := range jobs {
		if err := outcome(j); err != nil {
			return err
		}
	}
	return nil
}
