package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// jobService adapts JobService to the engine.
type jobService struct{ s *Server }

var _ jobwatchv1connect.JobServiceHandler = (*jobService)(nil)

// capDeadline is when a parked call answers: limit from now, or
// answerMargin before the caller's own deadline, whichever is sooner.
//
// It is computed once, here, from time.Now, and keeps its monotonic
// reading: the engine waits for it with a timer, so neither a step of the
// wall clock nor an engine clock (jobs.Config.Now) that is not the wall
// clock can stretch the cap.
func (s *Server) capDeadline(ctx context.Context, limit time.Duration) time.Time {
	now := time.Now()
	wait := limit
	if callerDeadline, ok := ctx.Deadline(); ok {
		left := callerDeadline.Sub(now)
		wait = min(wait, left-answerMargin(left, s.cfg.DeadlineMargin))
	}
	return now.Add(wait)
}

// shortDeadlineMargin is the margin a deadline under a tenth of a second
// gets, or half of it if less: there a tenth (2 ms of 20) is less than
// an answer takes to reach its caller on a busy machine, over gRPC-Web
// above all, which then hears deadline_exceeded instead of OK.
const shortDeadlineMargin = 10 * time.Millisecond

// answerMargin is how long before a caller's deadline, left from now, its
// parked call answers: a tenth of left, at least shortDeadlineMargin or
// half of left, at most limit (Config.DeadlineMargin), so that a long
// timeout gets nearly all its time and a short one its answer in time.
func answerMargin(left, limit time.Duration) time.Duration {
	return max(0, min(limit, max(left/10, min(left/2, shortDeadlineMargin))))
}

// checkClientJob answers not_found, exactly as for a job that does not
// exist (same code, same message), when a client asks for another
// tenant's job by id: whether the job exists is none of its business.
// It reads the job's tenant alone, with the caller's tenant in the
// read's WHERE, before anything of the job that grows with it (payload,
// result) is read, so the answer takes as long for another tenant's job
// of 256 KiB as for an id that does not exist. A job's tenant never
// changes, so the answer holds for the call that follows.
func (s *Server) checkClientJob(ctx context.Context, op, id string) error {
	tenant, confined := clientTenant(ctx)
	if !confined {
		return nil
	}
	if err := s.engine.CheckScope(ctx, id, jobs.Scope{Tenants: []string{tenant}}); err != nil {
		return s.toConnectError(ctx, op, ofJob(id, err))
	}
	return nil
}

// wait parks on the engine's Wait, counted as a parked wait. It returns
// the snapshot's wire form: when a publish woke the wait, the one built
// for every call it woke (see shared.go).
func (s *Server) wait(ctx context.Context, id string) (*wireSnapshot, error) {
	s.metrics.parkedWaits.Inc()
	defer s.metrics.parkedWaits.Dec()
	deadline := s.capDeadline(ctx, s.cfg.WaitCap)
	if release, refused := s.parkWait(ctx, id); refused == nil {
		defer release()
	} else {
		deadline = time.Now() // over MaxParkedCalls: the current state, at once
		markParkedCallsFull(ctx)
	}
	snap, err := s.engine.WaitSnapshot(ctx, id, deadline)
	if err != nil {
		return nil, s.toConnectError(ctx, "wait job", ofJob(id, err))
	}
	linkToJob(ctx, &snap.Job)
	w := s.wireFor(snap)
	if w.err != nil {
		return nil, s.toConnectError(ctx, "convert job", w.err)
	}
	return w, nil
}

// protoJob converts for the wire; a stored value that is not JSON is an
// internal error.
func (s *Server) protoJob(ctx context.Context, j *jobtype.Job) (*jobwatchv1.Job, error) {
	pj, err := wire.Job(j)
	if err != nil {
		return nil, s.toConnectError(ctx, "convert job", err)
	}
	return pj, nil
}

func (h *jobService) SubmitJob(ctx context.Context, req *jobwatchv1.SubmitJobRequest) (*jobwatchv1.SubmitJobResponse, error) {
	s := h.s
	r, err := s.submitRequest(ctx, "", req)
	if err != nil {
		return nil, err
	}
	if err := checkSubmit(req); err != nil {
		return nil, err
	}
	j, err := s.engine.Submit(ctx, r)
	if err != nil {
		return nil, s.toConnectError(ctx, "submit job", err)
	}
	if !req.GetWait() || j.State.Terminal() {
		pj, err := s.protoJob(ctx, &j)
		return &jobwatchv1.SubmitJobResponse{Job: pj}, err
	}
	w, err := s.wait(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.SubmitJobResponse{Job: w.job}, nil
}

// submitRequest is the engine's form of a SubmitJob request; a field it
// refuses is named with prefix ("jobs[3]." in a SubmitJobs).
func (s *Server) submitRequest(ctx context.Context, prefix string, req *jobwatchv1.SubmitJobRequest) (jobs.SubmitRequest, error) {
	tenant, err := tenantFor(ctx, prefix+"tenant", req.GetTenant())
	if err != nil {
		return jobs.SubmitRequest{}, err
	}
	r := jobs.SubmitRequest{
		Tenant:      tenant,
		Kind:        req.GetKind(),
		Queue:       req.GetQueue(),
		UniqueKey:   req.GetUniqueKey(),
		Hold:        req.GetHold(),
		MaxAttempts: req.GetMaxAttempts(),
		Priority:    req.Priority, // unset: the queue's default; the engine checks the range
		Batch:       req.GetBatch(),
		After:       req.GetAfter(),
	}
	tc := s.traceOf(ctx)
	r.TraceParent, r.TraceState = tc.Parent, tc.State
	switch f := req.GetOnDependencyFailure(); f {
	case jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED:
	case jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL:
		r.OnDependencyFailure = jobtype.CancelOnDependencyFailure
	case jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN:
		r.OnDependencyFailure = jobtype.RunOnDependencyFailure
	default:
		return jobs.SubmitRequest{}, invalid(prefix+"on_dependency_failure",
			fmt.Sprintf("%v is not DEPENDENCY_FAILURE_CANCEL or DEPENDENCY_FAILURE_RUN", f))
	}
	if req.RunAt != nil {
		// A timestamp the caller sent is a time it means: within
		// jobtype.MaxTimeOffset of now, and never the zero time, which
		// SubmitRequest takes for "unset".
		if err := req.RunAt.CheckValid(); err != nil {
			return jobs.SubmitRequest{}, invalid(prefix+"run_at", notATime)
		}
		r.RunAt = req.RunAt.AsTime()
		if err := s.engine.CheckTime(prefix+"run_at", r.RunAt); err != nil {
			return jobs.SubmitRequest{}, s.toConnectError(ctx, "submit job", err)
		}
	}
	if r.Payload, err = jsonField(prefix+"payload", req.GetPayload()); err != nil {
		return jobs.SubmitRequest{}, err
	}
	return r, nil
}

// SubmitJobs submits its jobs in one store transaction
// (jobs.Engine.SubmitMany): all, in order, or none.
func (h *jobService) SubmitJobs(ctx context.Context, req *jobwatchv1.SubmitJobsRequest) (*jobwatchv1.SubmitJobsResponse, error) {
	s := h.s
	if n := len(req.GetJobs()); n == 0 || n > jobtype.MaxBatchJobs {
		return nil, invalid("jobs", fmt.Sprintf("must hold 1 to %d jobs, got %d", jobtype.MaxBatchJobs, n))
	}
	rs := make([]jobs.SubmitRequest, len(req.GetJobs()))
	for i, pr := range req.GetJobs() {
		prefix := fmt.Sprintf("jobs[%d].", i)
		if pr.GetWait() {
			return nil, invalid(prefix+"wait", "must be false in SubmitJobs: wait for the jobs with WaitJobs")
		}
		r, err := s.submitRequest(ctx, prefix, pr)
		if err != nil {
			return nil, err
		}
		rs[i] = r
	}
	js, err := s.engine.SubmitMany(ctx, rs)
	if err != nil {
		return nil, s.toConnectError(ctx, "submit jobs", err)
	}
	pjs, err := wire.Jobs(js)
	if err != nil {
		return nil, s.toConnectError(ctx, "convert jobs", err)
	}
	return &jobwatchv1.SubmitJobsResponse{Jobs: pjs}, nil
}

// checkSubmit refuses what only the server can judge: the wait is the
// server's, every other field the engine's.
func checkSubmit(req *jobwatchv1.SubmitJobRequest) error {
	if req.GetHold() && req.GetWait() {
		// A held job cannot end before someone starts it, so the wait
		// could only ever time out.
		return invalid("wait", "cannot wait for a held job (hold is true)")
	}
	return nil
}

func (h *jobService) StartJob(ctx context.Context, req *jobwatchv1.StartJobRequest) (*jobwatchv1.StartJobResponse, error) {
	if err := h.s.checkClientJob(ctx, "start job", req.GetJobId()); err != nil {
		return nil, err
	}
	j, err := h.s.engine.Start(asOperator(ctx), req.GetJobId())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "start job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.StartJobResponse{Job: pj}, err
}

func (h *jobService) GetJob(ctx context.Context, req *jobwatchv1.GetJobRequest) (*jobwatchv1.GetJobResponse, error) {
	// A client reads its own tenant's jobs only: the tenant is in the
	// read's WHERE, so another tenant's job is not found without a byte
	// of it read (see checkClientJob).
	var (
		j   jobtype.Job
		err error
	)
	if tenant, confined := clientTenant(ctx); confined {
		j, err = h.s.engine.GetIn(ctx, tenant, req.GetJobId())
	} else {
		j, err = h.s.engine.Get(ctx, req.GetJobId())
	}
	if err != nil {
		return nil, h.s.toConnectError(ctx, "get job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.GetJobResponse{Job: pj}, err
}

func (h *jobService) ListJobs(ctx context.Context, req *jobwatchv1.ListJobsRequest) (*jobwatchv1.ListJobsResponse, error) {
	limit := int(req.GetPageSize()) // the engine applies the default and cap
	full, err := view(req.GetView())
	if err != nil {
		return nil, err
	}
	tenant, err := tenantFor(ctx, "tenant", req.GetTenant())
	if err != nil {
		return nil, err
	}
	f := jobs.ListRequest{
		Tenant:    tenant,
		Batch:     req.GetBatch(),
		Kind:      req.GetKind(),
		Queue:     req.GetQueue(),
		Limit:     limit,
		PageToken: req.GetPageToken(),
		Full:      full,
	}
	for i, ps := range req.GetStates() {
		st, ok := wire.StoreState(ps)
		if !ok {
			return nil, invalid(fmt.Sprintf("states[%d]", i), fmt.Sprintf("%v is not a job state", ps))
		}
		f.States = append(f.States, st)
	}
	js, next, err := h.s.engine.List(ctx, f)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "list jobs", err)
	}
	pjs, err := wire.Jobs(js)
	if err != nil {
		return nil, h.s.toConnectError(ctx, "convert jobs", err)
	}
	return &jobwatchv1.ListJobsResponse{Jobs: pjs, NextPageToken: next}, nil
}

// CancelJob makes a job that has not ended CANCELLED (jobs.Engine.Cancel).
// On a job that has ended it answers what a caller retrying a cancel
// needs to know: OK with the job unchanged when it is CANCELLED already
// (the cancel asked for holds), failed_precondition naming the state when
// it ended otherwise (SUCCEEDED, FAILED, LOST: no cancel happened).
func (h *jobService) CancelJob(ctx context.Context, req *jobwatchv1.CancelJobRequest) (*jobwatchv1.CancelJobResponse, error) {
	if err := h.s.checkClientJob(ctx, "cancel job", req.GetJobId()); err != nil {
		return nil, err
	}
	j, err := h.s.engine.Cancel(asOperator(ctx), req.GetJobId())
	if err != nil {
		return nil, h.s.toConnectError(ctx, "cancel job", ofJob(req.GetJobId(), err))
	}
	pj, err := h.s.protoJob(ctx, &j)
	return &jobwatchv1.CancelJobResponse{Job: pj}, err
}

func (h *jobService) WaitJob(ctx context.Context, req *jobwatchv1.WaitJobRequest) (*jobwatchv1.WaitJobResponse, error) {
	if err := h.s.checkClientJob(ctx, "wait job", req.GetJobId()); err != nil {
		return nil, err
	}
	w, err := h.s.wait(ctx, req.GetJobId())
	if err != nil {
		return nil, err
	}
	return w.wait, nil // shared with every call the same publish woke: not to be modified
}

// WaitJobs parks on the engine's WaitMany, with WaitJob's cap, counted
// as waitJobsPlaces parked calls of its tenant: one for every 16 jobs it
// waits for.
func (h *jobService) WaitJobs(ctx context.Context, req *jobwatchv1.WaitJobsRequest) (*jobwatchv1.WaitJobsResponse, error) {
	s := h.s
	full, err := view(req.GetView())
	if err != nil {
		return nil, err
	}
	r := jobs.WaitManyRequest{IDs: req.GetJobIds(), Batch: req.GetBatch(), Full: full}
	switch req.GetMode() {
	case jobwatchv1.WaitMode_WAIT_MODE_UNSPECIFIED, jobwatchv1.WaitMode_WAIT_MODE_ALL:
	case jobwatchv1.WaitMode_WAIT_MODE_ANY:
		r.Any = true
	default:
		return nil, invalid("mode", fmt.Sprintf("%v is not a wait mode (WAIT_MODE_ALL or WAIT_MODE_ANY)", req.GetMode()))
	}
	if r.Tenant, err = tenantFor(ctx, "tenant", req.GetTenant()); err != nil {
		return nil, err
	}
	_, client := clientTenant(ctx)
	// A client reaches its tenant's jobs only; a tenant named with ids
	// confines them to it for anyone.
	r.Confined = client || req.GetTenant() != ""
	counted := namedTenant(r.Tenant)
	if !r.Confined && len(r.IDs) > 0 {
		counted = s.jobTenant(r.IDs[0])
	}

	s.metrics.parkedWaits.Inc()
	defer s.metrics.parkedWaits.Dec()
	deadline := s.capDeadline(ctx, s.cfg.WaitCap)
	tenant, isCounted := s.callTenant(ctx, counted)
	r.Park = func(n int) (func(), bool) {
		release, refused := s.parked.parkPlaces(ctx, parkWaitKind, tenant, isCounted, waitJobsPlaces(n))
		if refused != nil {
			markParkedCallsFull(ctx) // over MaxParkedCalls: the current states, at once
			return nil, false
		}
		return release, true
	}
	answer := newJobsAnswer(ctx)
	if !full {
		// Full answers are built at the end: how many carry their payload
		// depends on them all (jobs.MaxWaitManyBytes).
		r.Ended = answer.add
	}
	res, err := s.engine.WaitMany(ctx, r, deadline)
	if err != nil {
		return nil, s.toConnectError(ctx, "wait jobs", err)
	}
	for i := range res.Ended {
		linkToJob(ctx, res.Ended[i])
	}
	resp, err := answer.response(&s.shared, res)
	if err != nil {
		return nil, s.toConnectError(ctx, "convert jobs", err)
	}
	return resp, nil
}

func (h *jobService) WatchJob(ctx context.Context, req *jobwatchv1.WatchJobRequest, stream *connect.ServerStream[jobwatchv1.WatchJobResponse]) error {
	s := h.s
	deadline, done, err := openJobStream(ctx, s, "watch job", req.GetJobId(), stream)
	if err != nil {
		return err
	}
	defer done()
	err = s.engine.Watch(ctx, req.GetJobId(), jobs.WatchOptions{
		AfterVersion: req.GetAfterVersion(),
		Deadline:     deadline,
		Keepalive:    s.cfg.Keepalive,
		Send: func(snap *jobs.Snapshot) error {
			if snap == nil {
				return stream.Send(&jobwatchv1.WatchJobResponse{}) // no job: a keepalive
			}
			w := s.wireFor(snap)
			if w.err != nil {
				return w.err
			}
			return stream.Send(w.watch) // shared with every call the same publish woke
		},
	})
	return s.toConnectError(ctx, "watch job", ofJob(req.GetJobId(), err))
}

func (h *jobService) WatchJobs(ctx context.Context, req *jobwatchv1.WatchJobsRequest, stream *connect.ServerStream[jobwatchv1.WatchJobsResponse]) error {
	s := h.s
	full, err := view(req.GetView())
	if err != nil {
		return err
	}
	limit := int(req.GetPageSize()) // the engine applies the default and cap
	tenant, err := tenantFor(ctx, "tenant", req.GetTenant())
	if err != nil {
		return err
	}
	deadline, done, err := s.parkWatch(ctx, namedTenant(tenant))
	if err != nil {
		return err
	}
	defer done()
	if err := sendHeaders(stream); err != nil {
		return err
	}
	// startedOver marks the stream's first response when the engine set
	// the caller's token aside: that response comes through Send (the
	// most recent jobs are this stream's own read, never shared).
	startedOver := false
	err = s.engine.WatchTenant(ctx, tenant, jobs.TenantWatchOptions{
		ResumeToken: req.GetResumeToken(),
		Batch:       req.GetBatch(),
		Full:        full,
		PageSize:    limit,
		Deadline:    deadline,
		Keepalive:   s.cfg.Keepalive,
		StartedOver: func() { startedOver = true },
		Send: func(js []jobtype.Job, deleted []string, resumeToken string) error {
			pjs, err := wire.Jobs(js)
			if err != nil {
				return err
			}
			msg := &jobwatchv1.WatchJobsResponse{Jobs: pjs, ResumeToken: resumeToken, DeletedJobIds: deleted, StartedOver: startedOver}
			startedOver = false
			return stream.Send(msg)
		},
		SendShared: func(js []jobtype.Job, resumeToken string, memo func(func() any) any) error {
			w := memo(func() any { return s.sharedWatchJobs(js, resumeToken) }).(wireBatch)
			if w.err != nil {
				return w.err
			}
			return stream.Send(w.msg) // shared with every stream of the tenant that sends this batch
		},
	})
	return s.toConnectError(ctx, "watch jobs", err)
}

// notATime says why a timestamp a caller sent (run_at, a bulk filter's
// created_before, a log line's time) is refused before its value is
// judged: protobuf's Timestamp covers only these.
const notATime = "is not a time: a timestamp's seconds run from 0001-01-01 to 9999-12-31 and its nanos from 0 to 999999999"

// view reads a request's view: whether it asks for whole jobs.
func view(v jobwatchv1.JobView) (full bool, err error) {
	full, ok := wire.FullView(v)
	if !ok {
		return false, invalid("view", fmt.Sprintf("%v is not a job view: JOB_VIEW_SUMMARY (the default) or JOB_VIEW_FULL", v))
	}
	return full, nil
}

// sendHeaders flushes the response headers before the stream has anything
// to say. Clients (connect-go among them) return from the call only once
// headers arrive, so a watch that starts quiet (after_version is current)
// would otherwise look hung until the first change.
func sendHeaders[T any](stream *connect.ServerStream[T]) error {
	return stream.Send(nil)
}

// openJobStream begins a stream about one job (WatchJob, WatchJobLogs):
// another tenant's job is not_found before anything is sent, with no
// headers first that a job of its own would not have had either; then a
// place among the parked calls, then the headers. done gives the place
// back; deadline is the stream's lifetime.
func openJobStream[T any](ctx context.Context, s *Server, op, id string, stream *connect.ServerStream[T]) (deadline time.Time, done func(), err error) {
	if err := s.checkClientJob(ctx, op, id); err != nil {
		return time.Time{}, nil, err
	}
	if deadline, done, err = s.parkWatch(ctx, s.jobTenant(id)); err != nil {
		return time.Time{}, nil, err
	}
	if err := sendHeaders(stream); err != nil {
		done()
		return time.Time{}, nil, err
	}
	return deadline, done, nil
}

// GetServerInfo also says who the caller's token is (auth.Principal), if
// it carried one the tokens know.
func (h *jobService) GetServerInfo(ctx context.Context, _ *jobwatchv1.GetServerInfoRequest) (*jobwatchv1.GetServerInfoResponse, error) {
	var caller *jobwatchv1.Caller
	if p, ok := auth.FromContext(ctx); ok {
		caller = &jobwatchv1.Caller{Role: string(p.Role), Tenant: p.Tenant, Name: p.Name}
	}
	return &jobwatchv1.GetServerInfoResponse{
		Demo:         len(h.s.cfg.DemoKinds) > 0,
		DemoKinds:    h.s.cfg.DemoKinds,
		AuthRequired: h.s.authRequired,
		Version:      h.s.cfg.Version,
		Caller:       caller,
	}, nil
}
