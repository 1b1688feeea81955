// Tests of the page's live feed against a scripted WatchJobs server.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions } from "@connectrpc/connect";
import {
  JobSchema,
  JobState,
  JobView,
  WatchJobsResponseSchema,
  type WatchJobsRequest,
  type WatchJobsResponse,
} from "../src/gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "../src/api";
import { JobFeed, type FeedOptions, type FeedStatus } from "../src/feed";
import { FakeVisibility } from "./visibility";

// A Call is one WatchJobs stream the feed opened; the test plays the
// server's side of it.
class Call {
  private readonly queue: (WatchJobsResponse | Error | null)[] = [];
  private wake: (() => void) | undefined;

  constructor(
    readonly req: WatchJobsRequest,
    private readonly opts: CallOptions,
  ) {
    opts.signal?.addEventListener("abort", () => this.push(new ConnectError("aborted", Code.Canceled)));
  }

  get aborted(): boolean {
    return this.opts.signal?.aborted ?? false;
  }

  headers(): void {
    this.opts.onHeader?.(new Headers());
  }

  send(jobs: { id: string; version: bigint }[], resumeToken: string, deletedJobIds: string[] = [], startedOver = false): void {
    const js = jobs.map((j) => create(JobSchema, { id: j.id, version: j.version, state: JobState.RUNNING }));
    this.push(create(WatchJobsResponseSchema, { jobs: js, resumeToken, deletedJobIds, startedOver }));
  }

  fail(code: Code, message: string): void {
    this.push(new ConnectError(message, code));
  }

  end(): void {
    this.push(null);
  }

  // rotate ends the stream OK once it has lasted long enough to count as
  // one the server rotated (its lifetime limit), not as a failure: the
  // feed resumes it with its token.
  rotate(): void {
    setTimeout(() => this.end(), 1100);
  }

  private push(item: WatchJobsResponse | Error | null): void {
    this.queue.push(item);
    this.wake?.();
  }

  async *responses(): AsyncGenerator<WatchJobsResponse> {
    for (;;) {
      while (this.queue.length === 0) {
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
      const item = this.queue.shift()!;
      if (item === null) {
        return;
      }
      if (item instanceof Error) {
        throw item;
      }
      yield item;
    }
  }
}

// Server scripts each call as the feed opens it.
class Server {
  readonly calls: Call[] = [];
  private waiting: (() => void)[] = [];

  constructor(private readonly script: (call: Call, n: number) => void) {}

  readonly client = {
    watchJobs: (req: WatchJobsRequest, opts: CallOptions) => {
      const call = new Call(req, opts);
      this.calls.push(call);
      queueMicrotask(() => this.script(call, this.calls.length));
      for (const w of this.waiting.splice(0)) {
        w();
      }
      return call.responses();
    },
  } as unknown as JobClient;

  // untilCalls waits for the feed to have opened n streams.
  async untilCalls(n: number, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.calls.length < n) {
      if (Date.now() > deadline) {
        throw new Error(`the feed opened ${this.calls.length} streams, want ${n}`);
      }
      await new Promise<void>((resolve) => {
        this.waiting.push(resolve);
        setTimeout(resolve, 20);
      });
    }
  }
}

// follow runs a feed against server. batches has each batch of jobs
// ("id@version") and each batch of deletions ("-id"), in the order the
// listener heard them; synced has, for each time the listener heard it,
// how many batches it had heard before; startedOver likewise.
function follow(t: TestContext, server: Server, opts: FeedOptions = {}) {
  const statuses: FeedStatus[] = [];
  const batches: string[][] = [];
  const synced: number[] = [];
  const startedOver: number[] = [];
  const feed = new JobFeed(
    server.client,
    "default",
    {
      jobs: (b) => batches.push(b.map((j) => `${j.id}@${j.version}`)),
      deleted: (ids) => batches.push(ids.map((id) => `-${id}`)),
      status: (s) => statuses.push(s),
      synced: () => synced.push(batches.length),
      startedOver: () => startedOver.push(batches.length),
    },
    { backoffMs: () => 0, ...opts },
  );
  feed.start();
  t.after(() => feed.stop());
  return { feed, statuses, batches, synced, startedOver };
}

async function until(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) {
      throw new Error(`never: ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

test("a stream that fails right after its headers backs off further each time and never shows live", async (t) => {
  // Connect streams carry errors after a 200 and its headers: a server
  // whose database is down answers every stream that way.
  const server = new Server((call) => {
    call.headers();
    call.fail(Code.Unavailable, "database is unavailable");
  });
  const { feed, statuses } = follow(t, server);
  await server.untilCalls(4);
  feed.stop();
  const attempts = statuses.flatMap((s) => (s.kind === "reconnecting" ? [s.attempt] : []));
  assert.deepEqual(attempts.slice(0, 3), [1, 2, 3], "each failure is a further attempt, so the backoff grows");
  assert.ok(!statuses.some((s) => s.kind === "live"), `a stream that never held was shown live: ${JSON.stringify(statuses)}`);
});

test("each outage counts its attempts from 1 again once a stream has been live in between", async (t) => {
  // A server shut down cleanly ends its streams OK (no error); the
  // outage after it must not carry on the count of the one before, or
  // its first failure waits as long as the fifth.
  const server = new Server((call, n) => {
    if (n === 1 || n === 4) {
      call.headers();
      call.send([{ id: "j_a", version: BigInt(n) }], `t1.${n}`);
      call.end();
    } else {
      call.fail(Code.Unavailable, "Failed to fetch");
    }
  });
  const waits: number[] = [];
  const { feed, statuses } = follow(t, server, {
    backoffMs: (attempt) => {
      waits.push(attempt);
      return 0;
    },
  });
  await server.untilCalls(6);
  feed.stop();
  const attempts = statuses.flatMap((s) => (s.kind === "reconnecting" ? [s.attempt] : []));
  assert.deepEqual(attempts.slice(0, 5), [1, 2, 3, 1, 2], `attempts as shown: ${JSON.stringify(statuses)}`);
  assert.deepEqual(waits.slice(0, 5), [0, 1, 2, 0, 1], "the first wait of each outage is the shortest");
});

test("a tenant the server refuses stops the feed with the server's reason instead of retrying", async (t) => {
  const server = new Server((call) => {
    call.headers();
    call.fail(Code.InvalidArgument, "tenant: may only contain ASCII letters, digits and . _ - : / @");
  });
  const { feed, statuses } = follow(t, server);
  await until("a refused status", () => statuses.some((s) => s.kind === "refused"));
  await new Promise((resolve) => setTimeout(resolve, 100));
  feed.stop();
  assert.equal(server.calls.length, 1, "the refused stream was dialled again");
  const last = statuses.at(-1)!;
  assert.equal(last.kind, "refused");
  assert.match((last as { reason: string }).reason, /tenant: may only contain/);
});

test("a token the server knows but that may not watch the tenant stops the feed as denied, not as a token needed", async (t) => {
  const server = new Server((call) => {
    call.headers();
    call.fail(Code.PermissionDenied, 'tenant: this token may only use tenant "acme"');
  });
  const { feed, statuses } = follow(t, server);
  await until("a denied status", () => statuses.some((s) => s.kind === "denied"));
  await new Promise((resolve) => setTimeout(resolve, 100));
  feed.stop();
  assert.equal(server.calls.length, 1, "the denied stream was dialled again");
  assert.ok(!statuses.some((s) => s.kind === "unauthenticated"), `a known token was asked for again: ${JSON.stringify(statuses)}`);
  assert.match((statuses.at(-1) as { reason: string }).reason, /may only use tenant "acme"/);
});

test("a token the server no longer knows is dropped and the feed starts over, saying so", async (t) => {
  const server = new Server((call, n) => {
    call.headers();
    if (n === 1) {
      call.send([{ id: "j_a", version: 3n }], "t1.old");
      call.rotate();
    } else if (n === 2) {
      call.fail(Code.InvalidArgument, "resume_token: is not a token this server issued");
    } else {
      call.send([{ id: "j_a", version: 4n }], "t1.new");
    }
  });
  const { feed, statuses, batches, synced, startedOver } = follow(t, server);
  await until("the fresh stream's batch", () => batches.length === 2);
  feed.stop();
  assert.deepEqual(
    server.calls.map((c) => c.req.resumeToken),
    ["", "t1.old", ""],
  );
  assert.deepEqual(batches, [["j_a@3"], ["j_a@4"]]);
  assert.deepEqual(startedOver, [1], "the listener was not told the stream started over, before its jobs");
  assert.deepEqual(synced, [1, 2]);
  assert.equal(statuses.at(-1)?.kind, "live");
});

test("after an outage the stream starts over and says so, so that jobs the server no longer has can go", async (t) => {
  // A server restarted on an empty (or restored) database takes a token
  // later than its changes as none and starts over without a word: the
  // feed cannot tell, so after an outage it starts over itself.
  const server = new Server((call, n) => {
    if (n === 1) {
      call.headers();
      call.send([{ id: "j_old", version: 7n }], "t2.c1.9");
      call.fail(Code.Unavailable, "Failed to fetch");
    } else if (n === 2) {
      call.fail(Code.Unavailable, "Failed to fetch");
    } else {
      call.headers();
      call.send([{ id: "j_new", version: 1n }], "t2.c1.1");
    }
  });
  const { feed, statuses, batches, synced, startedOver } = follow(t, server);
  await until("the fresh stream's batch", () => batches.length === 2);
  feed.stop();
  assert.deepEqual(
    server.calls.map((c) => c.req.resumeToken),
    ["", "", ""],
    "a stream after an outage resumed from a token the server may not hold",
  );
  assert.deepEqual(startedOver, [1], "told of the start-over once, before the fresh stream's jobs");
  assert.deepEqual(synced, [1, 2], "the fresh stream's first token did not say it was synced");
  assert.equal(statuses.at(-1)?.kind, "live");
});

test("a connection that goes silent is dropped and dialled again, starting over", async (t) => {
  // A half-open connection (a laptop that slept, a NAT that forgot)
  // delivers nothing, not even the server's keepalives, and no error.
  const server = new Server((call, n) => {
    call.headers();
    if (n === 1) {
      call.send([{ id: "j_a", version: 1n }], "t1.first");
    } else {
      call.send([], "t1.second");
    }
  });
  const { feed, statuses } = follow(t, server, { silenceMs: 100 });
  await server.untilCalls(2);
  const liveAgain = () => statuses.findIndex((s, i) => s.kind === "live" && statuses.slice(0, i).some((p) => p.kind === "reconnecting"));
  await until("live again", () => liveAgain() >= 0);
  feed.stop();
  assert.ok(server.calls[0]!.aborted, "the silent stream was left open");
  // The server may have restarted while the connection was silent (a
  // laptop asleep): the stream starts over, as after any outage.
  assert.equal(server.calls[1]!.req.resumeToken, "");
  const drop = statuses.find((s) => s.kind === "reconnecting");
  assert.ok(drop !== undefined && /no word from the server/.test(drop.reason), JSON.stringify(statuses));
});

test("stopping the feed ends its stream and its retries", async (t) => {
  const server = new Server((call) => call.headers());
  const { feed } = follow(t, server, { silenceMs: 60_000 });
  await server.untilCalls(1);
  feed.stop();
  await until("the stream aborted", () => server.calls[0]!.aborted);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(server.calls.length, 1);
});

test("the feed asks for summaries and resumes with the last token it was given", async (t) => {
  // A fresh stream's first jobs may come in several responses (each
  // bounded in bytes), only the last with a token.
  const server = new Server((call, n) => {
    call.headers();
    if (n === 1) {
      call.send([{ id: "j_c", version: 1n }], "");
      call.send([{ id: "j_b", version: 1n }], "");
      call.fail(Code.Unavailable, "dropped before the first token");
    } else if (n === 2) {
      call.send([{ id: "j_c", version: 1n }], "");
      call.send([{ id: "j_b", version: 1n }], "t1.first");
      call.send([], "");
      call.rotate();
    } else {
      call.send([{ id: "j_a", version: 2n }], "t1.second");
    }
  });
  const { feed, batches } = follow(t, server);
  await until("the third stream's batch", () => batches.some((b) => b.includes("j_a@2")));
  feed.stop();
  assert.deepEqual(
    server.calls.map((c) => c.req.resumeToken),
    ["", "", "t1.first"],
    "a stream that broke before its first token starts over; a rotated one resumes, an empty token later keeping the last one",
  );
  for (const call of server.calls) {
    assert.equal(call.req.view, JobView.SUMMARY, "the feed asked for payloads it does not show");
  }
});

test("jobs deleted anywhere reach the listener, after the jobs of the same response", async (t) => {
  // A job may change and then be deleted between two responses: its
  // deletion is the later news.
  const server = new Server((call) => {
    call.headers();
    call.send([{ id: "j_a", version: 1n }, { id: "j_b", version: 2n }], "t1.first");
    call.send([{ id: "j_b", version: 3n }], "t1.second", ["j_b"]);
    call.send([], "t1.third", ["j_a", "j_gone_before_this_page"]);
  });
  const { feed, batches } = follow(t, server);
  await until("the third response", () => batches.length === 4);
  feed.stop();
  assert.deepEqual(batches, [["j_a@1", "j_b@2"], ["j_b@3"], ["-j_b"], ["-j_a", "-j_gone_before_this_page"]]);
});

test("a batch's feed asks for that batch, and says it is synced once each fresh stream has sent its first token", async (t) => {
  // A batch's counts read ListJobs once the feed brings every change:
  // after a fresh stream's first token (which may come after several
  // responses), not after a resume, and again after a token the server
  // refused made the feed start over.
  const server = new Server((call, n) => {
    call.headers();
    if (n === 1) {
      call.send([{ id: "j_c", version: 1n }], "");
      call.send([{ id: "j_b", version: 1n }], "t1.first");
      call.send([{ id: "j_b", version: 2n }], "t1.second");
      call.rotate();
    } else if (n === 2) {
      call.send([{ id: "j_b", version: 3n }], "t1.third");
      call.rotate();
    } else if (n === 3) {
      call.fail(Code.InvalidArgument, "resume_token: is not a token this server issued");
    } else {
      call.send([{ id: "j_b", version: 3n }], "t2.first");
    }
  });
  const { feed, batches, synced } = follow(t, server, { batch: "thumbs-2026-12-02" });
  await until("the fourth stream's batch", () => batches.length === 5);
  feed.stop();
  assert.deepEqual(
    server.calls.map((c) => [c.req.batch, c.req.resumeToken]),
    [
      ["thumbs-2026-12-02", ""],
      ["thumbs-2026-12-02", "t1.second"],
      ["thumbs-2026-12-02", "t1.third"],
      ["thumbs-2026-12-02", ""],
    ],
  );
  assert.deepEqual(batches, [["j_c@1"], ["j_b@1"], ["j_b@2"], ["j_b@3"], ["j_b@3"]]);
  assert.deepEqual(synced, [2, 5], "synced after the first token's jobs of each fresh stream, and only then");
});

test("a feed with no batch asks for every job of the tenant", async (t) => {
  const server = new Server((call) => {
    call.headers();
    call.send([], "t1.first");
  });
  const { feed, synced } = follow(t, server);
  await until("synced", () => synced.length === 1);
  feed.stop();
  assert.equal(server.calls[0]!.req.batch, "");
});

// A tab out of sight lets go of its stream, so its connection serves
// the tab in front (a browser shares six HTTP/1.1 connections to one
// server among all its tabs): after hiddenMs out of sight the stream is
// aborted and none is dialled while the tab stays hidden; once shown, the
// feed dials again at once with the last token, without a reconnecting
// banner. A glance away shorter than hiddenMs keeps the stream.
test("a feed out of sight lets go of its stream and resumes it when shown", async (t) => {
  const visibility = new FakeVisibility();
  const show = (hidden: boolean) => visibility.set(hidden);
  const server = new Server((call, n) => {
    call.headers();
    call.send([{ id: "j_a", version: BigInt(n) }], `t1.${n}`);
  });
  const { feed, statuses, batches } = follow(t, server, { visibility, hiddenMs: 100, silenceMs: 60_000 });
  await until("the first batch", () => batches.length === 1);

  show(true);
  await new Promise((resolve) => setTimeout(resolve, 30));
  show(false); // a glance away
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.ok(!server.calls[0]!.aborted, "a glance away shorter than hiddenMs let go of the stream");

  show(true);
  await until("the hidden tab's stream let go of", () => server.calls[0]!.aborted);
  // It says it no longer follows: "live" would promise changes that no
  // stream brings.
  await until("the feed saying it is paused", () => statuses.at(-1)?.kind === "paused");
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(server.calls.length, 1, "a stream was dialled while the tab was out of sight");
  assert.equal(statuses.at(-1)?.kind, "paused", "the hidden tab's feed said more than that it is paused");

  show(false);
  await server.untilCalls(2);
  await until("the resumed stream's batch", () => batches.length === 2);
  feed.stop();
  assert.equal(server.calls[1]!.req.resumeToken, "t1.1", "the stream did not resume from its last token");
  assert.ok(!statuses.some((s) => s.kind === "reconnecting"), `a tab out of sight was shown as a lost connection: ${JSON.stringify(statuses)}`);
  assert.deepEqual(
    statuses.map((s) => s.kind),
    ["connecting", "live", "paused", "connecting", "live"],
    "a glance away said something, or the hidden tab did not say it was paused until shown",
  );
});

// A tab shown again resumes with its token; a server restarted meanwhile
// on its database restored from an older copy cannot resume from it and
// starts over with the most recent jobs, saying so on the first
// response: the feed passes that on before the response's jobs, and the
// response's token says the stream is synced, as a fresh stream's does.
test("a stream the server started over says so before its jobs, and is synced at its first token", async (t) => {
  const visibility = new FakeVisibility();
  const server = new Server((call, n) => {
    call.headers();
    if (n === 1) {
      call.send([{ id: "j_a", version: 9n }], "t2.c1.9");
    } else {
      call.send([{ id: "j_a", version: 3n }], "", [], true);
      call.send([{ id: "j_b", version: 1n }], "t2.c1.4");
    }
  });
  const { feed, batches, synced, startedOver } = follow(t, server, { visibility, hiddenMs: 10, silenceMs: 60_000 });
  await until("the first batch", () => batches.length === 1);
  visibility.set(true);
  await until("the hidden tab's stream let go of", () => server.calls[0]!.aborted);
  visibility.set(false);
  await until("the resumed stream's batches", () => batches.length === 3);
  feed.stop();
  assert.equal(server.calls[1]!.req.resumeToken, "t2.c1.9", "the shown tab did not resume from its token");
  assert.deepEqual(batches, [["j_a@9"], ["j_a@3"], ["j_b@1"]]);
  assert.deepEqual(startedOver, [1], "told of the start over once, before the jobs of the response that said so");
  assert.deepEqual(synced, [1, 3], "synced at the first token of the stream the server started over, and only then");
});

// A page left for another (a link followed, an address typed) may be
// kept, frozen, in the browser's back/forward cache, where no timer runs:
// its feed lets go of its stream at once, not after hiddenMs, and
// resumes with the last token, without a reconnecting banner, when the
// page is shown again.
test("a feed whose page is left lets go of its stream at once and resumes it when the page comes back", async (t) => {
  const visibility = new FakeVisibility();
  const server = new Server((call, n) => {
    call.headers();
    call.send([{ id: "j_a", version: BigInt(n) }], `t1.${n}`);
  });
  const { feed, statuses, batches } = follow(t, server, { visibility, hiddenMs: 60_000, silenceMs: 60_000 });
  await until("the first batch", () => batches.length === 1);

  visibility.leave(true);
  assert.ok(server.calls[0]!.aborted, "the stream of a page left was not let go of at once");
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(server.calls.length, 1, "a stream was dialled while the page was left");

  visibility.leave(false);
  await server.untilCalls(2);
  await until("the resumed stream's batch", () => batches.length === 2);
  feed.stop();
  assert.equal(server.calls[1]!.req.resumeToken, "t1.1", "the stream did not resume from its last token");
  assert.ok(!statuses.some((s) => s.kind === "reconnecting"), `a page left was shown as a lost connection: ${JSON.stringify(statuses)}`);
  assert.equal(statuses.at(-1)?.kind, "live");
});
