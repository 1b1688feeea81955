package server

import (
	"context"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

// asOperator returns ctx carrying who the caller is (auth's
// DescribeCaller: token name, role, tenant; "anonymous" without a tokens
// file) for the engine's operator actions, which record it in the job's
// history and log it.
func asOperator(ctx context.Context) context.Context {
	return jobs.WithActor(ctx, auth.DescribeCaller(ctx))
}

// RetryJob makes a FAILED, CANCELLED or LOST job QUEUED again
// (jobs.Engine.Retry). A client acts on its own tenant's jobs only:
// another tenant's is not_found, as for CancelJob.
func (h *jobService) RetryJob(ctx context.Context, req *jobwatchv1.RetryJobRequest) (*jobwatchv1.RetryJobResponse, error) {
	if err := h.s.checkClientJob(ctx, "retry job", req.GetJobId()); err != nil {
		return nil, err
	}
	j, err := h.s.engine.Retry(asOperator(ctx), req.GetJobId())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "retry job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.RetryJobResponse{Job: pj}, err
}

// DeleteJob removes a terminal job (jobs.Engine.Delete); an active one
// is failed_precondition.
func (h *jobService) DeleteJob(ctx context.Context, req *jobwatchv1.DeleteJobRequest) (*jobwatchv1.DeleteJobResponse, error) {
	if err := h.s.checkClientJob(ctx, "delete job", req.GetJobId()); err != nil {
		return nil, err
	}
	if err := h.s.engine.Delete(asOperator(ctx), req.GetJobId()); err != nil {
		return nil, h.s.toConnectError(ctx, "delete job", ofJob(req.GetJobId(), err))
	}
	return &jobwatchv1.DeleteJobResponse{}, nil
}
