// Reading a job's log against a real jobwatch server: getJobLogs' pages,
// and watchJobLogs across stream lifetimes and dropped connections, with
// gaps, unknown jobs and a log that ends before the seq a reader resumes
// after, as the Go client's tests of Logs and WatchLogs (client/logs_test.go).
import { mock, test } from "node:test";
import assert from "node:assert/strict";
import {
  Code,
  NotFoundError,
  createClient,
  nodeTransport,
  type JobwatchClient,
  type LogGap,
  type LogLine,
} from "../src/node.js";
import { Proxy, claimOne, clientOf, eventually, server, tap, uniqueKind, workerClientOf, type Call } from "./server.js";

const workers = workerClientOf();

/** append adds lines to the log of the job lease holds, as its worker would. */
async function append(lease: { jobId: string; leaseId: string }, ...texts: string[]): Promise<bigint> {
  const { lastSeq } = await workers.workerService.appendJobLogs({ ...lease, lines: texts.map((text) => ({ text })) });
  return lastSeq;
}

/**
 * running is a job of a kind of its own, claimed by hand and kept by
 * heartbeats as its worker would (the server's lease is 3 s, and a job
 * whose lease runs out ends its log), and a client whose long calls are
 * recorded in calls.
 */
async function running(what: string, url = server.url): Promise<{ client: JobwatchClient; calls: Call[]; jobId: string; lease: { jobId: string; leaseId: string } }> {
  const calls: Call[] = [];
  const client = createClient({
    url,
    token: server.clientToken,
    longTransport: tap(nodeTransport(url), calls),
    backoff: { initialMs: 20, maxMs: 200 },
  });
  const kind = uniqueKind(what);
  const job = await clientOf().submitJob({ kind });
  const lease = await claimOne(workers, kind);
  const heartbeats = setInterval(() => void workers.workerService.heartbeat(lease).catch(() => clearInterval(heartbeats)), server.leaseMs / 4);
  heartbeats.unref();
  return { client, calls, jobId: job.id, lease };
}

function streams(calls: Call[]): bigint[] {
  return calls.filter((c) => c.method === "WatchJobLogs").map((c) => c.request["afterSeq"] as bigint);
}

test("watchJobLogs yields every line once, in order, across the server's stream lifetime and dropped connections, and ends after the job ended", async () => {
  const proxy = new Proxy();
  await proxy.start();
  try {
    const { client, calls, jobId, lease } = await running("logs", proxy.url);
    const seen: LogLine[] = [];
    const gaps: LogGap[] = [];
    let ended = false;
    const watching = (async () => {
      for await (const batch of client.watchJobLogs(jobId)) {
        if (batch.gap !== undefined) {
          gaps.push(batch.gap);
        }
        seen.push(...batch.lines);
      }
      ended = true;
    })();
    // Lockstep, as the Go test: each line waits for the one before, so a
    // repeat or a hole is the resume's fault.
    for (let i = 1; i <= 30; i++) {
      if (i % 7 === 0) {
        proxy.cut();
      }
      if (i % 10 === 0) {
        const opened = streams(calls).length;
        await eventually("the stream to end at its lifetime and be opened again", () => streams(calls).length > opened);
      }
      await append(lease, `line ${i}`);
      await eventually(`line ${i}`, () => seen.length >= i);
    }
    assert.equal(ended, false, "the watch ended while the job ran");
    await workers.workerService.completeJob(lease);
    await watching;

    assert.deepEqual(
      seen.map((l) => `${l.seq} ${l.text}`),
      Array.from({ length: 30 }, (_, i) => `${i + 1} line ${i + 1}`),
    );
    assert.deepEqual(gaps, [], "a gap where no line was dropped");
    // Each stream after the first resumed after a seq it had yielded.
    const afters = streams(calls);
    assert.ok(afters.length >= 4, `only ${afters.length} WatchJobLogs streams across 3 lifetimes and 4 cuts`);
    assert.equal(afters[0], 0n);
    for (const after of afters.slice(1)) {
      assert.ok(after >= 1n && after <= 30n, `resumed after seq ${after}, which was never yielded`);
    }
  } finally {
    await proxy.stop();
  }
});

test("getJobLogs and watchJobLogs of an unknown job are NotFoundError; breaking out of the loop ends the watch", async () => {
  const client = clientOf();
  const isNotFound = (err: unknown) => {
    assert.ok(err instanceof NotFoundError, `got ${String(err)}`);
    assert.equal(err.code, Code.NotFound);
    return true;
  };
  await assert.rejects(client.getJobLogs("j_doesnotexist000000000000"), isNotFound);
  await assert.rejects(async () => {
    for await (const _ of client.watchJobLogs("j_doesnotexist000000000000")) {
      assert.fail("a line of a job that does not exist");
    }
  }, isNotFound);

  const { lease, jobId } = await running("break");
  await append(lease, "first", "second");
  for await (const batch of client.watchJobLogs(jobId)) {
    assert.equal(batch.lines[0]?.text, "first");
    break;
  }
  // After a seq already seen, the first line yielded is the next.
  const texts: string[] = [];
  for await (const batch of client.watchJobLogs(jobId, { afterSeq: 1 })) {
    texts.push(...batch.lines.map((l) => l.text));
    if (texts.length === 1) {
      await workers.workerService.completeJob(lease);
    }
  }
  assert.deepEqual(texts, ["second"]);
});

test("lines the queue dropped are yielded as one gap before the first line kept, by watchJobLogs and by getJobLogs' first page", async () => {
  const { client, calls, jobId, lease } = await running("gap");
  // 1,344 lines of 1 KiB: over the 1 MiB the default queue keeps.
  const line = (i: number) => `${String(i).padStart(4, "0")} ${"z".repeat(1019)}`;
  let last = 0n;
  for (let call = 0; call < 21; call++) {
    last = await append(lease, ...Array.from({ length: 64 }, (_, i) => line(call * 64 + i + 1)));
  }
  const seen: LogLine[] = [];
  const gaps: LogGap[] = [];
  const watching = (async () => {
    for await (const batch of client.watchJobLogs(jobId)) {
      if (batch.gap !== undefined) {
        gaps.push(batch.gap);
      }
      seen.push(...batch.lines);
    }
  })();
  await eventually("the last line appended", () => seen.at(-1)?.seq === last);
  // One more stream after the gap: it resumes after the last line, and
  // the gap is not yielded again.
  const opened = streams(calls).length;
  await eventually("the stream to end at its lifetime and be opened again", () => streams(calls).length > opened);
  const after = await append(lease, "after the gap");
  await workers.workerService.completeJob(lease);
  await watching;

  const first = seen[0]?.seq ?? 0n;
  assert.equal(gaps.length, 1, `gaps ${JSON.stringify(gaps.map((g) => `${g.skipped}@${g.resumeFrom}`))}`);
  assert.equal(gaps[0]?.resumeFrom, first);
  assert.equal(gaps[0]?.skipped, first - 1n);
  assert.ok(first > 1n, "nothing was dropped: the test appended too little");
  assert.equal(seen.at(-1)?.seq, after);
  assert.equal(seen.at(-1)?.text, "after the gap");
  seen.forEach((l, i) => assert.equal(l.seq, first + BigInt(i), `line ${i} of the watch has seq ${l.seq}`));

  // getJobLogs says the same a page at a time: the gap on the first
  // page, then every line kept, and that the job has ended.
  const paged: LogLine[] = [];
  let afterSeq = 0n;
  let firstGap: LogGap | undefined;
  for (let pages = 0; ; pages++) {
    const page = await client.getJobLogs(jobId, { afterSeq, limit: 500 });
    if (pages === 0) {
      firstGap = page.gap;
    } else {
      assert.equal(page.gap, undefined, `a gap on page ${pages + 1}`);
    }
    paged.push(...page.lines);
    afterSeq = page.lines.at(-1)?.seq ?? afterSeq;
    if (!page.more) {
      assert.equal(page.jobEnded, true);
      break;
    }
  }
  assert.equal(firstGap?.resumeFrom, first);
  assert.deepEqual(
    paged.map((l) => l.seq),
    seen.map((l) => l.seq),
  );
});

test("watchJobLogs after a seq past the end of the server's log (a database restored from an older copy) yields the log from its oldest line, then each new one", async () => {
  const { client, jobId, lease } = await running("restored");
  await append(lease, "one", "two");
  const got: string[] = [];
  for await (const batch of client.watchJobLogs(jobId, { afterSeq: 50, signal: AbortSignal.timeout(20_000) })) {
    got.push(...batch.lines.map((l) => `${l.seq} ${l.text}`));
    if (got.length === 2) {
      await append(lease, "three");
    }
    if (got.length === 3) {
      await workers.workerService.completeJob(lease);
    }
  }
  assert.deepEqual(got, ["1 one", "2 two", "3 three"]);
});

test("watchJobLogs of a job that has ended yields what is left and ends, retrying nothing", async () => {
  const retries: unknown[] = [];
  const client = createClient({ url: server.url, token: server.clientToken, onRetry: (err) => retries.push(err) });
  const { jobId, lease } = await running("done");
  const last = await append(lease, "a", "b", "c");
  await workers.workerService.completeJob(lease);

  const all: string[] = [];
  for await (const batch of client.watchJobLogs(jobId, { signal: AbortSignal.timeout(20_000) })) {
    all.push(...batch.lines.map((l) => l.text));
  }
  assert.deepEqual(all, ["a", "b", "c"]);
  for await (const batch of client.watchJobLogs(jobId, { afterSeq: last, signal: AbortSignal.timeout(20_000) })) {
    assert.fail(`after the last line, a batch ${JSON.stringify(batch.lines.map((l) => l.text))}`);
  }
  assert.deepEqual(retries.map(String), []);
});

test("the log example of docs/CLIENTS.md prints the lines so far, then follows them until the job ends", async (t) => {
  const { client, jobId: id, lease } = await running("example");
  await append(lease, "so far");
  const printed: string[] = [];
  mock.method(console, "log", (text: string) => printed.push(text));
  t.after(() => mock.restoreAll());
  const following = printLog(client, id);
  await eventually("the line so far to be printed", () => printed.length === 1);
  await append(lease, "followed");
  await workers.workerService.completeJob(lease);
  await following;
  assert.deepEqual(printed, ["1 so far", "2 followed"]);
});

/** printLog is the example of docs/CLIENTS.md, line for line. */
async function printLog(client: JobwatchClient, id: string): Promise<void> {
  let afterSeq = 0n;
  for (;;) {
    const page = await client.getJobLogs(id, { afterSeq });
    for (const line of page.lines) {
      console.log(`${line.seq} ${line.text}`);
    }
    afterSeq = page.lines.at(-1)?.seq ?? afterSeq;
    if (!page.more) {
      break;
    }
  }
  for await (const { lines, gap } of client.watchJobLogs(id, { afterSeq })) {
    if (gap !== undefined) {
      console.log(`[${gap.skipped} lines no longer kept]`);
    }
    for (const line of lines) {
      console.log(`${line.seq} ${line.text}`);
    }
  }
}
