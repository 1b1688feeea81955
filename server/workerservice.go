package server

import (
	"context"
	"errors"
	"time"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// workerService adapts WorkerService to the engine.
type workerService struct{ s *Server }

var _ jobwatchv1connect.WorkerServiceHandler = (*workerService)(nil)

func (h *workerService) ClaimJob(ctx context.Context, req *jobwatchv1.ClaimJobRequest) (*jobwatchv1.ClaimJobResponse, error) {
	s := h.s
	r := jobs.ClaimRequest{
		WorkerID: req.GetWorkerId(),
		Caller:   stopCaller(ctx),
		Kinds:    req.GetKinds(),
		Queues:   req.GetQueues(),
	}
	if err := workerScope(ctx, &r); err != nil {
		return nil, err
	}
	s.metrics.parkedClaims.Inc()
	defer s.metrics.parkedClaims.Dec()
	deadline := s.capDeadline(ctx, s.cfg.ClaimCap)
	release, refused := s.parkClaim(ctx)
	if refused == nil {
		defer release()
	} else {
		// Over MaxParkedCalls a claim still takes a job that is ready
		// now (it need not park for it), so parked waits can never keep
		// workers from the jobs they wait for; it only may not park. One
		// such claim looks at a time, the others are refused at once: a
		// flood of them, each looking (a read of the store), filled the
		// store's read pool, and everyone's reads queued behind it for
		// seconds. A worker refused asks again after its backoff.
		select {
		case s.unparkedLook <- struct{}{}:
			defer func() { <-s.unparkedLook }()
		default:
			return nil, refused
		}
		deadline = time.Now()
	}
	n := int(req.GetMaxJobs())
	if n == 0 {
		n = 1
	}
	claimed, err := s.engine.ClaimJobs(ctx, r, n, deadline)
	if errors.Is(err, jobtype.ErrNoJob) && refused != nil {
		return nil, refused
	}
	if errors.Is(err, jobtype.ErrNoJob) {
		return &jobwatchv1.ClaimJobResponse{}, nil
	}
	if err != nil {
		return nil, s.toConnectError(ctx, "claim job", err)
	}
	if err := ctx.Err(); err != nil {
		// The worker went away (or ran out of time) while the claim was
		// being granted: nobody will hold the leases, so the jobs go back
		// now instead of sitting RUNNING until the reaper calls them
		// LOST. A worker that leaves after this check is the reaper's.
		for _, j := range claimed {
			s.releaseClaim(ctx, j, "the worker is gone")
		}
		return nil, s.toConnectError(ctx, "claim job", err)
	}
	resp := &jobwatchv1.ClaimJobResponse{}
	size := 0
	var sendErr error
	for i, j := range claimed {
		// The answer stays under what gRPC clients take by default: the
		// jobs past that go back to the queue at once, as if never
		// claimed, for the worker's next claim.
		if size += j.Size(); i > 0 && size > maxClaimResponseBytes {
			s.releaseClaim(ctx, j, "the answer is full")
			continue
		}
		pj, err := s.protoJob(ctx, &j)
		if err != nil {
			s.releaseClaim(ctx, j, "the job cannot be sent")
			sendErr = err
			continue
		}
		resp.Claims = append(resp.Claims, &jobwatchv1.Claim{
			Job:            pj,
			LeaseId:        j.LeaseID,
			LeaseExpiresAt: wire.Timestamp(j.LeaseExpiresAt),
		})
	}
	if len(resp.Claims) == 0 {
		return nil, sendErr
	}
	if req.GetMaxJobs() == 0 {
		// A request without max_jobs (an older worker) reads job and
		// lease_id.
		c := resp.Claims[0]
		return &jobwatchv1.ClaimJobResponse{Job: c.Job, LeaseId: c.LeaseId, LeaseExpiresAt: c.LeaseExpiresAt}, nil
	}
	return resp, nil
}

// maxClaimResponseBytes bounds the jobs of one ClaimJob answer, as
// jobtype.Job.Size counts them: gRPC clients refuse a message over 4 MiB
// by default. The first job always goes, whatever its size (a payload is
// bounded by the server's --max-payload-bytes).
const maxClaimResponseBytes = 3 << 20

// releaseTimeout bounds giving back a claim whose caller is gone; it
// runs on a context of its own, as the request's has ended.
const releaseTimeout = 5 * time.Second

// releaseClaim gives back job j, claimed for a caller that will never
// receive it (why says why), so another worker can claim it at once.
func (s *Server) releaseClaim(ctx context.Context, j jobtype.Job, why string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, err := s.engine.Release(ctx, j.ID, j.LeaseID)
	switch {
	case errors.Is(err, jobs.ErrStaleLease):
		// Cancelled meanwhile: nothing to give back.
		s.log.DebugContext(ctx, "claim not given back: the lease is stale", "job_id", j.ID, "why", why)
		return
	case err != nil:
		s.log.WarnContext(ctx, "claim not given back: the lease reaper will take the job back",
			"job_id", j.ID, "worker_id", j.WorkerID, "why", why, "err", err)
		return
	}
	s.log.InfoContext(ctx, "claim given back", "job_id", j.ID, "worker_id", j.WorkerID, "why", why)
}

// checkWorkerJob answers not_found, exactly as for a job that does not
// exist (same code, same message), when a worker token bound to tenants
// or kinds names a job outside them in a lease call (Heartbeat,
// CompleteJob, FailJob): without it a real job's id would answer
// failed_precondition (its lease is not the caller's) and a made-up one
// not_found, telling the worker which ids exist. The job is left as it
// was, even by a caller that holds its lease (a token narrowed by a
// reload while its worker ran the job: the lease expires as the worker's
// would). The check reads the job's tenant and kind alone, never its
// payload or result (see jobs.Scope). A worker bound to nothing may
// touch every job, and hears failed_precondition for a lease that does
// not hold, as without tokens.
func (s *Server) checkWorkerJob(ctx context.Context, op, id string) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Role != auth.RoleWorker {
		return nil
	}
	if err := s.engine.CheckScope(ctx, id, jobs.Scope{Tenants: p.Tenants, Kinds: p.Kinds}); err != nil {
		return s.toConnectError(ctx, op, ofJob(id, err))
	}
	return nil
}

func (h *workerService) Heartbeat(ctx context.Context, req *jobwatchv1.HeartbeatRequest) (*jobwatchv1.HeartbeatResponse, error) {
	if err := h.s.checkWorkerJob(ctx, "heartbeat", req.GetJobId()); err != nil {
		return nil, err
	}
	// percent out of range is clamped by the engine, not refused.
	j, err := h.s.engine.Heartbeat(ctx, req.GetJobId(), req.GetLeaseId(), req.GetPercent(), req.GetStep())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "heartbeat", ofJob(req.GetJobId(), err))
	}
	return &jobwatchv1.HeartbeatResponse{
		// Not RUNNING: the server ended the attempt (a cancel, or the
		// queue's timeout); either way the worker must stop.
		Cancelled:      j.State != jobtype.Running,
		LeaseExpiresAt: wire.Timestamp(j.LeaseExpiresAt),
	}, nil
}

// ReleaseJob gives back a job its worker claimed and will not run: a
// claim answered after the worker began to stop. The job goes back as a
// claim whose caller left goes back (releaseClaim), its attempt not
// counted; a lease that no longer holds it is failed_precondition.
func (h *workerService) ReleaseJob(ctx context.Context, req *jobwatchv1.ReleaseJobRequest) (*jobwatchv1.ReleaseJobResponse, error) {
	if err := h.s.checkWorkerJob(ctx, "release job", req.GetJobId()); err != nil {
		return nil, err
	}
	j, err := h.s.engine.Release(ctx, req.GetJobId(), req.GetLeaseId())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "release job", ofJob(req.GetJobId(), err))
	}
	h.s.log.InfoContext(ctx, "claim given back by its worker", "job_id", j.ID, "queue", j.Queue, "tenant", j.Tenant, "by", actor(ctx))
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.ReleaseJobResponse{Job: pj}, err
}

// StopClaiming answers the worker's parked claims at once (the engine's
// StopClaiming), those sent with the caller's token only: a worker id is
// no secret (every job shows who runs it), so with another token it
// reaches nothing. Without tokens any caller reaches any worker's, whose
// claims are answered empty and sent again.
func (h *workerService) StopClaiming(ctx context.Context, req *jobwatchv1.StopClaimingRequest) (*jobwatchv1.StopClaimingResponse, error) {
	if err := h.s.engine.StopClaiming(ctx, req.GetWorkerId(), stopCaller(ctx)); err != nil {
		return nil, h.s.toConnectError(ctx, "stop claiming", err)
	}
	return &jobwatchv1.StopClaimingResponse{}, nil
}

func (h *workerService) CompleteJob(ctx context.Context, req *jobwatchv1.CompleteJobRequest) (*jobwatchv1.CompleteJobResponse, error) {
	result, err := jsonField("result", req.GetResult())
	if err != nil {
		return nil, err
	}
	if err := h.s.checkWorkerJob(ctx, "complete job", req.GetJobId()); err != nil {
		return nil, err
	}
	j, err := h.s.engine.Complete(ctx, req.GetJobId(), req.GetLeaseId(), result)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "complete job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.CompleteJobResponse{Job: pj}, err
}

func (h *workerService) FailJob(ctx context.Context, req *jobwatchv1.FailJobRequest) (*jobwatchv1.FailJobResponse, error) {
	if err := h.s.checkWorkerJob(ctx, "fail job", req.GetJobId()); err != nil {
		return nil, err
	}
	// An empty type is the engine's to default (jobtype.DefaultErrorType).
	jerr := req.GetError()
	j, err := h.s.engine.Fail(ctx, req.GetJobId(), req.GetLeaseId(),
		jobtype.JobError{Type: jerr.GetType(), Message: jerr.GetMessage()}, req.GetRetryable())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "fail job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.FailJobResponse{Job: pj}, err
}

// stopCaller is who a claim or a StopClaiming comes from, for the
// engine's matching of the two (jobs.ClaimRequest.Caller): the token's
// id, or "" on a server without tokens.
func stopCaller(ctx context.Context) string {
	if p, ok := auth.FromContext(ctx); ok {
		return p.TokenID
	}
	return ""
}
