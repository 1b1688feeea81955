// Tests of what the page reads again after its feed started over
// (src/refill.ts). web/page_logic_test.go bundles and runs them with
// `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { JobSchema, JobState, type Job } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { createdNs, deeper, readEach, sortUnread, upTo, worthNextPage } from "../src/refill";

function job(id: string, createdMs: number, nanos = 0): Job {
  const createdAt = timestampFromMs(createdMs);
  createdAt.nanos += nanos;
  return create(JobSchema, { id, version: 1n, state: JobState.QUEUED, createdAt });
}

const ids = (jobs: readonly Job[]) => jobs.map((j) => j.id);

test("a job's time of creation is kept to the nanosecond, as the server orders by it", () => {
  assert.equal(createdNs(job("j_a", 1_000, 1_000)), 1_000_001_000n);
  assert.ok(createdNs(job("j_a", 1_000, 1_000)) > createdNs(job("j_b", 1_000)), "a microsecond later is later");
  assert.equal(createdNs(create(JobSchema, { id: "j_x" })), 0n);
});

// ListJobs orders the jobs of one time by the order they were stored in,
// which ids do not follow (a batch's jobs share their time): the job
// listed last is the one read last, of those of its time.
test("the job listed furthest down is the last read of the oldest time", () => {
  let last: Job | undefined;
  for (const j of [job("j_c", 3_000), job("j_z", 2_000), job("j_a", 2_000), job("j_m", 2_000)]) {
    if (deeper(j, last)) {
      last = j;
    }
  }
  assert.equal(last?.id, "j_m");
  // The view read again from its start (the list let a job go) reads a
  // newer job after it: not further down.
  assert.equal(deeper(job("j_c", 3_000), last), false);
});

// The outside tester's case, and a batch: the view is read again down
// to the last job listed, and no further, even where the jobs after it
// share its time (all sixty of a batch, of which the list had fifty).
test("the view is read again down to the last job listed, and not past it", () => {
  const last = job("j_b", 5_000);
  const page = [job("j_n", 9_000), job("j_y", 5_000), job("j_b", 5_000), job("j_z", 5_000), job("j_a", 1_000)];
  assert.deepEqual(ids(upTo(page, last).jobs), ["j_n", "j_y", "j_b"]);
  assert.equal(upTo(page, last).past, true);
  assert.deepEqual(upTo(page.slice(0, 2), last), { jobs: page.slice(0, 2), past: false }, "a page that ends before the last job listed");
  // The server no longer has it: the read ends at the first job created
  // before its time.
  const gone = job("j_gone", 5_000);
  assert.deepEqual(ids(upTo(page, gone).jobs), ["j_n", "j_y", "j_b", "j_z"]);
  assert.equal(upTo(page, gone).past, true);
});

// A list of 50, and one job of a backlog from minute 1 that a worker
// took: read down to minute 25, that job is asked for by id. A job of
// the time read down to, or one read past, may be either side of it in
// the server's order: only the server can say.
test("a job held only because it changed, older than what was read, is asked for; one created after it is gone", () => {
  const to = job("j_listed", 25 * 60_000);
  const { gone, older } = sortUnread(
    [job("j_old", 60_000), job("j_after", 30 * 60_000), job("j_zsame", 25 * 60_000), job("j_asame", 25 * 60_000)],
    { all: false, to },
  );
  assert.deepEqual(gone, ["j_after"]);
  assert.deepEqual(ids(older), ["j_old", "j_zsame", "j_asame"]);
});

test("a view read to its end leaves nothing older to ask for, and a view not read at all leaves everything", () => {
  const jobs = [job("j_a", 1_000), job("j_b", 2_000)];
  assert.deepEqual(sortUnread(jobs, { all: true, to: undefined }), { gone: ["j_a", "j_b"], older: [] });
  assert.deepEqual(sortUnread(jobs, { all: true, to: job("j_z", 5_000) }).gone, ["j_a", "j_b"]);
  assert.deepEqual(ids(sortUnread(jobs, { all: false, to: undefined }).older), ["j_a", "j_b"]);
});

test("the view is read on past the jobs listed only while a page holds many of the jobs looked for", () => {
  assert.equal(worthNextPage(250, 500), true, "a batch the page saw submitted");
  assert.equal(worthNextPage(50, 500), true);
  assert.equal(worthNextPage(1, 500), false, "a backlog between the few");
  assert.equal(worthNextPage(0, 0), false, "an empty page");
});

test("each job is asked for once, at most parallel at a time, and its answer sorted as found, missing or unknown", async () => {
  const server = new Map([
    ["j_a", job("j_a", 1_000)],
    ["j_c", job("j_c", 3_000)],
  ]);
  let inFlight = 0;
  let most = 0;
  const asked: string[] = [];
  const get = async (id: string) => {
    asked.push(id);
    inFlight++;
    most = Math.max(most, inFlight);
    await new Promise((resolve) => setTimeout(resolve, 5));
    inFlight--;
    if (id === "j_x") {
      throw new Error("the server cannot be reached");
    }
    return server.get(id);
  };
  const all = ["j_a", "j_b", "j_c", "j_x", "j_d", "j_e", "j_f"];
  const got = await readEach(all, get, 3);
  assert.deepEqual([...asked].sort(), [...all].sort(), "each job asked for once");
  assert.equal(most, 3, "more calls at once than allowed, or fewer than could be");
  assert.deepEqual(ids(got.found).sort(), ["j_a", "j_c"]);
  assert.deepEqual(got.missing.sort(), ["j_b", "j_d", "j_e", "j_f"]);
  assert.deepEqual(got.unknown, ["j_x"], "a call that failed says nothing of the job");
  assert.deepEqual(await readEach([], get, 3), { found: [], missing: [], unknown: [] });
});

test("once the answers are no longer wanted (the view changed), no more jobs are asked for", async () => {
  let wanted = true;
  const asked: string[] = [];
  const get = async (id: string) => {
    asked.push(id);
    wanted = false;
    return job(id, 1_000);
  };
  const got = await readEach(["j_a", "j_b", "j_c"], get, 1, () => wanted);
  assert.deepEqual(asked, ["j_a"]);
  assert.deepEqual(got.unknown, ["j_b", "j_c"]);
});
