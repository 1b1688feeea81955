// A Node program using the generated TypeScript client: submit a job, then
// wait for it with WaitJob (a bounded long-poll, re-issued until the job
// ends) and print how it ended; a job that failed, was cancelled or was
// lost is run again with RetryJob (same id, a fresh allowance of
// attempts), up to JOBWATCH_RETRIES times (1 unless set). The kind
// defaults to enrich, which the workers of `jobwatch demo` run; a kind no
// worker runs waits forever.
//
//	cd web && npm ci && JOBWATCH_SERVER=http://127.0.0.1:8080 npm run example -- enrich
import { fromJson, toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { JobService, JobState, type Job } from "../src/gen/jobwatch/v1/jobwatch_pb";

const baseUrl = process.env["JOBWATCH_SERVER"] ?? "http://127.0.0.1:8080";
const kind = process.argv[2] ?? "enrich";
const token = process.env["JOBWATCH_TOKEN"];
const retries = Number(process.env["JOBWATCH_RETRIES"] ?? "1");

const transport = createConnectTransport({
  baseUrl,
  httpVersion: "1.1",
  // Deep enough for any payload or result the server takes (128 levels,
  // jobtype.MaxJSONDepth): protobuf-es stops at 100 nested messages otherwise.
  jsonOptions: { recursionLimit: 2 * 128 + 8 },
  interceptors: token ? [(next) => (req) => (req.header.set("Authorization", `Bearer ${token}`), next(req))] : [],
});
const jobs = createClient(JobService, transport);

const terminal = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST]);
// A server that cannot be reached, that went away mid-call (a socket hang
// up is aborted over HTTP/1.1), or that asks to come back later.
const transient = new Set([Code.Unavailable, Code.Aborted, Code.Canceled, Code.ResourceExhausted]);

// waitForJob re-issues WaitJob after each answer at the server's cap and
// retries a server that is briefly unreachable or restarting, with backoff.
async function waitForJob(jobId: string): Promise<Job> {
  let delay = 250;
  for (;;) {
    try {
      const { job } = await jobs.waitJob({ jobId });
      if (job !== undefined && terminal.has(job.state)) {
        return job;
      }
      delay = 250;
    } catch (err) {
      if (!transient.has(ConnectError.from(err).code)) {
        throw err;
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }
}

const { job } = await jobs.submitJob({
  kind,
  payload: fromJson(ValueSchema, { from: "node-client example" }),
});
if (job === undefined) {
  throw new Error("SubmitJob answered without a job");
}
console.log(`submitted ${job.id} (${job.kind})`);

let done = await waitForJob(job.id);
for (let retried = 0; done.state !== JobState.SUCCEEDED && retried < retries; retried++) {
  const why = done.error === undefined ? "" : `: ${done.error.type}`;
  console.log(`job ${done.id} ${JobState[done.state].toLowerCase()}${why}; retrying`);
  // RetryJob puts the ended job back in its queue under the same id; its
  // history keeps the error of the run that ended.
  await jobs.retryJob({ jobId: done.id });
  done = await waitForJob(done.id);
}
console.log(`job ${done.id} ${JobState[done.state].toLowerCase()}`);
if (done.result !== undefined) {
  console.log(`result ${JSON.stringify(toJson(ValueSchema, done.result))}`);
}
if (done.error !== undefined) {
  console.log(`error ${done.error.type}: ${done.error.message}`);
}
process.exitCode = done.state === JobState.SUCCEEDED ? 0 : 1;
