// The Node worker continues the submitter's trace: a job submitted in a
// trace runs its handler in a "jobwatch.job.handle" span of that trace,
// under the span the server kept with the job, and the handler's own spans
// nest under it. The application's OpenTelemetry SDK is played here by a
// BasicTracerProvider with an in-memory exporter, registered globally with
// an AsyncLocalStorage context manager, as an application would.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { JobState, Worker } from "../src/node.js";
import { parseTraceparent } from "../src/tracing.js";
import { clientOf, eventually, quiet, server, uniqueKind } from "./server.js";

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
after(async () => {
  await provider.shutdown();
  context.disable();
  trace.disable();
});

/** A client of the server that traces its calls. */
const traced = clientOf({ url: server.tracedUrl });

function newWorker(options: Partial<ConstructorParameters<typeof Worker>[0]> & Pick<ConstructorParameters<typeof Worker>[0], "handlers">): Worker {
  return new Worker({ url: server.tracedUrl, token: server.workerToken, logger: quiet, handleSignals: false, ...options });
}

/** A new trace: its id and a W3C traceparent naming a sampled span in it, as a traced caller sends. */
function newTrace(): { traceId: string; traceparent: string } {
  const traceId = randomBytes(16).toString("hex");
  return { traceId, traceparent: `00-${traceId}-${randomBytes(8).toString("hex")}-01` };
}

/** The span ids of a W3C traceparent. */
function idsOf(traceparent: string): { traceId: string; spanId: string } {
  const [, traceId, spanId] = traceparent.split("-");
  return { traceId: traceId as string, spanId: spanId as string };
}

function spansOf(exp: InMemorySpanExporter, jobId: string): ReadableSpan[] {
  return exp.getFinishedSpans().filter((s) => s.attributes["jobwatch.job.id"] === jobId);
}

test("a job submitted in a trace runs its handler in a jobwatch.job.handle span of that trace, under the job's span, with the handler's own spans under it", async () => {
  const kind = uniqueKind("traced");
  const { traceId, traceparent } = newTrace();
  const job = await traced.submitJob({ kind }, { headers: { traceparent, tracestate: "jw=t1" } });
  const kept = idsOf(job.traceparent);
  assert.equal(kept.traceId, traceId, `the job carries traceparent ${JSON.stringify(job.traceparent)}, not one of the submitting call's trace`);
  assert.equal(job.tracestate, "jw=t1");

  let handlerSpanId = "";
  const worker = newWorker({
    handlers: {
      // The handler's span starts after an await: the context the handler
      // runs in must survive it.
      [kind]: async () => {
        await new Promise((r) => setTimeout(r, 10));
        return trace.getTracer("handler").startActiveSpan("handler.work", (span) => {
          handlerSpanId = span.spanContext().spanId;
          span.end();
          return "ok";
        });
      },
    },
  });
  const run = worker.run();
  const done = await traced.waitForJob(job.id);
  await worker.stop();
  await run;
  assert.equal(done.state, JobState.SUCCEEDED);

  const [handle] = await eventually("the handle span", () => {
    const spans = spansOf(exporter, job.id);
    return spans.length > 0 ? spans : undefined;
  });
  assert.ok(handle !== undefined);
  assert.equal(handle.name, "jobwatch.job.handle");
  assert.equal(handle.kind, SpanKind.CONSUMER);
  assert.equal(handle.spanContext().traceId, traceId, "the handle span is not in the submitter's trace");
  assert.equal(handle.parentSpanContext?.spanId, kept.spanId, "the handle span's parent is not the span the job was submitted in");
  assert.equal(handle.spanContext().traceState?.get("jw"), "t1", "the job's tracestate was not carried on");
  assert.equal(handle.status.code, SpanStatusCode.UNSET);
  assert.deepEqual(handle.attributes, {
    "jobwatch.job.id": job.id,
    "jobwatch.job.kind": kind,
    "jobwatch.job.queue": job.queue,
    "jobwatch.job.attempt": 1,
    "jobwatch.worker.id": worker.id,
  });
  assert.equal(handle.instrumentationScope.name, "@jobwatch/client");

  const work = exporter.getFinishedSpans().find((s) => s.spanContext().spanId === handlerSpanId);
  assert.ok(work !== undefined, "the handler's own span was not exported");
  assert.equal(work.spanContext().traceId, traceId);
  assert.equal(work.parentSpanContext?.spanId, handle.spanContext().spanId, "the handler's own span is not under the handle span");
});

class BadInputError extends Error {}

test("a handler that throws ends its span with status ERROR, its error's type and the exception; a tracerProvider option is used instead of the global one", async () => {
  const own = new InMemorySpanExporter();
  const ownProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(own)] });
  const kind = uniqueKind("traced.fail");
  const { traceId, traceparent } = newTrace();
  const job = await traced.submitJob({ kind }, { headers: { traceparent } });
  const worker = newWorker({
    tracerProvider: ownProvider,
    handlers: {
      [kind]: async () => {
        throw new BadInputError("the width is negative");
      },
    },
  });
  const run = worker.run();
  const done = await traced.waitForJob(job.id);
  await worker.stop();
  await run;
  // (Not shut down: that would empty its exporter.)
  assert.equal(done.state, JobState.FAILED);
  assert.equal(done.error?.type, "BadInputError");

  const [handle] = await eventually("the handle span", () => {
    const spans = spansOf(own, job.id);
    return spans.length > 0 ? spans : undefined;
  });
  assert.ok(handle !== undefined);
  assert.equal(handle.spanContext().traceId, traceId);
  assert.equal(handle.parentSpanContext?.spanId, idsOf(job.traceparent).spanId);
  assert.deepEqual(handle.status, { code: SpanStatusCode.ERROR, message: "BadInputError" });
  const exception = handle.events.find((e) => e.name === "exception");
  assert.ok(exception !== undefined, `no exception event among ${handle.events.map((e) => e.name)}`);
  assert.equal(exception.attributes?.["exception.message"], "the width is negative");
  assert.deepEqual(spansOf(exporter, job.id), [], "the global provider made a span too");
});

test("a job submitted outside a trace runs with no span", async () => {
  const untraced = clientOf(); // the server that does not trace: its jobs carry no trace context
  const kind = uniqueKind("untraced");
  const job = await untraced.submitJob({ kind });
  assert.equal(job.traceparent, "");
  let active: unknown = "not run";
  const worker = newWorker({
    url: server.url,
    handlers: {
      [kind]: () => {
        active = trace.getActiveSpan();
        return "ok";
      },
    },
  });
  const run = worker.run();
  const done = await untraced.waitForJob(job.id);
  await worker.stop();
  await run;
  assert.equal(done.state, JobState.SUCCEEDED);
  assert.equal(active, undefined, "the handler ran in a span");
  assert.deepEqual(spansOf(exporter, job.id), []);
});

test("a traceparent is read as W3C Trace Context says, and an unreadable one is ignored", () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const spanId = "00f067aa0ba902b7";
  const cases: { name: string; traceparent: string; tracestate?: string; want?: { flags: number; state?: string } }[] = [
    { name: "a sampled span", traceparent: `00-${traceId}-${spanId}-01`, want: { flags: 1 } },
    { name: "a span not sampled", traceparent: `00-${traceId}-${spanId}-00`, want: { flags: 0 } },
    { name: "flags other than sampled are dropped", traceparent: `00-${traceId}-${spanId}-03`, want: { flags: 1 } },
    { name: "with a tracestate", traceparent: `00-${traceId}-${spanId}-01`, tracestate: "jw=t1,other=x", want: { flags: 1, state: "jw=t1,other=x" } },
    { name: "a later version with more fields", traceparent: `01-${traceId}-${spanId}-01-more`, want: { flags: 1 } },
    { name: "empty", traceparent: "" },
    { name: "version ff", traceparent: `ff-${traceId}-${spanId}-01` },
    { name: "version 00 with more fields", traceparent: `00-${traceId}-${spanId}-01-more` },
    { name: "an all-zero trace id", traceparent: `00-${"0".repeat(32)}-${spanId}-01` },
    { name: "an all-zero span id", traceparent: `00-${traceId}-${"0".repeat(16)}-01` },
    { name: "upper-case hex", traceparent: `00-${traceId.toUpperCase()}-${spanId}-01` },
    { name: "a short trace id", traceparent: `00-${traceId.slice(2)}-${spanId}-01` },
    { name: "not a traceparent", traceparent: "hello" },
  ];
  for (const c of cases) {
    const sc = parseTraceparent(c.traceparent, c.tracestate);
    if (c.want === undefined) {
      assert.equal(sc, undefined, `${c.name}: read as ${JSON.stringify(sc)}`);
      continue;
    }
    assert.ok(sc !== undefined, `${c.name}: not read`);
    assert.equal(sc.traceId, traceId, c.name);
    assert.equal(sc.spanId, spanId, c.name);
    assert.equal(sc.traceFlags, c.want.flags, c.name);
    assert.equal(sc.isRemote, true, c.name);
    assert.equal(sc.traceState?.serialize(), c.want.state, c.name);
  }
});
