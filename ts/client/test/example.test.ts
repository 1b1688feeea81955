// The example worker (examples/worker.ts), run as a user runs it: a Node
// process of its own against the real server, stopped with SIGTERM.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { JobState, resultOf } from "../src/node.js";
import { clientOf, eventually, server, uniqueKind } from "./server.js";

const client = clientOf();
const script = fileURLToPath(new URL("../examples/worker.js", import.meta.url));
const clientScript = fileURLToPath(new URL("../examples/client.js", import.meta.url));

/** ExampleWorker is the example worker's process and what it printed. */
class ExampleWorker {
  readonly process: ChildProcess;
  stdout = "";
  stderr = "";
  readonly exited: Promise<number | null>;

  constructor(
    readonly prefix: string,
    env: Record<string, string> = {},
  ) {
    this.process = spawn(process.execPath, [script], {
      env: {
        ...process.env,
        JOBWATCH_SERVER: server.url,
        JOBWATCH_TOKEN: server.workerToken,
        JOBWATCH_KIND_PREFIX: prefix,
        ...env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.process.stdout?.on("data", (b: Buffer) => (this.stdout += b.toString()));
    this.process.stderr?.on("data", (b: Buffer) => (this.stderr += b.toString()));
    this.exited = new Promise((resolve) => this.process.on("exit", (code) => resolve(code)));
  }

  /** stop sends SIGTERM and returns the exit code. */
  async stop(): Promise<number | null> {
    this.process.kill("SIGTERM");
    return this.exited;
  }

  output(): string {
    return `stdout:\n${this.stdout}\nstderr:\n${this.stderr}`;
  }
}

test("the example worker runs jobs to SUCCEEDED, retries a retryable failure, and aborts a cancelled job", async (t) => {
  const prefix = `${uniqueKind("example")}.`;
  const worker = new ExampleWorker(prefix);
  t.after(() => worker.process.kill("SIGKILL"));

  const resize = await client.submitJob({ kind: `${prefix}resize`, payload: "cat.png" });
  const flaky = await client.submitJob({ kind: `${prefix}flaky`, maxAttempts: 3 });
  const sleeper = await client.submitJob({ kind: `${prefix}sleep`, payload: { ms: 60_000 } });

  const resized = await client.waitForJob(resize.id);
  assert.equal(resized.state, JobState.SUCCEEDED, worker.output());
  assert.deepEqual(resultOf(resized), { thumbnails: 4, source: "cat.png" });
  assert.equal(resized.step, "batch 4 of 4");

  const retried = await client.waitForJob(flaky.id);
  assert.equal(retried.state, JobState.SUCCEEDED, worker.output());
  assert.equal(retried.attempt, 2);
  const first = (await client.getJob(flaky.id)).attempts[0];
  assert.equal(first?.error?.type, "UpstreamTimeout");
  assert.equal(first?.error?.message, "the upstream service timed out");

  await eventually("the sleeper RUNNING", async () => (await client.getJob(sleeper.id)).step.startsWith("sleeping"));
  await client.cancelJob(sleeper.id);
  await eventually("the worker to say the job was aborted", () =>
    worker.stdout.includes(`job ${sleeper.id}: aborted (JobCancelledError)`),
  );
  assert.equal((await client.getJob(sleeper.id)).state, JobState.CANCELLED);

  assert.equal(await worker.stop(), 0, worker.output());
  assert.match(worker.stdout, /stopped\n$/);
});

test("on SIGTERM the example worker lets a running job finish, claims nothing more, and exits 0", async (t) => {
  const prefix = `${uniqueKind("sigterm")}.`;
  const worker = new ExampleWorker(prefix, { JOBWATCH_CONCURRENCY: "1" });
  t.after(() => worker.process.kill("SIGKILL"));

  const running = await client.submitJob({ kind: `${prefix}sleep`, payload: { ms: 1500 } });
  await eventually("the job RUNNING", async () => (await client.getJob(running.id)).step.startsWith("sleeping"));
  // The worker's one slot is taken: this job waits for it, and must still
  // be waiting once the slot is free again after SIGTERM.
  const waiting = await client.submitJob({ kind: `${prefix}sleep`, payload: { ms: 1 } });
  worker.process.kill("SIGTERM");

  assert.equal(await worker.exited, 0, worker.output());
  const done = await client.getJob(running.id);
  assert.equal(done.state, JobState.SUCCEEDED, worker.output());
  assert.deepEqual(resultOf(done), { slept: 1500 });
  assert.equal((await client.getJob(waiting.id)).state, JobState.QUEUED, "the worker claimed a job after SIGTERM");
  await client.cancelJob(waiting.id);
});

test("on SIGTERM a job still running at the drain timeout fails as WorkerStopped, to run again", async (t) => {
  const prefix = `${uniqueKind("drain")}.`;
  const worker = new ExampleWorker(prefix, { JOBWATCH_DRAIN_TIMEOUT_MS: "200" });
  t.after(() => worker.process.kill("SIGKILL"));

  const job = await client.submitJob({ kind: `${prefix}sleep`, payload: { ms: 60_000 }, maxAttempts: 2 });
  await eventually("the job RUNNING", async () => (await client.getJob(job.id)).step.startsWith("sleeping"));
  assert.equal(await worker.stop(), 0, worker.output());

  const after = await client.getJob(job.id);
  assert.equal(after.state, JobState.QUEUED, worker.output());
  assert.equal(after.attempts[0]?.error?.type, "WorkerStopped");
  assert.match(worker.stdout, new RegExp(`job ${job.id}: aborted \\(WorkerStoppedError\\)`));
  await client.cancelJob(job.id);
});

/** ExampleClient is a run of the example client and what it printed. */
class ExampleClient {
  stdout = "";
  stderr = "";
  readonly exited: Promise<number | null>;

  constructor(args: string[]) {
    const child = spawn(process.execPath, [clientScript, ...args], {
      env: { ...process.env, JOBWATCH_SERVER: server.url, JOBWATCH_TOKEN: server.clientToken },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.on("data", (b: Buffer) => (this.stdout += b.toString()));
    child.stderr.on("data", (b: Buffer) => (this.stderr += b.toString()));
    this.exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  }
}

test("the example client follows a job to its result, and follows the active job of the same key instead of submitting it twice", async (t) => {
  const prefix = `${uniqueKind("client")}.`;
  const file = `${prefix}cat.png`;
  // A job for the file is active before the client runs: no worker yet.
  const active = await client.submitJob({ kind: `${prefix}resize`, payload: file, uniqueKey: `${prefix}resize ${file}` });
  const following = new ExampleClient([`${prefix}resize`, file]);
  await eventually("the client to follow the active job", () => following.stdout.includes("\nqueued 0%"));
  assert.equal(following.stdout.split("\n")[0], `already active as ${active.id}`);
  const worker = new ExampleWorker(prefix);
  t.after(() => worker.process.kill("SIGKILL"));

  assert.equal(await following.exited, 0, following.stderr);
  assert.match(following.stdout, /\nsucceeded 100% batch 4 of 4\nresult .*\n$/);
  assert.deepEqual(printedResult(following.stdout), { thumbnails: 4, source: file });

  // Once that job has ended, the key is free: the client submits its own.
  const again = new ExampleClient([`${prefix}resize`, file]);
  assert.equal(await again.exited, 0, again.stderr);
  assert.match(again.stdout, /^submitted j_/);
  assert.ok(!again.stdout.includes(active.id), again.stdout);
  assert.deepEqual(printedResult(again.stdout), { thumbnails: 4, source: file });
  assert.equal(await worker.stop(), 0, worker.output());
});

test("the example client says how a job that did not succeed ended, in the words its worker made public", async (t) => {
  const prefix = `${uniqueKind("client")}.`;
  const worker = new ExampleWorker(prefix);
  t.after(() => worker.process.kill("SIGKILL"));
  // One attempt: the flaky handler's first, retryable failure ends it.
  const failing = new ExampleClient([`${prefix}flaky`, `${prefix}dog.png`]);
  assert.equal(await failing.exited, 1, failing.stderr);
  assert.match(failing.stdout, /\nfailed: UpstreamTimeout the upstream service timed out\n$/);
  assert.equal(await worker.stop(), 0, worker.output());
});

/** printedResult is the result the example client printed last. */
function printedResult(stdout: string): unknown {
  const line = stdout.trimEnd().split("\n").at(-1) ?? "";
  assert.ok(line.startsWith("result "), stdout);
  return JSON.parse(line.slice("result ".length));
}
