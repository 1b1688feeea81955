// Tests of the list's state, queue and kind filters and job links
// (src/filter.ts). web/page_logic_test.go bundles and runs them with
// `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { JobFilterSchema, JobState } from "../src/gen/jobwatch/v1/jobwatch_pb";
import {
  countText,
  jobLink,
  kindFromURL,
  kindsHeldText,
  linkedJobFromURL,
  matches,
  noJobsText,
  queueFromURL,
  queueLink,
  refusesName,
  retryFailedFilter,
  stateFilterFromURL,
  stateNames,
  statesOf,
  unknownState,
  unknownStateText,
  urlWithKind,
  urlWithoutJob,
  urlWithQueue,
  urlWithState,
  viewLabel,
  viewShows,
} from "../src/filter";

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

test("the address narrows the list to a queue, beside the other filters, and clearing it keeps them", () => {
  const url = new URL("http://127.0.0.1:8080/?state=failed&batch=b1#job=j_1");
  const narrowed = urlWithQueue(url, "render", "");
  assert.equal(narrowed.href, "http://127.0.0.1:8080/?state=failed&batch=b1&queue=render#job=j_1");
  assert.equal(queueFromURL(narrowed), "render");
  assert.equal(stateFilterFromURL(narrowed), "failed", "the state filter stays");
  assert.equal(urlWithQueue(narrowed, "", "").href, url.href);
  assert.equal(urlWithQueue(url, "render", "acme").searchParams.get("tenant"), "acme", "a named tenant goes with it");
  assert.equal(queueFromURL(new URL("http://127.0.0.1:8080/")), "");
  assert.equal(queueFromURL(new URL("http://127.0.0.1:8080/?queue=")), "", "an empty queue is every queue");
  // Taken as written: the server says what is wrong with a name.
  assert.equal(queueFromURL(new URL("http://127.0.0.1:8080/?queue=a%20b")), "a b");
});

test("a queue's link opens the list narrowed to it, without the job shown", () => {
  const page = new URL("http://127.0.0.1:8080/?state=failed&job=j_2#job=j_3");
  assert.equal(queueLink(page, "mail/out", "acme").href, "http://127.0.0.1:8080/?state=failed&tenant=acme&queue=mail%2Fout");
  assert.equal(queueFromURL(queueLink(page, "mail/out", "acme")), "mail/out");
  assert.equal(queueLink(new URL("http://127.0.0.1:8080/?queue=old"), "new", "").href, "http://127.0.0.1:8080/?queue=new", "another queue replaces the one shown");
});

test("a job is in the view when its state, its queue and its kind are", () => {
  const job = (state: JobState, queue: string, kind = "mail.send") => ({ state, queue, kind });
  assert.ok(viewShows("all", "", job(JobState.QUEUED, "mail"), "mail.send"));
  assert.ok(!viewShows("all", "", job(JobState.QUEUED, "mail", "mail.digest"), "mail.send"), "another kind's job shows");
  assert.ok(!viewShows("failed", "mail", job(JobState.QUEUED, "mail"), "mail.send"), "a job of the kind that left the state stays");
  assert.ok(viewShows("failed", "mail", job(JobState.FAILED, "mail"), "mail.send"));
  assert.ok(viewShows("all", "", job(JobState.QUEUED, "mail")));
  assert.ok(viewShows("all", "mail", job(JobState.QUEUED, "mail")));
  assert.ok(!viewShows("all", "mail", job(JobState.QUEUED, "render")), "another queue's job shows");
  assert.ok(viewShows("failed", "mail", job(JobState.FAILED, "mail")));
  assert.ok(!viewShows("failed", "mail", job(JobState.QUEUED, "mail")), "a job that left the state stays");
  assert.ok(!viewShows("failed", "mail", job(JobState.FAILED, "render")));
});

test("the empty list names the queue it is narrowed to", () => {
  assert.equal(noJobsText("failed", "", "x"), "No failed jobs in queue “x”.");
  assert.equal(noJobsText("all", "", "x"), "No jobs in queue “x”.");
  assert.equal(noJobsText("waiting", "b1", "x"), "No queued or waiting jobs of batch “b1” in queue “x”.");
  assert.equal(noJobsText("all", "b1", "x"), "No jobs of batch “b1” in queue “x”.");
  // As before, without a queue.
  assert.equal(noJobsText("failed", "", ""), "No failed jobs for this tenant.");
  assert.equal(noJobsText("failed", "b1", ""), "No failed jobs in batch “b1”.");
  assert.equal(noJobsText("all", "b1", ""), "No jobs in batch “b1” yet.");
  assert.equal(noJobsText("all", "", ""), "", "a whole tenant's empty list is the page's to explain");
  // Narrowed to a kind.
  assert.equal(noJobsText("all", "", "", "mail.send"), "No jobs of kind “mail.send” for this tenant.");
  assert.equal(noJobsText("failed", "", "", "mail.send"), "No failed jobs of kind “mail.send” for this tenant.");
  assert.equal(noJobsText("all", "", "x", "mail.send"), "No jobs of kind “mail.send” in queue “x”.");
  assert.equal(noJobsText("all", "b1", "", "mail.send"), "No jobs of kind “mail.send” in batch “b1”.");
});

test("the count says how many rows the list shows, and calls them the most recent only while they are", () => {
  assert.equal(countText("all", 50, false), "50 most recent shown");
  assert.equal(countText("all", 1973, true), "1,973 jobs shown", "once paged, not the most recent");
  assert.equal(countText("all", 1, true), "1 job shown");
  assert.equal(countText("failed", 3, false), "3 failed shown");
  assert.equal(countText("failed", 2000, true), "2,000 failed shown");
});

test("the empty list of a kind names the kinds the page holds", () => {
  assert.equal(kindsHeldText([]), "");
  assert.equal(kindsHeldText(["mail.send", "mail.send"]), "Kinds are matched exactly, case and all; the newest jobs are of kind “mail.send”.");
  assert.equal(
    kindsHeldText(["thumbs.render", "mail.send", "bulk.import", "mail.send"]),
    "Kinds are matched exactly, case and all; the newest jobs are of kinds “bulk.import”, “mail.send” and “thumbs.render”.",
  );
  assert.equal(
    kindsHeldText(["k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10"]),
    "Kinds are matched exactly, case and all; the newest jobs are of kinds “k1”, “k10”, “k2”, “k3”, “k4”, “k5”, “k6”, “k7” and 2 more.",
  );
});

test("the address narrows the list to a kind, beside the other filters, and clearing it keeps them", () => {
  const url = new URL("http://127.0.0.1:8080/?state=failed&queue=mail#job=j_1");
  const narrowed = urlWithKind(url, "mail.send", "acme");
  assert.equal(narrowed.href, "http://127.0.0.1:8080/?state=failed&queue=mail&tenant=acme&kind=mail.send#job=j_1");
  assert.equal(kindFromURL(narrowed), "mail.send");
  assert.equal(urlWithKind(urlWithKind(url, "mail.send", ""), "", "").href, url.href);
  assert.equal(kindFromURL(url), "", "no kind is every kind");
});

test("what the list shows is named with its queue", () => {
  assert.equal(viewLabel("tenant “acme”", "", ""), "tenant “acme”");
  assert.equal(viewLabel("tenant “acme”", "", "mail"), "queue “mail” of tenant “acme”");
  assert.equal(viewLabel("tenant “acme”", "b1", ""), "batch “b1” of tenant “acme”");
  assert.equal(viewLabel("tenant “acme”", "b1", "mail"), "batch “b1” in queue “mail” of tenant “acme”");
  assert.equal(viewLabel("tenant “acme”", "", "", "mail.send"), "kind “mail.send” of tenant “acme”");
  assert.equal(viewLabel("tenant “acme”", "b1", "mail", "mail.send"), "kind “mail.send” in batch “b1” in queue “mail” of tenant “acme”");
});

test("retry all failed on a list narrowed to a queue retries that queue's failed jobs only", () => {
  const now = new Date(Date.UTC(2030, 0, 2, 3, 0, 0));
  const narrowed = create(JobFilterSchema, retryFailedFilter("acme", "", "mail", now));
  assert.deepEqual(narrowed.queues, ["mail"]);
  assert.deepEqual(narrowed.states, [JobState.FAILED]);
  assert.equal(narrowed.tenant, "acme");
  assert.equal(narrowed.all, false);
  assert.equal(timestampDate(narrowed.createdBefore!).getTime(), now.getTime(), "only the jobs made before the click, so the call ends");
  const whole = create(JobFilterSchema, retryFailedFilter("acme", "b1", "", now));
  assert.deepEqual(whole.queues, [], "every queue's, with no queue filter");
  assert.deepEqual(whole.kinds, [], "every kind's, with no kind filter");
  assert.deepEqual(create(JobFilterSchema, retryFailedFilter("acme", "", "", now, "mail.send")).kinds, ["mail.send"]);
  assert.equal(whole.batch, "b1");
});

test("only an invalid_argument about the queue (or kind) is the server refusing the list's queue (or kind)", () => {
  const why = "queue: may only contain ASCII letters, digits and . _ - : / @";
  assert.ok(refusesName("queue", "a b", Code.InvalidArgument, why));
  assert.ok(!refusesName("queue", "", Code.InvalidArgument, why), "no queue filter, nothing of it to refuse");
  assert.ok(!refusesName("queue", "a b", Code.InvalidArgument, "page_token: not a token of this list"), "another field's refusal");
  assert.ok(!refusesName("kind", "a b", Code.InvalidArgument, why), "the queue's refusal is not the kind's");
  assert.ok(refusesName("kind", "a b", Code.InvalidArgument, "kind: may only contain ASCII letters, digits and . _ - : / @"));
  assert.ok(!refusesName("queue", "a b", Code.Unavailable, why));
});

test("a state the address names that the page does not know is said, with the states it knows", () => {
  const named = (v: string) => unknownState(new URL(`http://127.0.0.1:8080/?state=${v}`));
  assert.equal(named("bogus"), "bogus");
  assert.equal(named("Bogus%20"), "Bogus", "as written, but for the spaces around it");
  assert.equal(named("constructor"), "constructor");
  for (const known of ["failed", "FAILED", "queued", "lost", "all", "waiting", ""]) {
    assert.equal(named(known), "", `${known} is a state the page knows`);
  }
  assert.equal(unknownState(new URL("http://127.0.0.1:8080/?queue=q")), "", "no state named");
  assert.deepEqual(stateNames, ["all", "failed", "running", "waiting", "queued", "pending", "succeeded", "cancelled", "lost"]);
  for (const name of stateNames) {
    assert.equal(named(name), "", `${name} is listed as a state but the address cannot name it`);
  }
  assert.equal(
    unknownStateText("bogus"),
    "The address asks for state “bogus”, which is no state: the list shows all jobs. " +
      "The states are all, failed, running, waiting, queued, pending, succeeded, cancelled or lost (or pick one under Show).",
  );
});
