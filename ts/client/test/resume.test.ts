// The resume loop of watchJob, watchJobs and watchJobLogs against a
// scripted server (an in-memory router transport, no jobwatch server):
// where each stream is opened from, what is yielded, which ends are
// backed off for and how long, and which failures end the watch. Math.random
// is pinned so that each backoff delay is its whole step (1, 2, 4... ms),
// which tells how many failures in a row the loop counts.
import { mock, test } from "node:test";
import assert from "node:assert/strict";
import { ConnectError, createRouterTransport, type ServiceImpl } from "@connectrpc/connect";
import {
  Code,
  JobNotStartedError,
  JobService,
  JobState,
  JobwatchClient,
  NotFoundError,
  PermissionDeniedError,
} from "../src/node.js";

mock.method(Math, "random", () => 0.9999);

/** A scripted stream: the messages it sends, how long it stays open after, then how it ends (cleanly without then). */
interface Stream<M> {
  send: M[];
  holdMs?: number;
  then?: ConnectError;
}

/**
 * scripted is a server stream handler that answers the calls in turn with
 * streams, recording each request in asked; one call more than scripted
 * fails as no watch retries.
 */
function scripted<Req, M>(streams: Stream<NoInfer<M>>[], asked: Req[]): (req: Req) => AsyncGenerator<M> {
  return async function* (req: Req): AsyncGenerator<M> {
    asked.push(req);
    const s = streams.shift();
    if (s === undefined) {
      throw new ConnectError("no stream scripted for this call", Code.DataLoss);
    }
    for (const msg of s.send) {
      yield msg;
    }
    if (s.holdMs !== undefined) {
      await new Promise((r) => setTimeout(r, s.holdMs));
    }
    if (s.then !== undefined) {
      throw s.then;
    }
  };
}

/** clientOf is a client of the handlers, with retries of 1, 2, 4... ms recorded in retries as "what: ms". */
function clientOf(impl: Partial<ServiceImpl<typeof JobService>>, retries: string[]): JobwatchClient {
  const transport = createRouterTransport(({ service }) => service(JobService, impl));
  return new JobwatchClient(
    { short: transport, long: transport },
    {
      backoff: { initialMs: 1, maxMs: 1000 },
      onRetry: (err, ms) => retries.push(`${err instanceof ConnectError ? err.rawMessage : String((err as Error).message)}: ${ms}`),
    },
  );
}

const unavailable = (what: string) => new ConnectError(what, Code.Unavailable);

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const got: T[] = [];
  for await (const v of it) {
    got.push(v);
  }
  return got;
}

test("watchJob resumes after the last version, backs off for failures and empty streams, and yields the outcome GetJob gives at a version it holds", async () => {
  const asked: { afterVersion: bigint }[] = [];
  const retries: string[] = [];
  let gets = 0;
  const job = (version: bigint, state: JobState) => ({ job: { id: "j1", version, state } });
  const client = clientOf(
    {
      watchJob: scripted(
        [
          { send: [], then: unavailable("down") },
          { send: [job(1n, JobState.QUEUED)], then: unavailable("cut once") },
          { send: [], then: unavailable("cut twice") },
          { send: [] }, // GetJob: running, so a server shutting down
          { send: [{}, job(1n, JobState.QUEUED), job(2n, JobState.RUNNING)] },
          { send: [] }, // GetJob: succeeded at version 2, which was yielded as running
        ],
        asked,
      ),
      getJob: () => {
        gets++;
        return gets === 1 ? job(1n, JobState.RUNNING) : job(2n, JobState.SUCCEEDED);
      },
    },
    retries,
  );
  const seen = await all(client.watchJob("j1"));
  assert.deepEqual(
    seen.map((j) => `${j.version} ${JobState[j.state]}`),
    ["1 QUEUED", "2 RUNNING", "2 SUCCEEDED"],
  );
  assert.deepEqual(
    asked.map((r) => r.afterVersion),
    [0n, 0n, 1n, 1n, 1n, 2n],
  );
  // The count starts over after a stream that sent something.
  assert.deepEqual(retries, ["down: 1", "cut once: 1", "cut twice: 2", "watch stream ended without a snapshot: 4"]);
  assert.equal(gets, 2);
});

test("watchJob ends with the terminal version, and throws what is not transient", async () => {
  const asked: unknown[] = [];
  const retries: string[] = [];
  const client = clientOf(
    {
      watchJob: scripted(
        [
          { send: [{ job: { id: "j1", version: 3n, state: JobState.SUCCEEDED } }], then: unavailable("never read") },
          { send: [], then: new ConnectError("j2: job not found", Code.NotFound) },
          { send: [], then: new ConnectError("j3 has not started", Code.FailedPrecondition) },
        ],
        asked,
      ),
    },
    retries,
  );
  const seen = await all(client.watchJob("j1"));
  assert.deepEqual(
    seen.map((j) => j.version),
    [3n],
  );
  assert.equal(asked.length, 1);
  await assert.rejects(all(client.watchJob("j2")), NotFoundError);
  await assert.rejects(all(client.watchJob("j3")), JobNotStartedError);
  assert.deepEqual(retries, []);
});

test("watchJobs resumes with the last token, yields what has jobs, deletions or a start over, and backs off for failures and empty streams", async () => {
  const asked: { resumeToken: string; batch: string }[] = [];
  const retries: string[] = [];
  const client = clientOf(
    {
      watchJobs: scripted(
        [
          {
            send: [{ jobs: [{ id: "a", version: 1n }], resumeToken: "t1" }, { resumeToken: "t2" }],
            then: unavailable("cut"),
          },
          { send: [] },
          { send: [{ startedOver: true, resumeToken: "t3" }, { deletedJobIds: ["a"] }, {}] },
          { send: [], then: new ConnectError("not yours", Code.PermissionDenied) },
        ],
        asked,
      ),
    },
    retries,
  );
  const seen: string[] = [];
  await assert.rejects(async () => {
    for await (const r of client.watchJobs({ batch: "b", resumeToken: "t0" })) {
      seen.push(`${r.jobs.map((j) => j.id).join()}|${r.deletedJobIds.join()}|${r.startedOver}`);
    }
  }, PermissionDeniedError);
  assert.deepEqual(seen, ["a||false", "||true", "|a|false"]);
  assert.deepEqual(
    asked.map((r) => `${r.batch} ${r.resumeToken}`),
    ["b t0", "b t2", "b t2", "b t3"],
  );
  assert.deepEqual(retries, ["cut: 1", "watch stream ended without a response: 2"]);
});

test("watchJobs ends with the signal's reason when it is aborted during a backoff", async () => {
  const retries: string[] = [];
  const stop = new AbortController();
  const reason = new Error("stopped by the test");
  const transport = createRouterTransport(({ service }) =>
    service(JobService, {
      watchJobs: async function* () {
        throw unavailable("down");
      },
    }),
  );
  const client = new JobwatchClient(
    { short: transport, long: transport },
    {
      backoff: { initialMs: 60_000 },
      onRetry: (err) => {
        retries.push(String(err));
        stop.abort(reason);
      },
    },
  );
  await assert.rejects(all(client.watchJobs({ signal: stop.signal })), (err) => err === reason);
  assert.equal(retries.length, 1);
});

test("watchJobLogs resumes after the last seq, asks GetJobLogs after each clean end, and ends with the job", async () => {
  const asked: { afterSeq: bigint }[] = [];
  const pages: { afterSeq: bigint; limit: number }[] = [];
  const retries: string[] = [];
  const line = (seq: bigint) => ({ seq, text: `line ${seq}` });
  const client = clientOf(
    {
      watchJobLogs: scripted(
        [
          { send: [{ lines: [line(1n), line(2n)] }], then: unavailable("cut") },
          { send: [{ lines: [line(1n), line(2n), line(3n)] }] }, // 1 and 2 again
          { send: [], holdMs: 30 }, // GetJobLogs fails
          { send: [], holdMs: 30 }, // a stream that lived: no backoff
          { send: [{}, { gap: { skipped: 2n, resumeFrom: 6n }, lines: [line(6n)] }, { jobEnded: true }] },
        ],
        asked,
      ),
      getJobLogs: (req) => {
        pages.push({ afterSeq: req.afterSeq, limit: req.limit });
        if (pages.length === 2) {
          throw unavailable("page cut");
        }
        return { lines: [line(req.afterSeq + 1n)] };
      },
    },
    retries,
  );
  const seen = await all(client.watchJobLogs("j1"));
  assert.deepEqual(
    seen.map((b) => `${b.gap === undefined ? "" : `gap ${b.gap.skipped} `}${b.lines.map((l) => l.seq).join()}`),
    ["1,2", "3", "gap 2 6"],
  );
  assert.deepEqual(
    asked.map((r) => r.afterSeq),
    [0n, 2n, 3n, 3n, 3n],
  );
  assert.deepEqual(
    pages.map((p) => `${p.afterSeq} ${p.limit}`),
    ["3 1", "3 1", "3 1"],
  );
  assert.deepEqual(retries, ["cut: 1", "page cut: 1"]);
});

test("watchJobLogs ends when GetJobLogs says the job ended after a clean end, and throws what is not transient", async () => {
  const asked: unknown[] = [];
  const retries: string[] = [];
  let pages = 0;
  const client = clientOf(
    {
      watchJobLogs: scripted([{ send: [{ lines: [{ seq: 1n }] }] }, { send: [] }], asked),
      getJobLogs: () => {
        pages++;
        if (pages === 2) {
          throw new ConnectError("j2: job not found", Code.NotFound);
        }
        return { jobEnded: true };
      },
    },
    retries,
  );
  const seen = await all(client.watchJobLogs("j1"));
  assert.deepEqual(
    seen.map((b) => b.lines.map((l) => l.seq)),
    [[1n]],
  );
  await assert.rejects(all(client.watchJobLogs("j2")), NotFoundError);
  assert.equal(asked.length, 2);
  assert.deepEqual(retries, []);
});
