// The job detail's live log pane: the end of the open job's log, fed by
// one WatchJobLogs stream (LogFollower) while the detail shows that job.
// It keeps to the bottom while lines arrive; once the reader scrolls up
// it stays where they left it, never trimming the lines they read (what
// no longer fits waits in the LogTail until they return to the bottom),
// and offers a button that says how many lines came since. Log text is untrusted: it only ever becomes text
// nodes, never markup.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { LogStream, type Job, type LogGap, type LogLine } from "./gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "./api";
import { h, setData, setText } from "./dom";
import { clockTime } from "./format";
import { LogFollower, LogTail, parseAnsi, type LogEntry, type LogStatus } from "./logs";
import { isTerminal } from "./model";

// A reader within this many pixels of the bottom is at the bottom: a
// zoomed page scrolls by fractions of a pixel.
const bottomSlackPx = 4;

export class LogPane {
  readonly el: HTMLElement;
  private readonly state = h("span", { class: "muted log-status" });
  private readonly scroller = h("div", { class: "log", role: "log", tabindex: "0", "aria-label": "job log" });
  private readonly empty = h("p", { class: "muted log-empty" }, "No lines yet.");
  private readonly trimmedNote = h("p", { class: "muted log-trimmed" });
  private readonly jump = h("button", { type: "button", class: "log-jump" });
  private jobId = "";
  // shownId is the job whose log is shown, kept after close.
  private shownId = "";
  private tail = new LogTail();
  private follower: LogFollower | undefined;
  private status: LogStatus = { kind: "connecting" };
  // ended: the follower stopped because the job had ended, which a retry
  // undoes; refused: it stopped because the server refused the token,
  // which a token entered again undoes (resume). A follower stopped for
  // any other reason stays stopped.
  private ended = false;
  private refused = false;
  // following: the pane keeps to the bottom. unseen counts the lines
  // that arrived since the reader scrolled up.
  private following = true;
  private unseen = 0;
  private streams = 0;

  constructor(private readonly client: JobClient) {
    this.el = h(
      "div",
      { class: "log-pane" },
      h("div", { class: "log-head" }, h("h3", {}, "Log"), this.state),
      this.trimmedNote,
      h("div", { class: "log-frame" }, this.scroller, this.jump),
    );
    this.scroller.append(this.empty);
    this.trimmedNote.hidden = true;
    this.jump.hidden = true;
    this.scroller.addEventListener("scroll", () => {
      const following = this.atBottom();
      if (following === this.following) {
        return;
      }
      if (following) {
        this.followAgain();
      } else {
        this.following = false;
        this.renderJump();
      }
    });
    this.jump.addEventListener("click", () => this.followAgain());
  }

  // open starts showing job id's log, from its oldest line kept; the
  // stream of the job shown before is closed.
  open(id: string): void {
    this.close();
    this.jobId = id;
    this.shownId = id;
    this.clear();
    setData(this.el, "jobId", id);
    this.follow();
  }

  // clear empties the pane, which then keeps to the bottom.
  private clear(): void {
    this.tail = new LogTail();
    this.following = true;
    this.unseen = 0;
    this.scroller.replaceChildren(this.empty);
    this.empty.hidden = false;
    this.trimmedNote.hidden = true;
    this.renderJump();
  }

  // close ends the stream; what is shown stays until the next open.
  close(): void {
    this.follower?.stop();
    this.follower = undefined;
    this.ended = false;
    this.refused = false;
    this.jobId = "";
  }

  // resume follows the log again, after the last line shown, if the
  // server stopped it for the token it refused: the page has a token
  // again (the same one, which the server may take back: a tokens file
  // restored and reloaded).
  resume(): void {
    if (this.refused && this.jobId !== "" && this.follower === undefined) {
      this.follow();
    }
  }

  // jobChanged hears of the shown job's every change: a job that ended
  // was retried, and its next attempt logs after the last line shown.
  jobChanged(job: Job): void {
    if (job.id === this.jobId && this.ended && !isTerminal(job.state)) {
      this.follow();
    }
  }

  private follow(): void {
    this.ended = false;
    this.refused = false;
    const current = new LogFollower(
      this.client,
      this.jobId,
      {
        lines: (lines, gap) => {
          if (this.follower === current) {
            this.add(lines, gap);
          }
        },
        // The server's log is not the one shown (a database restored
        // from an older copy): show the server's, as a reload would.
        rewound: () => {
          if (this.follower === current) {
            this.clear();
          }
        },
        status: (s) => {
          if (this.follower !== current) {
            return;
          }
          if (s.kind === "ended" || s.kind === "stopped") {
            this.follower = undefined;
            this.ended = s.kind === "ended";
            this.refused = s.kind === "stopped" && s.refused;
          }
          this.showStatus(s);
        },
        dialled: () => {
          if (this.follower === current) {
            this.streams++;
            setData(this.el, "streams", String(this.streams));
          }
        },
      },
      { afterSeq: this.tail.lastSeq },
    );
    this.follower = current;
    current.start();
  }

  // followAgain keeps to the bottom again, showing first the lines held
  // while the reader was scrolled up.
  private followAgain(): void {
    this.following = true;
    this.unseen = 0;
    const { add, drop } = this.tail.release();
    this.show(add, drop);
    this.toBottom();
    this.renderJump();
  }

  private add(lines: LogLine[], gap: LogGap | undefined): void {
    const { add, drop, held } = this.tail.take(lines, gap, !this.following);
    this.show(add, drop);
    if (this.following) {
      this.toBottom();
    } else if (add.length > 0 || held > 0) {
      this.unseen += add.filter((e) => e.kind === "line").length + held;
      this.renderJump();
    }
  }

  // show removes drop rows from the top and adds add at the bottom.
  private show(add: LogEntry[], drop: number): void {
    if (add.length === 0) {
      return;
    }
    this.empty.hidden = true;
    // Lines dropped off the top move what the reader looks at up: scroll
    // back by as much, so a reader who scrolled up sees no jump.
    const before = this.scroller.scrollHeight;
    for (let i = 0; i < drop; i++) {
      this.empty.nextSibling?.remove();
    }
    if (drop > 0 && !this.following) {
      this.scroller.scrollTop -= before - this.scroller.scrollHeight;
    }
    const rows = document.createDocumentFragment();
    for (const e of add) {
      rows.append(entryRow(e));
    }
    this.scroller.append(rows);
    if (this.tail.trimmed > 0) {
      this.trimmedNote.replaceChildren(
        `Showing the last ${this.tail.max.toLocaleString("en-US")} lines; ${this.tail.trimmed.toLocaleString("en-US")} earlier lines are not shown here. The whole log: `,
        h("code", {}, `jobwatch logs ${this.shownId}`),
        ", or the API's GetJobLogs.",
      );
      this.trimmedNote.hidden = false;
    }
  }

  private showStatus(s: LogStatus): void {
    this.status = s;
    setData(this.el, "status", s.kind);
    switch (s.kind) {
      case "connecting":
        setText(this.state, "connecting…");
        break;
      case "live":
        setText(this.state, "live");
        break;
      case "paused":
        setText(this.state, "paused while out of sight");
        break;
      case "reconnecting":
        setText(this.state, `reconnecting… ${s.reason}`);
        break;
      case "ended":
        setText(this.state, "the job has ended");
        break;
      case "stopped":
        setText(this.state, s.reason);
        break;
    }
    setText(this.empty, this.status.kind === "ended" ? "The job logged nothing." : "No lines yet.");
  }

  private atBottom(): boolean {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight <= bottomSlackPx;
  }

  private toBottom(): void {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  private renderJump(): void {
    this.jump.hidden = this.following;
    setData(this.el, "following", String(this.following));
    setText(this.jump, this.unseen === 0 ? "Follow ↓" : `${this.unseen.toLocaleString("en-US")} new ${this.unseen === 1 ? "line" : "lines"} ↓`);
  }
}

const streamClass: Record<LogStream, string> = {
  [LogStream.UNSPECIFIED]: "log-handler",
  [LogStream.STDOUT]: "log-stdout",
  [LogStream.STDERR]: "log-stderr",
};

// entryRow draws one entry: a line's text as spans of text nodes, its
// time, stream and attempt in its tooltip.
function entryRow(e: LogEntry): HTMLElement {
  if (e.kind === "gap") {
    const n = Number(e.skipped);
    return h("div", { class: "log-gap muted" }, `… ${n.toLocaleString("en-US")} ${n === 1 ? "line" : "lines"} dropped`);
  }
  if (e.kind === "attempt") {
    return h("div", { class: "log-attempt muted" }, `attempt ${e.attempt}`);
  }
  const l = e.line;
  const stream = streamClass[l.stream] ?? "log-handler";
  const when = l.time === undefined ? "" : clockTime(timestampDate(l.time));
  const from = stream === "log-stderr" ? "stderr" : stream === "log-stdout" ? "stdout" : "handler";
  const row = h("div", { class: `log-line ${stream}`, "data-seq": String(l.seq), title: `#${l.seq} · ${when} · ${from} · attempt ${l.attempt}` });
  for (const span of parseAnsi(l.text)) {
    row.append(span.cls === "" ? span.text : h("span", { class: span.cls }, span.text));
  }
  return row;
}
