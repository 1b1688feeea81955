// Tests of what the page shows of a job's dependencies: the jobs it runs
// after with what the page knows of each, the policy in words, a WAITING
// job's step text, a job a dependency cancelled, and a batch's count of
// its WAITING jobs.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { DependencyFailure, JobErrorSchema, JobSchema, JobState, type Job } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { batchSummary } from "../src/batch";
import { dependencies, dependencyFailed, onDependencyFailureText, waitingStep } from "../src/deps";
import { JobBook } from "../src/model";

function job(id: string, state: JobState, fields: Partial<Pick<Job, "kind" | "after" | "error" | "onDependencyFailure">> = {}): Job {
  return create(JobSchema, { id, version: 1n, state, kind: "k", ...fields });
}

test("the jobs a job runs after are listed in order, each with its kind and state once the page has it", () => {
  const book = new JobBook();
  book.merge(job("j_a", JobState.SUCCEEDED, { kind: "thumbs.render" }));
  book.merge(job("j_b", JobState.RUNNING, { kind: "thumbs.render" }));
  const after = job("j_c", JobState.WAITING, { after: ["j_b", "j_old", "j_a"] });
  assert.deepEqual(dependencies(after, (id) => book.get(id)), {
    shown: [
      { id: "j_b", kind: "thumbs.render", state: "running" },
      { id: "j_old", kind: "", state: "" }, // older than the list: only its id
      { id: "j_a", kind: "thumbs.render", state: "succeeded" },
    ],
    more: 0,
  });
});

test("a fan-in after a whole batch shows the first jobs and counts the rest", () => {
  const ids = Array.from({ length: 1000 }, (_, i) => `j_${i}`);
  const deps = dependencies(job("j_all", JobState.WAITING, { after: ids }), () => undefined, 50);
  assert.equal(deps.shown.length, 50);
  assert.equal(deps.shown[49]?.id, "j_49");
  assert.equal(deps.more, 950);
  assert.deepEqual(dependencies(job("j_none", JobState.QUEUED), () => undefined), { shown: [], more: 0 });
});

test("the policy reads as the command line's flag: cancel or run, and nothing without after", () => {
  assert.equal(onDependencyFailureText(DependencyFailure.CANCEL), "cancel");
  assert.equal(onDependencyFailureText(DependencyFailure.RUN), "run");
  assert.equal(onDependencyFailureText(DependencyFailure.UNSPECIFIED), "");
});

test("a WAITING job's step says how many jobs it runs after; once released it has none of its own", () => {
  assert.equal(waitingStep(job("j_1", JobState.WAITING, { after: ["j_a"] })), "after 1 job");
  assert.equal(waitingStep(job("j_2", JobState.WAITING, { after: Array.from({ length: 1000 }, (_, i) => `j_${i}`) })), "after 1,000 jobs");
  assert.equal(waitingStep(job("j_3", JobState.QUEUED, { after: ["j_a"] })), "", "a released job still said what it waited for");
  assert.equal(waitingStep(job("j_4", JobState.RUNNING)), "");
});

test("only a cancellation by a dependency reads as one", () => {
  const depError = create(JobErrorSchema, { type: "DependencyFailed", message: "job j_a, which it runs after, ended FAILED" });
  assert.equal(dependencyFailed(job("j_1", JobState.CANCELLED, { error: depError })), true);
  assert.equal(dependencyFailed(job("j_2", JobState.CANCELLED)), false, "an operator's cancel");
  assert.equal(dependencyFailed(job("j_3", JobState.QUEUED, { error: depError })), false, "a retried job");
  assert.equal(
    dependencyFailed(job("j_4", JobState.CANCELLED, { error: create(JobErrorSchema, { type: "Timeout" }) })),
    false,
    "a job cancelled after a failed attempt",
  );
});

test("a batch's line says how many of the jobs to go are waiting for others", () => {
  const byState = new Map([
    [JobState.SUCCEEDED, 3],
    [JobState.QUEUED, 1],
    [JobState.WAITING, 2],
  ]);
  assert.equal(batchSummary("album", { kind: "counted" }, { total: 6, ended: 3, byState }), "album: 6 jobs · 3 ended (3 succeeded) · 3 to go (2 waiting)");
  byState.delete(JobState.WAITING);
  assert.equal(batchSummary("album", { kind: "counted" }, { total: 4, ended: 3, byState }), "album: 4 jobs · 3 ended (3 succeeded) · 1 to go");
});
