// A job's log as the detail shows it: the ANSI colour codes of a line
// (parseAnsi), the bounded tail of lines on screen (LogTail) and the one
// WatchJobLogs stream that feeds it (LogFollower), resumed after the last
// seq seen, so a reconnect neither repeats nor loses a line. Nothing here
// touches the DOM: logview.ts draws it.
import { Code, ConnectError } from "@connectrpc/connect";
import type { LogGap, LogLine } from "./gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "./api";
import { backoffMs, sleep } from "./feed";
import { followStream, pageVisibility, whenShown, type StreamEnd, type Visibility } from "./stream";

// A Span is a run of a line's text in one style: cls is "" for plain
// text, else the classes that colour it ("ansi-red", "ansi-bold").
export interface Span {
  text: string;
  cls: string;
}

const colours = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"] as const;

const ESC = 0x1b;
const BEL = 0x07;

// parseAnsi splits a log line into spans by its SGR colour codes
// (ESC[…m: 30–37 and 90–97 colours, 39 the default colour, 1 bold, 22
// normal weight, 0 or nothing a reset; 8, conceal, is not drawn, so a
// line cannot hide text on screen); every other escape sequence
// (cursor moves, clearing, window titles, 256-colour and RGB colours) and
// every other control character goes, so no raw ESC ever shows, and so
// do the invisible characters that would reorder the line. Each
// line starts plain: a line shown alone, after a gap or a resume, looks
// the same as in the whole log. A carriage return followed by more text
// keeps only what follows it, as a terminal overwrites a progress line.
export function parseAnsi(line: string): Span[] {
  const out: Span[] = [];
  let fg = "";
  let bold = false;
  let text = "";
  let overwrite = false;
  const flush = () => {
    if (text === "") {
      return;
    }
    const cls = [fg === "" ? "" : `ansi-${fg}`, bold ? "ansi-bold" : ""].filter((c) => c !== "").join(" ");
    const last = out.at(-1);
    if (last !== undefined && last.cls === cls) {
      last.text += text;
    } else {
      out.push({ text, cls });
    }
    text = "";
  };
  const print = (s: string) => {
    if (overwrite) {
      out.length = 0;
      text = "";
      overwrite = false;
    }
    text += s;
  };
  const sgr = (params: string) => {
    flush();
    const ps = params.split(";");
    for (let k = 0; k < ps.length; k++) {
      const p = ps[k]!;
      if (p.includes(":")) {
        continue; // a colon form (38:2:r:g:b): a colour the page does not draw
      }
      const n = p === "" ? 0 : Number(p);
      if (n === 0) {
        fg = "";
        bold = false;
      } else if (n === 1) {
        bold = true;
      } else if (n === 22) {
        bold = false;
      } else if (n >= 30 && n <= 37) {
        fg = colours[n - 30]!;
      } else if (n === 39) {
        fg = "";
      } else if (n >= 90 && n <= 97) {
        fg = `bright-${colours[n - 90]!}`;
      } else if (n === 38 || n === 48 || n === 58) {
        // 256 colours (5;n) or RGB (2;r;g;b): skip their arguments,
        // which would otherwise read as codes of their own.
        const form = ps[k + 1];
        k += form === "5" ? 2 : form === "2" ? 4 : 0;
      }
    }
  };
  // csi skips a control sequence whose parameters start at i, applying
  // it if it is SGR; an unfinished one runs to the end of the line.
  const csi = (i: number): number => {
    let j = i;
    while (j < line.length && inRange(line.charCodeAt(j), 0x30, 0x3f)) {
      j++;
    }
    const params = line.slice(i, j);
    const k = j;
    while (j < line.length && inRange(line.charCodeAt(j), 0x20, 0x2f)) {
      j++;
    }
    if (j >= line.length) {
      return j;
    }
    const final = line.charCodeAt(j);
    if (!inRange(final, 0x40, 0x7e)) {
      return j; // malformed: what follows is text again
    }
    if (final === 0x6d && j === k && /^[0-9;:]*$/.test(params)) {
      sgr(params);
    }
    return j + 1;
  };
  // stringEnd skips an OSC, DCS, SOS, PM or APC string (a window title,
  // a hyperlink's target) to its BEL or string terminator.
  const stringEnd = (i: number): number => {
    for (let j = i; j < line.length; j++) {
      const c = line.charCodeAt(j);
      if (c === BEL || c === 0x9c) {
        return j + 1;
      }
      if (c === ESC && line.charCodeAt(j + 1) === 0x5c) {
        return j + 2;
      }
    }
    return line.length;
  };
  let i = 0;
  while (i < line.length) {
    const c = line.charCodeAt(i);
    if (c === ESC) {
      const next = line.charCodeAt(i + 1);
      if (next === 0x5b) {
        i = csi(i + 2); // ESC [
      } else if (next === 0x5d || next === 0x50 || next === 0x58 || next === 0x5e || next === 0x5f) {
        i = stringEnd(i + 2); // ESC ] P X ^ _
      } else {
        // ESC, intermediates, a final: a charset choice, a keypad mode.
        let j = i + 1;
        while (j < line.length && inRange(line.charCodeAt(j), 0x20, 0x2f)) {
          j++;
        }
        i = j < line.length && inRange(line.charCodeAt(j), 0x30, 0x7e) ? j + 1 : j;
      }
    } else if (c === 0x9b) {
      i = csi(i + 1); // the one-character CSI
    } else if (c === 0x90 || c === 0x98 || c === 0x9d || c === 0x9e || c === 0x9f) {
      i = stringEnd(i + 1);
    } else if (c === 0x0d) {
      overwrite = true;
      i++;
    } else if (c === 0x09) {
      print("\t");
      i++;
    } else if (c < 0x20 || inRange(c, 0x7f, 0x9f) || invisible(c)) {
      i++;
    } else {
      let j = i + 1;
      while (j < line.length && printable(line.charCodeAt(j))) {
        j++;
      }
      print(line.slice(i, j));
      i = j;
    }
  }
  flush();
  return out;
}

// plainText is text a worker wrote outside its log (a job's step, an
// error's type and message) as the log pane would show it, without its
// colours: escape sequences, control characters and invisible ones go
// (parseAnsi), each line on its own, so a message keeps its lines (a
// CRLF ends one as a LF does) and no raw ESC shows anywhere on the page.
export function plainText(text: string): string {
  return text
    .split("\n")
    .map((line) => parseAnsi(line).map((s) => s.text).join(""))
    .join("\n");
}

function inRange(c: number, lo: number, hi: number): boolean {
  return c >= lo && c <= hi;
}

function printable(c: number): boolean {
  return c >= 0x20 && c !== 0x7f && !inRange(c, 0x80, 0x9f) && !invisible(c);
}

// invisible reports whether c is a character that reorders or splits
// the line rather than shows: the bidirectional marks, embeddings,
// overrides and isolates (a right-to-left override makes "exe.txt" of
// "txt.exe"), the line and paragraph separators, and the byte order
// mark. The command line drops the same (cmd/jobwatch/logtext.go).
export function invisible(c: number): boolean {
  return (
    c === 0x061c ||
    c === 0x200e ||
    c === 0x200f ||
    inRange(c, 0x202a, 0x202e) ||
    inRange(c, 0x2066, 0x2069) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0xfeff
  );
}

// A LogEntry is what one row of the log pane shows: a line; a gap, lines
// the server no longer keeps (the queue's max_log_bytes dropped them);
// or the start of another attempt's lines.
export type LogEntry = { kind: "line"; line: LogLine } | { kind: "gap"; skipped: bigint } | { kind: "attempt"; attempt: number };

// maxLogEntries bounds the rows the pane keeps: a chatty job's log is
// read from the bottom, and a DOM of millions of rows would stall the tab.
export const maxLogEntries = 5000;

// LogTail is the end of a job's log as shown: at most max entries, each
// line once, in seq order. While the reader is scrolled up (hold), the
// shown entries are never dropped: what no longer fits waits in held,
// itself at most max entries, until release, so the lines under the
// reader's eyes stay put however much the job writes.
export class LogTail {
  // lastSeq is the seq of the last line taken, or of the last line a gap
  // covered: the after_seq to resume from.
  lastSeq = 0n;
  // trimmed counts the lines dropped off the top to keep to max.
  trimmed = 0;
  private lastAttempt = 0;
  private readonly entries: LogEntry[] = [];
  // held: entries taken while holding that did not fit below those
  // shown; heldTrimmed: lines dropped off held's top to keep it to max,
  // counted in trimmed once released (they come before every held one).
  private held: LogEntry[] = [];
  private heldTrimmed = 0;

  constructor(readonly max = maxLogEntries) {}

  get size(): number {
    return this.entries.length;
  }

  // take adds what a response brought: the gap first, then the lines.
  // It returns the entries to add at the bottom, how many to remove from
  // the top first, and how many lines it held back (hold: the reader is
  // scrolled up, so nothing shown may go). A line at or before lastSeq
  // (a resumed stream that repeats one) and a gap already covered are
  // left out.
  take(lines: LogLine[], gap?: LogGap, hold = false): { add: LogEntry[]; drop: number; held: number } {
    let add: LogEntry[] = [];
    if (gap !== undefined && gap.resumeFrom - 1n > this.lastSeq) {
      add.push({ kind: "gap", skipped: gap.skipped });
      this.lastSeq = gap.resumeFrom - 1n;
    }
    for (const line of lines) {
      if (line.seq <= this.lastSeq) {
        continue;
      }
      if (this.lastAttempt !== 0 && line.attempt !== this.lastAttempt) {
        add.push({ kind: "attempt", attempt: line.attempt });
      }
      add.push({ kind: "line", line });
      this.lastSeq = line.seq;
      this.lastAttempt = line.attempt;
    }
    if (!hold && this.held.length > 0) {
      const released = this.held;
      this.held = [];
      this.trimmed += this.heldTrimmed;
      this.heldTrimmed = 0;
      add = [...released, ...add];
    }
    if (hold) {
      // What fits below the shown entries is shown; the rest waits.
      // Held entries always follow every shown one, so once any wait,
      // all that come after wait too.
      const room = this.held.length > 0 ? 0 : Math.max(0, this.max - this.entries.length);
      const wait = add.slice(room);
      add = add.slice(0, room);
      this.entries.push(...add);
      this.held.push(...wait);
      if (this.held.length > this.max) {
        this.heldTrimmed += countLines(this.held.splice(0, this.held.length - this.max));
      }
      return { add, drop: 0, held: countLines(wait) };
    }
    return { ...this.append(add), held: 0 };
  }

  // release shows what was held: the entries to add at the bottom and
  // how many to remove from the top first.
  release(): { add: LogEntry[]; drop: number } {
    return this.take([]);
  }

  private append(add: LogEntry[]): { add: LogEntry[]; drop: number } {
    // Of a batch larger than the whole pane only its end is shown.
    if (add.length > this.max) {
      this.trimmed += countLines(add.slice(0, add.length - this.max));
      add = add.slice(add.length - this.max);
    }
    const drop = Math.max(0, this.entries.length + add.length - this.max);
    this.trimmed += countLines(this.entries.splice(0, drop));
    this.entries.push(...add);
    return { add, drop };
  }
}

function countLines(entries: LogEntry[]): number {
  return entries.filter((e) => e.kind === "line").length;
}

export type LogStatus =
  | { kind: "connecting" }
  | { kind: "live" }
  // Out of sight, the follower let go of its stream (as FeedStatus's
  // paused): it resumes after the last line shown once in sight.
  | { kind: "paused" }
  | { kind: "reconnecting"; attempt: number; retryAt: number; reason: string }
  // The job has ended and every line it kept was sent.
  | { kind: "ended" }
  // The server will not send this log (the job is gone, the token may
  // not read it, the server keeps no logs): asking again cannot help.
  // refused: it refused the token (unknown, revoked, or not allowed this
  // job), so asking with a token again may (the same one, once the
  // server takes it back).
  | { kind: "stopped"; reason: string; refused: boolean };

export interface LogListener {
  // lines has only lines after every one heard before; gap, if set,
  // comes before them.
  lines(lines: LogLine[], gap: LogGap | undefined): void;
  // rewound is told when the server's log ends before the lines heard
  // (its database was restored from an older copy): what was heard is
  // not the server's log, and the lines that follow are, from its oldest
  // kept.
  rewound?(): void;
  status(s: LogStatus): void;
  // dialled is told each time a stream is opened: the n-th.
  dialled?(n: number): void;
}

export interface LogFollowOptions {
  // The last seq already shown; the first stream starts after it.
  afterSeq?: bigint;
  // As FeedOptions: a stream silent this long (the server's keepalive
  // is every 15 s) is dialled again; a stream is live once a message
  // arrives or once it has stayed open settleMs after its headers.
  silenceMs?: number;
  settleMs?: number;
  backoffMs?: (attempt: number) => number;
  // As FeedOptions: out of sight for hiddenMs, the follower lets go of
  // its stream until the tab is shown.
  visibility?: Visibility | null;
  hiddenMs?: number;
}

// A stream that ran at least this long was healthy: if it ended OK
// before the job did (the server's stream lifetime), the follower dials
// again at once; if it failed, the backoff starts over.
const healthyStreamMs = 1000;

// jobEnded: the server said the job ended and its last line was sent;
// ended: the stream ended OK without saying so (its lifetime passed, the
// server shut down, or a server older than job_ended).
type Ending = { kind: "jobEnded" } | StreamEnd;

// LogFollower follows one job's log on one WatchJobLogs stream at a time,
// dialling again after the last seq heard whenever a stream ends before
// the job has ended and its last line was sent.
export class LogFollower {
  private afterSeq: bigint;
  private streams = 0;
  private readonly abort = new AbortController();
  private readonly silenceMs: number;
  private readonly settleMs: number;
  private readonly backoffMs: (attempt: number) => number;
  private readonly visibility: Visibility | undefined;
  private readonly hiddenMs: number | undefined;

  constructor(
    private readonly client: JobClient,
    private readonly jobId: string,
    private readonly listener: LogListener,
    opts: LogFollowOptions = {},
  ) {
    this.afterSeq = opts.afterSeq ?? 0n;
    this.silenceMs = opts.silenceMs ?? 45_000;
    this.settleMs = opts.settleMs ?? 500;
    this.backoffMs = opts.backoffMs ?? backoffMs;
    this.visibility = opts.visibility === undefined ? pageVisibility : (opts.visibility ?? undefined);
    this.hiddenMs = opts.hiddenMs;
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    this.abort.abort();
  }

  private async run(): Promise<void> {
    const stopped = this.abort.signal;
    let failures = 0;
    this.listener.status({ kind: "connecting" });
    while (!stopped.aborted) {
      const began = Date.now();
      let end = await this.follow();
      if (stopped.aborted) {
        return;
      }
      if (end.kind === "jobEnded") {
        this.listener.status({ kind: "ended" });
        return;
      }
      if (end.kind === "hidden" && this.visibility !== undefined) {
        // Out of sight: resume after the last line shown once in sight.
        this.listener.status({ kind: "paused" });
        if (!(await whenShown(this.visibility, stopped))) {
          return;
        }
        this.listener.status({ kind: "connecting" });
        continue;
      }
      const healthy = Date.now() - began >= healthyStreamMs;
      if (end.kind === "ended") {
        // A server older than job_ended ends a stream OK once the job has
        // ended and its last line is sent as at the stream's lifetime: ask.
        try {
          const res = await this.client.getJobLogs({ jobId: this.jobId, afterSeq: this.afterSeq, limit: 1 }, { signal: stopped });
          if (res.jobEnded && !res.more && res.lines.length === 0 && res.gap === undefined) {
            this.listener.status({ kind: "ended" });
            return;
          }
          if (healthy) {
            continue;
          }
        } catch (err) {
          if (stopped.aborted) {
            return;
          }
          end = { kind: "failed", error: ConnectError.from(err), live: false };
        }
      }
      let reason = "the stream ended";
      if (end.kind === "silent") {
        reason = `no word from the server in ${Math.round(this.silenceMs / 1000)}s`;
      }
      if (end.kind === "failed") {
        const ce = end.error;
        const why = stopReason(ce);
        if (why !== "") {
          const refused = ce.code === Code.Unauthenticated || ce.code === Code.PermissionDenied;
          this.listener.status({ kind: "stopped", reason: why, refused });
          return;
        }
        reason = ce.code === Code.Unknown || ce.code === Code.Unavailable ? "the server cannot be reached" : ce.rawMessage;
      }
      if (healthy) {
        failures = 0;
      }
      const wait = end.kind === "silent" ? 0 : this.backoffMs(failures);
      this.listener.status({ kind: "reconnecting", attempt: failures + 1, retryAt: Date.now() + wait, reason });
      failures++;
      await sleep(wait, stopped);
    }
  }

  // follow runs one WatchJobLogs stream until it ends, fails, goes silent
  // or the follower stops, passing on what is new.
  private async follow(): Promise<Ending> {
    this.streams++;
    this.listener.dialled?.(this.streams);
    let jobEnded = false;
    let heard = false;
    const end = await followStream(
      {
        stopped: this.abort.signal,
        silenceMs: this.silenceMs,
        settleMs: this.settleMs,
        onLive: () => this.listener.status({ kind: "live" }),
        visibility: this.visibility,
        hiddenMs: this.hiddenMs,
      },
      (opts) => this.client.watchJobLogs({ jobId: this.jobId, afterSeq: this.afterSeq }, opts),
      (res) => {
        if (res.jobEnded) {
          jobEnded = true;
          return true;
        }
        const lastSent = res.lines.at(-1);
        if (!heard && lastSent !== undefined) {
          heard = true;
          if (lastSent.seq < this.afterSeq) {
            // A stream's first lines all before the seq it was opened
            // after: the server's log ends before it, so the server sends
            // its log from the oldest line kept (a line of a seq heard
            // before was another).
            this.afterSeq = 0n;
            this.listener.rewound?.();
          }
        }
        let gap = res.gap;
        if (gap !== undefined) {
          if (gap.resumeFrom - 1n > this.afterSeq) {
            this.afterSeq = gap.resumeFrom - 1n;
          } else {
            gap = undefined;
          }
        }
        const fresh = res.lines.filter((l) => l.seq > this.afterSeq);
        const last = fresh.at(-1);
        if (last !== undefined) {
          this.afterSeq = last.seq;
        }
        if (fresh.length > 0 || gap !== undefined) {
          this.listener.lines(fresh, gap);
        }
        return false;
      },
    );
    return jobEnded ? { kind: "jobEnded" } : end;
  }
}

// stopReason is why err means the log cannot be followed at all, or ""
// if asking again may help.
function stopReason(err: ConnectError): string {
  switch (err.code) {
    case Code.NotFound:
      return "the job is not on the server";
    case Code.Unauthenticated:
      return `the server wants a token: ${err.rawMessage}`;
    case Code.PermissionDenied:
      return `this token may not read the job's log: ${err.rawMessage}`;
    case Code.Unimplemented:
      return "this server keeps no job logs";
    case Code.InvalidArgument:
      return err.rawMessage;
  }
  return "";
}
