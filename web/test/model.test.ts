// Tests of what the page keeps about jobs: merge by version, trimming.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { JobSchema, JobState, type Job } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { JobBook } from "../src/model";

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
  assert.deepEqual(book.trim(2, "j_1"), ["j_3", "j_4"]);
  assert.deepEqual(
    book.newestFirst().map((j) => j.id),
    ["j_5", "j_2", "j_1"],
  );
  assert.deepEqual(book.sightings("j_3"), []);
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
