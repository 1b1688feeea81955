// The operator's controls: a button that acts on a job or a queue, the
// in-page question it asks first, and what the page has learned it may
// not do. An action never runs from one click: the first click asks, in
// the page (a window.confirm would block the page, hide the stream's
// changes while open, and no test could click it), and only "yes" acts.
import { h, setText } from "./dom";

// Action names what an operator does; the same words as the RPCs.
export type Action = "retry" | "cancel" | "delete" | "pause" | "resume" | "retry-failed";

// ActionButton is one control: enabled, or disabled with the reason shown
// beside it (and as its tooltip), so nobody has to guess why.
export class ActionButton {
  readonly el: HTMLElement;
  readonly button: HTMLButtonElement;
  private readonly reason = h("span", { class: "muted reason" });

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
  set(reason: string, hidden = false): void {
    this.el.hidden = hidden;
    this.button.disabled = reason !== "";
    this.button.title = reason;
    setText(this.reason, reason);
    this.reason.hidden = reason === "";
  }
}

// Confirm is the question an action asks before it runs, with the
// outcome said in the same place once it has.
export class Confirm {
  readonly el: HTMLElement;
  private readonly question = h("span", { class: "question" });
  private readonly yes = h("button", { type: "button", class: "confirm-yes danger" });
  private readonly no = h("button", { type: "button", class: "confirm-no" }, "Keep");
  private readonly ask = h("div", { class: "confirm-ask", role: "group" }, this.question, this.yes, this.no);
  private readonly outcome = h("p", { class: "outcome", role: "status" });
  private run: (() => Promise<string>) | undefined;
  // Each question has a number: the outcome of an action the user has
  // since left (another question, another job) is not shown over it.
  private asked = 0;

  constructor() {
    this.el = h("div", { class: "confirm" }, this.ask, this.outcome);
    this.ask.hidden = true;
    this.outcome.hidden = true;
    this.no.addEventListener("click", () => this.reset());
    this.yes.addEventListener("click", () => void this.confirm());
  }

  // request asks question; yes runs act, whose answer (what it did) or
  // error message is then shown.
  request(question: string, yesLabel: string, act: () => Promise<string>): void {
    this.asked++;
    this.run = act;
    setText(this.question, question);
    setText(this.yes, yesLabel);
    this.yes.disabled = false;
    this.outcome.hidden = true;
    this.ask.hidden = false;
    this.yes.focus();
  }

  // reset forgets the question and the last outcome (another job shown).
  reset(): void {
    this.asked++;
    this.run = undefined;
    this.ask.hidden = true;
    this.outcome.hidden = true;
  }

  // withdraw takes back a question not yet answered, as what it asks
  // about is gone; an action already running, and its outcome, stay.
  withdraw(): void {
    if (this.run !== undefined) {
      this.reset();
    }
  }

  private async confirm(): Promise<void> {
    const act = this.run;
    if (act === undefined) {
      return;
    }
    const asked = this.asked;
    this.run = undefined;
    this.yes.disabled = true;
    let said: string;
    let failed = false;
    try {
      said = await act();
    } catch (err) {
      said = err instanceof Error ? err.message : String(err);
      failed = true;
    }
    if (asked !== this.asked) {
      return;
    }
    this.ask.hidden = true;
    setText(this.outcome, said);
    this.outcome.dataset["failed"] = String(failed);
    this.outcome.hidden = false;
  }
}

// Access is what the page knows of its token, from GetServerInfo's
// caller: "open" on a server without tokens (every call is allowed);
// "token" with the role of a token the server knows; "unknown" before
// the answer, from an older server (no caller field), or for a token
// the server does not know (its calls are refused anyway). While it is
// unknown, only Refusals can disable a button.
export type Access = { kind: "unknown" } | { kind: "open" } | { kind: "token"; role: string };

// What each action does, as a refusal names it: "a worker token may not
// retry jobs".
const deeds: Record<Action, string> = {
  retry: "retry jobs",
  cancel: "cancel jobs",
  delete: "delete jobs",
  pause: "pause queues",
  resume: "resume queues",
  "retry-failed": "retry jobs",
};

// accessReason is why the token Access describes may not take action
// ("" when it may), by the server's rules (server/auth.go): an admin may
// do everything; a client may retry, cancel and delete its tenant's jobs
// (the only tenant its page shows) but not pause or resume a queue; any
// other role (worker, metrics) may do none of these.
export function accessReason(access: Access, action: Action): string {
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
