// The operator's controls: a button that acts on a job or a queue, the
// in-page question it asks first, and what the page has learned it may
// not do. An action never runs from one click: the first click asks, in
// the page (a window.confirm would block the page, hide the stream's
// changes while open, and no test could click it), and only "yes" acts.
import { Code, ConnectError } from "@connectrpc/connect";
import { h, setText } from "./dom";
import { BulkStoppedSchema, JobState, type BulkStopped, type Job } from "./gen/jobwatch/v1/jobwatch_pb";

// Action names what an operator does; the same words as the RPCs.
export type Action = "start" | "retry" | "cancel" | "delete" | "pause" | "resume" | "retry-failed";

// Said is what an action did, for its outcome: a sentence, or one that
// stops being true once staleWhen says so (a retried job's new run has
// ended, a paused queue was resumed elsewhere), when the outcome goes,
// or, with afterwards, says what it gives instead (how the new run ended):
// an outcome that went by itself, seconds after the action, would leave
// its reader, and the keyboard, before an empty box.
export type Said = string | { text: string; staleWhen: () => boolean; afterwards?: () => string | undefined };

// ActionError is an action's failure whose message stops being true once
// staleWhen says so (the server was out of reach, and has since
// answered). whole: the message says all, in the page's words, and is
// shown as it is; else the action's name goes before it ("Retry all
// failed: …").
export class ActionError extends Error {
  constructor(
    message: string,
    readonly staleWhen: () => boolean,
    readonly whole = false,
  ) {
    super(message);
  }
}

// ActionButton is one control: enabled, or disabled with the reason shown
// beside it (and as its tooltip), so nobody has to guess why.
export class ActionButton {
  readonly el: HTMLElement;
  readonly button: HTMLButtonElement;
  private readonly reason = h("span", { class: "muted reason", tabindex: "-1" });

  constructor(
    readonly action: Action,
    label: string,
    onClick: () => void,
    danger = false,
  ) {
    this.button = h("button", { type: "button", "data-action": action, class: danger ? "danger" : "" }, label);
    this.button.addEventListener("click", onClick);
    this.el = h("span", { class: "action" }, this.button, this.reason);
  }

  // set enables the button when reason is "", else disables it and says
  // why. A hidden button is one that makes no sense here at all.
  // A button disabled while it has the keyboard (what it acts on changed,
  // as after its own action) hands it to the reason beside it: the
  // browser would drop it to the top of the page.
  set(reason: string, hidden = false): void {
    const focused = document.activeElement === this.button;
    this.el.hidden = hidden;
    this.button.disabled = reason !== "";
    this.button.title = reason;
    setText(this.reason, reason);
    this.reason.hidden = reason === "";
    if (focused && !hidden && reason !== "") {
      this.reason.focus();
    }
  }
}

// Confirm is the question an action asks before it runs, with the
// outcome said in the same place once it has.
//
// The keyboard stays where the person is: the question takes it (on
// "yes"); Keep, or Escape anywhere in the question, withdraws the question
// and gives it back to the button that asked; once the action has run it
// goes back to that button, or to the outcome when the button is gone or
// disabled (a paused queue's Pause, a cancelled job's Cancel). Where the
// button that asked cannot take it back, the confirmation's own place does,
// so Tab goes on from there, never from the top of the page.
export class Confirm {
  readonly el: HTMLElement;
  private readonly question = h("span", { class: "question" });
  private readonly yes = h("button", { type: "button", class: "confirm-yes danger" });
  private readonly no = h("button", { type: "button", class: "confirm-no" }, "Keep");
  private readonly ask = h("div", { class: "confirm-ask", role: "group" }, this.question, this.yes, this.no);
  private readonly outcome = h("p", { class: "outcome", role: "status", tabindex: "-1" });
  private run: ((report: (progress: string) => void) => Promise<Said>) | undefined;
  // stale says when the outcome shown no longer holds; recheck asks it.
  private stale: (() => boolean) | undefined;
  private afterwards: (() => string | undefined) | undefined;
  // asker is the button whose question is shown, or whose action runs.
  private asker: HTMLElement | undefined;
  // Each question has a number: the outcome of an action the user has
  // since left (another question, another job) is not shown over it.
  private asked = 0;

  constructor() {
    this.el = h("div", { class: "confirm", tabindex: "-1" }, this.ask, this.outcome);
    this.ask.hidden = true;
    this.outcome.hidden = true;
    this.no.addEventListener("click", () => this.dismiss());
    this.yes.addEventListener("click", () => void this.confirm());
    this.ask.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.dismiss()) {
        // Only the question: not the details panel around it.
        e.preventDefault();
        e.stopPropagation();
      }
    });
  }

  // request asks question for the button asker; yes runs act, whose
  // answer (what it did) or error message is then shown. An act of many
  // calls (a bulk action's pages) may report how far it has got
  // meanwhile: shown under the question, its buttons disabled, until the
  // answer replaces it. The keyboard goes to the yes, or to Keep for an
  // act that cannot be undone (forGood), so that Enter pressed twice
  // deletes nothing.
  request(
    question: string,
    yesLabel: string,
    act: (report: (progress: string) => void) => Promise<Said>,
    asker?: HTMLElement,
    forGood = false,
  ): void {
    this.asked++;
    this.run = act;
    this.asker = asker;
    setText(this.question, question);
    setText(this.yes, yesLabel);
    this.yes.disabled = false;
    this.outcome.hidden = true;
    this.ask.hidden = false;
    (forGood ? this.no : this.yes).focus();
  }

  // asking reports whether a question waits for its answer.
  get asking(): boolean {
    return this.run !== undefined;
  }

  // dismiss withdraws a question not yet answered, as Keep does, and
  // gives the keyboard back to the button that asked; false if there was
  // none to withdraw.
  dismiss(): boolean {
    if (this.run === undefined) {
      return false;
    }
    const asker = this.asker;
    const hadFocus = this.holdsFocus();
    this.reset();
    if (hadFocus || (asker !== undefined && asker === document.activeElement)) {
      this.giveFocusBack(asker, this.el);
    }
    return true;
  }

  // reset forgets the question and the last outcome (another job shown).
  reset(): void {
    this.asked++;
    this.run = undefined;
    this.stale = undefined;
    this.afterwards = undefined;
    this.ask.hidden = true;
    this.outcome.hidden = true;
  }

  // withdraw takes back a question not yet answered, as what it asks
  // about is gone; an action already running, and its outcome, stay.
  withdraw(): void {
    if (this.run !== undefined) {
      this.dismiss();
    }
  }

  // withdrawIfMoot takes back a question whose button no longer offers
  // it (the job was retried or cancelled elsewhere meanwhile): "yes"
  // would only be refused.
  withdrawIfMoot(): void {
    if (this.run !== undefined && this.asker !== undefined && !usable(this.asker)) {
      this.dismiss();
    }
  }

  private async confirm(): Promise<void> {
    const act = this.run;
    if (act === undefined) {
      return;
    }
    const asked = this.asked;
    const asker = this.asker;
    this.run = undefined;
    this.yes.disabled = true;
    let said: string;
    let failed = false;
    let stale: (() => boolean) | undefined;
    let afterwards: (() => string | undefined) | undefined;
    const report = (progress: string) => {
      if (asked === this.asked) {
        setText(this.outcome, progress);
        this.outcome.dataset["failed"] = "false";
        this.outcome.dataset["running"] = "true";
        this.outcome.hidden = false;
      }
    };
    try {
      const done = await act(report);
      said = typeof done === "string" ? done : done.text;
      stale = typeof done === "string" ? undefined : done.staleWhen;
      afterwards = typeof done === "string" ? undefined : done.afterwards;
    } catch (err) {
      said = err instanceof Error ? err.message : String(err);
      stale = err instanceof ActionError ? err.staleWhen : undefined;
      failed = true;
    }
    if (asked !== this.asked) {
      return;
    }
    // Taken before the question hides: hiding it drops the keyboard.
    const hadFocus = this.holdsFocus();
    this.ask.hidden = true;
    setText(this.outcome, said);
    this.outcome.dataset["failed"] = String(failed);
    this.outcome.dataset["running"] = "false";
    this.outcome.hidden = false;
    this.stale = stale;
    this.afterwards = afterwards;
    if (hadFocus) {
      this.giveFocusBack(asker, this.outcome);
    }
    this.recheck();
  }

  // recheck takes the outcome away once what it says no longer holds;
  // its owner calls it whenever what it shows changes. The keyboard, if
  // on the outcome, stays in the confirmation's place.
  recheck(): void {
    if (this.stale === undefined || this.outcome.hidden || !this.stale()) {
      return;
    }
    const focused = document.activeElement === this.outcome;
    const next = this.afterwards?.();
    this.stale = undefined;
    this.afterwards = undefined;
    if (next !== undefined) {
      setText(this.outcome, next); // the keyboard, if on it, stays
      return;
    }
    this.outcome.hidden = true;
    if (focused) {
      // Keeps the keyboard's place without scrolling to it: the outcome
      // went stale by itself (the job moved on), not by the reader.
      this.el.focus({ preventScroll: true });
    }
  }

  // holdsFocus reports whether the keyboard is in the question, or was
  // there until a button of it was disabled or hidden (which leaves it on
  // the page's body): not when the person has moved on elsewhere.
  private holdsFocus(): boolean {
    const active = document.activeElement;
    return active === null || active === document.body || this.el.contains(active);
  }

  private giveFocusBack(asker: HTMLElement | undefined, otherwise: HTMLElement): void {
    if (asker !== undefined && usable(asker)) {
      asker.focus();
    } else {
      otherwise.focus();
    }
  }
}

// usable reports whether el can take the keyboard: on the page, shown and
// not disabled.
function usable(el: HTMLElement): boolean {
  if (!el.isConnected || el.closest("[hidden]") !== null) {
    return false;
  }
  return !(el instanceof HTMLButtonElement && el.disabled);
}

// Access is what the page knows of its token, from GetServerInfo's
// caller: "open" on a server without tokens (every call is allowed);
// "none" on a server that needs a token where the page has none (every
// call but GetServerInfo is refused); "token" with the role of a token
// the server knows; "unknown" before the answer, from an older server
// (no caller field), or for a token the server does not know (its calls
// are refused anyway). While it is unknown, only Refusals can disable a
// button.
export type Access = { kind: "unknown" } | { kind: "open" } | { kind: "none" } | { kind: "token"; role: string };

// What each action does, as a refusal names it: "a worker token may not
// retry jobs".
const deeds: Record<Action, string> = {
  start: "start jobs",
  retry: "retry jobs",
  cancel: "cancel jobs",
  delete: "delete jobs",
  pause: "pause queues",
  resume: "resume queues",
  "retry-failed": "retry jobs",
};

// accessReason is why the token Access describes may not take action
// ("" when it may), by the server's rules (server/auth.go): nothing
// without a token where the server needs one; an admin may
// do everything; a client may retry, cancel and delete its tenant's jobs
// (the only tenant its page shows) but not pause or resume a queue; any
// other role (worker, metrics) may do none of these.
export function accessReason(access: Access, action: Action): string {
  if (access.kind === "none") {
    return "the server needs a token: enter one";
  }
  if (access.kind !== "token" || access.role === "admin") {
    return "";
  }
  if (access.role === "client") {
    if (action === "pause") {
      return "pausing a queue takes an admin token";
    }
    if (action === "resume") {
      return "resuming a queue takes an admin token";
    }
    return "";
  }
  return `a ${access.role} token may not ${deeds[action]}`;
}

// Refusals is what the server has told this page's token it may not do:
// an action answered permission_denied or unimplemented (an older
// server) stays disabled, with the server's reason, until the token
// changes. The page learns a token's role up front from GetServerInfo
// (Access); Refusals covers what that cannot: a server too old to say
// who the caller is, or to know the action at all.
export class Refusals {
  private readonly reasons = new Map<Action, string>();

  refuse(action: Action, reason: string): void {
    this.reasons.set(action, reason);
  }

  reason(action: Action): string {
    return this.reasons.get(action) ?? "";
  }

  clear(): void {
    this.reasons.clear();
  }
}

// unreachable reports whether err (a ConnectError, or the library's
// JobwatchError around one) says the call never reached the server:
// fetch itself failed (refused, reset, offline: a TypeError such as
// "Failed to fetch", which connect-es passes on as unknown or unavailable
// with that error as its cause), or a proxy in front of a stopped server
// answered 502, 503 or 504 ("HTTP 503", unavailable). An unavailable the
// server itself sent ("database is unavailable") is not: its words say
// more than the page's.
export function unreachable(err: unknown): boolean {
  const ce = err instanceof ConnectError ? err : err instanceof Error ? err.cause : undefined;
  if (!(ce instanceof ConnectError) || (ce.code !== Code.Unknown && ce.code !== Code.Unavailable)) {
    return false;
  }
  const local = ce.cause instanceof Error && !(ce.cause instanceof ConnectError);
  return local || (ce.code === Code.Unavailable && /^HTTP 50[234]$/.test(ce.rawMessage));
}

// What was not done, action by action, for a call that could not reach
// the server. A connection that broke after the server acted is the rare
// exception: the change then arrives on the page's stream once it is
// live again.
const notDone: Record<Action, string> = {
  start: "the job was not started",
  retry: "the job was not retried",
  cancel: "the job was not cancelled",
  delete: "the job was not deleted",
  pause: "the queue was not paused",
  resume: "the queue was not resumed",
  "retry-failed": "nothing was retried",
};

// unreachableText is what an action's outcome says when the server
// cannot be reached, in the page's words rather than the browser's.
export function unreachableText(action: Action): string {
  return `the server cannot be reached; ${notDone[action]}. Try again once the page is live.`;
}

// retriedText is what "retry all failed" says it did: changed of the
// matched jobs retried, in view, and why the others may have been left
// as they were (the server counts them without saying which).
export function retriedText(changed: bigint, matched: bigint, view: string): string {
  const done = `Retried ${changed.toLocaleString("en-US")} of ${matched.toLocaleString("en-US")} failed jobs of ${view}.`;
  const left = matched - changed;
  if (left <= 0n) {
    return done;
  }
  const were = left === 1n ? "1 was" : `${left.toLocaleString("en-US")} were`;
  return `${done} ${were} left as ${left === 1n ? "it was" : "they were"}: retried or removed meanwhile, or a retry would make a second active job with its unique key (its own Retry says which).`;
}

// Quota is what a QuotaExceeded detail says of the tenant's max_queued
// that refused a write (the library's QuotaExceededError carries it).
export interface Quota {
  tenant: string;
  maxQueued: bigint;
  // The tenant's jobs not yet running, counted up to maxQueued + 1.
  queued: bigint;
  // How many more the write would have added.
  adding: bigint;
}

// quotaText says in the page's words why the tenant's max_queued refused
// a write: "tenant “globex” is at its max_queued (100 jobs not yet
// running)".
export function quotaText(q: Quota): string {
  const tenant = `tenant “${q.tenant}”`;
  const jobs = (n: bigint) => (n === 1n ? "1 job" : `${n.toLocaleString("en-US")} jobs`);
  if (q.queued >= q.maxQueued) {
    // A count past the bound reads as maxQueued + 1 (a bound lowered
    // below what waits, or the engine's own retries, which it never
    // refuses).
    return `${tenant} is at its max_queued (${q.queued > q.maxQueued ? "more than " : ""}${jobs(q.maxQueued)} not yet running)`;
  }
  return `${tenant} has ${jobs(q.queued)} not yet running, and ${q.adding.toLocaleString("en-US")} more would pass its max_queued of ${q.maxQueued.toLocaleString("en-US")}`;
}

// quotaRefusedText is what an action the tenant's max_queued refused
// says after its name: why, and when it may be tried again.
export function quotaRefusedText(q: Quota): string {
  return `${quotaText(q)}. Try again once some of its jobs have started.`;
}

// bulkStoppedOf is the BulkStopped detail of a bulk call's refusal (err:
// what the generated client threw, or the library's error around it):
// what the page of the call did before it stopped.
export function bulkStoppedOf(err: unknown): BulkStopped | undefined {
  const ce = err instanceof ConnectError ? err : err instanceof Error && err.cause instanceof ConnectError ? err.cause : undefined;
  return ce?.findDetails(BulkStoppedSchema)[0];
}

// retryHeldText is what Retry all failed says when the tenant's
// max_queued stopped it: changed of the matched jobs retried (those of
// the pages before the one it stopped at, and of that one), why it
// stopped, and when to retry again. The server's own message speaks to a
// program (its "this page" is the call's page of jobs, and it names the
// page token to go on with), not to a person on the page.
export function retryHeldText(changed: bigint, matched: bigint, q: Quota): string {
  const done =
    matched === 0n
      ? "No failed job was retried"
      : `Retried ${changed.toLocaleString("en-US")} of ${matched.toLocaleString("en-US")} failed ${matched === 1n ? "job" : "jobs"}`;
  return `${done}: ${quotaText(q)}. Retry again once some of its jobs have started.`;
}

// cancelledText says what a Cancel did to job id (the answer: CancelJob
// answers a job that had ended with the job as it is): cancelled it, or
// found it ended already, by whom where its history says. before is the
// job as the page knew it at the click; me the token's name (""
// unknown), which the history's "by" starts with for the token's own
// actions.
export function cancelledText(id: string, job: Job, before: Job | undefined, me: string): string {
  if (job.state !== JobState.CANCELLED) {
    const how = job.state === JobState.LOST ? "been lost" : (JobState[job.state] ?? "ended").toLowerCase();
    return `Job ${id} had already ${how}: there was nothing to cancel.`;
  }
  const entry = job.attempts.filter((a) => a.state === JobState.CANCELLED).at(-1);
  const by = entry?.by ?? "";
  const byOther = by !== "" && me !== "" && by !== me && !by.startsWith(`${me} (`);
  if (before?.state === JobState.CANCELLED || byOther) {
    return by === "" ? `Job ${id} was already cancelled.` : `Job ${id} was already cancelled, by ${by}.`;
  }
  return `Cancelled job ${id}.`;
}
