// Package inproc runs a client.Worker in the same process as the engine,
// with no network in between: the demo, the bench and single-binary
// deployments use it. It lives beside the engine so that package client,
// the remote Go client, does not import the engine.
package inproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/wire"
)

// WorkerBackend runs a client.Worker in the same process as the engine, with no
// network in between: the demo and single-binary deployments use it.
// claimCap bounds one parked Claim (0: jobs.DefaultClaimCap, the
// server's default claim cap for remote workers).
func WorkerBackend(e *jobs.Engine, claimCap time.Duration) client.WorkerBackend {
	if claimCap <= 0 {
		claimCap = jobs.DefaultClaimCap
	}
	return engineBackend{e: e, claimCap: claimCap}
}

type engineBackend struct {
	e        *jobs.Engine
	claimCap time.Duration
}

func (b engineBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*client.Lease, error) {
	leases, undecodable, err := b.ClaimJobs(ctx, workerID, kinds, queues, 1)
	switch {
	case err != nil:
		return nil, err
	case len(undecodable) > 0:
		return nil, undecodable[0]
	case len(leases) == 0:
		return nil, nil
	}
	return leases[0], nil
}

// ClaimJobs implements client.BatchClaimer with Engine.ClaimJobs.
func (b engineBackend) ClaimJobs(ctx context.Context, workerID string, kinds, queues []string, max int) ([]*client.Lease, []*client.UndecodableJobError, error) {
	// time.Now, not the engine's clock (which may be a test's, or stepped):
	// the deadline keeps its monotonic reading, and the engine waits for
	// it with a timer.
	deadline := time.Now().Add(b.claimCap)
	js, err := b.e.ClaimJobs(ctx, jobs.ClaimRequest{WorkerID: workerID, Kinds: kinds, Queues: queues}, max, deadline)
	if errors.Is(err, jobtype.ErrNoJob) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, engineError(err)
	}
	var (
		leases      []*client.Lease
		undecodable []*client.UndecodableJobError
	)
	for _, j := range js {
		pj, err := wire.Job(&j)
		if err != nil {
			// Stored before the engine checked what it stores: the
			// worker fails it rather than leave it RUNNING until the
			// lease expires.
			undecodable = append(undecodable, &client.UndecodableJobError{JobID: j.ID, LeaseID: j.LeaseID, Err: err})
			continue
		}
		leases = append(leases, &client.Lease{Job: pj, ID: j.LeaseID, TTL: j.LeaseExpiresAt.Sub(j.UpdatedAt)})
	}
	return leases, undecodable, nil
}

func (b engineBackend) Heartbeat(ctx context.Context, l *client.Lease, percent int32, step string) (bool, error) {
	j, err := b.e.Heartbeat(ctx, l.Job.GetId(), l.ID, percent, step)
	if err != nil {
		return false, engineError(err)
	}
	return j.State != jobtype.Running, nil // cancelled, or timed out (see jobs.Engine.Heartbeat)
}

func (b engineBackend) Complete(ctx context.Context, l *client.Lease, result json.RawMessage) error {
	_, err := b.e.Complete(ctx, l.Job.GetId(), l.ID, result)
	return engineError(err)
}

func (b engineBackend) Fail(ctx context.Context, l *client.Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	_, err := b.e.Fail(ctx, l.Job.GetId(), l.ID,
		jobtype.JobError{Type: jerr.GetType(), Message: jerr.GetMessage()}, retryable)
	return engineError(err)
}

// StopClaiming implements client.ClaimStopper with the engine's.
func (b engineBackend) StopClaiming(ctx context.Context, workerID string) error {
	return b.e.StopClaiming(ctx, workerID, "")
}

var _ client.ClaimStopper = engineBackend{}

// Release implements client.Releaser with the engine's Release.
func (b engineBackend) Release(ctx context.Context, l *client.Lease) error {
	_, err := b.e.Release(ctx, l.Job.GetId(), l.ID)
	return engineError(err)
}

var _ client.Releaser = engineBackend{}

// AppendLogs implements client.LogAppender with the engine's AppendLogs.
func (b engineBackend) AppendLogs(ctx context.Context, l *client.Lease, lines []*jobwatchv1.AppendLogLine) (bool, error) {
	ls := make([]jobtype.LogLine, len(lines))
	for i, line := range lines {
		ls[i] = jobtype.LogLine{Text: line.GetText(), Stream: jobtype.LogStream(line.GetStream())}
		if line.GetTime() != nil {
			ls[i].Time = line.GetTime().AsTime()
		}
	}
	_, cancelled, err := b.e.AppendLogs(ctx, l.Job.GetId(), l.ID, ls)
	return cancelled, engineError(err)
}

var _ client.LogAppender = engineBackend{}

// engineError maps the engine's errors onto what a Worker branches on.
func engineError(err error) error {
	var invalid *jobtype.InvalidError
	var tooLarge *jobtype.TooLargeError
	var state *jobs.StateError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jobs.ErrStaleLease), errors.Is(err, jobtype.ErrNotFound), errors.As(err, &state):
		return fmt.Errorf("%w: %w", client.ErrLeaseLost, err)
	case errors.As(err, &invalid), errors.As(err, &tooLarge):
		return fmt.Errorf("%w: %w", client.ErrRefused, err)
	}
	return err
}
