package client

// Many jobs at once: submitting them in one commit (SubmitJobs), waiting
// for all or any of them (WaitForJobs), and following a tenant's or a
// batch's jobs on one stream (WatchJobs).

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// MaxBatchJobs is the most jobs one SubmitJobs creates and one WaitJobs
// waits for (the server's limit).
const MaxBatchJobs = jobtype.MaxBatchJobs

// SubmitJobs is JobService.SubmitJobs returning the jobs created, in the
// order of reqs: 1 to MaxBatchJobs jobs of one tenant, created in one
// commit, all of them or none. Each request is what Submit takes, without
// Wait (wait for the jobs with WaitForJobs); give them the same Batch to
// wait for them, list or watch them by that label. A refusal names the
// job it is about as jobs[i] in its message (an invalid_argument
// *connect.Error, or ErrJobAlreadyActive, as for Submit), and then no
// job was created; a batch that would take the tenant past its
// max_queued is ErrQuotaExceeded, and none was created either.
//
// It is named after the call it makes, as RetryJobs and CancelJobs are,
// so the Go client, the wire and the docs say one word for it.
func (c *Client) SubmitJobs(ctx context.Context, reqs []*jobwatchv1.SubmitJobRequest) ([]*jobwatchv1.Job, error) {
	resp, err := c.jobs.SubmitJobs(ctx, &jobwatchv1.SubmitJobsRequest{Jobs: reqs})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJobs(), nil
}

// WaitForJobs waits for several jobs as WaitForJob waits for one. req
// names up to MaxBatchJobs jobs by JobIds, or a Batch (of Tenant), and
// its Mode says until when: ALL (also UNSPECIFIED) until every job has
// ended, ANY until one has. It has no deadline of its own, so bound it
// with ctx. It loops on WaitJobs over the long-call transport: after an
// answer at the server's cap that does not meet the mode yet (ALL: jobs
// still unfinished; ANY: none ended) it asks again at once, for the
// unfinished jobs only, and it retries transient failures (the server
// restarting, a dropped connection) with backoff.
//
// The answer is one WaitJobsResponse, as if the server had waited that
// long. With ALL it holds every job, ended, in the order asked (JobIds, a
// repeated id once) or submitted (Batch), and no UnfinishedJobIds. With
// ANY it holds the jobs that had ended when the server answered, and the
// ids of the others, in the same order. A batch's jobs are those its
// first answer names (the batch as the server found it when that call
// started): jobs submitted to the batch later are not waited for. A job
// deleted before an answer showed it ended (only an ended job can be
// deleted) counts as ended, as the server counts it, and is in neither
// list. With view FULL each answer carries payloads
// and results up to the server's bound (8 MiB); jobs past it come as
// summaries (read them with Get).
//
// A PENDING job is ErrJobNotStarted and an unknown one (or another
// tenant's) ErrJobNotFound, each named in the error; a batch that holds
// no job is ErrJobNotFound too. Any other refusal (more than MaxBatchJobs
// jobs, ids and a batch together) is returned as it is.
func (c *Client) WaitForJobs(ctx context.Context, req *jobwatchv1.WaitJobsRequest) (*jobwatchv1.WaitJobsResponse, error) {
	r := c.retrier()
	anyEnded := req.GetMode() == jobwatchv1.WaitMode_WAIT_MODE_ANY
	ask := req
	// order is the jobs waited for, in the order of the answer: known at
	// once for ids, from the first answer for a batch.
	var order []string
	if len(req.GetJobIds()) > 0 {
		order = distinct(req.GetJobIds())
	}
	asked := len(order) // jobs in ask; 0 for a batch
	ended := map[string]*jobwatchv1.Job{}
	for {
		start := time.Now()
		callCtx, call := connect.NewClientContext(ctx)
		resp, err := c.longJobs.WaitJobs(callCtx, ask)
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if id, ok := deletedSince(ask, req, err); ok {
				// It ended and was deleted between two asks: within one,
				// the server counts such a job ended, in neither list.
				rest := slices.DeleteFunc(slices.Clone(ask.GetJobIds()), func(x string) bool { return x == id })
				if anyEnded {
					return &jobwatchv1.WaitJobsResponse{UnfinishedJobIds: rest}, nil
				}
				if len(rest) == 0 {
					return endedInOrder(order, ended), nil
				}
				ask = &jobwatchv1.WaitJobsRequest{JobIds: rest, Tenant: req.GetTenant(), Mode: req.GetMode(), View: req.GetView()}
				asked = len(rest)
				continue
			}
			if err := waitJobsError(ask.GetBatch(), err); err != nil {
				return nil, err
			}
			r.failedAfter(start)
			if err := r.wait(ctx, err); err != nil {
				return nil, err
			}
			continue
		}
		first := ask == req
		unfinished := resp.GetUnfinishedJobIds()
		switch {
		// A job deleted meanwhile is in neither list: it ended.
		case anyEnded && (len(resp.GetJobs()) > 0 || len(resp.GetJobs())+len(unfinished) < asked):
			return resp, nil
		case !anyEnded && len(unfinished) == 0 && first:
			return resp, nil
		}
		for _, j := range resp.GetJobs() {
			ended[j.GetId()] = j
		}
		if !anyEnded && len(unfinished) == 0 {
			return endedInOrder(order, ended), nil
		}
		for order == nil {
			order, err = c.batchOrder(ctx, req.GetTenant(), req.GetBatch(), resp)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if !transient(ctx, err) {
				return nil, fmt.Errorf("wait for jobs: list batch %q: %w", req.GetBatch(), mapJobError(err))
			}
			if err := r.wait(ctx, err); err != nil {
				return nil, err
			}
		}
		ask = &jobwatchv1.WaitJobsRequest{JobIds: unfinished, Tenant: req.GetTenant(), Mode: req.GetMode(), View: req.GetView()}
		asked = len(unfinished)
		if parkedFull(call.ResponseHeader()) {
			if err := r.wait(ctx, errParkedFull); err != nil {
				return nil, err
			}
			continue
		}
		if time.Since(start) >= minPark || cutShort(ctx, start) {
			r.reset()
			continue
		}
		// A server answers "not yet" without waiting only while it shuts
		// down or its parked calls are full; asking again at once would
		// spin until it waits again.
		if err := r.wait(ctx, errNotParked); err != nil {
			return nil, err
		}
	}
}

// endedInOrder is the answer of a wait for all: the jobs of order that
// ended, in that order (those deleted meanwhile are in neither list).
func endedInOrder(order []string, ended map[string]*jobwatchv1.Job) *jobwatchv1.WaitJobsResponse {
	all := &jobwatchv1.WaitJobsResponse{}
	for _, id := range order {
		if j, ok := ended[id]; ok {
			all.Jobs = append(all.Jobs, j)
		}
	}
	return all
}

// deletedSince reports the job of ask that err says is not found, when
// ask is not the first ask of req: a job WaitForJobs heard was there,
// deleted since (the server names it: "<id>: job not found").
func deletedSince(ask, req *jobwatchv1.WaitJobsRequest, err error) (string, bool) {
	if ask == req || connect.CodeOf(err) != connect.CodeNotFound {
		return "", false
	}
	id, ok := strings.CutSuffix(connectMessage(err), ": "+ErrJobNotFound.Error())
	return id, ok && slices.Contains(ask.GetJobIds(), id)
}

// distinct is ids without repeats, in order.
func distinct(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// batchOrder is the jobs of a batch's first WaitJobs answer in the order
// they were submitted. The answer lists the ended jobs and the others
// each in that order, but not how the two lists interleave; ListJobs of
// the batch (newest first) does. Jobs submitted to the batch since are
// left out, and so is a job deleted since (it counts as ended).
func (c *Client) batchOrder(ctx context.Context, tenant, batch string, first *jobwatchv1.WaitJobsResponse) ([]string, error) {
	if len(first.GetJobs()) == 0 {
		return first.GetUnfinishedJobIds(), nil
	}
	want := make(map[string]bool, len(first.GetJobs())+len(first.GetUnfinishedJobIds()))
	for _, j := range first.GetJobs() {
		want[j.GetId()] = true
	}
	for _, id := range first.GetUnfinishedJobIds() {
		want[id] = true
	}
	var newestFirst []string
	req := &jobwatchv1.ListJobsRequest{Tenant: tenant, Batch: batch, PageSize: MaxBatchJobs}
	for len(newestFirst) < len(want) {
		resp, err := c.jobs.ListJobs(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, j := range resp.GetJobs() {
			if want[j.GetId()] {
				newestFirst = append(newestFirst, j.GetId())
			}
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	slices.Reverse(newestFirst)
	return newestFirst, nil
}

// waitJobsError is the error WaitForJobs returns for err, or nil when err
// is transient and the call should be retried. batch is the request's.
func waitJobsError(batch string, err error) error {
	var sentinel error
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition:
		sentinel = ErrJobNotStarted
	case connect.CodeNotFound:
		sentinel = ErrJobNotFound
	default:
		if transient(context.Background(), err) {
			return nil
		}
		return fmt.Errorf("wait for jobs: %w", err)
	}
	// The server names the job: "j_…: job not found". errors.As finds
	// the server's *connect.Error behind the sentinel, as for every call.
	reads := func(text string) error { return &sentinelError{sentinel: sentinel, answer: err, text: text} }
	msg := connectMessage(err)
	if subject, ok := strings.CutSuffix(msg, ": "+sentinel.Error()); ok {
		return reads("wait for jobs: " + subject + ": " + sentinel.Error())
	}
	switch {
	case msg == sentinel.Error() && batch != "" && sentinel == ErrJobNotFound:
		return reads(fmt.Sprintf("wait for jobs: batch %q holds no job: %s", batch, sentinel))
	case msg == sentinel.Error():
		return reads("wait for jobs: " + sentinel.Error())
	}
	return reads("wait for jobs: " + sentinel.Error() + ": " + msg)
}

// WatchJobs yields the responses of WatchJobs streams for req: a tenant's
// jobs as they change, or only a batch's with req.Batch (deletions are
// announced for the whole tenant). The first response comes once the
// server is following the jobs, and holds the most recent ones (up to
// req.PageSize); an empty one (no jobs, no deletions) is a keepalive,
// yielded so a caller can tell the stream is alive.
//
// It follows the streams as Watch follows WatchJob: when one ends (the
// server's stream lifetime, a restart, a dropped connection) it opens
// another with the last resume token received, backing off only when the
// server could not be reached. A job may come again at a version already
// yielded across a resume: keep the higher version, except after a
// response with StartedOver set, which the server sends when it could
// not resume from the token (its database restored from an older copy,
// say): from there take each job's snapshot whatever its version, and
// ask GetJob about the jobs held from before that it does not bring. It
// ends by yielding an error when the server refuses the stream, and
// ctx's cause when ctx ends; breaking out of the loop closes the stream.
// Its streams go over the long-call transport.
func (c *Client) WatchJobs(ctx context.Context, req *jobwatchv1.WatchJobsRequest) iter.Seq2[*jobwatchv1.WatchJobsResponse, error] {
	return func(yield func(*jobwatchv1.WatchJobsResponse, error) bool) {
		ask := &jobwatchv1.WatchJobsRequest{} // nil: the defaults, as an empty request
		if req != nil {
			ask = proto.CloneOf(req)
		}
		c.resume(ctx, func() (bool, bool, error) { return c.watchJobsOnce(ctx, ask, yield) },
			func(err error) error {
				if transient(ctx, err) {
					return nil
				}
				return fmt.Errorf("watch jobs: %w", err)
			},
			func(err error) { yield(nil, err) })
	}
}

// watchJobsOnce runs one WatchJobs stream, keeping ask's resume token up
// to date. stopped says the consumer stopped; received that the stream
// delivered anything, so the server is up.
func (c *Client) watchJobsOnce(ctx context.Context, ask *jobwatchv1.WatchJobsRequest,
	yield func(*jobwatchv1.WatchJobsResponse, error) bool) (stopped, received bool, err error) {
	return stream(ctx, c.longJobs.WatchJobs, ask, func(msg *jobwatchv1.WatchJobsResponse) bool {
		if t := msg.GetResumeToken(); t != "" {
			ask.ResumeToken = t
		}
		return yield(msg, nil)
	})
}
