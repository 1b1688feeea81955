// Tests of the list's state filter and job links (src/filter.ts).
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JobState } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { jobLink, linkedJobFromURL, matches, stateFilterFromURL, statesOf, urlWithoutJob, urlWithState } from "../src/filter";

test("a state filter asks for its states and matches only them", () => {
  assert.deepEqual(statesOf("all"), []);
  assert.deepEqual(statesOf("waiting"), [JobState.QUEUED, JobState.WAITING, JobState.PENDING]);
  assert.ok(matches("all", JobState.SUCCEEDED));
  assert.ok(matches("failed", JobState.FAILED));
  assert.ok(!matches("failed", JobState.QUEUED));
});

test("the address names the filter, and an unknown one shows every job", () => {
  const url = new URL("http://127.0.0.1:8080/?batch=b1#job=j_1");
  const failed = urlWithState(url, "failed");
  assert.equal(failed.href, "http://127.0.0.1:8080/?batch=b1&state=failed#job=j_1");
  assert.equal(stateFilterFromURL(failed), "failed");
  assert.equal(urlWithState(failed, "all").href, url.href);
  assert.equal(stateFilterFromURL(new URL("http://127.0.0.1:8080/?state=nonsense")), "all");
});

test("an address may name a state the menu shows with others, in any case", () => {
  const named = (v: string) => stateFilterFromURL(new URL(`http://127.0.0.1:8080/?state=${v}`));
  assert.equal(named("queued"), "waiting");
  assert.equal(named("PENDING"), "waiting");
  assert.equal(named("Failed"), "failed");
  assert.equal(named("lost"), "cancelled");
  assert.equal(named("constructor"), "all", "not a property every object has");
});

test("a job link opens one job, with the page's tenant, and ?job= wins over #job=", () => {
  const page = new URL("http://127.0.0.1:8080/?batch=b1&state=failed#job=j_2");
  assert.equal(jobLink(page, "j_1", "acme").href, "http://127.0.0.1:8080/?tenant=acme&job=j_1");
  assert.equal(jobLink(page, "j_1", "").href, "http://127.0.0.1:8080/?job=j_1");
  assert.equal(linkedJobFromURL(page), "j_2");
  assert.equal(linkedJobFromURL(new URL("http://127.0.0.1:8080/?job=j_1#job=j_2")), "j_1");
  assert.equal(linkedJobFromURL(new URL("http://127.0.0.1:8080/")), "");
  assert.equal(urlWithoutJob(new URL("http://127.0.0.1:8080/?job=j_1&tenant=a")).href, "http://127.0.0.1:8080/?tenant=a");
});
