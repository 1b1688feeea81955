// The worker's side of a job's trace: a job submitted by a traced call
// carries that call's W3C trace context (Job.traceparent, tracestate), and
// the worker runs its handler in a span that continues it, as the Go
// Worker does (client/worker.go, startSpan). Only the Node worker imports
// this file: the browser entry (and so the page) never loads
// @opentelemetry/api.
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  createTraceState,
  isSpanContextValid,
  trace,
  type Context,
  type Span,
  type SpanContext,
  type Tracer,
  type TracerProvider,
} from "@opentelemetry/api";
import type { Job } from "./gen/jobwatch/v1/jobwatch_pb.js";

/** The instrumentation scope of the worker's spans. */
export const tracerName = "@jobwatch/client";

/** The name of the span a handler runs in, the same in every jobwatch worker. */
export const handleSpanName = "jobwatch.job.handle";

/**
 * tracerOf is the worker's tracer: provider's, else the global one, which
 * makes nothing until the application registers a provider and follows
 * it once it does (the API's proxy), so tracing costs nothing by default.
 */
export function tracerOf(provider: TracerProvider | undefined): Tracer {
  return provider !== undefined ? provider.getTracer(tracerName) : trace.getTracer(tracerName);
}

// W3C Trace Context, level 1: version-traceid-parentid-flags, lowercase
// hex. A later version may add fields after a dash, which a reader of
// version 00 ignores; version ff is invalid.
const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * parseTraceparent is the remote span context a job's traceparent and
 * tracestate name, or undefined when the traceparent is empty or not one
 * the W3C format allows (an all-zero id, version ff, anything after the
 * flags of version 00). A tracestate the API cannot read is dropped, not
 * the trace.
 */
export function parseTraceparent(traceparent: string, tracestate = ""): SpanContext | undefined {
  const m = traceparentPattern.exec(traceparent.trim());
  if (m === null) {
    return undefined;
  }
  const [, version, traceId, spanId, flags, rest] = m as unknown as [string, string, string, string, string, string | undefined];
  if (version === "ff" || (version === "00" && rest !== undefined)) {
    return undefined;
  }
  const sc: SpanContext = {
    traceId,
    spanId,
    // Only the sampled bit has a meaning today; the others are kept off.
    traceFlags: parseInt(flags, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  if (tracestate.trim() !== "") {
    try {
      sc.traceState = createTraceState(tracestate);
    } catch {
      // An unreadable tracestate is vendor data: the trace goes on without it.
    }
  }
  return isSpanContextValid(sc) ? sc : undefined;
}

/** HandleSpan is a running handler's span, and the context the handler runs in. */
export interface HandleSpan {
  span: Span;
  context: Context;
}

/**
 * startHandleSpan starts the span job's handler runs in, "jobwatch.job.handle",
 * a consumer span whose parent is the trace context the job was submitted
 * with; undefined (no span) for a job without one, or with one that cannot
 * be read. The span starts from the root context, not the worker's: the
 * handler belongs to the submitter's trace, and nothing of the context the
 * worker was started in should leak into it.
 */
export function startHandleSpan(tracer: Tracer, job: Job, workerId: string): HandleSpan | undefined {
  if (job.traceparent === "") {
    return undefined;
  }
  const parent = parseTraceparent(job.traceparent, job.tracestate);
  if (parent === undefined) {
    return undefined;
  }
  const parentContext = trace.setSpanContext(ROOT_CONTEXT, parent);
  const span = tracer.startSpan(
    handleSpanName,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        "jobwatch.job.id": job.id,
        "jobwatch.job.kind": job.kind,
        "jobwatch.job.queue": job.queue,
        "jobwatch.job.attempt": job.attempt,
        "jobwatch.worker.id": workerId,
      },
    },
    parentContext,
  );
  return { span, context: trace.setSpan(parentContext, span) };
}

/**
 * endHandleSpan ends a handler's span with how the handler ended: for a
 * thrown error, status ERROR with the error's type (as the job's
 * error.type) and the exception recorded.
 */
export function endHandleSpan(span: Span, outcome: { result: unknown } | { error: unknown }, errorType: (err: unknown) => string): void {
  if ("error" in outcome) {
    const err = outcome.error;
    span.recordException(err instanceof Error ? err : String(err));
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorType(err) });
  }
  span.end();
}
