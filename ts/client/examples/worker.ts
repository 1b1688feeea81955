// An example jobwatch worker in Node. It runs three kinds of job:
//
//   example.resize  reports progress in steps and returns a result
//   example.flaky   fails its first attempt with a retryable error
//   example.sleep   sleeps payload.ms, stopping early when cancelled
//
// and stops gracefully on SIGTERM or Ctrl-C: it claims nothing more and
// lets running jobs finish (up to JOBWATCH_DRAIN_TIMEOUT_MS, default 60 s).
//
//   cd ts/client && npm ci && npm run build
//   JOBWATCH_SERVER=http://127.0.0.1:8080 JOBWATCH_TOKEN=... npm run worker
//
// JOBWATCH_KIND_PREFIX replaces "example." in the kinds' names.
import { HandlerError, Worker, payloadOf, type Handler } from "../src/node.js";

const prefix = process.env["JOBWATCH_KIND_PREFIX"] ?? "example.";
const drain = process.env["JOBWATCH_DRAIN_TIMEOUT_MS"];

/** sleep waits ms, or rejects with the signal's reason when the job is cancelled or the worker stops. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

const resize: Handler = async (job, progress, signal) => {
  const batches = 4;
  for (let i = 1; i <= batches; i++) {
    await sleep(50, signal);
    progress((i * 100) / batches, `batch ${i} of ${batches}`);
  }
  return { thumbnails: batches, source: payloadOf(job) ?? null };
};

const flaky: Handler = (job) => {
  if (job.attempt === 1) {
    // retryable: the job runs again if it has attempts left; public: the
    // message is shown to callers (by default they see the type alone).
    throw new HandlerError("the upstream service timed out", { type: "UpstreamTimeout", retryable: true, public: true });
  }
  return { attempt: job.attempt };
};

const sleeper: Handler = async (job, progress, signal) => {
  const ms = Number((payloadOf(job) as { ms?: number } | undefined)?.ms ?? 1000);
  progress(0, `sleeping ${ms} ms`);
  try {
    await sleep(ms, signal);
  } catch (err) {
    console.log(`job ${job.id}: aborted (${(err as Error).name})`);
    throw err;
  }
  return { slept: ms };
};

const worker = new Worker({
  url: process.env["JOBWATCH_SERVER"] ?? "http://127.0.0.1:8080",
  token: process.env["JOBWATCH_TOKEN"],
  concurrency: Number(process.env["JOBWATCH_CONCURRENCY"] ?? "4"),
  drainTimeoutMs: drain === undefined ? undefined : Number(drain),
  handlers: {
    [`${prefix}resize`]: resize,
    [`${prefix}flaky`]: flaky,
    [`${prefix}sleep`]: sleeper,
  },
});
console.log(`worker ${worker.id} running ${prefix}resize, ${prefix}flaky and ${prefix}sleep`);
try {
  await worker.run();
} catch (err) {
  // The server refused the claims for good: a token it does not know,
  // or kinds the token may not claim. Its words say which.
  console.error(`worker ${worker.id} stopped: ${(err as Error).message}`);
  process.exit(1);
}
console.log(`worker ${worker.id} stopped`);
