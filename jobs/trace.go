package jobs

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/internal/tracing"
	"github.com/jobwatch/jobwatch/jobtype"
)

// The engine's spans, in the trace of the call that submitted a job (its
// TraceParent), made only when Config.Tracer is set and the job has a
// trace context: what a user looks for between the submit and the end.
//
//   - "jobwatch.job.queued": from when the job became ready (its RunAt,
//     or its creation) to the claim that took it;
//   - "jobwatch.job.claim": the claim, with the worker;
//   - "jobwatch.job.attempt": one attempt, from its claim to its end
//     (completion, failure, loss), with its outcome and error;
//   - "jobwatch.job.end": the job's end, when an attempt's end is the
//     job's (SUCCEEDED, FAILED, LOST), at that moment, with the state and
//     how long the job took from its submission.
//
// Each is made once its end is known, with explicit times, so no span is
// kept open across calls and a replica that dies leaves none dangling.

// traceClaim records a claimed job's queued span and claim span.
func (e *Engine) traceClaim(j jobtype.Job, queuedAt, claimedAt time.Time) {
	if e.cfg.Tracer == nil || j.TraceParent == "" {
		return
	}
	ctx := tracing.Context{Parent: j.TraceParent, State: j.TraceState}.Into(context.Background())
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("jobwatch.job.id", j.ID), attribute.String("jobwatch.job.kind", j.Kind),
		attribute.String("jobwatch.job.queue", j.Queue), attribute.String("jobwatch.job.tenant", j.Tenant),
		attribute.Int("jobwatch.job.attempt", int(j.Attempt)),
	}
	if queuedAt.IsZero() || queuedAt.After(claimedAt) {
		queuedAt = claimedAt
	}
	_, queued := e.cfg.Tracer.Start(ctx, "jobwatch.job.queued", trace.WithTimestamp(queuedAt), trace.WithAttributes(attrs...))
	queued.End(trace.WithTimestamp(claimedAt))
	_, claim := e.cfg.Tracer.Start(ctx, "jobwatch.job.claim", trace.WithTimestamp(claimedAt),
		trace.WithAttributes(append(attrs, attribute.String("jobwatch.worker.id", j.WorkerID))...))
	claim.End(trace.WithTimestamp(claimedAt))
}

// traceAttemptEnd records the attempt span of a job whose attempt a
// write just ended: its last history entry is that attempt.
func (e *Engine) traceAttemptEnd(j jobtype.Job) {
	if e.cfg.Tracer == nil || j.TraceParent == "" || len(j.History) == 0 {
		return
	}
	ctx := tracing.Context{Parent: j.TraceParent, State: j.TraceState}.Into(context.Background())
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	h := j.History[len(j.History)-1]
	if h.StartedAt.IsZero() {
		return // an operator's action, no run
	}
	_, span := e.cfg.Tracer.Start(ctx, "jobwatch.job.attempt", trace.WithTimestamp(h.StartedAt), trace.WithAttributes(
		attribute.String("jobwatch.job.id", j.ID), attribute.String("jobwatch.job.kind", j.Kind),
		attribute.Int("jobwatch.job.attempt", int(h.Attempt)), attribute.String("jobwatch.worker.id", h.WorkerID),
		attribute.String("jobwatch.job.outcome", string(h.State))))
	if h.Error != nil {
		span.SetStatus(codes.Error, h.Error.Type)
		span.SetAttributes(attribute.String("jobwatch.job.error.type", h.Error.Type))
	}
	span.End(trace.WithTimestamp(h.FinishedAt))
	if !j.State.Terminal() {
		return // queued again for another attempt
	}
	_, end := e.cfg.Tracer.Start(ctx, "jobwatch.job.end", trace.WithTimestamp(j.FinishedAt), trace.WithAttributes(
		attribute.String("jobwatch.job.id", j.ID), attribute.String("jobwatch.job.kind", j.Kind),
		attribute.String("jobwatch.job.state", string(j.State)),
		attribute.Float64("jobwatch.job.duration_seconds", j.FinishedAt.Sub(j.CreatedAt).Seconds())))
	if j.State != jobtype.Succeeded {
		end.SetStatus(codes.Error, string(j.State))
	}
	end.End(trace.WithTimestamp(j.FinishedAt))
}
