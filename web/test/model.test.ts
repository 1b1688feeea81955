// Tests of what the page keeps about jobs: merge by version, trimming.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { JobSchema, JobState, type Job } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { historyGap, JobBook, keepOldest, placeOf, sortsBefore } from "../src/model";

function job(id: string, version: number, state: JobState, percent = 0, createdMs = 1_000): Job {
  return create(JobSchema, { id, version: BigInt(version), state, percent, createdAt: timestampFromMs(createdMs) });
}

test("a stale snapshot never overwrites a newer one", () => {
  const book = new JobBook();
  assert.equal(book.merge(job("j_a", 5, JobState.RUNNING, 60)), true);
  assert.equal(book.merge(job("j_a", 4, JobState.RUNNING, 40)), false, "an older version changed the book");
  assert.equal(book.merge(job("j_a", 5, JobState.RUNNING, 60)), false, "a repeat of the same version changed the book");
  assert.equal(book.get("j_a")?.percent, 60);
  assert.equal(book.merge(job("j_a", 6, JobState.SUCCEEDED, 100)), true);
  // A GetJob answer that left the server before the stream's last batch.
  assert.equal(book.merge(job("j_a", 5, JobState.RUNNING, 60)), false);
  assert.equal(book.get("j_a")?.state, JobState.SUCCEEDED);
  assert.deepEqual(
    book.sightings("j_a").map((s) => s.state),
    [JobState.RUNNING, JobState.SUCCEEDED],
    "a stale snapshot added a step to the timeline",
  );
});

test("trimming drops the oldest ended jobs but keeps active ones and the one on display", () => {
  const book = new JobBook();
  book.merge(job("j_1", 3, JobState.SUCCEEDED, 100, 1_000));
  book.merge(job("j_2", 2, JobState.RUNNING, 10, 2_000));
  book.merge(job("j_3", 3, JobState.FAILED, 10, 3_000));
  book.merge(job("j_4", 3, JobState.SUCCEEDED, 100, 4_000));
  book.merge(job("j_5", 1, JobState.QUEUED, 0, 5_000));
  assert.deepEqual(book.trim(2, "j_1"), [], "the two newest ended jobs besides the one on display were dropped");
  assert.deepEqual(book.trim(1, "j_1"), ["j_3"]);
  assert.deepEqual(
    book.newestFirst().map((j) => j.id),
    ["j_5", "j_4", "j_2", "j_1"],
  );
  assert.deepEqual(book.sightings("j_3"), []);
});

// The list keeps every job that has not ended: however many there are,
// they must not push out the newest ended ones (a thousand queued jobs
// no worker runs used to leave no room for any job that ended).
test("jobs that have not ended, however many, leave the newest ended jobs in the book", () => {
  const book = new JobBook();
  for (let i = 0; i < 300; i++) {
    book.merge(job(`j_q${String(i).padStart(3, "0")}`, 1, JobState.QUEUED, 0, 10_000 + i));
  }
  for (let i = 0; i < 5; i++) {
    book.merge(job(`j_e${i}`, 3, i % 2 === 0 ? JobState.FAILED : JobState.SUCCEEDED, 0, 1_000 + i));
  }
  assert.deepEqual(book.trim(3, ""), ["j_e1", "j_e0"], "not the oldest ended jobs beyond the newest 3 were dropped");
  assert.equal(book.count(JobState.QUEUED), 300);
  assert.deepEqual(
    book.newestFirst().slice(300).map((j) => j.id),
    ["j_e4", "j_e3", "j_e2"],
  );
  // Jobs kept for the user do not count against the bound.
  book.merge(job("j_e5", 3, JobState.FAILED, 0, 1_005));
  assert.deepEqual(book.trim(3, "", (id) => id === "j_e4"), []);
});

test("the jobs not ended past the bound go, running ones last, and one that changes comes back to be judged again", () => {
  const book = new JobBook();
  // Two old jobs running, then 10 queued, the newest last.
  book.merge(job("j_r0", 3, JobState.RUNNING, 40, 1));
  book.merge(job("j_r1", 3, JobState.RUNNING, 40, 2));
  for (let i = 0; i < 10; i++) {
    book.merge(job(`j_q${i}`, 1, JobState.QUEUED, 0, 100 + i));
  }
  book.merge(job("j_done", 3, JobState.SUCCEEDED, 100, 0));
  assert.deepEqual(book.trimUnended(12, ""), [], "a book within the bound lost jobs");
  const gone = book.trimUnended(5, "j_q0", (id) => id === "j_q1").map((j) => j.id);
  assert.deepEqual(gone, ["j_q6", "j_q5", "j_q4", "j_q3", "j_q2"], "not the oldest queued jobs went, past the 5 most relevant");
  assert.deepEqual(
    book.newestFirst().map((j) => j.id),
    ["j_q9", "j_q8", "j_q7", "j_q1", "j_q0", "j_r1", "j_r0", "j_done"],
    "the running jobs, the one shown, the one kept and the ended one must stay",
  );
  // A job let go is dropped, not held deleted: its next change brings it
  // back, and as it runs now, it stays.
  assert.equal(book.merge(job("j_q2", 2, JobState.RUNNING, 0, 102)), true);
  assert.deepEqual(
    book.trimUnended(5, "j_q0", (id) => id === "j_q1").map((j) => j.id),
    ["j_q7"],
  );
  assert.equal(book.get("j_q2")?.state, JobState.RUNNING);
});

test("a deleted job leaves the book and its counts, and a snapshot still on its way cannot bring it back", () => {
  const book = new JobBook();
  book.merge(job("j_1", 3, JobState.FAILED, 0, 1_000));
  book.merge(job("j_2", 3, JobState.FAILED, 0, 2_000));
  assert.equal(book.count(JobState.FAILED), 2);
  assert.equal(book.forget("j_1"), true);
  assert.equal(book.forget("j_never_shown"), false, "a job the book never had was reported dropped");
  assert.equal(book.get("j_1"), undefined);
  assert.equal(book.count(JobState.FAILED), 1);
  assert.deepEqual(
    book.newestFirst().map((j) => j.id),
    ["j_2"],
  );
  assert.deepEqual(book.sightings("j_1"), []);
  // A GetJob or RetryJob answer that left the server before the deletion.
  assert.equal(book.merge(job("j_1", 4, JobState.QUEUED, 0, 1_000)), false, "a late snapshot brought a deleted job back");
  assert.equal(book.get("j_1"), undefined);
  assert.equal(book.merge(job("j_never_shown", 1, JobState.QUEUED)), false);
  // Another tenant or token starts afresh.
  book.clear();
  assert.equal(book.merge(job("j_1", 4, JobState.QUEUED, 0, 1_000)), true);
});

// A server restarted on its database restored from an older copy has the
// jobs at lower versions than the page saw, and never says so: once the
// feed starts over, the server's answers are the truth again.
test("after the feed starts over, the server's answer is taken whatever its version, then versions order it again", () => {
  const book = new JobBook();
  book.merge(job("j_a", 5, JobState.CANCELLED));
  book.merge(job("j_b", 6, JobState.SUCCEEDED, 100));
  const before = book.era;
  book.startOver();
  assert.equal(book.merge(job("j_a", 2, JobState.QUEUED)), true, "the restored server's older version was refused");
  assert.equal(book.get("j_a")?.state, JobState.QUEUED);
  assert.deepEqual(
    book.sightings("j_a").map((s) => s.state),
    [JobState.CANCELLED, JobState.QUEUED],
  );
  // The same version, reached by other changes on the restored database.
  assert.equal(book.merge(job("j_b", 6, JobState.FAILED)), true, "the same version with another state was refused");
  assert.equal(book.get("j_b")?.state, JobState.FAILED);
  // Within the new era, a late snapshot never overwrites a newer one.
  assert.equal(book.merge(job("j_a", 3, JobState.RUNNING, 10)), true);
  assert.equal(book.merge(job("j_a", 2, JobState.QUEUED)), false, "a late snapshot of the new era overwrote a newer one");
  assert.equal(book.get("j_a")?.state, JobState.RUNNING);
  // An answer asked for before the start over (from the server before
  // it went back) changes nothing, whatever its version.
  assert.equal(book.merge(job("j_a", 9, JobState.SUCCEEDED, 100), before), false, "an answer from before the start over changed the book");
  assert.equal(book.get("j_a")?.state, JobState.RUNNING);
});

test("a job held from before the start over is taken from the first answer asked for after it, and only once", () => {
  const book = new JobBook();
  book.merge(job("j_a", 5, JobState.CANCELLED));
  book.startOver();
  const asked = book.era;
  // A ListJobs page read at version 2, then the stream's version 3: the
  // page's late answer comes last and must not take the job back.
  assert.equal(book.merge(job("j_a", 3, JobState.RUNNING, 10)), true);
  assert.equal(book.merge(job("j_a", 2, JobState.QUEUED), asked), false, "the first answer of the era did not settle the job's version");
  assert.equal(book.get("j_a")?.version, 3n);
});

test("a job deleted before the start over comes back when the server answers with it after, not before", () => {
  const book = new JobBook();
  book.merge(job("j_a", 3, JobState.CANCELLED));
  const before = book.era;
  book.forget("j_a");
  assert.equal(book.merge(job("j_a", 3, JobState.CANCELLED), before), false, "a snapshot from before the deletion brought it back");
  book.startOver();
  assert.equal(book.merge(job("j_a", 3, JobState.CANCELLED), before), false, "an answer asked before the start over brought it back");
  assert.equal(book.merge(job("j_a", 1, JobState.QUEUED)), true, "the restored server's job stayed deleted");
  assert.equal(book.get("j_a")?.state, JobState.QUEUED);
  // Deleted again, in this era: a late answer of this era cannot bring it back.
  const now = book.era;
  book.forget("j_a");
  assert.equal(book.merge(job("j_a", 2, JobState.RUNNING), now), false);
});

test("a history trimmed to its bound says how many earlier attempts are not kept", () => {
  // Each run's end (with its start), then a retry (an action: no start).
  const entries = (first: number, n: number) =>
    Array.from({ length: n }, (_, i) => ({ attempt: first + Math.floor(i / 2), startedAt: i % 2 === 0 ? timestampFromMs(1_000) : undefined }));
  assert.equal(historyGap([]), "");
  assert.equal(historyGap(entries(1, 5)), "", "a history kept whole said something was dropped");
  assert.equal(historyGap(entries(8, 20)), "… 7 earlier attempts not kept (a job keeps the last 20 entries of its history)");
  assert.equal(historyGap(entries(2, 20)), "… 1 earlier attempt not kept (a job keeps the last 20 entries of its history)");
  assert.equal(
    historyGap(entries(8, 21).slice(1)),
    "… 8 earlier attempts not kept (a job keeps the last 20 entries of its history)",
    "a history that starts at the retry after run 8 did not count run 8 as not kept",
  );
  assert.equal(historyGap([{ attempt: 0, startedAt: undefined }, ...entries(1, 19)]), "… earlier entries, if any, not kept (a job keeps the last 20 entries of its history)");
});

test("a list past its bound lets its newest rows go and keeps the page just read", () => {
  const book = new JobBook();
  // Ten jobs, two created in the same millisecond (ordered by id then).
  for (let i = 0; i < 10; i++) {
    book.merge(job(`j_${i}`, 1, JobState.QUEUED, 0, 1_000 + Math.min(i, 8) * 100));
  }
  const rows = book.newestFirst().map(placeOf);
  assert.deepEqual(
    rows.map((p) => p.id),
    ["j_9", "j_8", "j_7", "j_6", "j_5", "j_4", "j_3", "j_2", "j_1", "j_0"],
  );
  // sortsBefore orders as the book does, ties by id included.
  for (let i = 0; i < rows.length; i++) {
    for (let k = 0; k < rows.length; k++) {
      assert.equal(sortsBefore(rows[i]!, rows[k]!), i < k, `${rows[i]!.id} before ${rows[k]!.id}`);
    }
  }
  assert.deepEqual(keepOldest(rows, 10), { drop: [], top: undefined }, "a list within its bound let rows go");
  assert.deepEqual(keepOldest(rows, 20), { drop: [], top: undefined });
  const { drop, top } = keepOldest(rows, 6);
  assert.deepEqual(drop, ["j_9", "j_8", "j_7", "j_6"], "not the newest rows let go");
  assert.equal(top?.id, "j_5");
  // Above the top: what was let go, and anything newer the stream brings.
  assert.equal(sortsBefore(placeOf(job("j_9", 2, JobState.RUNNING, 10, 1_800)), top!), true, "a row let go would come back when it changes");
  assert.equal(sortsBefore(placeOf(job("j_new", 1, JobState.QUEUED, 0, 9_000)), top!), true);
  assert.equal(sortsBefore(placeOf(job("j_5", 2, JobState.RUNNING, 10, 1_500)), top!), false, "the newest row kept would leave when it changes");
  assert.equal(sortsBefore(placeOf(job("j_1", 2, JobState.RUNNING, 10, 1_100)), top!), false);
});

test("a job the list let go may come back, unlike a deleted one", () => {
  const book = new JobBook();
  book.merge(job("j_a", 1, JobState.QUEUED));
  book.merge(job("j_b", 1, JobState.QUEUED));
  book.drop("j_a");
  book.forget("j_b");
  assert.equal(book.get("j_a"), undefined);
  assert.equal(book.merge(job("j_a", 1, JobState.QUEUED)), true, "a job let go was held as deleted");
  assert.equal(book.merge(job("j_b", 2, JobState.QUEUED)), false);
});
