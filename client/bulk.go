package client

import (
	"context"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// BulkResult is what a bulk action did, summed over the pages it took.
type BulkResult struct {
	// Matched counts the jobs the filter matched; Changed those the
	// action changed (a job that ended or went meanwhile matched but did
	// not change).
	Matched, Changed int64
}

// BulkPage is one page of a bulk action: the call a bulk method repeats
// with each page token until the server says no job is left.
type BulkPage func(ctx context.Context, f *jobwatchv1.JobFilter, pageToken string) (matched, changed int64, next string, err error)

// RetryJobs retries every job f matches (FAILED, CANCELLED or LOST), a
// page of at most 1,000 at a time, until none is left; see
// JobService.RetryJobs. onPage, if not nil, hears the running totals
// after each page that more pages follow (the last page's are the
// result). An error stops it: what was done is in the result, the part
// of a page done before a refusal stopped it included, and calling it
// again with the same filter goes on where it stopped. A tenant's
// max_queued does not stop it: that tenant's jobs are left as they were,
// the other tenants' retried, page after page, and the error at the end
// is ErrQuotaExceeded, Quota naming the first tenant held back.
func (c *Client) RetryJobs(ctx context.Context, f *jobwatchv1.JobFilter, onPage func(BulkResult)) (BulkResult, error) {
	return c.bulk(ctx, f, onPage, func(ctx context.Context, f *jobwatchv1.JobFilter, token string) (int64, int64, string, error) {
		resp, err := c.jobs.RetryJobs(ctx, &jobwatchv1.RetryJobsRequest{Filter: f, PageToken: token})
		return resp.GetMatched(), resp.GetChanged(), resp.GetNextPageToken(), err
	})
}

// CancelJobs cancels every active job f matches, as RetryJobs retries.
func (c *Client) CancelJobs(ctx context.Context, f *jobwatchv1.JobFilter, onPage func(BulkResult)) (BulkResult, error) {
	return c.bulk(ctx, f, onPage, func(ctx context.Context, f *jobwatchv1.JobFilter, token string) (int64, int64, string, error) {
		resp, err := c.jobs.CancelJobs(ctx, &jobwatchv1.CancelJobsRequest{Filter: f, PageToken: token})
		return resp.GetMatched(), resp.GetChanged(), resp.GetNextPageToken(), err
	})
}

// DeleteJobs deletes every ended job f matches, as RetryJobs retries.
func (c *Client) DeleteJobs(ctx context.Context, f *jobwatchv1.JobFilter, onPage func(BulkResult)) (BulkResult, error) {
	return c.bulk(ctx, f, onPage, func(ctx context.Context, f *jobwatchv1.JobFilter, token string) (int64, int64, string, error) {
		resp, err := c.jobs.DeleteJobs(ctx, &jobwatchv1.DeleteJobsRequest{Filter: f, PageToken: token})
		return resp.GetMatched(), resp.GetChanged(), resp.GetNextPageToken(), err
	})
}

// bulk calls page with each page token in turn until the server gives
// none, summing what the pages did. A page that a tenant's max_queued
// held back (its BulkStopped detail gives the next page's token, or it
// is the last) does not stop it: the other tenants' jobs of the later
// pages are acted on too, and the first such refusal is the error at
// the end, in words of the whole call (heldBack).
func (c *Client) bulk(ctx context.Context, f *jobwatchv1.JobFilter, onPage func(BulkResult), page BulkPage) (BulkResult, error) {
	var (
		total BulkResult
		held  error
	)
	for token := ""; ; {
		matched, changed, next, err := page(ctx, f, token)
		if err != nil {
			done, _ := detail[*jobwatchv1.BulkStopped](err)
			matched, changed, next = done.GetMatched(), done.GetChanged(), done.GetNextPageToken()
			_, quota := detail[*jobwatchv1.QuotaExceeded](err)
			switch {
			case quota && next != "" && held == nil:
				held = heldBack(err)
			case next == "":
				total.Matched += matched
				total.Changed += changed
				if quota && held != nil {
					return total, held
				}
				return total, mapJobError(err)
			}
		}
		total.Matched += matched
		total.Changed += changed
		if next == "" {
			return total, held
		}
		if onPage != nil {
			onPage(total)
		}
		token = next
	}
}

// heldBack is err, a page's refusal by a tenant's max_queued that a bulk
// call went on past, as ErrQuotaExceeded in words of the whole call: the
// server's words are the page's, with a page token for curl users.
func heldBack(err error) error {
	q, _ := Quota(err)
	refusal := &jobtype.QuotaError{Tenant: q.GetTenant(), MaxQueued: int(q.GetMaxQueued()), Queued: int(q.GetQueued()), Adding: int(q.GetAdding())}
	return &sentinelError{sentinel: ErrQuotaExceeded, answer: err,
		text: refusal.Error() + " (its jobs were left as they were, the other tenants' acted on; the same call again takes them up once there is room)"}
}
