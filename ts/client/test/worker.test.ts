// The Node worker against a real jobwatch server: claims, heartbeats and
// progress, cancellation, retryable errors, a graceful stop.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  HandlerError,
  JobCancelledError,
  JobState,
  PermissionDeniedError,
  UnauthenticatedError,
  Worker,
  WorkerStoppedError,
  createClient,
  nodeTransport,
  payloadOf,
  resultOf,
  type Job,
  type WorkerLogger,
} from "../src/node.js";
import { ConnectError, type Transport } from "@connectrpc/connect";
import { Code } from "../src/errors.js";
import { Proxy, clientOf, eventually, quiet, server, tap, uniqueKind, type Call } from "./server.js";

const client = clientOf();

function newWorker(options: Partial<ConstructorParameters<typeof Worker>[0]> & Pick<ConstructorParameters<typeof Worker>[0], "handlers">): Worker {
  return new Worker({ url: server.url, token: server.workerToken, logger: quiet, handleSignals: false, ...options });
}

test("a worker runs jobs to SUCCEEDED with their result, as many at once as its concurrency, claiming for every free slot", async () => {
  const kind = uniqueKind("run");
  const calls: Call[] = [];
  let running = 0;
  let most = 0;
  const release = deferred();
  const worker = newWorker({
    concurrency: 2,
    longTransport: tap(nodeTransport(server.url), calls),
    handlers: {
      [kind]: async (job) => {
        running++;
        most = Math.max(most, running);
        await release.promise;
        running--;
        return { doubled: (payloadOf(job) as { n: number }).n * 2 };
      },
    },
  });
  const run = worker.run();
  const jobs = await Promise.all([1, 2, 3, 4].map((n) => client.submitJob({ kind, payload: { n } })));
  await eventually("two handlers running", () => running === 2);
  release.resolve();
  const done = await Promise.all(jobs.map((j) => client.waitForJob(j.id)));
  await worker.stop();
  await run;

  assert.deepEqual(
    done.map((j) => [j.state, resultOf(j)]),
    [1, 2, 3, 4].map((n) => [JobState.SUCCEEDED, { doubled: n * 2 }]),
  );
  assert.equal(most, 2, "more handlers ran at once than the worker's concurrency");
  assert.ok(done.every((j) => j.workerId === worker.id));
  const claims = calls.filter((c) => c.method === "ClaimJob");
  assert.equal(claims[0]?.request["maxJobs"], 2, "the first claim did not ask for both free slots");
  assert.deepEqual(claims[0]?.request["kinds"], [kind]);
});

test("heartbeats keep a job longer than its lease RUNNING, and carry its progress", async () => {
  const kind = uniqueKind("long");
  const worker = newWorker({
    handlers: {
      [kind]: async (_job, progress) => {
        // Twice the lease: without heartbeats the job would be LOST.
        const steps = 8;
        for (let i = 1; i <= steps; i++) {
          progress((i * 100) / steps - 1, `step ${i} of ${steps}`);
          await sleep((2 * server.leaseMs) / steps);
        }
        return "done";
      },
    },
  });
  const run = worker.run();
  const job = await client.submitJob({ kind });
  const seen: Job[] = [];
  for await (const snap of client.watchJob(job.id)) {
    seen.push(snap);
  }
  await worker.stop();
  await run;

  const last = seen.at(-1) as Job;
  assert.equal(last.state, JobState.SUCCEEDED);
  assert.equal(last.attempt, 1, "the job ran again: its lease was lost");
  assert.equal(last.step, "step 8 of 8");
  const running = seen.filter((j) => j.state === JobState.RUNNING && j.step !== "");
  assert.ok(running.length >= 4, `only ${running.length} progress snapshots: ${running.map((j) => j.step)}`);
  const percents = running.map((j) => j.percent);
  assert.deepEqual(percents, [...percents].sort((a, b) => a - b));
});

test("a job cancelled while it runs aborts its handler's signal with JobCancelledError, and the worker goes on", async () => {
  const kind = uniqueKind("cancel");
  const reasons: unknown[] = [];
  const worker = newWorker({
    heartbeatIntervalMs: 100,
    handlers: {
      [kind]: async (job, _progress, signal) => {
        if (payloadOf(job) === "quick") {
          return "quick";
        }
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        reasons.push(signal.reason);
        return "this result is dropped";
      },
    },
  });
  const run = worker.run();
  const slow = await client.submitJob({ kind, payload: "slow" });
  await eventually("the job RUNNING", async () => (await client.getJob(slow.id)).state === JobState.RUNNING);
  await client.cancelJob(slow.id);
  await eventually("the handler's signal aborted", () => reasons.length === 1);
  assert.ok(reasons[0] instanceof JobCancelledError, `reason ${String(reasons[0])}`);

  // The slot is free again: the next job runs.
  const quick = await client.submitJob({ kind, payload: "quick" });
  assert.equal((await client.waitForJob(quick.id)).state, JobState.SUCCEEDED);
  await worker.stop();
  await run;
  const ended = await client.getJob(slow.id);
  assert.equal(ended.state, JobState.CANCELLED);
  assert.equal(ended.result, undefined);
});

class FlakyUpstreamError extends Error {
  readonly retryable = true;
}

class BadInputError extends Error {}

test("errors fail the job with their type; retryable ones run it again, and only public messages reach callers", async () => {
  const kind = uniqueKind("errors");
  const worker = newWorker({
    concurrency: 3,
    handlers: {
      [kind]: (job) => {
        switch (payloadOf(job)) {
          case "flaky":
            if (job.attempt === 1) {
              throw new FlakyUpstreamError("upstream at 10.0.0.7 timed out");
            }
            return "second time lucky";
          case "bad":
            throw new BadInputError("customer 1234's row is malformed");
          case "public":
            throw new HandlerError("the image is 0 bytes long", { type: "EmptyImage", public: true });
          case "not an error":
            throw "a string"; // eslint-disable-line no-throw-literal
        }
        return undefined;
      },
    },
  });
  const run = worker.run();
  const submit = (payload: string) => client.submitJob({ kind, payload, maxAttempts: 2 });
  const [flaky, bad, pub, str] = await Promise.all(["flaky", "bad", "public", "not an error"].map(submit));
  const [flakyDone, badDone, pubDone, strDone] = await Promise.all(
    [flaky, bad, pub, str].map((j) => client.waitForJob((j as Job).id)),
  );
  await worker.stop();
  await run;

  assert.equal(flakyDone.state, JobState.SUCCEEDED);
  assert.equal(flakyDone.attempt, 2);
  assert.deepEqual(resultOf(flakyDone), "second time lucky");
  const history = (await client.getJob(flakyDone.id)).attempts;
  assert.equal(history[0]?.error?.type, "FlakyUpstreamError");
  assert.equal(history[0]?.error?.message, "", "a message not marked public reached callers");

  assert.equal(badDone.state, JobState.FAILED);
  assert.equal(badDone.attempt, 1, "an error not marked retryable ran the job again");
  assert.equal(badDone.error?.type, "BadInputError");
  assert.equal(badDone.error?.message, "");

  assert.equal(pubDone.state, JobState.FAILED);
  assert.equal(pubDone.error?.type, "EmptyImage");
  assert.equal(pubDone.error?.message, "the image is 0 bytes long");

  assert.equal(strDone.state, JobState.FAILED);
  assert.equal(strDone.error?.type, "Error");
});

test("a result JSON would change (NaN, Infinity, half a surrogate pair alone) fails the job as ResultRejected naming where; a whole pair goes through", async () => {
  const kind = uniqueKind("results");
  const results: Record<string, unknown> = {
    nan: { n: NaN },
    infinity: { rows: [{ total: Infinity }] },
    lone: { text: "a\uD800b" },
    pair: { text: "a\uD83D\uDE00b" },
  };
  const worker = newWorker({ concurrency: 4, handlers: { [kind]: (job) => results[payloadOf(job) as string] } });
  const run = worker.run();
  const names = Object.keys(results);
  const jobs = await Promise.all(names.map((payload) => client.submitJob({ kind, payload })));
  const done = new Map((await Promise.all(jobs.map((j) => client.waitForJob(j.id)))).map((j, i) => [names[i], j]));
  await worker.stop();
  await run;

  const expected: Record<string, RegExp> = {
    nan: /^the result is not JSON: result\.n: NaN is not a number JSON can hold$/,
    infinity: /^the result is not JSON: result\.rows\[0\]\.total: Infinity is not a number JSON can hold$/,
    lone: /^the result is not JSON: result\.text: a string holds half of a UTF-16 surrogate pair \(U\+D800\) without its other half/,
  };
  for (const [name, message] of Object.entries(expected)) {
    const job = done.get(name);
    assert.equal(job?.state, JobState.FAILED, `the ${name} result: ${JSON.stringify(job && resultOf(job))}`);
    assert.equal(job?.error?.type, "ResultRejected");
    assert.match(job?.error?.message ?? "", message);
  }
  const pair = done.get("pair");
  assert.equal(pair?.state, JobState.SUCCEEDED);
  assert.deepEqual(resultOf(pair as Job), { text: "a\u{1F600}b" });
});

test("stop() stops claiming and lets a running handler finish; its job is reported before stop() resolves", async () => {
  const kind = uniqueKind("drain");
  const release = deferred();
  let started = 0;
  const worker = newWorker({
    handlers: {
      [kind]: async () => {
        started++;
        await release.promise;
        return "finished while draining";
      },
    },
  });
  const run = worker.run();
  const first = await client.submitJob({ kind });
  await eventually("the handler running", () => started === 1);
  // The worker's one slot is taken: this job waits for it, and must
  // still be waiting once the slot is free again after stop().
  const second = await client.submitJob({ kind });
  const stopped = worker.stop();
  release.resolve();
  await stopped;
  await run;

  const firstDone = await client.getJob(first.id);
  assert.equal(firstDone.state, JobState.SUCCEEDED);
  assert.deepEqual(resultOf(firstDone), "finished while draining");
  assert.equal(started, 1, "the worker claimed a job after stop()");
  assert.equal((await client.getJob(second.id)).state, JobState.QUEUED);
  await client.cancelJob(second.id);
});

test("a handler still running at the drain timeout is stopped, and its job fails as WorkerStopped and runs again", async () => {
  const kind = uniqueKind("stopped");
  const reasons: unknown[] = [];
  let started = 0;
  const worker = newWorker({
    drainTimeoutMs: 300,
    handlers: {
      [kind]: (_job, _progress, signal) => {
        started++;
        signal.addEventListener("abort", () => reasons.push(signal.reason));
        return new Promise(() => {}); // never returns, even when aborted
      },
    },
  });
  const run = worker.run();
  const job = await client.submitJob({ kind, maxAttempts: 2 });
  await eventually("the handler running", () => started === 1);
  await worker.stop();
  await run;

  assert.ok(reasons[0] instanceof WorkerStoppedError, `reason ${String(reasons[0])}`);
  const after = await client.getJob(job.id);
  assert.equal(after.state, JobState.QUEUED, "a job with attempts left was not queued again");
  assert.equal(after.attempts[0]?.error?.type, "WorkerStopped");
  await client.cancelJob(job.id);
});

test("a worker whose claims are refused for good stops, and run() rejects with the refusal", async () => {
  const anonymous = newWorker({ token: "not-a-token", handlers: { "ts.any": () => 1 } });
  await assert.rejects(anonymous.run(), UnauthenticatedError);
  const narrow = newWorker({ token: server.narrowWorkerToken, handlers: { "ts.other": () => 1 } });
  await assert.rejects(narrow.run(), PermissionDeniedError);
});

test("a worker refuses options that cannot work, saying why", () => {
  assert.throws(() => newWorker({ handlers: {} }), /no handlers/);
  assert.throws(() => newWorker({ handlers: { a: () => 1 }, kinds: ["b"] }), /"b", which has no handler/);
  assert.throws(() => newWorker({ handlers: { a: () => 1 }, concurrency: 0 }), /concurrency/);
  assert.throws(() => createClient({ url: "ftp://x" }), /http:\/\//);
});

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** runOne runs worker until its job of kind, submitted here, has ended, and returns the job and the texts of its log. */
async function runOne(worker: Worker, kind: string): Promise<{ done: Job; logs: string[] }> {
  const run = worker.run();
  const job = await client.submitJob({ kind });
  const done = await client.waitForJob(job.id);
  await worker.stop();
  await run;
  const page = await client.jobService.getJobLogs({ jobId: job.id });
  return { done, logs: page.lines.map((l) => l.text) };
}

test("log lines the server could not take while it was away are sent once it is back, none lost, the failures said once at warn", async () => {
  const kind = uniqueKind("logs.away");
  // The first three AppendJobLogs calls fail as a server that cannot be
  // reached does; the rest go through.
  let refusals = 3;
  const real = nodeTransport(server.url);
  const away: Transport = {
    unary: (method, signal, timeoutMs, header, input, contextValues) => {
      if (method.name === "AppendJobLogs" && refusals > 0) {
        refusals--;
        return Promise.reject(new ConnectError("connect ECONNREFUSED", Code.Unavailable, undefined, undefined, new Error("ECONNREFUSED")));
      }
      return real.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: (...args) => real.stream(...args),
  };
  const said: string[] = [];
  const keep = (level: string) => (msg: string) => said.push(`${level} ${msg}`);
  const worker = newWorker({
    transport: away,
    logger: { debug: keep("debug"), info: keep("info"), warn: keep("warn"), error: keep("error") },
    handlers: {
      [kind]: async (_job, progress) => {
        for (let i = 1; i <= 5; i++) {
          progress.log(`line ${i}`);
          await new Promise((r) => setTimeout(r, 50));
        }
        return "ok";
      },
    },
  });
  const { done, logs } = await runOne(worker, kind);
  assert.equal(done.state, JobState.SUCCEEDED);
  assert.equal(refusals, 0, "the transport refused fewer calls than planned");
  assert.deepEqual(logs, ["line 1", "line 2", "line 3", "line 4", "line 5"]);
  const notSent = said.filter((l) => l.includes("log lines not sent"));
  assert.equal(notSent.filter((l) => l.startsWith("warn ")).length, 1, said.join("\n"));
  assert.equal(notSent.length, 3, said.join("\n"));
});

test("log lines whose answer was lost are sent again as they were and kept once", async () => {
  const kind = uniqueKind("logs.lost");
  // The first AppendJobLogs is made, and its answer lost, as when the
  // server restarts after the commit; a line logged meanwhile waits.
  let lose = 1;
  let lost: () => void = () => {};
  const answerLost = new Promise<void>((resolve) => (lost = resolve));
  const real = nodeTransport(server.url);
  const lossy: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      const answer = await real.unary(method, signal, timeoutMs, header, input, contextValues);
      if (method.name === "AppendJobLogs" && lose > 0) {
        lose--;
        lost();
        throw new ConnectError("read ECONNRESET", Code.Unavailable, undefined, undefined, new Error("ECONNRESET"));
      }
      return answer;
    },
    stream: (...args) => real.stream(...args),
  };
  const worker = newWorker({
    transport: lossy,
    handlers: {
      [kind]: async (_job, progress) => {
        progress.log("one");
        progress.log("two");
        await answerLost;
        progress.log("three");
        return "ok";
      },
    },
  });
  const { done, logs } = await runOne(worker, kind);
  assert.equal(done.state, JobState.SUCCEEDED);
  assert.equal(lose, 0, "the transport lost no answer");
  assert.deepEqual(logs, ["one", "two", "three"]);
});

test("an outcome whose answer was lost, sent again, is answered as made, not refused as a lost lease", async () => {
  const kind = uniqueKind("lost.answer");
  // The first CompleteJob is made, and its answer lost, as when the
  // server restarts after the commit.
  let lose = 1;
  const real = nodeTransport(server.url);
  const lossy: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      const answer = await real.unary(method, signal, timeoutMs, header, input, contextValues);
      if (method.name === "CompleteJob" && lose > 0) {
        lose--;
        throw new ConnectError("read ECONNRESET", Code.Unavailable, undefined, undefined, new Error("ECONNRESET"));
      }
      return answer;
    },
    stream: (...args) => real.stream(...args),
  };
  const lines: string[] = [];
  const keep = (level: string) => (msg: string) => lines.push(`${level} ${msg}`);
  const worker = newWorker({
    transport: lossy,
    logger: { debug: keep("debug"), info: keep("info"), warn: keep("warn"), error: keep("error") },
    handlers: { [kind]: async () => "ok" },
  });
  const run = worker.run();
  const job = await client.submitJob({ kind });
  const done = await client.waitForJob(job.id);
  await eventually("the outcome logged", () => lines.some((l) => l.includes(`job ${job.id} succeeded`)));
  await worker.stop();
  await run;
  assert.equal(done.state, JobState.SUCCEEDED);
  assert.equal(lose, 0, "the transport lost no answer");
  assert.ok(!lines.some((l) => l.includes("lease lost")), lines.join("\n"));
});

test("when heartbeats fail for the whole lease, the warning says why they failed, not only that the last ran out of time", async () => {
  const kind = uniqueKind("beats.refused");
  // The first Heartbeat is refused as by a server that is down; the ones
  // after it hang until their deadline, as to one that came back frozen.
  let beats = 0;
  const real = nodeTransport(server.url);
  const away: Transport = {
    unary: (method, signal, timeoutMs, header, input, contextValues) => {
      if (method.name === "Heartbeat" && ++beats === 1) {
        return Promise.reject(new ConnectError("connect ECONNREFUSED 127.0.0.1:1", Code.Unavailable));
      }
      if (method.name === "Heartbeat") {
        return new Promise((_, reject) => setTimeout(() => reject(new ConnectError("the operation timed out", Code.DeadlineExceeded)), timeoutMs ?? 0));
      }
      return real.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: (...args) => real.stream(...args),
  };
  const lines: string[] = [];
  const keep = (level: string) => (msg: string) => lines.push(`${level} ${msg}`);
  let stopped: () => void = () => {};
  const cutOff = new Promise<void>((resolve) => (stopped = resolve));
  const worker = newWorker({
    transport: away,
    logger: { debug: keep("debug"), info: keep("info"), warn: keep("warn"), error: keep("error") },
    handlers: {
      [kind]: async (_job, _progress, signal) => {
        await new Promise((resolve) => signal.addEventListener("abort", resolve));
        stopped();
      },
    },
  });
  const run = worker.run();
  await client.submitJob({ kind });
  await cutOff;
  await worker.stop();
  await run;
  const warning = lines.find((l) => l.includes("heartbeats failed for the whole lease"));
  assert.ok(warning?.includes("ECONNREFUSED"), `warning ${warning}; all:\n${lines.join("\n")}`);
});

test("a job whose claim is answered after stop() is given back to the queue, not started, its attempt not counted", async () => {
  const kind = uniqueKind("late.claim");
  // The server hands the job out; its answer reaches the worker just
  // after stop(), within the grace a claim in flight has.
  let handedOut: () => void = () => {};
  const claimed = new Promise<void>((resolve) => (handedOut = resolve));
  let deliver: () => void = () => {};
  const stopped = new Promise<void>((resolve) => (deliver = resolve));
  const real = nodeTransport(server.url);
  const late: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      const answer = await real.unary(method, signal, timeoutMs, header, input, contextValues);
      if (method.name === "ClaimJob") {
        handedOut();
        await stopped;
      }
      return answer;
    },
    stream: (...args) => real.stream(...args),
  };
  let ran = false;
  const worker = newWorker({
    transport: late,
    handlers: {
      [kind]: async () => {
        ran = true;
        return "ran";
      },
    },
  });
  const run = worker.run();
  const job = await client.submitJob({ kind });
  await claimed;
  const stopping = worker.stop();
  deliver();
  await stopping;
  await run;
  const after = await client.getJob(job.id);
  assert.equal(ran, false, "the handler ran after stop()");
  assert.equal(after.state, JobState.QUEUED);
  assert.equal(after.attempt, 0);
  assert.equal(after.workerId, "");
});

test("stop() has the server answer the worker's parked claim (StopClaiming) rather than cut it, whose answer could be a job", async () => {
  const kind = uniqueKind("parked.stop");
  const outcomes: string[] = [];
  let sent: () => void = () => {};
  const claiming = new Promise<void>((resolve) => (sent = resolve));
  const real = nodeTransport(server.url);
  const recording: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      if (method.name !== "ClaimJob") {
        return real.unary(method, signal, timeoutMs, header, input, contextValues);
      }
      sent();
      try {
        const answer = await real.unary(method, signal, timeoutMs, header, input, contextValues);
        outcomes.push("answered");
        return answer;
      } catch (err) {
        outcomes.push(`failed: ${String(err)}`);
        throw err;
      }
    },
    stream: (...args) => real.stream(...args),
  };
  const worker = newWorker({ transport: recording, handlers: { [kind]: async () => "ran" } });
  const run = worker.run();
  await claiming;
  await worker.stop();
  await run;
  assert.deepEqual(outcomes, ["answered"]);
});

test("run({ signal }) stops the worker when the signal aborts, as stop() does", async () => {
  const kind = uniqueKind("run.signal");
  const worker = newWorker({ handlers: { [kind]: async () => "ok" } });
  const ac = new AbortController();
  const run = worker.run({ signal: ac.signal });
  const job = await client.submitJob({ kind });
  assert.equal((await client.waitForJob(job.id)).state, JobState.SUCCEEDED);
  ac.abort();
  await run;
  // A signal aborted already stops a worker as it starts.
  const late = newWorker({ handlers: { [kind]: async () => "ok" } });
  await late.run({ signal: AbortSignal.abort() });
});

test("a handler's progress.log lines reach the job's log in order, a text with newlines as its lines, all sent before the outcome", async () => {
  const kind = uniqueKind("logs");
  const calls: Call[] = [];
  const worker = newWorker({
    longTransport: tap(nodeTransport(server.url), calls),
    transport: tap(nodeTransport(server.url), calls),
    handlers: {
      [kind]: async (_job, progress) => {
        progress.log("starting");
        progress.log("two\nlines\n", "and one more");
        for (let i = 0; i < 1500; i++) {
          progress.log(`row ${i}`);
        }
        progress(100, "done");
        return "ok";
      },
    },
  });
  const run = worker.run();
  const job = await client.submitJob({ kind });
  const done = await client.waitForJob(job.id);
  await worker.stop();
  await run;
  assert.equal(done.state, JobState.SUCCEEDED);

  const texts: string[] = [];
  let after = 0n;
  for (;;) {
    const page = await client.jobService.getJobLogs({ jobId: job.id, afterSeq: after, limit: 1000 });
    texts.push(...page.lines.map((l) => l.text));
    if (page.lines.length === 0) {
      break;
    }
    after = page.lines.at(-1)!.seq;
  }
  const want = ["starting", "two", "lines", "and one more", ...Array.from({ length: 1500 }, (_, i) => `row ${i}`)];
  assert.deepEqual(texts, want);
  const appends = calls.filter((c) => c.method === "AppendJobLogs").length;
  assert.ok(appends >= 2 && appends <= 10, `${appends} AppendJobLogs calls for 1,504 lines; want a few batches of at most 1,000`);
});

test("a logger without every level, or one that throws, does not stop the worker", async () => {
  // Plain JavaScript may hand over any object: the worker used to stall
  // silently on a logger without debug.
  const kind = uniqueKind("logger");
  const lines: string[] = [];
  for (const logger of [
    { info: (m: string) => void lines.push(m), warn: () => {}, error: () => {} },
    {
      debug: () => {
        throw new Error("the logger broke");
      },
      info: () => {},
      warn: () => {},
      error: () => {},
    },
  ]) {
    const worker = newWorker({ logger: logger as unknown as WorkerLogger, handlers: { [kind]: () => ({ ok: true }) } });
    const run = worker.run();
    const job = await client.submitJob({ kind });
    const done = await client.waitForJob(job.id, { signal: AbortSignal.timeout(20_000) });
    await worker.stop();
    await run;
    assert.equal(done.state, JobState.SUCCEEDED);
  }
});

test("a worker whose connections go silent while its jobs run gives them up without crashing its process, and works on over new ones", async () => {
  // An outside probe froze the connections of a Node worker running four
  // jobs: 15 s later (the pings' 10 s and 5 s) connect-node destroyed the
  // sessions with "PING timed out" as an 'error' event no listener took,
  // and the process died, its jobs left to end LOST.
  const proxy = new Proxy();
  await proxy.start();
  try {
    const kind = uniqueKind("silent");
    let started = 0;
    const worker = newWorker({
      url: proxy.url,
      concurrency: 4,
      handlers: {
        [kind]: async (_job, progress, signal) => {
          started++;
          for (let i = 1; i <= 40 && !signal.aborted; i++) {
            await new Promise((r) => setTimeout(r, 250));
            progress(i * 2.5, `step ${i}`);
            progress.log(`did step ${i}`);
          }
          return "ok";
        },
      },
    });
    const run = worker.run();
    await Promise.all([1, 2, 3, 4].map(() => client.submitJob({ kind })));
    await eventually("four handlers running", () => started === 4);
    proxy.freeze();
    const next = await client.submitJob({ kind });
    const done = await client.waitForJob(next.id, { signal: AbortSignal.timeout(90_000) });
    assert.equal(done.state, JobState.SUCCEEDED);
    await worker.stop();
    await run;
  } finally {
    proxy.thaw();
    await proxy.stop();
  }
});
