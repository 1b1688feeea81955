// Tests of what the page offers a token before it acts: the reason each
// button is disabled for each role GetServerInfo may name.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { accessReason, type Access, type Action } from "../src/actions";

const actions: Action[] = ["retry", "cancel", "delete", "pause", "resume", "retry-failed"];

function reasons(access: Access): Record<Action, string> {
  return Object.fromEntries(actions.map((a) => [a, accessReason(access, a)])) as Record<Action, string>;
}

test("each role is offered what the server lets it do, and a refusal names the role or the role it takes", () => {
  const cases: { name: string; access: Access; want: Record<Action, string> }[] = [
    {
      name: "an admin token may do everything",
      access: { kind: "token", role: "admin" },
      want: { retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
    {
      name: "a client token acts on its tenant's jobs but may not pause or resume a queue",
      access: { kind: "token", role: "client" },
      want: {
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
      want: { retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
    {
      // An older server, or a token it does not know: the server's own
      // refusals (Refusals) decide, once it gives them.
      name: "a token the page cannot place is offered everything until refused",
      access: { kind: "unknown" },
      want: { retry: "", cancel: "", delete: "", pause: "", resume: "", "retry-failed": "" },
    },
  ];
  for (const c of cases) {
    assert.deepEqual(reasons(c.access), c.want, c.name);
  }
});
