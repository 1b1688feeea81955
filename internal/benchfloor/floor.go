// Package benchfloor is the floor that jobwatch bench measures jobwatch
// against: the job and worker RPCs a benchmark drives (SubmitJob, GetJob,
// WaitJob, WatchJob, ClaimJob, Heartbeat, CompleteJob, FailJob) as plain
// connect-go handlers over an in-memory map, served with h2c and the same
// HTTP/2 settings and compression threshold as jobwatch. It is what "connect-go with an in-memory
// table" means in docs/BENCHMARKS.md: the cost of the wire and of the Go
// HTTP/2 server alone, with no store, no engine and no limits.
//
// It must never grow into a second jobwatch: no durability, no auth, no
// queue rules, no retention, no keepalives on streams. Every other RPC
// answers unimplemented.
package benchfloor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

// Defaults of Config's zero values.
const (
	DefaultWaitCap  = 60 * time.Second
	DefaultClaimCap = 30 * time.Second
	// LeaseTTL is what a claim's lease_expires_at promises; the floor
	// never expires a lease (a worker's heartbeats only echo it).
	LeaseTTL = 30 * time.Second
)

// maxConcurrentStreams matches jobwatch's server (server.Serve), so
// parked calls multiplex the same way on both.
const maxConcurrentStreams = 1 << 20

// compressMinBytes is jobwatch's compression setting (server.New): a
// response under 1 KiB goes uncompressed even to a caller that accepts
// gzip. connect-go's default compresses every response, so a floor
// without it would pay gzip for each small answer of a fan-out that
// jobwatch does not, and the comparison would not be like with like.
// (jobwatch's gzip also shares one compressed body among the calls one
// publish wakes: that is jobwatch's work, not the floor's.)
var compressMinBytes = connect.WithCompressMinBytes(1 << 10)

// Config tunes a Server. The zero value takes the defaults above.
type Config struct {
	WaitCap  time.Duration // longest a WaitJob parks; the caller's deadline may cut it
	ClaimCap time.Duration // longest a ClaimJob parks before answering with no job
}

// Server is the in-memory floor. Create it with New.
type Server struct {
	jobwatchv1connect.UnimplementedJobServiceHandler
	jobwatchv1connect.UnimplementedWorkerServiceHandler

	cfg Config
	seq atomic.Int64

	parkedWaits atomic.Int64
	openWatches atomic.Int64

	mu    sync.Mutex
	jobs  map[string]*job
	ready map[string][]*job // queued jobs by kind, in submission order
	// readyChanged is closed (and replaced) when a job becomes ready while
	// claims are parked: every parked claim looks again.
	readyChanged chan struct{}
	claimsParked int
}

// job is one job's cell: snap is replaced, never changed, on every
// transition, and changed is closed then, so a parked call reads the
// latest snapshot without holding the lock while it sends it.
type job struct {
	snap    *jobwatchv1.Job
	lease   string
	changed chan struct{}
}

// New returns an empty floor server.
func New(cfg Config) *Server {
	if cfg.WaitCap <= 0 {
		cfg.WaitCap = DefaultWaitCap
	}
	if cfg.ClaimCap <= 0 {
		cfg.ClaimCap = DefaultClaimCap
	}
	return &Server{
		cfg:          cfg,
		jobs:         make(map[string]*job),
		ready:        make(map[string][]*job),
		readyChanged: make(chan struct{}),
	}
}

// Handler serves the two services and /metrics: go_goroutines,
// jobwatch_parked_waits and jobwatch_open_watches, named as jobwatch names
// them so a benchmark reads both servers alike.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(jobwatchv1connect.NewJobServiceHandler(s, compressMinBytes))
	mux.Handle(jobwatchv1connect.NewWorkerServiceHandler(s, compressMinBytes))
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "go_goroutines %d\njobwatch_parked_waits %d\njobwatch_open_watches %d\n",
			runtime.NumGoroutine(), s.parkedWaits.Load(), s.openWatches.Load())
	})
	return mux
}

// Serve answers on ln with HTTP/1.1 and h2c until ctx ends, then closes
// every connection (parked calls end with them).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:           s.Handler(),
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxConcurrentStreams},
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	hs.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// set replaces j's snapshot and wakes its parked calls. s.mu is held.
func (j *job) set(snap *jobwatchv1.Job) {
	j.snap = snap
	close(j.changed)
	j.changed = make(chan struct{})
}

// read returns j's snapshot and the channel closed at its next change.
func (s *Server) read(j *job) (*jobwatchv1.Job, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return j.snap, j.changed
}

func (s *Server) find(id string) (*job, error) {
	s.mu.Lock()
	j := s.jobs[id]
	s.mu.Unlock()
	if j == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("job %q not found", id))
	}
	return j, nil
}

func terminal(st jobwatchv1.JobState) bool {
	switch st {
	case jobwatchv1.JobState_JOB_STATE_SUCCEEDED, jobwatchv1.JobState_JOB_STATE_FAILED,
		jobwatchv1.JobState_JOB_STATE_CANCELLED, jobwatchv1.JobState_JOB_STATE_LOST:
		return true
	}
	return false
}

// SubmitJob stores a QUEUED job; hold, unique_key, run_at and wait are
// not part of the floor.
func (s *Server) SubmitJob(_ context.Context, req *jobwatchv1.SubmitJobRequest) (*jobwatchv1.SubmitJobResponse, error) {
	if req.GetKind() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kind is required"))
	}
	now := timestamppb.Now()
	snap := &jobwatchv1.Job{
		Id:          fmt.Sprintf("floor-%012d", s.seq.Add(1)),
		Tenant:      orDefault(req.GetTenant()),
		Kind:        req.GetKind(),
		Queue:       orDefault(req.GetQueue()),
		State:       jobwatchv1.JobState_JOB_STATE_QUEUED,
		Version:     1,
		Payload:     req.GetPayload(),
		Attempt:     1,
		MaxAttempts: 1,
		CreatedAt:   now,
		UpdatedAt:   now,
		RunAt:       now,
	}
	j := &job{snap: snap, changed: make(chan struct{})}
	s.mu.Lock()
	s.jobs[snap.Id] = j
	s.ready[snap.Kind] = append(s.ready[snap.Kind], j)
	if s.claimsParked > 0 {
		close(s.readyChanged)
		s.readyChanged = make(chan struct{})
	}
	s.mu.Unlock()
	return &jobwatchv1.SubmitJobResponse{Job: snap}, nil
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// GetJob returns the job's latest snapshot.
func (s *Server) GetJob(_ context.Context, req *jobwatchv1.GetJobRequest) (*jobwatchv1.GetJobResponse, error) {
	j, err := s.find(req.GetJobId())
	if err != nil {
		return nil, err
	}
	snap, _ := s.read(j)
	return &jobwatchv1.GetJobResponse{Job: snap}, nil
}

// GetServerInfo says only that this is the floor.
func (s *Server) GetServerInfo(context.Context, *jobwatchv1.GetServerInfoRequest) (*jobwatchv1.GetServerInfoResponse, error) {
	return &jobwatchv1.GetServerInfoResponse{Version: "benchfloor"}, nil
}

// WaitJob parks until the job is terminal, the cap passes (OK with the
// latest state) or the caller goes away.
func (s *Server) WaitJob(ctx context.Context, req *jobwatchv1.WaitJobRequest) (*jobwatchv1.WaitJobResponse, error) {
	j, err := s.find(req.GetJobId())
	if err != nil {
		return nil, err
	}
	s.parkedWaits.Add(1)
	defer s.parkedWaits.Add(-1)
	cap := time.NewTimer(s.cfg.WaitCap)
	defer cap.Stop()
	for {
		snap, changed := s.read(j)
		if terminal(snap.GetState()) {
			return &jobwatchv1.WaitJobResponse{Job: snap}, nil
		}
		select {
		case <-changed:
		case <-cap.C:
			return &jobwatchv1.WaitJobResponse{Job: snap}, nil
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// WatchJob sends the current snapshot when it is newer than
// after_version, then each change (latest value only), and ends after a
// terminal one.
func (s *Server) WatchJob(ctx context.Context, req *jobwatchv1.WatchJobRequest, stream *connect.ServerStream[jobwatchv1.WatchJobResponse]) error {
	j, err := s.find(req.GetJobId())
	if err != nil {
		return err
	}
	s.openWatches.Add(1)
	defer s.openWatches.Add(-1)
	sent := req.GetAfterVersion()
	for {
		snap, changed := s.read(j)
		if snap.GetVersion() > sent || sent == 0 {
			if err := stream.Send(&jobwatchv1.WatchJobResponse{Job: snap}); err != nil {
				return err
			}
			sent = snap.GetVersion()
		}
		if terminal(snap.GetState()) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return connect.NewError(connect.CodeCanceled, ctx.Err())
		}
	}
}

// ClaimJob hands out the oldest ready job of one of the kinds (any, if
// none is named), parking until one is ready or the cap passes.
func (s *Server) ClaimJob(ctx context.Context, req *jobwatchv1.ClaimJobRequest) (*jobwatchv1.ClaimJobResponse, error) {
	cap := time.NewTimer(s.cfg.ClaimCap)
	defer cap.Stop()
	for {
		s.mu.Lock()
		j := s.pop(req.GetKinds())
		if j != nil {
			now := timestamppb.Now()
			snap := cloneJob(j.snap)
			snap.State = jobwatchv1.JobState_JOB_STATE_RUNNING
			snap.Version++
			snap.StartedAt, snap.UpdatedAt = now, now
			snap.WorkerId = req.GetWorkerId()
			j.lease = fmt.Sprintf("lease-%d", s.seq.Add(1))
			j.set(snap)
			lease := j.lease
			s.mu.Unlock()
			return &jobwatchv1.ClaimJobResponse{
				Job: snap, LeaseId: lease,
				LeaseExpiresAt: timestamppb.New(now.AsTime().Add(LeaseTTL)),
			}, nil
		}
		s.claimsParked++
		changed := s.readyChanged
		s.mu.Unlock()
		capPassed := false
		select {
		case <-changed:
		case <-cap.C:
			capPassed = true
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.claimsParked--
		s.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		case capPassed:
			return &jobwatchv1.ClaimJobResponse{}, nil
		}
	}
}

// pop removes and returns the oldest ready job of kinds. s.mu is held.
func (s *Server) pop(kinds []string) *job {
	if len(kinds) == 0 {
		var oldest *job
		var kind string
		for k, q := range s.ready {
			if len(q) > 0 && (oldest == nil || q[0].snap.GetId() < oldest.snap.GetId()) {
				oldest, kind = q[0], k
			}
		}
		if oldest != nil {
			s.ready[kind][0] = nil
			s.ready[kind] = s.ready[kind][1:]
		}
		return oldest
	}
	for _, k := range kinds {
		if q := s.ready[k]; len(q) > 0 {
			j := q[0]
			q[0] = nil
			s.ready[k] = q[1:]
			return j
		}
	}
	return nil
}

// cloneJob copies j field by field (a message must not be copied by
// value); payload, result and error are never changed in place, so they
// are shared.
func cloneJob(j *jobwatchv1.Job) *jobwatchv1.Job {
	return &jobwatchv1.Job{
		Id: j.Id, Tenant: j.Tenant, Kind: j.Kind, Queue: j.Queue, State: j.State,
		Version: j.Version, Percent: j.Percent, Step: j.Step, Payload: j.Payload,
		Result: j.Result, Error: j.Error, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		UniqueKey: j.UniqueKey, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt,
		UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt, RunAt: j.RunAt, WorkerId: j.WorkerId,
	}
}

// Heartbeat echoes the lease while it is held.
func (s *Server) Heartbeat(_ context.Context, req *jobwatchv1.HeartbeatRequest) (*jobwatchv1.HeartbeatResponse, error) {
	j, err := s.find(req.GetJobId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.lease != req.GetLeaseId() || j.snap.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("lease not held"))
	}
	return &jobwatchv1.HeartbeatResponse{LeaseExpiresAt: timestamppb.New(time.Now().Add(LeaseTTL))}, nil
}

// CompleteJob ends the job SUCCEEDED with the result.
func (s *Server) CompleteJob(_ context.Context, req *jobwatchv1.CompleteJobRequest) (*jobwatchv1.CompleteJobResponse, error) {
	snap, err := s.end(req.GetJobId(), req.GetLeaseId(), func(j *jobwatchv1.Job) {
		j.State = jobwatchv1.JobState_JOB_STATE_SUCCEEDED
		j.Result = req.GetResult()
	})
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.CompleteJobResponse{Job: snap}, nil
}

// FailJob ends the job FAILED with the error (no retries on the floor).
func (s *Server) FailJob(_ context.Context, req *jobwatchv1.FailJobRequest) (*jobwatchv1.FailJobResponse, error) {
	snap, err := s.end(req.GetJobId(), req.GetLeaseId(), func(j *jobwatchv1.Job) {
		j.State = jobwatchv1.JobState_JOB_STATE_FAILED
		j.Error = req.GetError()
	})
	if err != nil {
		return nil, err
	}
	return &jobwatchv1.FailJobResponse{Job: snap}, nil
}

// end applies a terminal transition under the job's lease and wakes the
// job's parked calls.
func (s *Server) end(id, lease string, apply func(*jobwatchv1.Job)) (*jobwatchv1.Job, error) {
	j, err := s.find(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.lease != lease || j.snap.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("lease not held"))
	}
	now := timestamppb.Now()
	snap := cloneJob(j.snap)
	apply(snap)
	snap.Version++
	snap.UpdatedAt, snap.FinishedAt = now, now
	j.set(snap)
	return snap, nil
}
