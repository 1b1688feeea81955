package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

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
	l := &Lease{Job: resp.GetJob(), ID: resp.GetLeaseId()}
	// Both times are the server's, so clock skew does not shorten the TTL.
	if exp, at := resp.GetLeaseExpiresAt(), resp.GetJob().GetUpdatedAt(); exp != nil && at != nil {
		l.TTL = exp.AsTime().Sub(at.AsTime())
	}
	return l, nil
}

func (b remoteBackend) Heartbeat(ctx context.Context, l *Lease, percent int32, step string) (bool, error) {
	resp, err := b.c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{
		JobId: l.Job.GetId(), LeaseId: l.ID, Percent: percent, Step: step,
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
	_, err = b.c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{
		JobId: l.Job.GetId(), LeaseId: l.ID, Result: v,
	})
	return outcomeError(err)
}

func (b remoteBackend) Fail(ctx context.Context, l *Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	_, err := b.c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{
		JobId: l.Job.GetId(), LeaseId: l.ID, Error: jerr, Retryable: retryable,
	})
	return outcomeError(err)
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
		return nil, fmt.Errorf("%w: result is not JSON: %w", ErrRefused, err)
	}
	return v, nil
}
