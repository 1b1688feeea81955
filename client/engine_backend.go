package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "jobwatch/gen/jobwatch/v1"
	"jobwatch/jobs"
	"jobwatch/store"
)

// EngineBackend runs a Worker in the same process as the engine, with no
// network in between: the demo and single-binary deployments use it.
// claimCap bounds one parked Claim (0: 30s), as the server's claim cap
// does for remote workers.
func EngineBackend(e *jobs.Engine, claimCap time.Duration) WorkerBackend {
	if claimCap <= 0 {
		claimCap = 30 * time.Second
	}
	return engineBackend{e: e, claimCap: claimCap}
}

type engineBackend struct {
	e        *jobs.Engine
	claimCap time.Duration
}

func (b engineBackend) Claim(ctx context.Context, workerID string, kinds, queues []string) (*Lease, error) {
	j, err := b.e.Claim(ctx, jobs.ClaimRequest{WorkerID: workerID, Kinds: kinds, Queues: queues},
		time.Now().Add(b.claimCap))
	if errors.Is(err, jobs.ErrNoJob) {
		return nil, nil
	}
	if err != nil {
		return nil, engineError(err)
	}
	return &Lease{Job: protoJob(&j), ID: j.LeaseID, TTL: j.LeaseExpiresAt.Sub(j.UpdatedAt)}, nil
}

func (b engineBackend) Heartbeat(ctx context.Context, l *Lease, percent int32, step string) (bool, error) {
	j, err := b.e.Heartbeat(ctx, l.Job.GetId(), l.ID, percent, step)
	if err != nil {
		return false, engineError(err)
	}
	return j.State == store.Cancelled, nil
}

func (b engineBackend) Complete(ctx context.Context, l *Lease, result json.RawMessage) error {
	_, err := b.e.Complete(ctx, l.Job.GetId(), l.ID, result)
	return engineError(err)
}

func (b engineBackend) Fail(ctx context.Context, l *Lease, jerr *jobwatchv1.JobError, retryable bool) error {
	_, err := b.e.Fail(ctx, l.Job.GetId(), l.ID,
		store.JobError{Type: jerr.GetType(), Message: jerr.GetMessage()}, retryable)
	return engineError(err)
}

// engineError maps the engine's errors onto what a Worker branches on.
func engineError(err error) error {
	var invalid *jobs.InvalidError
	var state *jobs.StateError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jobs.ErrStaleLease), errors.Is(err, jobs.ErrNotFound), errors.As(err, &state):
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	return err
}

// protoJob converts the engine's job for handlers, which see the same
// jobwatchv1.Job whether they run in-process or remotely. A payload that
// is not valid JSON (the engine refuses those) is left out.
func protoJob(j *store.Job) *jobwatchv1.Job {
	payload, _ := jsonValue(j.Payload)
	result, _ := jsonValue(j.Result)
	pj := &jobwatchv1.Job{
		Id:          j.ID,
		Tenant:      j.Tenant,
		Kind:        j.Kind,
		Queue:       j.Queue,
		State:       protoStates[j.State],
		Version:     j.Version,
		Percent:     j.Percent,
		Step:        j.Step,
		Payload:     payload,
		Result:      result,
		Attempt:     j.Attempt,
		MaxAttempts: j.MaxAttempts,
		UniqueKey:   j.UniqueKey,
		CreatedAt:   timestamp(j.CreatedAt),
		StartedAt:   timestamp(j.StartedAt),
		UpdatedAt:   timestamp(j.UpdatedAt),
		FinishedAt:  timestamp(j.FinishedAt),
		RunAt:       timestamp(j.RunAt),
		WorkerId:    j.WorkerID,
	}
	if j.Error != nil {
		pj.Error = &jobwatchv1.JobError{Type: j.Error.Type, Message: j.Error.Message}
	}
	return pj
}

var protoStates = map[store.State]jobwatchv1.JobState{
	store.Pending:   jobwatchv1.JobState_JOB_STATE_PENDING,
	store.Queued:    jobwatchv1.JobState_JOB_STATE_QUEUED,
	store.Running:   jobwatchv1.JobState_JOB_STATE_RUNNING,
	store.Succeeded: jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
	store.Failed:    jobwatchv1.JobState_JOB_STATE_FAILED,
	store.Cancelled: jobwatchv1.JobState_JOB_STATE_CANCELLED,
	store.Lost:      jobwatchv1.JobState_JOB_STATE_LOST,
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
