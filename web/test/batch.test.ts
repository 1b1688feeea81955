// Tests of what the page counts of a batch while the list shows it: the
// tally merged from the feed and from ListJobs pages in any order, the
// summary line, the count that pages through ListJobs once the feed is
// synced, and the address that carries the filter.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  JobSchema,
  JobState,
  JobView,
  ListJobsResponseSchema,
  type Job,
  type ListJobsRequest,
  type ListJobsResponse,
} from "../src/gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "../src/api";
import { BatchProgress, BatchTally, batchFromURL, batchSummary, outcomeShares, urlWithBatch, type BatchCounts } from "../src/batch";

const batch = "thumbs-2026-12-02";

function job(id: string, version: number, state: JobState, inBatch = batch): Job {
  return create(JobSchema, { id, version: BigInt(version), state, batch: inBatch, tenant: "default" });
}

function counts(c: BatchCounts): Record<string, number> {
  const out: Record<string, number> = { total: c.total, ended: c.ended };
  for (const [state, n] of c.byState) {
    out[JobState[state]!.toLowerCase()] = n;
  }
  return out;
}

test("the tally counts each job once, at its highest version, whatever order snapshots come in", () => {
  const tally = new BatchTally(batch);
  assert.equal(tally.merge(job("j_1", 1, JobState.QUEUED)), true);
  assert.equal(tally.merge(job("j_2", 1, JobState.QUEUED)), true);
  assert.equal(tally.merge(job("j_1", 3, JobState.RUNNING)), true);
  assert.equal(tally.merge(job("j_1", 4, JobState.RUNNING)), false, "a new percent changes no count");
  // A ListJobs page read before the feed's change, received after it.
  assert.equal(tally.merge(job("j_1", 2, JobState.QUEUED)), false);
  assert.equal(tally.merge(job("j_2", 5, JobState.FAILED)), true);
  assert.equal(tally.merge(job("j_3", 2, JobState.SUCCEEDED)), true);
  assert.equal(tally.merge(job("j_9", 2, JobState.SUCCEEDED, "another-batch")), false, "another batch's job was counted");
  assert.deepEqual(counts(tally.counts()), { total: 3, ended: 2, running: 1, failed: 1, succeeded: 1 });
});

test("a deleted job leaves the counts, and a page read before its deletion cannot count it again", () => {
  const tally = new BatchTally(batch);
  tally.merge(job("j_1", 3, JobState.FAILED));
  tally.merge(job("j_2", 3, JobState.SUCCEEDED));
  assert.equal(tally.forget("j_1"), true);
  assert.equal(tally.forget("j_elsewhere"), false, "a deletion elsewhere in the tenant");
  assert.equal(tally.merge(job("j_1", 3, JobState.FAILED)), false);
  tally.reset();
  assert.equal(tally.merge(job("j_1", 3, JobState.FAILED)), false, "a reset brought a deleted job back");
  tally.merge(job("j_2", 3, JobState.SUCCEEDED));
  assert.deepEqual(counts(tally.counts()), { total: 1, ended: 1, succeeded: 1 });
});

test("the summary says how many jobs, how many ended and how, and how many are to go", () => {
  const tally = new BatchTally(batch);
  let n = 0;
  const add = (count: number, state: JobState) => {
    for (let i = 0; i < count; i++) {
      tally.merge(job(`j_${n++}`, 2, state));
    }
  };
  add(309, JobState.SUCCEEDED);
  add(3, JobState.FAILED);
  add(150, JobState.QUEUED);
  add(38, JobState.RUNNING);
  const counted = { kind: "counted" } as const;
  assert.equal(batchSummary(batch, counted, tally.counts()), "thumbs-2026-12-02: 500 jobs · 312 ended (309 succeeded, 3 failed) · 188 to go");
  add(2, JobState.CANCELLED);
  add(1, JobState.LOST);
  add(20_000 - 503, JobState.QUEUED);
  assert.equal(
    batchSummary(batch, counted, tally.counts()),
    "thumbs-2026-12-02: 20,000 jobs · 315 ended (309 succeeded, 3 failed, 2 cancelled, 1 lost) · 19,685 to go",
  );

  const one = new BatchTally("b");
  assert.equal(batchSummary("b", counted, one.counts()), "b: no jobs");
  one.merge(job("j_1", 1, JobState.QUEUED, "b"));
  assert.equal(batchSummary("b", counted, one.counts()), "b: 1 job · 0 ended · 1 to go");
  one.merge(job("j_1", 2, JobState.SUCCEEDED, "b"));
  assert.equal(batchSummary("b", counted, one.counts()), "b: 1 job · 1 ended (1 succeeded) · 0 to go");
  assert.equal(batchSummary("b", { kind: "counting" }, one.counts()), "b: counting jobs… 1 so far");
  assert.equal(batchSummary("b", { kind: "counting" }, new BatchTally("b").counts()), "b: counting jobs…");
  assert.equal(batchSummary("b", { kind: "too-many", limit: 20_000 }, one.counts()), "b: more than 20,000 jobs, too many for this page to count");
  assert.equal(
    batchSummary("b", { kind: "retrying", reason: "the server cannot be reached", retryAt: 0 }, one.counts()),
    "b: cannot count the jobs (the server cannot be reached); trying again",
  );
});

test("the bar's parts are each way of ending as a share of the batch", () => {
  const tally = new BatchTally(batch);
  tally.merge(job("j_1", 2, JobState.SUCCEEDED));
  tally.merge(job("j_2", 2, JobState.SUCCEEDED));
  tally.merge(job("j_3", 2, JobState.FAILED));
  tally.merge(job("j_4", 2, JobState.RUNNING));
  assert.deepEqual(
    outcomeShares(tally.counts()).map((p) => [JobState[p.state], p.share]),
    [
      ["SUCCEEDED", 0.5],
      ["FAILED", 0.25],
      ["CANCELLED", 0],
      ["LOST", 0],
    ],
  );
  assert.deepEqual(outcomeShares(new BatchTally(batch).counts()), []);
});

// Lister plays ListJobs: the batch's jobs newest first, pageSize a page,
// with a hook before each answer (the feed's news arriving meanwhile) and
// failures to give first.
class Lister {
  readonly requests: ListJobsRequest[] = [];
  failures: ConnectError[] = [];
  beforePage: (n: number) => void = () => {};

  constructor(public jobs: Job[]) {}

  readonly client = {
    listJobs: async (req: ListJobsRequest): Promise<ListJobsResponse> => {
      this.requests.push(req);
      await new Promise((resolve) => setTimeout(resolve, 1));
      const failure = this.failures.shift();
      if (failure !== undefined) {
        throw failure;
      }
      const from = req.pageToken === "" ? 0 : Number(req.pageToken);
      const page = this.jobs.slice(from, from + req.pageSize);
      this.beforePage(this.requests.length);
      const next = from + req.pageSize < this.jobs.length ? String(from + req.pageSize) : "";
      return create(ListJobsResponseSchema, { jobs: page, nextPageToken: next });
    },
  } as unknown as Pick<JobClient, "listJobs">;
}

async function until(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) {
      throw new Error(`never: ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

// batchOf is n jobs of the batch, newest (j_<n-1>) first, all queued at
// version 1.
function batchOf(n: number): Job[] {
  return Array.from({ length: n }, (_, i) => job(`j_${n - 1 - i}`, 1, JobState.QUEUED));
}

test("a batch larger than the feed's first page is counted from ListJobs once the feed is synced, and kept from the feed", async (t) => {
  const lister = new Lister(batchOf(7));
  let changes = 0;
  const progress = new BatchProgress(lister.client, "default", batch, () => changes++, { pageSize: 3, backoffMs: () => 0 });
  t.after(() => progress.stop());

  // The feed's first page: the two newest. Nothing is read before the
  // feed is synced, and the line says it is counting.
  progress.jobs([job("j_6", 1, JobState.QUEUED), job("j_5", 1, JobState.QUEUED)]);
  assert.equal(lister.requests.length, 0);
  assert.equal(progress.summary(), `${batch}: counting jobs… 2 so far`);

  // While the pages come, the oldest job ends: the feed says so before
  // the page that still has it queued arrives.
  lister.beforePage = (n) => {
    if (n === 2) {
      progress.jobs([job("j_0", 3, JobState.SUCCEEDED)]);
    }
  };
  progress.synced();
  await until("counted", () => progress.status.kind === "counted");
  assert.deepEqual(
    lister.requests.map((r) => [r.tenant, r.batch, r.pageSize, r.pageToken, r.view]),
    [
      ["default", batch, 3, "", JobView.SUMMARY],
      ["default", batch, 3, "3", JobView.SUMMARY],
      ["default", batch, 3, "6", JobView.SUMMARY],
    ],
  );
  assert.equal(progress.summary(), `${batch}: 7 jobs · 1 ended (1 succeeded) · 6 to go`);

  // From now on the feed alone keeps the counts: no more ListJobs.
  const before = changes;
  progress.jobs([job("j_3", 2, JobState.RUNNING)]);
  progress.jobs([job("j_3", 3, JobState.FAILED), job("j_7", 1, JobState.QUEUED)]);
  progress.deleted(["j_0"]);
  assert.equal(progress.summary(), `${batch}: 7 jobs · 1 ended (1 failed) · 6 to go`);
  assert.ok(changes > before, "the page was not told the counts changed");
  assert.equal(lister.requests.length, 3);
});

test("a stream started afresh counts again from scratch, so a job deleted while the feed was away is gone", async (t) => {
  const lister = new Lister(batchOf(4));
  const progress = new BatchProgress(lister.client, "default", batch, () => {}, { pageSize: 10, backoffMs: () => 0 });
  t.after(() => progress.stop());
  progress.synced();
  await until("counted", () => progress.status.kind === "counted");
  assert.equal(progress.summary(), `${batch}: 4 jobs · 0 ended · 4 to go`);
  // Deleted, and j_1 ended, while the feed had no stream; the server no
  // longer knew its token, so it started afresh.
  lister.jobs = [job("j_3", 1, JobState.QUEUED), job("j_2", 1, JobState.QUEUED), job("j_1", 4, JobState.SUCCEEDED)];
  progress.synced();
  await until("counted again", () => progress.status.kind === "counted" && lister.requests.length === 2);
  assert.equal(progress.summary(), `${batch}: 3 jobs · 1 ended (1 succeeded) · 2 to go`);
});

test("a count that fails tries again, and one the server refuses stops and says why", async (t) => {
  const lister = new Lister(batchOf(2));
  lister.failures = [new ConnectError("fetch failed", Code.Unavailable)];
  const statuses: string[] = [];
  const progress: BatchProgress = new BatchProgress(lister.client, "default", batch, () => statuses.push(progress.status.kind), {
    pageSize: 10,
    backoffMs: () => 0,
  });
  t.after(() => progress.stop());
  progress.synced();
  await until("counted", () => progress.status.kind === "counted");
  assert.ok(statuses.includes("retrying"), JSON.stringify(statuses));
  assert.equal(progress.summary(), `${batch}: 2 jobs · 0 ended · 2 to go`);

  const refused = new Lister(batchOf(2));
  refused.failures = [new ConnectError('tenant: this token may only use tenant "acme"', Code.PermissionDenied)];
  const denied = new BatchProgress(refused.client, "default", batch, () => {}, { backoffMs: () => 0 });
  t.after(() => denied.stop());
  denied.synced();
  await until("refused", () => denied.status.kind === "refused");
  await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(refused.requests.length, 1, "a refused count was asked again");
  assert.equal(denied.summary(), `${batch}: cannot count the jobs: tenant: this token may only use tenant "acme"`);
});

test("a batch larger than the page keeps is said to be so, not counted, and stays so as the feed brings more", async (t) => {
  const lister = new Lister(batchOf(7));
  const progress = new BatchProgress(lister.client, "default", batch, () => {}, { pageSize: 3, maxJobs: 5, backoffMs: () => 0 });
  t.after(() => progress.stop());
  progress.synced();
  await until("too many", () => progress.status.kind === "too-many");
  assert.equal(progress.tally.size, 0, "the page kept the jobs it would not count");
  progress.jobs([job("j_7", 1, JobState.QUEUED)]);
  assert.equal(progress.summary(), `${batch}: more than 5 jobs, too many for this page to count`);

  // A batch that grows past the bound while it is watched.
  const small = new Lister(batchOf(4));
  const growing = new BatchProgress(small.client, "default", batch, () => {}, { pageSize: 10, maxJobs: 5, backoffMs: () => 0 });
  t.after(() => growing.stop());
  growing.synced();
  await until("counted", () => growing.status.kind === "counted");
  growing.jobs([job("j_4", 1, JobState.QUEUED), job("j_5", 1, JobState.QUEUED)]);
  assert.equal(growing.status.kind, "too-many");
  assert.equal(growing.tally.size, 0);
});

test("a batch whose feed the server refuses says why instead of counting", async (t) => {
  const lister = new Lister(batchOf(2));
  const progress = new BatchProgress(lister.client, "default", "not a name", () => {}, { backoffMs: () => 0 });
  t.after(() => progress.stop());
  progress.refuse("batch: may only contain ASCII letters, digits and . _ - : / @");
  progress.synced();
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(lister.requests.length, 0, "a refused batch was counted");
  assert.equal(progress.summary(), "not a name: cannot count the jobs: batch: may only contain ASCII letters, digits and . _ - : / @");
});

test("a stopped count asks nothing more", async () => {
  const lister = new Lister(batchOf(9));
  const progress = new BatchProgress(lister.client, "default", batch, () => {}, { pageSize: 3, backoffMs: () => 0 });
  lister.beforePage = (n) => {
    if (n === 1) {
      progress.stop();
    }
  };
  progress.synced();
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.equal(lister.requests.length, 1);
  progress.synced();
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(lister.requests.length, 1, "a stopped count started again");
});

test("the address carries the batch beside a named tenant, and keeps the job shown", () => {
  const page = new URL("http://127.0.0.1:8080/#job=j_01");
  const filtered = urlWithBatch(page, "thumbs/2026-12-02:v1", "acme");
  assert.equal(filtered.search, "?tenant=acme&batch=thumbs%2F2026-12-02%3Av1");
  assert.equal(filtered.hash, "#job=j_01");
  assert.equal(batchFromURL(filtered), "thumbs/2026-12-02:v1");
  assert.equal(urlWithBatch(page, "b", "").search, "?batch=b", "the caller's own tenant is named by no parameter");
  const cleared = urlWithBatch(filtered, "", "acme");
  assert.equal(cleared.search, "?tenant=acme");
  assert.equal(batchFromURL(cleared), "");
  assert.equal(page.href, "http://127.0.0.1:8080/#job=j_01", "the url given was changed");
});
