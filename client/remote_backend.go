package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/wire"
)

// WorkerBackend returns the backend that runs a Worker against the
// server over WorkerService: claims park on the long-call transport,
// heartbeats and outcomes go over the short one.
func (c *Client) WorkerBackend() WorkerBackend { return remoteBackend{c} }

type remoteBackend struct{ c *Client }

func (b remoteBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*Lease, error) {
	resp, err := b.c.longWorkers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{
		WorkerId: workerID, Kinds: kinds, Queues: queues,
	})
	if err != nil {
		return nil, err // an *UndecodableJobError among them, from the codec
	}
	if resp.GetJob() == nil {
		return nil, nil
	}
	return newLease(resp.GetJob(), resp.GetLeaseId(), resp.GetLeaseExpiresAt()), nil
}

// ClaimJobs implements BatchClaimer with ClaimJob's max_jobs. A server
// that predates max_jobs answers with one job, which it returns as one.
func (b remoteBackend) ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) ([]*Lease, []*UndecodableJobError, error) {
	resp, err := b.c.longWorkers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{
		WorkerId: workerID, Kinds: kinds, Queues: queues, MaxJobs: int32(max),
	})
	var partial *undecodableClaimsError
	switch {
	case errors.As(err, &partial):
		resp = partial.decoded
	case err != nil:
		return nil, nil, err // an *UndecodableJobError of an old server's one job among them
	}
	claims := resp.GetClaims()
	if len(claims) == 0 && resp.GetJob() != nil {
		claims = []*jobwatchv1.Claim{{Job: resp.GetJob(), LeaseId: resp.GetLeaseId(), LeaseExpiresAt: resp.GetLeaseExpiresAt()}}
	}
	leases := make([]*Lease, 0, len(claims))
	for _, c := range claims {
		leases = append(leases, newLease(c.GetJob(), c.GetLeaseId(), c.GetLeaseExpiresAt()))
	}
	var undecodable []*UndecodableJobError
	if partial != nil {
		undecodable = partial.undecodable
	}
	return leases, undecodable, nil
}

// newLease is the lease of job under id expiring at exp.
func newLease(job *jobwatchv1.Job, id string, exp *timestamppb.Timestamp) *Lease {
	l := &Lease{Job: job, ID: id}
	// Both times are the server's, so clock skew does not shorten the TTL.
	if at := job.GetUpdatedAt(); exp != nil && at != nil {
		l.TTL = exp.AsTime().Sub(at.AsTime())
	}
	return l
}

func (b remoteBackend) Heartbeat(ctx context.Context, l *Lease, percent int32, step string) (bool, error) {
	var resp *jobwatchv1.HeartbeatResponse
	err := b.leaseCall(ctx, l, func(ctx context.Context) (err error) {
		resp, err = b.c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{
			JobId: l.Job.GetId(), LeaseId: l.ID, Percent: percent, Step: step,
		})
		return err
	})
	if err != nil {
		return false, leaseError(err)
	}
	return resp.GetCancelled(), nil
}

func (b remoteBackend) Complete(ctx context.Context, l *Lease, result json.RawMessage) error {
	v, err := jsonValue(result)
	if err != nil {
		return err
	}
	return outcomeError(b.leaseCall(ctx, l, func(ctx context.Context) error {
		_, err := b.c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{
			JobId: l.Job.GetId(), LeaseId: l.ID, Result: v,
		})
		return err
	}))
}

func (b remoteBackend) Fail(ctx context.Context, l *Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	return outcomeError(b.leaseCall(ctx, l, func(ctx context.Context) error {
		_, err := b.c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{
			JobId: l.Job.GetId(), LeaseId: l.ID, Error: jerr, Retryable: retryable,
		})
		return err
	}))
}

func (b remoteBackend) Release(ctx context.Context, l *Lease) error {
	return leaseError(b.leaseCall(ctx, l, func(ctx context.Context) error {
		_, err := b.c.workers.ReleaseJob(ctx, &jobwatchv1.ReleaseJobRequest{JobId: l.Job.GetId(), LeaseId: l.ID})
		return err
	}))
}

func (b remoteBackend) StopClaiming(ctx context.Context, workerID string) error {
	_, err := b.c.workers.StopClaiming(ctx, &jobwatchv1.StopClaimingRequest{WorkerId: workerID})
	return err
}

// leaseCall makes a call under lease l. On a client of several servers
// the first try has a third of the lease to be answered: a server that
// froze, its connection still open, would otherwise hold the call until
// ctx ends (the lease's end, for a heartbeat), and the job would be LOST
// while the other servers could have renewed it. Abandoned then, the try
// moves the client to its next server (errUnanswered, failoverHTTP),
// where the call is made once more with what is left of ctx. Heartbeats
// may be sent twice; an outcome sent twice is answered as made both
// times (CompleteJob and FailJob are idempotent under one lease).
func (b remoteBackend) leaseCall(ctx context.Context, l *Lease, call func(context.Context) error) error {
	if !b.c.several || l.TTL <= 0 {
		return call(ctx)
	}
	first, cancel := context.WithTimeoutCause(ctx, l.TTL/3, errUnanswered)
	err := call(first)
	abandoned := err != nil && ctx.Err() == nil && unanswered(first)
	cancel()
	if abandoned {
		return call(ctx)
	}
	return err
}

// outcomeError is leaseError for Complete and Fail, whose answer echoes
// the job: an echo this client cannot decode (a job it could not decode
// when it claimed it) came in a successful answer, so the outcome is
// recorded.
func outcomeError(err error) error {
	if errors.As(err, new(*UndecodableJobError)) {
		return nil
	}
	return leaseError(err)
}

// leaseError: failed_precondition from a worker call means the lease is
// not held any more (cancelled, lost, re-claimed).
func leaseError(err error) error {
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return fmt.Errorf("%w: %s", ErrLeaseLost, connectMessage(err))
	}
	return err
}

// jsonValue converts JSON text to the wire's google.protobuf.Value.
func jsonValue(raw json.RawMessage) (*structpb.Value, error) {
	v, err := wire.Value(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: result is not JSON: %s", ErrRefused, wire.DecodeMistake(err, raw))
	}
	if v == nil {
		return nil, nil
	}
	if err := wire.CheckExactJSON(raw, "result"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return v, nil
}
