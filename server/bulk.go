package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// RetryJobs, CancelJobs and DeleteJobs: one page of a bulk action
// (jobs.Engine.Bulk). A client acts within its tenant; naming another
// tenant, or every tenant ("*"), is for admins.

func (h *jobService) RetryJobs(ctx context.Context, req *jobwatchv1.RetryJobsRequest) (*jobwatchv1.RetryJobsResponse, error) {
	r, err := h.s.bulk(ctx, h.s.engine.RetryAction(), req.GetFilter(), req.GetPageToken(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.RetryJobsResponse{Matched: int64(r.Matched), Changed: int64(r.Changed), NextPageToken: r.NextPageToken}, nil
}

func (h *jobService) CancelJobs(ctx context.Context, req *jobwatchv1.CancelJobsRequest) (*jobwatchv1.CancelJobsResponse, error) {
	r, err := h.s.bulk(ctx, h.s.engine.CancelAction(), req.GetFilter(), req.GetPageToken(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.CancelJobsResponse{Matched: int64(r.Matched), Changed: int64(r.Changed), NextPageToken: r.NextPageToken}, nil
}

func (h *jobService) DeleteJobs(ctx context.Context, req *jobwatchv1.DeleteJobsRequest) (*jobwatchv1.DeleteJobsResponse, error) {
	r, err := h.s.bulk(ctx, h.s.engine.DeleteAction(), req.GetFilter(), req.GetPageToken(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.DeleteJobsResponse{Matched: int64(r.Matched), Changed: int64(r.Changed), NextPageToken: r.NextPageToken}, nil
}

// bulk runs one page of a under the request's filter, scoped to what the
// caller may reach, and logs what it did once.
func (s *Server) bulk(ctx context.Context, a jobs.BulkAction, pf *jobwatchv1.JobFilter, pageToken string, pageSize int32) (jobs.BulkResult, error) {
	f, err := bulkFilter(ctx, pf)
	if err != nil {
		return jobs.BulkResult{}, err
	}
	by := auth.DescribeCaller(ctx)
	r, err := s.engine.Bulk(jobs.WithActor(ctx, by), a, f, pageToken, int(pageSize))
	if r.Matched > 0 || err == nil {
		tenant := f.Tenant
		if tenant == "" {
			tenant = jobtype.DefaultTenant // as jobs.BulkFilter reads it
		}
		attrs := []any{"by", by, "tenant", tenant, "queues", f.Queues, "kinds", f.Kinds, "states", f.States}
		if f.Batch != "" {
			attrs = append(attrs, "batch", f.Batch)
		}
		if !f.CreatedBefore.IsZero() {
			attrs = append(attrs, "created_before", f.CreatedBefore)
		}
		attrs = append(attrs, "matched", r.Matched, "changed", r.Changed, "more", r.NextPageToken != "")
		if err != nil {
			attrs = append(attrs, "stopped_by", err.Error())
		}
		s.log.InfoContext(ctx, "bulk "+a.Name, attrs...)
	}
	if err != nil {
		return jobs.BulkResult{}, bulkStopped(a, r, err, s.toConnectError(ctx, a.Name+" jobs", err))
	}
	return r, nil
}

// bulkStopped is err (cause as the engine returned it), the refusal that
// stopped a page of a partway through, or that held back some tenants'
// jobs of it (jobs.BulkHeldError), saying in its message and in a
// BulkStopped detail what the page did, so that no caller takes the
// changes made for none. A page never read (r.Matched 0) has nothing to
// add.
//
// A page cut by the caller's deadline says so in a bulk action's words
// (the one-job answer's "whole or not at all" is not true of a page), and
// always with its count, none changed included.
func bulkStopped(a jobs.BulkAction, r jobs.BulkResult, cause, err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	deadline := ce.Code() == connect.CodeDeadlineExceeded
	if r.Matched == 0 && !deadline {
		return err
	}
	msg := ce.Message()
	if deadline {
		msg = "the call's deadline passed before its page was done (its timeout is too short for how busy the server is, or for its page_size)"
	}
	did := fmt.Sprintf("before it, this page %s %d of the %d jobs it matched; those changes stand, and the same call goes on from there", a.Done, r.Changed, r.Matched)
	switch held := (*jobs.BulkHeldError)(nil); {
	case errors.As(cause, &held):
		whose := fmt.Sprintf("tenant %q's", held.Tenants[0])
		if len(held.Tenants) > 1 {
			whose = fmt.Sprintf("those of %d tenants at their max_queued (%q first)", len(held.Tenants), held.Tenants[0])
		}
		// The held jobs still match: the same call finds them first
		// again, so the next page's token is how to go on past them.
		next := ""
		if r.NextPageToken != "" {
			next = fmt.Sprintf("; page_token %q goes on past them", r.NextPageToken)
		}
		did = fmt.Sprintf("this page %s %d of the %d jobs it matched, and left %s as they are; those changes stand, and the same call again takes them up once there is room%s",
			a.Done, r.Changed, r.Matched, whose, next)
	case r.Changed == 0:
		did = "before this page changed any job: run the same call again"
	}
	stopped := connect.NewError(ce.Code(), fmt.Errorf("%s (%s)", msg, did))
	for _, d := range ce.Details() {
		stopped.AddDetail(d)
	}
	if d, derr := connect.NewErrorDetail(&jobwatchv1.BulkStopped{Matched: int64(r.Matched), Changed: int64(r.Changed), NextPageToken: r.NextPageToken}); derr == nil {
		stopped.AddDetail(d)
	}
	return stopped
}

// bulkFilter reads a JobFilter, with its tenant as the caller may use it:
// "" is the caller's own (the default tenant for an admin), and only a
// caller not confined to one tenant may name another or "*".
func bulkFilter(ctx context.Context, pf *jobwatchv1.JobFilter) (jobs.BulkFilter, error) {
	if unknown := pf.ProtoReflect().GetUnknown(); len(unknown) > 0 {
		// The JSON codec refuses an unknown name (strictMessages); this is
		// the binary form's unknown field.
		num, _, _ := protowire.ConsumeTag(unknown)
		return jobs.BulkFilter{}, connect.NewError(connect.CodeInvalidArgument, unknownInFilter(fmt.Sprintf("filter field number %d", num), ""))
	}
	tenant, err := tenantFor(ctx, "filter.tenant", pf.GetTenant())
	if err != nil {
		return jobs.BulkFilter{}, err
	}
	f := jobs.BulkFilter{Tenant: tenant, Queues: pf.GetQueues(), Kinds: pf.GetKinds(), Batch: pf.GetBatch(), All: pf.GetAll()}
	for i, ps := range pf.GetStates() {
		st, ok := wire.StoreState(ps)
		if !ok {
			return jobs.BulkFilter{}, invalid(fmt.Sprintf("filter.states[%d]", i), fmt.Sprintf("%v is not a job state", ps))
		}
		f.States = append(f.States, st)
	}
	if pf.GetCreatedBefore() != nil {
		if err := pf.GetCreatedBefore().CheckValid(); err != nil {
			return jobs.BulkFilter{}, invalid("filter.created_before", notATime)
		}
		f.CreatedBefore = pf.GetCreatedBefore().AsTime()
		if f.CreatedBefore.IsZero() { // which the engine reads as unset
			return jobs.BulkFilter{}, invalid("filter.created_before", "0001-01-01T00:00:00Z is no time: give a time, or leave filter.created_before out")
		}
	}
	return f, nil
}
