// Tests of what the page offers a token before it acts: the reason each
// button is disabled for each role GetServerInfo may name; and what an
// action says when the server cannot be reached.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { create, toBinary } from "@bufbuild/protobuf";
import { BulkStoppedSchema, JobAttemptSchema, JobSchema, JobService, JobState, QuotaExceededSchema } from "../src/gen/jobwatch/v1/jobwatch_pb";
import {
  accessReason,
  bulkStoppedOf,
  cancelledText,
  quotaRefusedText,
  quotaText,
  retriedText,
  retryHeldText,
  unreachable,
  unreachableText,
  type Access,
  type Action,
} from "../src/actions";

const actions: Action[] = ["start", "retry", "cancel", "delete", "pause", "resume", "retry-failed"];

function reasons(access: Access): Record<Action, string> {
  return Object.fromEntries(actions.map((a) => [a, accessReason(access, a)])) as Record<Action, string>;
}

test("each role is offered what the server lets it do, and a refusal names the role or the role it takes", () => {
  const cases: { name: string; access: Access; want: Record<Action, string> }[] = [
    {
      name: "an admin token may do everything",
      access: { kind: "token", role: "admin" },
      want: { start: "", retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
    {
      name: "a client token acts on its tenant's jobs but may not pause or resume a queue",
      access: { kind: "token", role: "client" },
      want: {
        start: "",
        retry: "",
        cancel: "",
        delete: "",
        pause: "pausing a queue takes an admin token",
        resume: "resuming a queue takes an admin token",
        "retry-failed": "",
      },
    },
    {
      name: "a worker token may do none of it",
      access: { kind: "token", role: "worker" },
      want: {
        start: "a worker token may not start jobs",
        retry: "a worker token may not retry jobs",
        cancel: "a worker token may not cancel jobs",
        delete: "a worker token may not delete jobs",
        pause: "a worker token may not pause queues",
        resume: "a worker token may not resume queues",
        "retry-failed": "a worker token may not retry jobs",
      },
    },
    {
      name: "a metrics token may do none of it either",
      access: { kind: "token", role: "metrics" },
      want: {
        start: "a metrics token may not start jobs",
        retry: "a metrics token may not retry jobs",
        cancel: "a metrics token may not cancel jobs",
        delete: "a metrics token may not delete jobs",
        pause: "a metrics token may not pause queues",
        resume: "a metrics token may not resume queues",
        "retry-failed": "a metrics token may not retry jobs",
      },
    },
    {
      name: "a server without tokens allows every call",
      access: { kind: "open" },
      want: { start: "", retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
    {
      name: "no token where the server needs one may do nothing, and is told to enter one",
      access: { kind: "none" },
      want: {
        start: "the server needs a token: enter one",
        retry: "the server needs a token: enter one",
        cancel: "the server needs a token: enter one",
        delete: "the server needs a token: enter one",
        pause: "the server needs a token: enter one",
        resume: "the server needs a token: enter one",
        "retry-failed": "the server needs a token: enter one",
      },
    },
    {
      // An older server, or a token it does not know: the server's own
      // refusals (Refusals) decide, once it gives them.
      name: "a token the page cannot place is offered everything until refused",
      access: { kind: "unknown" },
      want: { start: "", retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
  ];
  for (const c of cases) {
    assert.deepEqual(reasons(c.access), c.want, c.name);
  }
});

// failureOf is how a RetryJob call through the page's transport (connect-web
// on fetch) fails when fetch answers as respond does.
async function failureOf(respond: () => Promise<Response>): Promise<unknown> {
  const transport = createConnectTransport({ baseUrl: "http://127.0.0.1:8080", fetch: respond });
  try {
    await createClient(JobService, transport).retryJob({ jobId: "j_1" });
  } catch (err) {
    return err;
  }
  throw new Error("the call succeeded");
}

test("a call that cannot reach the server says so in the page's words, and a refusal the server gave keeps its own", async () => {
  const json = (status: number, body: object) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  const cases: { name: string; respond: () => Promise<Response>; want: boolean }[] = [
    { name: "the browser's fetch fails (server stopped, offline)", respond: () => Promise.reject(new TypeError("Failed to fetch")), want: true },
    { name: "a proxy in front of a stopped server answers 502", respond: async () => new Response("<h1>Bad Gateway</h1>", { status: 502, headers: { "Content-Type": "text/html" } }), want: true },
    { name: "a proxy answers 503", respond: async () => new Response("", { status: 503 }), want: true },
    { name: "the server says its database is unavailable", respond: async () => json(503, { code: "unavailable", message: "database is unavailable" }), want: false },
    { name: "the server refuses the token", respond: async () => json(403, { code: "permission_denied", message: "a worker token may not call RetryJob" }), want: false },
  ];
  for (const c of cases) {
    const err = await failureOf(c.respond);
    assert.equal(unreachable(err), c.want, `${c.name}: ${String(err)}`);
    // The library's typed calls wrap the ConnectError (JobwatchError, its cause).
    assert.equal(unreachable(new Error("wrapped", { cause: err })), c.want, `${c.name}, wrapped`);
  }
  assert.equal(unreachable(new ConnectError("Failed to fetch", Code.Unknown)), false, "an unknown the server sent is its answer");
  assert.equal(unreachable(new Error("a bug")), false);
});

test("what each action says when the server cannot be reached names what was not done, not the browser's error", () => {
  const cases: [Action, string][] = [
    ["retry-failed", "the server cannot be reached; nothing was retried."],
    ["retry", "the server cannot be reached; the job was not retried."],
    ["cancel", "the server cannot be reached; the job was not cancelled."],
    ["delete", "the server cannot be reached; the job was not deleted."],
    ["pause", "the server cannot be reached; the queue was not paused."],
    ["resume", "the server cannot be reached; the queue was not resumed."],
  ];
  for (const [action, want] of cases) {
    const text = unreachableText(action);
    assert.ok(text.startsWith(want), `${action}: ${text}`);
    assert.ok(!/fetch/i.test(text), `${action}: ${text}`);
  }
});

test("retry all failed says how many it retried, and why the others may have been left", () => {
  assert.equal(retriedText(3n, 3n, "tenant “default”"), "Retried 3 of 3 failed jobs of tenant “default”.");
  assert.equal(
    retriedText(1n, 2n, "tenant “default”"),
    "Retried 1 of 2 failed jobs of tenant “default”. 1 was left as it was: retried or removed meanwhile, or a retry would make a second active job with its unique key (its own Retry says which).",
  );
  assert.match(retriedText(0n, 1500n, "batch “b”"), /^Retried 0 of 1,500 failed jobs of batch “b”\. 1,500 were left as they were: /);
});

test("a cancel says whether it cancelled the job or found it ended, and by whom", () => {
  const entry = (state: JobState, by: string) => create(JobAttemptSchema, { attempt: 1, state, by });
  const job = (state: JobState, ...attempts: ReturnType<typeof entry>[]) => create(JobSchema, { id: "j_1", state, attempts });
  const running = job(JobState.RUNNING);
  assert.equal(cancelledText("j_1", job(JobState.CANCELLED, entry(JobState.CANCELLED, "ops (admin)")), running, "ops"), "Cancelled job j_1.");
  assert.equal(
    cancelledText("j_1", job(JobState.CANCELLED, entry(JobState.CANCELLED, "deploy-bot (client, tenant acme)")), running, "ops"),
    "Job j_1 was already cancelled, by deploy-bot (client, tenant acme).",
  );
  assert.equal(
    cancelledText("j_1", job(JobState.CANCELLED, entry(JobState.CANCELLED, "anonymous")), job(JobState.CANCELLED), ""),
    "Job j_1 was already cancelled, by anonymous.",
  );
  assert.equal(cancelledText("j_1", job(JobState.CANCELLED, entry(JobState.CANCELLED, "anonymous")), running, ""), "Cancelled job j_1.", "no name to tell one caller from another");
  assert.equal(cancelledText("j_1", job(JobState.SUCCEEDED), running, "ops"), "Job j_1 had already succeeded: there was nothing to cancel.");
  assert.equal(cancelledText("j_1", job(JobState.LOST), running, "ops"), "Job j_1 had already been lost: there was nothing to cancel.");
});

// The outside tester's case: Retry all failed on tenant globex, at its
// max_queued of 100, showed the server's words for a program ("this page
// retried 0 of the 183 jobs it matched … page_token "…" goes on past
// them"). The page says it in its own, with the counts of the pages
// before added to those of the page the quota stopped, read from the
// refusal's BulkStopped detail as the browser decodes it.
test("a retry of every failed job that a tenant's max_queued stopped says so in the page's words", () => {
  const over = { tenant: "globex", maxQueued: 100n, queued: 101n, adding: 1n };
  const refusal = new ConnectError(
    `tenant "globex" has more than 100 jobs not yet running, its max_queued is 100: wait for some to start or end (this page retried 0 of the 183 jobs it matched, …)`,
    Code.ResourceExhausted,
  );
  // As the browser's client decodes them from the wire.
  refusal.details = [
    { type: QuotaExceededSchema.typeName, value: toBinary(QuotaExceededSchema, create(QuotaExceededSchema, over)) },
    { type: BulkStoppedSchema.typeName, value: toBinary(BulkStoppedSchema, create(BulkStoppedSchema, { matched: 183n, changed: 0n, nextPageToken: "k.x" })) },
  ];
  const stopped = bulkStoppedOf(refusal);
  assert.equal(stopped?.matched, 183n);
  assert.equal(stopped?.changed, 0n);
  assert.equal(bulkStoppedOf(new Error("wrapped", { cause: refusal }))?.matched, 183n, "the library's error around the refusal");
  assert.equal(bulkStoppedOf(new ConnectError("no detail", Code.ResourceExhausted)), undefined);

  assert.equal(
    retryHeldText(0n + stopped!.changed, 0n + stopped!.matched, over),
    "Retried 0 of 183 failed jobs: tenant “globex” is at its max_queued (more than 100 jobs not yet running). Retry again once some of its jobs have started.",
  );
  // Two pages of 1,000 went through before the quota stopped the third.
  assert.equal(
    retryHeldText(2000n + 40n, 2000n + 183n, { ...over, queued: 100n }),
    "Retried 2,040 of 2,183 failed jobs: tenant “globex” is at its max_queued (100 jobs not yet running). Retry again once some of its jobs have started.",
  );
  assert.equal(
    retryHeldText(0n, 0n, over),
    "No failed job was retried: tenant “globex” is at its max_queued (more than 100 jobs not yet running). Retry again once some of its jobs have started.",
  );
  for (const text of [retryHeldText(0n, 183n, over), quotaRefusedText(over)]) {
    assert.doesNotMatch(text, /this page|page_token|"globex"/, "the server's words for a program");
  }
});

test("a tenant's max_queued is said with its count, and what a write would add where that passes it", () => {
  assert.equal(quotaText({ tenant: "acme", maxQueued: 1n, queued: 1n, adding: 1n }), "tenant “acme” is at its max_queued (1 job not yet running)");
  assert.equal(
    quotaText({ tenant: "acme", maxQueued: 1000n, queued: 990n, adding: 20n }),
    "tenant “acme” has 990 jobs not yet running, and 20 more would pass its max_queued of 1,000",
  );
  assert.equal(
    quotaRefusedText({ tenant: "acme", maxQueued: 5n, queued: 6n, adding: 1n }),
    "tenant “acme” is at its max_queued (more than 5 jobs not yet running). Try again once some of its jobs have started.",
  );
});
