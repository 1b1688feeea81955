// Tests of the log pane's logic: the ANSI parser, the bounded tail of
// lines, and the WatchJobLogs follower against a scripted server.
// web/page_logic_test.go bundles and runs them with `node --test`.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type CallOptions } from "@connectrpc/connect";
import {
  GetJobLogsResponseSchema,
  LogGapSchema,
  LogLineSchema,
  WatchJobLogsResponseSchema,
  type GetJobLogsRequest,
  type GetJobLogsResponse,
  type LogLine,
  type WatchJobLogsRequest,
  type WatchJobLogsResponse,
} from "../src/gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "../src/api";
import { LogFollower, LogTail, parseAnsi, plainText, type LogFollowOptions, type LogStatus } from "../src/logs";
import { FakeVisibility } from "./visibility";

const ESC = "\x1b";

// shown is what a line looks like on the page: each span as its text,
// with its classes in brackets.
function shown(line: string): string {
  return parseAnsi(line)
    .map((s) => (s.cls === "" ? s.text : `[${s.cls}]${s.text}`))
    .join("|");
}

test("ANSI colour codes become classed spans and never show as text", () => {
  const cases: [string, string, string][] = [
    ["plain text stays one plain span", "build ok", "build ok"],
    ["a red word then a reset", `${ESC}[31mFAILED${ESC}[0m: disk full`, "[ansi-red]FAILED|: disk full"],
    ["bold and a bright colour together", `${ESC}[1;92mPASS${ESC}[m done`, "[ansi-bright-green ansi-bold]PASS| done"],
    ["39 goes back to the default colour but keeps bold", `${ESC}[1;34mx${ESC}[39my${ESC}[22mz`, "[ansi-blue ansi-bold]x|[ansi-bold]y|z"],
    ["an empty parameter is a reset", `${ESC}[33mwarn${ESC}[;mok`, "[ansi-yellow]warn|ok"],
    ["256-colour and RGB arguments are not read as codes of their own", `${ESC}[38;5;31mA${ESC}[38;2;1;31;0mB${ESC}[0m`, "AB"],
    ["a colon form is skipped as a whole", `${ESC}[38:2:0:255:0mC${ESC}[31mD`, "C|[ansi-red]D"],
    ["conceal (8) is not drawn: the text it would hide shows", `${ESC}[8mhidden${ESC}[28m seen ${ESC}[31;8mred${ESC}[0m`, "hidden seen |[ansi-red]red"],
    ["cursor moves and clears are stripped", `${ESC}[2K${ESC}[1Gstep 3${ESC}[?25l`, "step 3"],
    ["a window title (OSC, BEL) is stripped", `${ESC}]0;my title\x07hello`, "hello"],
    ["a hyperlink (OSC 8, ST) keeps its text only", `${ESC}]8;;https://example.test/${ESC}\\link${ESC}]8;;${ESC}\\ after`, "link after"],
    ["a charset choice is stripped", `${ESC}(Bplain`, "plain"],
    ["the one-character CSI is understood", `\x9b31mred\x9b0m`, "[ansi-red]red"],
    ["an unfinished sequence at the end goes", `tail ${ESC}[31`, "tail "],
    ["a lone ESC at the end goes", `tail${ESC}`, "tail"],
    ["other control characters go, tabs stay", "a\x07b\x08c\td\x00", "abc\td"],
    ["a carriage return followed by text keeps what follows", "10%\r20%\r30%", "30%"],
    ["a trailing carriage return (CRLF) keeps the line", "done\r", "done"],
    ["each line starts plain", `${ESC}[31mno reset`, "[ansi-red]no reset"],
    ["a line of escapes only is empty", `${ESC}[0m${ESC}[K`, ""],
    ["text that looks like markup stays text", "<img src=x onerror=alert(1)>", "<img src=x onerror=alert(1)>"],
    ["a right-to-left override and a byte order mark go", "rlo:\u202etxt.exe bom:\ufeffx", "rlo:txt.exe bom:x"],
    ["bidirectional isolates and marks go, other text stays", "\u2067a\u2069\u200fb\u2028c é", "abc é"],
  ];
  for (const [name, line, want] of cases) {
    assert.equal(shown(line), want, name);
    for (const span of parseAnsi(line)) {
      assert.ok(!/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(span.text), `${name}: a control character in ${JSON.stringify(span.text)}`);
    }
  }
});

test("a step or an error shows as the log pane would, without its colours, and keeps its lines", () => {
  const cases: [string, string, string][] = [
    ["colours and a screen clear", "\x1b[31mType \x1b[1;31mred error\x1b[0m \x1b[2J", "Type red error "],
    ["a window title and a hyperlink", "\x1b]0;pwned\x07see \x1b]8;;https://x.example\x1b\\docs\x1b]8;;\x1b\\", "see docs"],
    ["a progress line overwritten", "copying 10%\rcopying 90%", "copying 90%"],
    ["a message of CRLF lines", "first line\r\nsecond line\r\n\tat main.go:12", "first line\nsecond line\n\tat main.go:12"],
    ["other control characters and a right-to-left override", "a\x00b\x07c \u202Eexe.txt", "abc exe.txt"],
    ["plain text", "sleeping 3 of 5", "sleeping 3 of 5"],
  ];
  for (const [name, text, want] of cases) {
    assert.equal(plainText(text), want, name);
  }
});

function line(seq: number, attempt = 1, text = `line ${seq}`): LogLine {
  return create(LogLineSchema, { seq: BigInt(seq), attempt, text });
}

function lines(from: number, to: number, attempt = 1): LogLine[] {
  const out: LogLine[] = [];
  for (let s = from; s <= to; s++) {
    out.push(line(s, attempt));
  }
  return out;
}

function seqs(entries: { kind: string; line?: LogLine }[]): string[] {
  return entries.map((e) => (e.kind === "line" ? String(e.line!.seq) : e.kind));
}

test("the tail takes each line once, in order, however often a resumed stream repeats it", () => {
  const tail = new LogTail(100);
  assert.deepEqual(seqs(tail.take(lines(1, 3)).add), ["1", "2", "3"]);
  assert.deepEqual(seqs(tail.take(lines(2, 5)).add), ["4", "5"], "lines 2 and 3 again");
  assert.deepEqual(tail.take(lines(1, 5)).add, []);
  assert.equal(tail.lastSeq, 5n);
  assert.equal(tail.size, 5);
});

test("a gap shows as one marker with the server's count, and the tail resumes after it", () => {
  const tail = new LogTail(100);
  tail.take(lines(1, 2));
  const gap = create(LogGapSchema, { skipped: 120n, resumeFrom: 123n });
  const { add } = tail.take(lines(123, 124), gap);
  assert.deepEqual(seqs(add), ["gap", "123", "124"]);
  assert.equal(add[0]!.kind === "gap" && add[0]!.skipped, 120n);
  assert.deepEqual(tail.take([], create(LogGapSchema, { skipped: 120n, resumeFrom: 123n })).add, [], "a gap already covered");
  assert.equal(tail.lastSeq, 124n);
});

test("a gap with no lines after it still moves the resume point", () => {
  const tail = new LogTail(100);
  tail.take([], create(LogGapSchema, { skipped: 9n, resumeFrom: 10n }));
  assert.equal(tail.lastSeq, 9n);
  assert.deepEqual(seqs(tail.take(lines(8, 10)).add), ["10"]);
});

test("another attempt's first line is marked", () => {
  const tail = new LogTail(100);
  tail.take(lines(1, 2, 1));
  const { add } = tail.take([line(3, 2), line(4, 2)]);
  assert.deepEqual(seqs(add), ["attempt", "3", "4"]);
});

test("the tail keeps at most max entries, dropping the oldest and counting the lines dropped", () => {
  const tail = new LogTail(5);
  tail.take(lines(1, 4));
  let r = tail.take(lines(5, 7));
  assert.equal(r.drop, 2, "two rows leave the top");
  assert.deepEqual(seqs(r.add), ["5", "6", "7"]);
  assert.equal(tail.size, 5);
  assert.equal(tail.trimmed, 2);
  // A batch larger than the pane: only its end is added, and everything
  // shown before goes.
  r = tail.take(lines(8, 20));
  assert.equal(r.drop, 5);
  assert.deepEqual(seqs(r.add), ["16", "17", "18", "19", "20"]);
  assert.equal(tail.size, 5);
  assert.equal(tail.trimmed, 15);
  assert.equal(tail.lastSeq, 20n);
});

test("while the reader is scrolled up the tail drops nothing shown, holds the rest, and shows it on release", () => {
  const tail = new LogTail(5);
  tail.take(lines(1, 3));
  // Room for two more below the three shown: they are shown; the rest wait.
  let r = tail.take(lines(4, 8), undefined, true);
  assert.equal(r.drop, 0, "nothing shown leaves");
  assert.deepEqual(seqs(r.add), ["4", "5"]);
  assert.equal(r.held, 3);
  // Full: every later line waits, at most max of them, the oldest counted.
  r = tail.take(lines(9, 12), undefined, true);
  assert.deepEqual([r.drop, r.add.length, r.held], [0, 0, 4]);
  assert.equal(tail.size, 5);
  assert.equal(tail.trimmed, 0, "nothing counted as not shown while the reader reads");
  assert.equal(tail.lastSeq, 12n, "the stream resumes after the last line held");
  const released = tail.release();
  assert.equal(released.drop, 5);
  assert.deepEqual(seqs(released.add), ["8", "9", "10", "11", "12"]);
  assert.equal(tail.trimmed, 7, "lines 1 to 7 are not shown");
  const again = tail.release();
  assert.deepEqual([again.add.length, again.drop], [0, 0], "a second release adds nothing");
  // Taken without hold, held lines come first, in order.
  tail.take(lines(13, 14), undefined, true);
  r = tail.take(lines(15, 15));
  assert.equal(r.drop, 3);
  assert.deepEqual(seqs(r.add), ["13", "14", "15"]);
});

// A Call is one WatchJobLogs stream the follower opened; the test plays
// the server's side of it.
class Call {
  private readonly queue: (WatchJobLogsResponse | Error | null)[] = [];
  private wake: (() => void) | undefined;

  constructor(
    readonly req: WatchJobLogsRequest,
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

  send(from: number, to: number, gap?: { skipped: number; resumeFrom: number }): void {
    this.push(
      create(WatchJobLogsResponseSchema, {
        lines: lines(from, to),
        ...(gap === undefined ? {} : { gap: create(LogGapSchema, { skipped: BigInt(gap.skipped), resumeFrom: BigInt(gap.resumeFrom) }) }),
      }),
    );
  }

  keepalive(): void {
    this.push(create(WatchJobLogsResponseSchema, {}));
  }

  // jobEnded sends the last message of a stream whose job has ended.
  jobEnded(): void {
    this.push(create(WatchJobLogsResponseSchema, { jobEnded: true }));
  }

  fail(code: Code, message: string): void {
    this.push(new ConnectError(message, code));
  }

  end(): void {
    this.push(null);
  }

  private push(item: WatchJobLogsResponse | Error | null): void {
    this.queue.push(item);
    this.wake?.();
  }

  async *responses(): AsyncGenerator<WatchJobLogsResponse> {
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

// LogServer scripts each stream as the follower opens it, and answers
// GetJobLogs with whether the job has ended.
class LogServer {
  readonly calls: Call[] = [];
  readonly pages: GetJobLogsRequest[] = [];
  jobEnded = false;

  constructor(private readonly script: (call: Call, n: number) => void) {}

  readonly client = {
    watchJobLogs: (req: WatchJobLogsRequest, opts: CallOptions) => {
      const call = new Call(req, opts);
      this.calls.push(call);
      queueMicrotask(() => this.script(call, this.calls.length));
      return call.responses();
    },
    getJobLogs: async (req: GetJobLogsRequest): Promise<GetJobLogsResponse> => {
      this.pages.push(req);
      return create(GetJobLogsResponseSchema, { jobEnded: this.jobEnded });
    },
  } as unknown as JobClient;
}

function follow(t: TestContext, server: LogServer, opts: LogFollowOptions = {}) {
  const statuses: LogStatus[] = [];
  const heard: string[] = [];
  const follower = new LogFollower(
    server.client,
    "j_1",
    {
      lines: (ls, gap) => {
        if (gap !== undefined) {
          heard.push(`gap ${gap.skipped}`);
        }
        heard.push(...ls.map((l) => String(l.seq)));
      },
      rewound: () => heard.push("rewound"),
      status: (s) => statuses.push(s),
    },
    { backoffMs: () => 0, ...opts },
  );
  follower.start();
  t.after(() => follower.stop());
  return { follower, statuses, heard };
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

test("a stream that drops is resumed after the last seq heard, and a line sent again is not passed on twice", async (t) => {
  const server = new LogServer((call, n) => {
    call.headers();
    if (n === 1) {
      call.send(1, 3);
      call.fail(Code.Unavailable, "connection reset");
    } else if (n === 2) {
      call.send(3, 5); // a server may repeat what it sent before the drop
      call.keepalive();
      call.end(); // the stream's lifetime
    } else {
      call.send(6, 6);
    }
  });
  const { follower, heard, statuses } = follow(t, server);
  await until("line 6", () => heard.includes("6"));
  follower.stop();
  assert.deepEqual(
    server.calls.map((c) => c.req.afterSeq),
    [0n, 3n, 5n],
  );
  assert.deepEqual(heard, ["1", "2", "3", "4", "5", "6"]);
  assert.equal(server.calls[0]!.req.jobId, "j_1");
  assert.ok(statuses.some((s) => s.kind === "reconnecting"), JSON.stringify(statuses));
  assert.equal(statuses.at(-1)?.kind, "live");
});

test("a server whose log ends before the lines heard (a restored database) is heard from its oldest line, after word that it went back", async (t) => {
  const server = new LogServer((call, n) => {
    call.headers();
    if (n === 1) {
      call.send(1, 5);
      call.fail(Code.Unavailable, "connection reset");
    } else if (n === 2) {
      call.keepalive();
      call.send(2, 3, { skipped: 1, resumeFrom: 2 }); // all it has, from its oldest kept
      call.send(4, 4);
      call.fail(Code.Unavailable, "connection reset");
    } else {
      call.send(5, 6);
    }
  });
  const { follower, heard } = follow(t, server);
  await until("line 6", () => heard.includes("6"));
  follower.stop();
  assert.deepEqual(
    server.calls.map((c) => c.req.afterSeq),
    [0n, 5n, 4n],
  );
  assert.deepEqual(heard, ["1", "2", "3", "4", "5", "rewound", "gap 1", "2", "3", "4", "5", "6"]);
});

test("a gap is passed on once and the follower resumes after it", async (t) => {
  const server = new LogServer((call, n) => {
    call.headers();
    if (n === 1) {
      call.send(1, 1);
      call.send(121, 122, { skipped: 119, resumeFrom: 121 });
      call.fail(Code.Unavailable, "dropped");
    } else {
      call.send(123, 123);
    }
  });
  const { follower, heard } = follow(t, server);
  await until("line 123", () => heard.includes("123"));
  follower.stop();
  assert.deepEqual(heard, ["1", "gap 119", "121", "122", "123"]);
  assert.equal(server.calls[1]!.req.afterSeq, 122n);
});

test("a stream that ends OK without job_ended (an older server) is followed by a GetJobLogs that says the job ended", async (t) => {
  const server = new LogServer((call) => {
    call.headers();
    call.send(1, 2);
    server.jobEnded = true;
    call.end();
  });
  const { heard, statuses } = follow(t, server);
  await until("ended", () => statuses.at(-1)?.kind === "ended");
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(server.calls.length, 1, "an ended job's log was dialled again");
  assert.deepEqual(heard, ["1", "2"]);
  assert.equal(server.pages[0]?.afterSeq, 2n, "the check asked after the last line heard");
});

test("a stream whose last message says the job ended stops the follower at once, without asking", async (t) => {
  const server = new LogServer((call) => {
    call.headers();
    call.send(1, 2);
    call.jobEnded();
    call.end();
  });
  const { heard, statuses } = follow(t, server);
  await until("ended", () => statuses.at(-1)?.kind === "ended");
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(server.calls.length, 1, "an ended job's log was dialled again");
  assert.equal(server.pages.length, 0, "the follower asked GetJobLogs what the stream had said");
  assert.deepEqual(heard, ["1", "2"]);
});

test("a job the server does not have stops the follower with the reason, without retrying", async (t) => {
  const server = new LogServer((call) => call.fail(Code.NotFound, "job j_1 not found"));
  const { statuses } = follow(t, server);
  await until("stopped", () => statuses.at(-1)?.kind === "stopped");
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(server.calls.length, 1);
  assert.match((statuses.at(-1) as { reason: string }).reason, /not on the server/);
  assert.equal((statuses.at(-1) as { refused: boolean }).refused, false, "a job not found was taken for a token refused");
});

// A token the server no longer knows (a reload revoked it) stops the
// follower too, but says it was the token: the page follows the log
// again once it has a token the server takes.
test("a token the server refuses stops the follower, saying it was the token", async (t) => {
  for (const [code, message] of [
    [Code.Unauthenticated, "the token is no longer known"],
    [Code.PermissionDenied, "a worker token may not call WatchJobLogs"],
  ] as const) {
    const server = new LogServer((call) => call.fail(code, message));
    const { statuses } = follow(t, server);
    await until("stopped", () => statuses.at(-1)?.kind === "stopped");
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(server.calls.length, 1, `${message}: dialled again`);
    const last = statuses.at(-1);
    assert.ok(last?.kind === "stopped" && last.refused, `${message}: not stopped as refused: ${JSON.stringify(last)}`);
    assert.match(last.reason, new RegExp(message));
  }
});

test("a silent stream is dropped and dialled again after the last seq", async (t) => {
  const server = new LogServer((call, n) => {
    call.headers();
    if (n === 1) {
      call.send(1, 4);
    } else {
      call.send(5, 5);
    }
  });
  const { follower, heard } = follow(t, server, { silenceMs: 100 });
  await until("line 5", () => heard.includes("5"));
  follower.stop();
  assert.ok(server.calls[0]!.aborted, "the silent stream was left open");
  assert.equal(server.calls[1]!.req.afterSeq, 4n);
});

test("a follower told where to start resumes there, and stopping it ends its stream", async (t) => {
  const server = new LogServer((call) => call.headers());
  const { follower } = follow(t, server, { afterSeq: 41n, silenceMs: 60_000 });
  await until("a stream", () => server.calls.length === 1);
  assert.equal(server.calls[0]!.req.afterSeq, 41n);
  follower.stop();
  await until("the stream aborted", () => server.calls[0]!.aborted);
});

// As the feed's: a log pane out of sight lets go of its stream and
// resumes after the last line shown once it is in sight again.
test("a follower out of sight lets go of its stream and resumes after the last line when shown", async (t) => {
  const visibility = new FakeVisibility();
  const server = new LogServer((call, n) => {
    call.headers();
    call.send(2 * n - 1, 2 * n);
  });
  const { follower, heard, statuses } = follow(t, server, { visibility, hiddenMs: 100, silenceMs: 60_000 });
  await until("lines 1 and 2", () => heard.includes("2"));
  visibility.set(true);
  await until("the hidden pane's stream let go of", () => server.calls[0]!.aborted);
  await until("the pane saying it is paused", () => statuses.at(-1)?.kind === "paused");
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal(server.calls.length, 1, "a stream was dialled while the pane was out of sight");
  visibility.set(false);
  await until("lines 3 and 4", () => heard.includes("4"));
  follower.stop();
  assert.deepEqual(heard, ["1", "2", "3", "4"]);
  assert.equal(server.calls[1]!.req.afterSeq, 2n);
  assert.ok(!statuses.some((s) => s.kind === "reconnecting"), JSON.stringify(statuses));
  assert.deepEqual(
    statuses.map((s) => s.kind),
    ["connecting", "live", "paused", "connecting", "live"],
  );
});

// As the feed's: the log pane of a page left lets go of its stream at
// once and resumes after the last line shown when the page comes back.
test("a follower whose page is left lets go of its stream at once and resumes after the last line when it comes back", async (t) => {
  const visibility = new FakeVisibility();
  const server = new LogServer((call, n) => {
    call.headers();
    call.send(2 * n - 1, 2 * n);
  });
  const { follower, heard, statuses } = follow(t, server, { visibility, hiddenMs: 60_000, silenceMs: 60_000 });
  await until("lines 1 and 2", () => heard.includes("2"));
  visibility.leave(true);
  assert.ok(server.calls[0]!.aborted, "the stream of a page left was not let go of at once");
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(server.calls.length, 1, "a stream was dialled while the page was left");
  visibility.leave(false);
  await until("lines 3 and 4", () => heard.includes("4"));
  follower.stop();
  assert.deepEqual(heard, ["1", "2", "3", "4"]);
  assert.equal(server.calls[1]!.req.afterSeq, 2n);
  assert.ok(!statuses.some((s) => s.kind === "reconnecting"), JSON.stringify(statuses));
});
