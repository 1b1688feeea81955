// The client against a real jobwatch server: waits across caps and
// outages, watches across stream lifetimes and dropped connections, typed
// errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type * as net from "node:net";
import { ConnectError, type Transport } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  AlreadyActiveError,
  Code,
  JobNotStartedError,
  JobService,
  JobState,
  JobwatchError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  UnauthenticatedError,
  WaitMode,
  createClient,
  nodeTransport,
  jobJson,
  payloadOf,
  resultOf,
  timestampDate,
  transient,
  type Job,
  type JobwatchClient,
} from "../src/node.js";
import {
  Proxy,
  claimOne,
  clientOf,
  eventually,
  server,
  tap,
  tappedClient,
  uniqueKind,
  workerClientOf,
  type Call,
} from "./server.js";

const workers = workerClientOf();

test("waitForJob re-issues WaitJob at each cap and resolves with the job once it ends", async () => {
  const calls: Call[] = [];
  const client = tappedClient(calls);
  const kind = uniqueKind("wait");
  const job = await client.submitJob({ kind, payload: { n: 1 } });
  let settled = false;
  const waiting = client.waitForJob(job.id).finally(() => (settled = true));

  const lease = await claimOne(workers, kind);
  // Three caps pass with the job RUNNING: each answer is OK and
  // non-terminal, and the wait asks again.
  await eventually("three WaitJob calls", () => calls.filter((c) => c.method === "WaitJob").length >= 4);
  assert.equal(settled, false, "waitForJob resolved while the job was still running");
  await workers.workerService.heartbeat({ ...lease, percent: 50, step: "half way" });
  await workers.workerService.completeJob({ ...lease, result: fromJson(ValueSchema, { thumbnails: 3 }) });

  const done = await waiting;
  assert.equal(done.id, job.id);
  assert.equal(done.state, JobState.SUCCEEDED);
  assert.deepEqual(resultOf(done), { thumbnails: 3 });
  assert.equal(done.step, "half way");
});

test("waitForJob rides out a server it cannot reach, retrying with backoff, and resolves once it is back", async () => {
  const proxy = new Proxy();
  await proxy.start();
  const retries: { err: unknown; delayMs: number }[] = [];
  const calls: Call[] = [];
  const client = createClient({
    url: proxy.url,
    token: server.clientToken,
    longTransport: tap(nodeTransport(proxy.url), calls),
    backoff: { initialMs: 20, maxMs: 200 },
    onRetry: (err, delayMs) => retries.push({ err, delayMs }),
  });
  const kind = uniqueKind("outage");
  const job = await client.submitJob({ kind });
  const waiting = client.waitForJob(job.id);
  try {
    // The wait is parked when the connection breaks; then every new
    // connection is refused.
    await eventually("the wait to be parked again after a cap", () => calls.filter((c) => c.method === "WaitJob").length >= 2);
    await proxy.stop();
    await eventually("three retries", () => retries.length >= 3);
    const lease = await claimOne(workers, kind);
    await workers.workerService.completeJob({ ...lease, result: fromJson(ValueSchema, "ok") });
    await proxy.start();

    const done = await waiting;
    assert.equal(done.state, JobState.SUCCEEDED);
    assert.deepEqual(resultOf(done), "ok");
    for (const r of retries) {
      assert.ok(r.delayMs <= 200, `a retry slept ${r.delayMs} ms, more than the backoff's max`);
      assert.ok(r.err instanceof Error, `retried ${String(r.err)}`);
    }
  } finally {
    await proxy.stop();
  }
});

test("waitForJob of a held job is JobNotStartedError, of an unknown one NotFoundError", async () => {
  const client = clientOf();
  const held = await client.submitJob({ kind: uniqueKind("held"), hold: true });
  await assert.rejects(client.waitForJob(held.id), (err) => {
    assert.ok(err instanceof JobNotStartedError, `got ${String(err)}`);
    assert.ok(err instanceof JobwatchError);
    assert.equal(err.code, Code.FailedPrecondition);
    return true;
  });
  await assert.rejects(client.waitForJob("j_doesnotexist000000000000"), (err) => {
    assert.ok(err instanceof NotFoundError, `got ${String(err)}`);
    assert.equal(err.code, Code.NotFound);
    return true;
  });
  const cancelled = await client.cancelJob(held.id);
  assert.equal(cancelled.state, JobState.CANCELLED);
  await client.deleteJob(held.id);
  await assert.rejects(client.getJob(held.id), NotFoundError);
  await assert.rejects(client.waitForJob(held.id), NotFoundError);
});

test("waitForJob through https:// to the plain-HTTP server rejects at once instead of retrying for ever", async () => {
  let retries = 0;
  const client = createClient({
    url: server.url.replace("http://", "https://"),
    token: server.clientToken,
    onRetry: () => {
      retries++;
    },
  });
  await assert.rejects(client.waitForJob("j_doesnotexist000000000000", { signal: AbortSignal.timeout(30_000) }), (err) => {
    assert.ok(err instanceof JobwatchError, `got ${String(err)}`);
    assert.notEqual((err as { name?: string }).name, "TimeoutError");
    return true;
  });
  assert.equal(retries, 0);
});

test("waitForJob stops when its signal is aborted, with the signal's reason", async () => {
  const client = clientOf();
  const job = await client.submitJob({ kind: uniqueKind("abort") });
  const ac = new AbortController();
  const waiting = client.waitForJob(job.id, { signal: ac.signal });
  const reason = new Error("the caller gave up");
  setTimeout(() => ac.abort(reason), 50);
  await assert.rejects(waiting, (err) => err === reason);
  await client.cancelJob(job.id);
});

test("a second active job with the same unique key is AlreadyActiveError naming the active one", async () => {
  const client = clientOf();
  const kind = uniqueKind("unique");
  const key = `report-${kind}`;
  const first = await client.submitJob({ kind, uniqueKey: key });
  await assert.rejects(client.submitJob({ kind, uniqueKey: key }), (err) => {
    assert.ok(err instanceof AlreadyActiveError, `got ${String(err)}`);
    assert.ok(err instanceof JobwatchError);
    assert.equal(err.code, Code.AlreadyExists);
    assert.equal(err.codeName, "already_exists");
    assert.equal(err.activeJobId, first.id);
    assert.equal(err.uniqueKey, key);
    return true;
  });
  // Once the first has ended the key is free again.
  await client.cancelJob(first.id);
  const second = await client.submitJob({ kind, uniqueKey: key });
  assert.notEqual(second.id, first.id);
  await client.cancelJob(second.id);
});

test("a submission past the tenant's max_queued is QuotaExceededError with the numbers, and creates nothing", async () => {
  const client = createClient({ url: server.url, token: server.quotaToken });
  const kind = uniqueKind("quota");
  const first = await client.submitJob({ kind });
  const refused = (adding: bigint) => (err: unknown) => {
    assert.ok(err instanceof QuotaExceededError, `got ${String(err)}`);
    assert.ok(err instanceof JobwatchError);
    assert.equal(err.code, Code.ResourceExhausted);
    assert.equal(err.codeName, "resource_exhausted");
    assert.deepEqual([err.tenant, err.maxQueued, err.queued, err.adding], ["ts-quota", 1n, 1n, adding]);
    assert.match(err.rawMessage, /its max_queued is 1/);
    return true;
  };
  await assert.rejects(client.submitJob({ kind }), refused(1n));
  await assert.rejects(client.submitJobs([{ kind }, { kind }]), refused(2n));
  assert.equal((await client.listJobs({ kind })).jobs.length, 1);
  // Once the first has ended there is room again.
  await client.cancelJob(first.id);
  const second = await client.submitJob({ kind });
  await client.cancelJob(second.id);
  // Another resource_exhausted, a payload too large, is no quota.
  await assert.rejects(client.submitJob({ kind, payload: "x".repeat(300 << 10) }), (err) => {
    assert.ok(err instanceof JobwatchError && !(err instanceof QuotaExceededError), `got ${String(err)}`);
    assert.equal(err.code, Code.ResourceExhausted);
    return true;
  });
});

test("calls without a good token, or for another tenant, are refused with their own error classes", async () => {
  const anonymous = createClient({ url: server.url });
  await assert.rejects(anonymous.submitJob({ kind: "x" }), UnauthenticatedError);
  const wrong = createClient({ url: server.url, token: "not-a-token" });
  await assert.rejects(wrong.listJobs(), UnauthenticatedError);
  await assert.rejects(clientOf().listJobs({ tenant: "someone-else" }), PermissionDeniedError);
  assert.throws(() => createClient({ url: "127.0.0.1:8080" }), /must start with http:\/\/ or https:\/\//);
  // JOBWATCH_SERVER may list replicas for the Go client: not here.
  assert.throws(() => createClient({ url: "http://127.0.0.1:1,http://127.0.0.1:2" }), /is a list: this client takes one address/);
  // A token read from a file keeps its newline; it is sent without.
  await createClient({ url: server.url, token: `${server.clientToken}\n` }).listJobs();
  assert.throws(() => createClient({}), /pass url/);
});

test("bad input is invalid_argument with the server's reason", async () => {
  await assert.rejects(clientOf().submitJob({ kind: "" }), (err) => {
    assert.ok(err instanceof JobwatchError);
    assert.equal(err.code, Code.InvalidArgument);
    assert.match(err.rawMessage, /kind/);
    return true;
  });
});

test("watchJob yields every version once, in order, across the server's stream lifetime, and ends with the terminal one", async () => {
  const calls: Call[] = [];
  const client = tappedClient(calls);
  const kind = uniqueKind("watch");
  const job = await client.submitJob({ kind });
  const seen: Job[] = [];
  const watching = (async () => {
    for await (const snap of client.watchJob(job.id)) {
      seen.push(snap);
    }
  })();

  const lease = await claimOne(workers, kind);
  // Progress for more than two stream lifetimes, slowly enough that the
  // reader sees each step.
  const steps = Math.ceil((2.5 * server.streamLifetimeMs) / 150);
  for (let i = 1; i <= steps; i++) {
    const percent = Math.round((i * 90) / steps);
    await workers.workerService.heartbeat({ ...lease, percent, step: `step ${i}` });
    await eventually(`step ${i} to be seen`, () => seen.at(-1)?.step === `step ${i}`);
    await new Promise((r) => setTimeout(r, 150));
  }
  await workers.workerService.completeJob(lease);
  await watching;

  const versions = seen.map((j) => j.version);
  assert.deepEqual(versions, [...versions].sort((a, b) => (a < b ? -1 : 1)));
  assert.equal(new Set(versions).size, versions.length, `a version came twice: ${versions}`);
  assert.equal(seen.at(-1)?.state, JobState.SUCCEEDED);
  assert.equal(seen.filter((j) => j.state === JobState.SUCCEEDED).length, 1);

  // The stream was opened again after each lifetime, each time after
  // the last version yielded before it.
  const watches = calls.filter((c) => c.method === "WatchJob").map((c) => c.request["afterVersion"] as bigint);
  assert.ok(watches.length >= 3, `only ${watches.length} WatchJob streams for ${2.5 * server.streamLifetimeMs} ms`);
  assert.equal(watches[0], 0n);
  for (const after of watches.slice(1)) {
    assert.ok(versions.includes(after), `resumed after version ${after}, which was never yielded`);
  }
});

test("watchJob resumes after a dropped connection without repeating a version", async () => {
  const proxy = new Proxy();
  await proxy.start();
  try {
    const client = createClient({ url: proxy.url, token: server.clientToken, backoff: { initialMs: 20, maxMs: 200 } });
    const kind = uniqueKind("drop");
    const job = await client.submitJob({ kind });
    const seen: Job[] = [];
    const watching = (async () => {
      for await (const snap of client.watchJob(job.id)) {
        seen.push(snap);
      }
    })();
    await eventually("the first snapshot", () => seen.length === 1);
    const lease = await claimOne(workers, kind);
    await workers.workerService.heartbeat({ ...lease, percent: 10, step: "before the cut" });
    await eventually("progress before the cut", () => seen.at(-1)?.step === "before the cut");
    proxy.cut();
    await workers.workerService.heartbeat({ ...lease, percent: 60, step: "during the cut" });
    await workers.workerService.completeJob(lease);
    await watching;

    const versions = seen.map((j) => j.version);
    assert.equal(new Set(versions).size, versions.length, `a version came twice: ${versions}`);
    assert.equal(seen.at(-1)?.state, JobState.SUCCEEDED);
    assert.equal(seen.at(-1)?.percent, 100);
  } finally {
    await proxy.stop();
  }
});

test("watchJob opens its stream again when it has heard nothing, not even a keepalive, for streamIdleTimeoutMs", async () => {
  const proxy = new Proxy();
  await proxy.start();
  try {
    const retries: unknown[] = [];
    const idleMs = 4 * server.keepaliveMs;
    // HTTP/1.1, so that nothing but the stream itself (no HTTP/2 ping)
    // can tell the connection is dead, as in a browser.
    const viaProxy = nodeTransport(proxy.url, "1.1");
    const client = createClient({
      transport: viaProxy,
      token: server.clientToken,
      streamIdleTimeoutMs: idleMs,
      backoff: { initialMs: 20, maxMs: 200 },
      onRetry: (err) => retries.push(err),
    });
    const kind = uniqueKind("idle");
    const job = await clientOf().submitJob({ kind });
    const seen: Job[] = [];
    const watching = (async () => {
      for await (const snap of client.watchJob(job.id)) {
        seen.push(snap);
      }
    })();
    await eventually("the first snapshot", () => seen.length === 1);
    // Keepalives keep a stream quiet for longer than idleMs alive.
    await new Promise((r) => setTimeout(r, 2 * idleMs));
    assert.equal(retries.length, 0, `a live stream was opened again: ${retries.map(String)}`);

    proxy.freeze();
    const lease = await claimOne(workers, kind);
    await workers.workerService.completeJob(lease);
    // The frozen stream is given up for a new one, on a new connection.
    await eventually("the silent stream to be given up", () => retries.length >= 1);
    assert.match(String(retries[0]), /presumed dead|abort/i);
    await watching;
    assert.equal(seen.at(-1)?.state, JobState.SUCCEEDED);
  } finally {
    proxy.thaw();
    await proxy.stop();
  }
});

test("watchJob of an unknown job is NotFoundError; breaking out of the loop ends the watch", async () => {
  const client = clientOf();
  await assert.rejects(async () => {
    for await (const _ of client.watchJob("j_doesnotexist000000000000")) {
      assert.fail("a snapshot of a job that does not exist");
    }
  }, NotFoundError);

  const job = await client.submitJob({ kind: uniqueKind("break") });
  for await (const snap of client.watchJob(job.id)) {
    assert.equal(snap.state, JobState.QUEUED);
    break;
  }
  // After a version already seen, the first one yielded is the next.
  const cancelled = await client.cancelJob(job.id);
  for await (const snap of client.watchJob(job.id, { afterVersion: cancelled.version - 1n })) {
    assert.equal(snap.version, cancelled.version);
    assert.equal(snap.state, JobState.CANCELLED);
  }
});

test("watchJob after the version at which the job ended ends at once, yielding nothing and retrying nothing", async () => {
  // The server ends such a stream at once with nothing to send, as it
  // ends one of a server shutting down; the client used to take it for
  // the latter and open it again until the signal ran out.
  const calls: Call[] = [];
  const retries: unknown[] = [];
  const client = createClient({
    url: server.url,
    token: server.clientToken,
    longTransport: tap(nodeTransport(server.url), calls),
    onRetry: (err) => retries.push(err),
  });
  const job = await client.submitJob({ kind: uniqueKind("ended") });
  const cancelled = await client.cancelJob(job.id);
  const seen: Job[] = [];
  for await (const snap of client.watchJob(job.id, { afterVersion: cancelled.version, signal: AbortSignal.timeout(20_000) })) {
    seen.push(snap);
  }
  assert.deepEqual(seen, []);
  assert.deepEqual(retries.map(String), []);
  assert.equal(calls.filter((c) => c.method === "WatchJob").length, 1);
});

test("watchJobs follows a batch across stream lifetimes, resuming with the last resume token", async () => {
  const calls: Call[] = [];
  const client = tappedClient(calls);
  const batch = uniqueKind("batch").replaceAll(".", "-");
  const ac = new AbortController();
  const latest = new Map<string, Job>();
  const following = (async () => {
    for await (const update of client.watchJobs({ batch, signal: ac.signal })) {
      for (const j of update.jobs) {
        if ((latest.get(j.id)?.version ?? 0n) < j.version) {
          latest.set(j.id, j);
        }
      }
    }
  })();

  // Jobs come and end over more than two stream lifetimes.
  const ids: string[] = [];
  const rounds = 3;
  for (let i = 0; i < rounds; i++) {
    const job = await client.submitJob({ kind: uniqueKind("fed"), batch });
    ids.push(job.id);
    await eventually(`job ${i} on the feed`, () => latest.has(job.id));
    await new Promise((r) => setTimeout(r, server.streamLifetimeMs));
    await client.cancelJob(job.id);
  }
  await eventually("every job CANCELLED on the feed", () =>
    ids.every((id) => latest.get(id)?.state === JobState.CANCELLED),
  );
  ac.abort();
  await assert.rejects(following, (err) => (err as Error).name === "AbortError");

  const streams = calls.filter((c) => c.method === "WatchJobs").map((c) => c.request["resumeToken"] as string);
  assert.ok(streams.length >= 3, `only ${streams.length} WatchJobs streams`);
  assert.equal(streams[0], "");
  assert.ok(streams.slice(1).every((t) => t !== ""), `a stream resumed without a token: ${JSON.stringify(streams)}`);
});

test("watchJobs resumed from a token the server cannot resume from yields its start over first, even with no jobs to bring", async () => {
  // A token of another database (the traced server's) stands for one
  // from before a restore of this server's database from an older copy.
  const elsewhere = clientOf({ url: server.tracedUrl });
  const batch = uniqueKind("restored").replaceAll(".", "-");
  await elsewhere.submitJob({ kind: uniqueKind("elsewhere"), batch });
  let token = "";
  for await (const msg of elsewhere.watchJobs({ batch })) {
    token = msg.resumeToken;
    if (token !== "") {
      break;
    }
  }
  const client = clientOf();
  const first = async (b: string) => {
    for await (const msg of client.watchJobs({ batch: b, resumeToken: token })) {
      return msg;
    }
    throw new Error("watchJobs ended");
  };
  const empty = await first(uniqueKind("none").replaceAll(".", "-"));
  assert.equal(empty.startedOver, true, "the start over of a batch with no jobs was not yielded");
  assert.deepEqual(empty.jobs, []);
  const mine = await client.submitJob({ kind: uniqueKind("mine"), batch });
  const fresh = await first(batch);
  assert.equal(fresh.startedOver, true);
  assert.deepEqual(fresh.jobs.map((j) => j.id), [mine.id], "the stream did not start over with this server's jobs of the batch");
});

test("a payload nested as deep as the server takes (128 levels) is submitted and read back; deeper, the server refuses it", async () => {
  const client = clientOf();
  // n lists, one in the other, around a number.
  const nest = (n: number) => {
    let p: unknown = 1;
    for (let i = 0; i < n; i++) {
      p = [p];
    }
    return p as JsonValue;
  };
  const job = await client.submitJob({ kind: uniqueKind("deep"), payload: nest(128) });
  assert.deepEqual(payloadOf(await client.getJob(job.id)), nest(128));
  await client.cancelJob(job.id);
  await assert.rejects(client.submitJob({ kind: uniqueKind("deeper"), payload: nest(129) }), (err) => {
    assert.ok(err instanceof JobwatchError, `got ${String(err)}`);
    assert.equal(err.code, Code.InvalidArgument);
    return true;
  });
});

test("waitForJobs resolves once the first of a batch has ended (ANY), and once all have (ALL), re-asking at each cap", async () => {
  const client = clientOf();
  const workers = workerClientOf();
  const kind = uniqueKind("batch");
  const batch = uniqueKind("b").replaceAll(".", "-");
  const jobs = await client.submitJobs([{ kind, batch }, { kind, batch }]);
  const signal = AbortSignal.timeout(60_000);
  const any = client.waitForJobs({ batch, mode: WaitMode.ANY }, { signal });
  const all = client.waitForJobs({ jobIds: jobs.map((j) => j.id) }, { signal });
  // Past one cap of the server's, with nothing ended.
  await new Promise((r) => setTimeout(r, server.waitCapMs + 200));
  const first = await claimOne(workers, kind);
  await workers.workerService.completeJob({ jobId: first.jobId, leaseId: first.leaseId });
  const anyDone = await any;
  assert.deepEqual(
    anyDone.jobs.map((j) => j.id),
    [first.jobId],
  );
  const second = await claimOne(workers, kind);
  await workers.workerService.completeJob({ jobId: second.jobId, leaseId: second.leaseId });
  const allDone = await all;
  assert.equal(allDone.unfinishedJobIds.length, 0);
  assert.deepEqual(new Set(allDone.jobs.map((j) => j.id)), new Set(jobs.map((j) => j.id)));
  await assert.rejects(client.waitForJobs({ jobIds: ["j_doesnotexist000000000000"] }), NotFoundError);
});

/** waitJobsAsks is the WaitJobs requests among calls, in the order they were sent. */
function waitJobsAsks(calls: Call[]): { jobIds: string[]; batch: string }[] {
  return calls
    .filter((c) => c.method === "WaitJobs")
    .map((c) => ({ jobIds: (c.request["jobIds"] as string[] | undefined) ?? [], batch: (c.request["batch"] as string | undefined) ?? "" }));
}

/**
 * holdingClient is a client whose long calls are recorded in calls, and
 * whose nth WaitJobs is held before it is sent until release is called;
 * held resolves once it is.
 */
function holdingClient(calls: Call[], nth: number): { client: JobwatchClient; held: Promise<void>; release: () => void } {
  let asks = 0;
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  let hold = () => {};
  const held = new Promise<void>((resolve) => (hold = resolve));
  const inner = tap(nodeTransport(server.url), calls);
  const transport: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      if (method.name === "WaitJobs" && ++asks === nth) {
        hold();
        await released;
      }
      return inner.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: inner.stream,
  };
  const client = createClient({ url: server.url, token: server.clientToken, longTransport: transport, backoff: { initialMs: 20, maxMs: 200 } });
  return { client, held, release };
}

test("waitForJobs of a batch waits for the jobs its first answer named, asking by id after it, and answers in the order submitted", async () => {
  const calls: Call[] = [];
  const client = tappedClient(calls);
  const kind = uniqueKind("grown");
  const batch = uniqueKind("g").replaceAll(".", "-");
  const jobs = await client.submitJobs([{ kind, batch }, { kind, batch }, { kind, batch }]);
  const [a, b, c] = jobs.map((j) => j.id) as [string, string, string];
  // The second has ended before the wait: the first answer has it ended
  // and the others unfinished, which does not say how they interleave.
  await client.cancelJob(b);
  const all = client.waitForJobs({ batch }, { signal: AbortSignal.timeout(60_000) });
  await eventually("the wait to ask again after a cap", () => waitJobsAsks(calls).length >= 2);
  // A job added to the batch now is not waited for, by the asks that
  // follow either.
  const [added] = await client.submitJobs([{ kind, batch }]);
  assert.ok(added !== undefined);
  try {
    const before = waitJobsAsks(calls).length;
    await eventually("an ask after the job was added", () => waitJobsAsks(calls).length > before);
    await client.cancelJob(a);
    await client.cancelJob(c);
    const done = await all;
    assert.deepEqual(
      done.jobs.map((j) => j.id),
      [a, b, c],
    );
    assert.deepEqual(done.unfinishedJobIds, []);
    const [first, ...again] = waitJobsAsks(calls);
    assert.deepEqual(first, { jobIds: [], batch });
    for (const ask of again) {
      assert.deepEqual(ask, { jobIds: [a, c], batch: "" }, "a re-ask named the batch, or jobs other than the unfinished ones");
    }
  } finally {
    await client.cancelJob(added.id);
  }
});

test("waitForJobs (ALL) counts a job that ended and was deleted between two answers as ended, and asks again without it", async () => {
  const calls: Call[] = [];
  const { client, held, release } = holdingClient(calls, 2);
  const kind = uniqueKind("gone");
  const jobs = await client.submitJobs([{ kind }, { kind }, { kind }]);
  const [a, b, c] = jobs.map((j) => j.id) as [string, string, string];
  await client.cancelJob(a);
  const all = client.waitForJobs({ jobIds: [a, b, c] }, { signal: AbortSignal.timeout(60_000) });
  // The first answer, at the cap: a ended, b and c not. Before the
  // second ask, a (ended already) and b end and are deleted.
  await held;
  await client.deleteJob(a);
  await client.cancelJob(b);
  await client.deleteJob(b);
  release();
  await eventually("a third ask, after b was not found", () => waitJobsAsks(calls).length >= 3);
  await client.cancelJob(c);
  const done = await all;
  assert.deepEqual(
    done.jobs.map((j) => j.id),
    [a, c],
    "a was seen ended before it was deleted; b was not",
  );
  assert.deepEqual(done.unfinishedJobIds, []);
  const asks = waitJobsAsks(calls).map((ask) => ask.jobIds);
  assert.deepEqual(asks.slice(0, 3), [[a, b, c], [b, c], [c]]);
});

test("waitForJobs (ANY) answers at once when a job it asks for again was deleted meanwhile, as ended, in neither list", async () => {
  const calls: Call[] = [];
  const { client, held, release } = holdingClient(calls, 2);
  const kind = uniqueKind("goneany");
  const jobs = await client.submitJobs([{ kind }, { kind }]);
  const [a, b] = jobs.map((j) => j.id) as [string, string];
  const any = client.waitForJobs({ jobIds: [a, b], mode: WaitMode.ANY }, { signal: AbortSignal.timeout(60_000) });
  await held;
  await client.cancelJob(a);
  await client.deleteJob(a);
  release();
  try {
    const done = await any;
    assert.deepEqual(done.jobs, []);
    assert.deepEqual(done.unfinishedJobIds, [b]);
    assert.equal(waitJobsAsks(calls).length, 2);
  } finally {
    await client.cancelJob(b);
  }
});

test("a wait answered at once because the server's parked calls are full backs off before it asks again, however long the answer took", async () => {
  const url = server.fullUrl;
  const plain = createClient({ url, token: server.clientToken, backoff: { initialMs: 20, maxMs: 200 } });
  const job = await plain.submitJob({ kind: uniqueKind("full") });
  const ended = await plain.cancelJob((await plain.submitJob({ kind: uniqueKind("full") })).id);
  // The server parks one call: this wait's, once a wait for an ended
  // job (which never parks long) is answered as full.
  const blocking = new AbortController();
  const blocker = plain.waitForJob(job.id, { signal: blocking.signal }).catch(() => undefined);
  await eventually("the first wait to be parked", async () => {
    let full = false;
    await plain.longJobService.waitJob({ jobId: ended.id }, { onHeader: (h) => (full = h.get("Jobwatch-Parked-Calls") === "full") });
    return full;
  });

  let asks = 0;
  const retries: unknown[] = [];
  const far = nodeTransport(url);
  // A server 30 ms away: each answer takes longer than a quick "not
  // yet" would, which the client used to ask again at once.
  const distant: Transport = {
    unary: async (method, signal, timeoutMs, header, input, contextValues) => {
      asks++;
      await new Promise((resolve) => setTimeout(resolve, 30));
      return far.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: far.stream,
  };
  const client = createClient({
    url,
    token: server.clientToken,
    longTransport: distant,
    backoff: { initialMs: 20, maxMs: 200 },
    onRetry: (err) => retries.push(err),
  });
  try {
    for (const [name, wait] of [
      ["waitForJob", (signal: AbortSignal) => client.waitForJob(job.id, { signal })],
      ["waitForJobs", (signal: AbortSignal) => client.waitForJobs({ jobIds: [job.id] }, { signal })],
    ] as const) {
      asks = 0;
      retries.length = 0;
      const stop = new AbortController();
      const waiting = wait(stop.signal);
      await eventually(`${name} to ask four times`, () => asks >= 4);
      stop.abort(new Error("enough"));
      await assert.rejects(waiting, /enough/);
      // Each ask after the first follows a retry's notice, made before
      // its delay.
      assert.ok(asks <= retries.length + 1, `${name}: ${asks} asks after ${retries.length} retries: a full answer was asked again at once`);
      for (const err of retries) {
        assert.match(String(err), /parked calls are full/, `${name} retried after something else`);
      }
    }
  } finally {
    blocking.abort();
    await blocker;
    await plain.cancelJob(job.id);
  }
});

test("a payload JSON would change (NaN, Infinity, half a surrogate pair alone) is invalid_argument naming where, and is not sent", async () => {
  const calls: Call[] = [];
  const client = createClient({ url: server.url, token: server.clientToken, transport: tap(nodeTransport(server.url), calls) });
  const kind = uniqueKind("unsendable");
  const refused: [JsonValue, RegExp][] = [
    [{ n: NaN }, /^payload\.n: NaN is not a number JSON can hold$/],
    [{ rows: [1, -Infinity] }, /^payload\.rows\[1\]: -Infinity is not a number JSON can hold$/],
    ["a\uD800b", /^payload: a string holds half of a UTF-16 surrogate pair \(U\+D800\) without its other half/],
    [{ list: ["ok", "\uDC00 low first"] }, /^payload\.list\[1\]: a string holds half of a UTF-16 surrogate pair \(U\+DC00\)/],
    [{ ["key \uDBFF"]: 1 }, /^payload\.key \uDBFF: an object key holds half of a UTF-16 surrogate pair \(U\+DBFF\)/],
  ];
  for (const [payload, message] of refused) {
    await assert.rejects(client.submitJob({ kind, payload }), (err: unknown) => {
      assert.ok(err instanceof JobwatchError, `${String(err)} is not a JobwatchError`);
      assert.equal(err.code, Code.InvalidArgument);
      assert.match(err.rawMessage, message);
      return true;
    });
  }
  await assert.rejects(client.submitJobs([{ kind, payload: 1 }, { kind, payload: { x: NaN } }]), (err: unknown) => {
    assert.ok(err instanceof JobwatchError);
    assert.equal(err.code, Code.InvalidArgument);
    assert.match(err.rawMessage, /^jobs\[1\]\.payload\.x: NaN/);
    return true;
  });
  assert.deepEqual(calls, [], "a refused payload was sent");

  // A whole pair is text, and comes back as it went.
  const job = await client.submitJob({ kind, payload: { s: "a\uD83D\uDE00b" } });
  assert.deepEqual(payloadOf(await client.getJob(job.id)), { s: "a\u{1F600}b" });
  await client.cancelJob(job.id);
});

test("a stream the server refuses (HTTP/2 REFUSED_STREAM) is unavailable, saying the server closed it, for the client and the generated clients alike", async () => {
  // What a server shutting down answers a call sent as it stops taking
  // them: connect-node calls it internal ("Stream closed with error code
  // NGHTTP2_REFUSED_STREAM").
  const refusing = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  refusing.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  refusing.on("stream", (stream) => {
    stream.on("error", () => {}); // this side's report of the refusal it made
    stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
  });
  await new Promise<void>((resolve) => refusing.listen(0, "127.0.0.1", resolve));
  try {
    const address = refusing.address() as net.AddressInfo;
    const client = createClient({ url: `http://127.0.0.1:${address.port}` });
    await assert.rejects(client.getJob("j_00000000000000000000000000"), (err: unknown) => {
      assert.ok(err instanceof JobwatchError, `${String(err)} is not a JobwatchError`);
      assert.equal(err.codeName, "unavailable");
      assert.match(err.rawMessage, /server closed the stream.*REFUSED_STREAM.*safe to send again/);
      assert.ok(transient(err), "a refused stream is not retried");
      return true;
    });
    await assert.rejects(client.jobService.getJob({ jobId: "j_00000000000000000000000000" }), (err: unknown) => {
      assert.ok(err instanceof ConnectError);
      assert.equal(err.code, Code.Unavailable);
      return true;
    });
  } finally {
    // The clients' connections would keep the server, and this process, up.
    for (const s of sessions) {
      s.destroy();
    }
    await new Promise((resolve) => refusing.close(resolve));
  }
});

test("a client may be given its own transports", async () => {
  const calls: Call[] = [];
  const client = createClient({ transport: tap(nodeTransport(server.url, "1.1"), calls), token: server.clientToken });
  const job = await client.submitJob({ kind: uniqueKind("own"), payload: { deep: [1, { two: 2 }] } });
  const got = await client.getJob(job.id);
  assert.deepEqual(got.payload, fromJson(ValueSchema, { deep: [1, { two: 2 }] }));
  await client.cancelJob(job.id);
  assert.deepEqual(
    calls.map((c) => c.method),
    ["SubmitJob", "GetJob", "CancelJob"],
  );
});

test("an address that answers HTTP/2 in HTTP/1 is refused at once, saying so, not retried", async () => {
  // Another kind of server, or a proxy that does not pass HTTP/2 on: the
  // client used to retry waitForJob against it until aborted.
  const http = await import("node:http");
  const other = http.createServer((_req, res) => {
    res.writeHead(404);
    res.end("not here");
  });
  await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
  try {
    const address = other.address();
    assert.ok(address !== null && typeof address === "object");
    let retries = 0;
    const c = createClient({ url: `http://127.0.0.1:${address.port}`, onRetry: () => void retries++ });
    await assert.rejects(c.submitJob({ kind: "x" }), /did not answer in HTTP\/2/);
    const began = Date.now();
    await assert.rejects(
      c.waitForJob("j_00000000000000000000000000", { signal: AbortSignal.timeout(20_000) }),
      /did not answer in HTTP\/2/,
    );
    assert.equal(retries, 0, "a server that speaks HTTP/1 was asked again");
    assert.ok(Date.now() - began < 10_000, `waitForJob took ${Date.now() - began} ms to give up`);
  } finally {
    other.close();
  }
});

test("a job goes to JSON with jobJson, and its times are Dates with timestampDate", async () => {
  const client = clientOf();
  const job = await client.submitJob({ kind: uniqueKind("json"), payload: { n: 1 } });
  assert.throws(() => JSON.stringify(job), /BigInt/, "JSON.stringify of a job no longer throws: drop jobJson's reason");
  const text = JSON.stringify(jobJson(job));
  const back = JSON.parse(text) as Record<string, unknown>;
  assert.equal(back["id"], job.id);
  assert.equal(back["state"], "JOB_STATE_QUEUED");
  assert.equal(back["version"], String(job.version), "a 64-bit number is a string, as curl shows it");
  assert.ok(job.createdAt !== undefined);
  const created = timestampDate(job.createdAt);
  assert.ok(created instanceof Date && Math.abs(created.getTime() - Date.now()) < 60_000, `createdAt as a Date: ${created}`);
});

test("a wait held by a server that then went away retries from the first step of its backoff, however often that happens", async () => {
  // A server of its own, whose WaitJob holds each of the first five calls
  // a little over a second and then drops the connection, as a server
  // that died; the sixth is answered with the job ended.
  let calls = 0;
  const sessions = new Set<http2.ServerHttp2Session>();
  const routes = connectNodeAdapter({
    routes: (router) =>
      router.service(JobService, {
        async waitJob(req) {
          calls++;
          if (calls <= 5) {
            await new Promise((resolve) => setTimeout(resolve, 1050));
            for (const s of sessions) {
              s.destroy();
            }
            await new Promise(() => {}); // its connection is gone
          }
          return { job: { id: req.jobId, state: JobState.SUCCEEDED } };
        },
      }),
  });
  const h2 = http2.createServer(routes);
  h2.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => h2.listen(0, "127.0.0.1", () => resolve()));
  const url = `http://127.0.0.1:${(h2.address() as net.AddressInfo).port}`;
  try {
    const delays: number[] = [];
    const client = createClient({ url, backoff: { initialMs: 50, maxMs: 3_600_000 }, onRetry: (_err, ms) => delays.push(ms) });
    const done = await client.waitForJob("j_held");
    assert.equal(done.state, JobState.SUCCEEDED);
    // Were each cut counted as one more failure, the fifth retry's delay
    // would be drawn from up to 16 steps: all five within the first
    // happens by chance once in a thousand.
    assert.equal(delays.length, 5, `retries: ${delays}`);
    for (const d of delays) {
      assert.ok(d <= 50, `a retry after a held call was cut slept ${d} ms, more than the first step (all: ${delays})`);
    }
  } finally {
    for (const s of sessions) {
      s.destroy();
    }
    await new Promise((resolve) => h2.close(resolve));
  }
});
