// An example jobwatch client in Node: submit a job, follow its progress,
// and print how it ended. A job with the same unique key already running
// is followed instead of submitted twice.
//
//   cd ts/client && npm ci && npm run build
//   JOBWATCH_SERVER=http://127.0.0.1:8080 JOBWATCH_TOKEN=... npm run client -- example.resize cat.png
import { AlreadyActiveError, JobState, createClient, resultOf, type Job } from "../src/node.js";

const client = createClient({
  url: process.env["JOBWATCH_SERVER"] ?? "http://127.0.0.1:8080",
  token: process.env["JOBWATCH_TOKEN"],
});
const kind = process.argv[2] ?? "example.resize";
const file = process.argv[3] ?? "cat.png";

let job: Job;
try {
  job = await client.submitJob({ kind, payload: file, uniqueKey: `${kind} ${file}` });
  console.log(`submitted ${job.id}`);
} catch (err) {
  if (!(err instanceof AlreadyActiveError)) {
    throw err;
  }
  // The same job of this file is active already: follow it instead.
  console.log(`already active as ${err.activeJobId}`);
  job = await client.getJob(err.activeJobId);
}

// watchJob yields each change, resumes across disconnects and the
// server's stream lifetime, and ends after the job has.
for await (const snapshot of client.watchJob(job.id)) {
  console.log(`${JobState[snapshot.state].toLowerCase()} ${snapshot.percent}% ${snapshot.step}`);
}

// waitForJob answers at once for a job that has ended; a caller that
// needs no progress calls only this.
const done = await client.waitForJob(job.id);
if (done.state === JobState.SUCCEEDED) {
  console.log(`result ${JSON.stringify(resultOf(done))}`);
} else {
  // What the worker chose to tell callers: always the type, the message
  // only if it made it public.
  console.log(`${JobState[done.state].toLowerCase()}: ${done.error?.type ?? ""} ${done.error?.message ?? ""}`.trimEnd());
}
process.exitCode = done.state === JobState.SUCCEEDED ? 0 : 1;
