// The page's views. Each keeps references to the elements it made and
// updates them in place, so a stream of snapshots never rebuilds (and
// never flickers) what is already on screen.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { JobState, type Job, type Queue, type QueueDepth, type Schedule } from "./gen/jobwatch/v1/jobwatch_pb";
import { age, breaksAnywhere, clockTime, durationText, jsonText, periodText } from "./format";
import { h, setAttr, setData, setText, svg } from "./dom";
import { ActionButton, Confirm, type Action, type Said } from "./actions";
import { alertingText, drainedText, lastState, leftOutText, modeText, nextRun, pausedText, rateText, spark, tenantLines, tenantsLabel, type NextRun } from "./queues";
import { historyGap, isTerminal, keepOldest, millis, placeOf, sortsBefore, stateName, type JobBook, type Place } from "./model";
import type { LogPane } from "./logview";
import { plainText } from "./logs";
import { outcomeShares, type BatchCounts } from "./batch";
import { dependencies, dependencyFailed, onDependencyFailureText, waitingStep, type Dependencies } from "./deps";

// FilterLinks is what a batch label (or a job's kind, in its details)
// links to: the list filtered to that batch or kind (open), at an
// address of its own (href) that a reload or a shared link opens again.
export interface FilterLinks {
  href(name: string): string;
  open(name: string): void;
}

export type BatchLinks = FilterLinks;

// batchLink is a batch's label as a link that filters the list to it (or
// with key "kind", a kind's). It acts on its own: a click, Enter or Space
// on it does not reach the row around it (which would open the job's
// detail); Escape still does.
function batchLink(links: FilterLinks, cls: string, key = "batch"): HTMLAnchorElement {
  const a = h("a", { class: cls });
  a.addEventListener("click", (e) => {
    e.preventDefault();
    e.stopPropagation();
    const name = a.dataset[key];
    if (name !== undefined && name !== "") {
      links.open(name);
    }
  });
  a.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.stopPropagation();
    }
  });
  return a;
}

function setBatchLink(a: HTMLAnchorElement, links: BatchLinks, batch: string, text: string, title: string): void {
  setData(a, "batch", batch);
  setText(a, text);
  setAttr(a, "href", links.href(batch));
  setAttr(a, "title", title);
}

// ProgressView is a bar with its percent and step text (or, for a job
// that failed or that a dependency cancelled, the error type in place of
// the step; for a WAITING one, how many jobs it runs after).
class ProgressView {
  readonly el: HTMLElement;
  private readonly fill = h("span", { class: "fill" });
  private readonly percent = h("span", { class: "percent" });
  private readonly step = h("span", { class: "step" });

  private readonly track = h("span", { class: "track", role: "progressbar", "aria-label": "progress", "aria-valuemin": "0", "aria-valuemax": "100" }, this.fill);

  constructor() {
    this.el = h("span", { class: "progress" }, this.track, h("span", { class: "progress-text" }, this.percent, this.step));
  }

  update(job: Job): void {
    const width = `${job.percent}%`;
    if (this.fill.style.width !== width) {
      this.fill.style.width = width;
      this.track.setAttribute("aria-valuenow", String(job.percent));
    }
    setText(this.percent, `${job.percent}%`);
    const failed = job.error !== undefined && (job.state === JobState.FAILED || job.state === JobState.LOST || dependencyFailed(job));
    setText(this.step, plainText(failed ? job.error!.type : job.step || waitingStep(job)));
    this.step.classList.toggle("error-type", failed);
  }
}

function badge(): HTMLElement {
  return h("span", { class: "badge" });
}

function setBadge(el: HTMLElement, state: JobState): void {
  setText(el, stateName(state));
  setData(el, "state", stateName(state));
}

class JobRow {
  readonly el: HTMLLIElement;
  private readonly badge = badge();
  private readonly kind = h("span", { class: "kind-name" });
  private readonly id = h("code", { class: "job-id" });
  private readonly batch: HTMLAnchorElement;
  private readonly kindLine: HTMLElement;
  private readonly progress = new ProgressView();
  // The age is one text node, rewritten in place each second only when
  // its text changes: no element is replaced.
  private readonly ageText = document.createTextNode("");
  private readonly age = h("span", { class: "age right" }, this.ageText);
  private since = 0;

  constructor(
    job: Job,
    onSelect: (id: string, byKeyboard: boolean) => void,
    private readonly links: BatchLinks,
  ) {
    this.batch = batchLink(links, "batch-label");
    // Not a Tab stop: the list is one (JobList); the details the row
    // opens have the same link.
    this.batch.tabIndex = -1;
    this.kindLine = h("span", { class: "kind-line" }, this.kind, this.batch);
    this.el = h(
      "li",
      { class: "job", tabindex: "-1", "data-job-id": job.id },
      this.badge,
      h("span", { class: "kind" }, this.kindLine, this.id),
      this.progress.el,
      this.age,
    );
    this.el.addEventListener("click", () => onSelect(job.id, false));
    this.el.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        onSelect(job.id, true);
      }
    });
  }

  update(job: Job): void {
    setData(this.el, "state", stateName(job.state));
    setBadge(this.badge, job.state);
    setText(this.kind, job.kind);
    setText(this.id, job.id);
    this.batch.hidden = job.batch === "";
    setData(this.kindLine, "batched", String(job.batch !== ""));
    if (job.batch !== "") {
      setBatchLink(this.batch, this.links, job.batch, job.batch, `batch ${job.batch}: show only its jobs`);
    }
    this.progress.update(job);
    this.since = millis(job.createdAt);
    this.tick(Date.now());
  }

  tick(now: number): void {
    const text = age(this.since, now);
    if (this.ageText.data !== text) {
      this.ageText.data = text;
    }
  }
}

// JobList shows the book's jobs newest first, one row per job id. It
// holds as many rows as it is asked to (keepOldest): past that, it lets
// the newest go and shows nothing above the newest row kept (top).
// The list is one Tab stop, however many rows it holds (a roving
// tabindex): the row last focused has tabindex 0, every other -1, and
// Arrow Up and Down, Home and End move the keyboard between rows, so
// one Tab takes it past the list to the queue panel.
export class JobList {
  // tabStop: the id of the row with tabindex 0 ("" when none).
  private tabStop = "";
  private readonly rows = new Map<string, JobRow>();
  private top: Place | undefined;
  // Only the rows in or near the viewport refresh their age each second:
  // a list of a thousand rows costs what the twenty in sight cost.
  private readonly inSight = new Set<JobRow>();
  private readonly rowOf = new WeakMap<Element, JobRow>();
  private readonly sight = new IntersectionObserver(
    (entries) => {
      const now = Date.now();
      for (const entry of entries) {
        const row = this.rowOf.get(entry.target);
        if (row === undefined) {
          continue;
        }
        if (entry.isIntersecting) {
          this.inSight.add(row);
          row.tick(now);
        } else {
          this.inSight.delete(row);
        }
      }
    },
    { rootMargin: "200px 0px" },
  );
  private selected = "";
  // shows is whether a job belongs in the list (the state filter's); a
  // job that changes out of it leaves the list.
  private shows: (job: Job) => boolean = () => true;
  // countText is what the count says of the rows (filter.ts's
  // countText): how many, and whether they are the view's most recent
  // jobs, which they no longer are once paged (Show older jobs read past
  // the view's first page) or windowed.
  private countText: (rows: number, paged: boolean) => string = (rows) => `${rows.toLocaleString("en-US")} most recent shown`;
  private paged = false;
  // backlog follows the count: what the server says of the view's jobs
  // in all, where it can say it ("" for nothing).
  private backlog = "";

  constructor(
    private readonly list: HTMLOListElement,
    private readonly empty: HTMLElement,
    private readonly count: HTMLElement,
    // byKeyboard: opened with Enter or Space, so the keyboard goes along
    // to the details.
    private readonly onSelect: (id: string, byKeyboard: boolean) => void,
    private readonly links: BatchLinks,
  ) {
    list.addEventListener("focusin", (e) => {
      const id = e.target instanceof HTMLElement ? (e.target.closest<HTMLElement>("li.job")?.dataset["jobId"] ?? "") : "";
      if (id !== "") {
        this.setTabStop(id);
      }
    });
    list.addEventListener("keydown", (e) => {
      const row = e.target;
      // Only on a row itself: a link in it keeps its own keys.
      if (!(row instanceof HTMLLIElement) || row.parentElement !== list) {
        return;
      }
      const next = { ArrowDown: row.nextElementSibling, ArrowUp: row.previousElementSibling, Home: list.firstElementChild, End: list.lastElementChild }[e.key];
      if (next === undefined || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) {
        return;
      }
      e.preventDefault(); // not the page's scroll
      if (next instanceof HTMLElement) {
        next.focus();
      }
    });
  }

  private setTabStop(id: string): void {
    if (id === this.tabStop && this.rows.has(id)) {
      return;
    }
    this.rows.get(this.tabStop)?.el.setAttribute("tabindex", "-1");
    this.tabStop = id;
    this.rows.get(id)?.el.setAttribute("tabindex", "0");
  }

  // keepTabStop gives the list a Tab stop again when its row went: the
  // selected job's row if shown, else the first.
  private keepTabStop(): void {
    if (this.rows.has(this.tabStop)) {
      return;
    }
    const first = this.list.firstElementChild;
    const id = this.rows.has(this.selected) ? this.selected : first instanceof HTMLElement ? (first.dataset["jobId"] ?? "") : "";
    this.setTabStop(id);
  }

  // filter sets which jobs the list shows, and what its count says of
  // them ("12 most recent shown", "3 failed shown": the rows, not the jobs
  // of the view, which may be many more), from the newest again; the page
  // clears and renders it again.
  filter(shows: (job: Job) => boolean, countText: (rows: number, paged: boolean) => string): void {
    this.shows = shows;
    this.countText = countText;
    this.top = undefined;
    this.paged = false;
  }

  // pagedBack says that the list holds jobs of the view's pages after its
  // first (Show older jobs): its rows are no longer the most recent only.
  pagedBack(): void {
    this.paged = true;
    this.showCount();
  }

  // size is how many rows the list shows.
  get size(): number {
    return this.rows.size;
  }

  // windowed reports whether the list let its newest rows go (keepOldest):
  // it shows none of the jobs newer than the newest row it kept.
  get windowed(): boolean {
    return this.top !== undefined;
  }

  // fromNewest shows the jobs newer than the rows kept again, as they are
  // rendered.
  fromNewest(): void {
    this.top = undefined;
    this.paged = false;
  }

  // aboveTop reports whether job is newer than the rows the list kept.
  aboveTop(job: Job): boolean {
    return this.top !== undefined && sortsBefore(placeOf(job), this.top);
  }

  // keepOldest lets the newest rows go to hold at most max, and from then
  // on shows no job newer than the newest it kept (a job the stream
  // brings or changes up there included). It returns the ids let go.
  keepOldest(max: number, book: JobBook): string[] {
    if (this.rows.size <= max) {
      return [];
    }
    const shown = book
      .newestFirst()
      .filter((job) => this.rows.has(job.id))
      .map(placeOf);
    const { drop, top } = keepOldest(shown, max);
    if (top === undefined) {
      return [];
    }
    this.top = top;
    for (const id of drop) {
      this.removeRow(id);
    }
    this.showCount();
    this.keepTabStop();
    return drop;
  }

  render(book: JobBook, changed: Iterable<string>): void {
    for (const id of changed) {
      const job = book.get(id);
      if (job === undefined) {
        continue;
      }
      let row = this.rows.get(id);
      if (!this.shows(job) || this.aboveTop(job)) {
        this.removeRow(id);
        continue;
      }
      if (row === undefined) {
        row = new JobRow(job, this.onSelect, this.links);
        this.rows.set(id, row);
        this.rowOf.set(row.el, row);
        this.sight.observe(row.el);
      }
      row.update(job);
    }
    // Put rows in order, moving only those out of place: a row that is
    // already where it belongs is never detached.
    let cursor: ChildNode | null = this.list.firstChild;
    for (const job of book.newestFirst()) {
      const el = this.rows.get(job.id)?.el;
      if (el === undefined) {
        continue;
      }
      if (cursor === el) {
        cursor = el.nextSibling;
      } else {
        this.list.insertBefore(el, cursor);
      }
    }
    this.showCount();
    this.markSelected();
    this.keepTabStop();
  }

  // has reports whether the list shows a row for job id.
  has(id: string): boolean {
    return this.rows.has(id);
  }

  remove(ids: string[]): void {
    for (const id of ids) {
      this.removeRow(id);
    }
    this.showCount();
    this.keepTabStop();
  }

  private removeRow(id: string): void {
    const row = this.rows.get(id);
    if (row === undefined) {
      return;
    }
    this.sight.unobserve(row.el);
    this.inSight.delete(row);
    row.el.remove();
    this.rows.delete(id);
  }

  // setBacklog says after the count how many jobs the view has in all,
  // where the server tells it ("" for nothing).
  setBacklog(text: string): void {
    this.backlog = text;
    this.showCount();
  }

  private showCount(): void {
    this.empty.hidden = this.rows.size > 0;
    const shown = this.rows.size === 0 ? "" : this.countText(this.rows.size, this.paged || this.windowed);
    setText(this.count, shown !== "" && this.backlog !== "" ? `${shown} · ${this.backlog}` : shown);
  }

  select(id: string): void {
    this.selected = id;
    this.markSelected();
  }

  // focus puts the keyboard back on a job's row (after its details close).
  focus(id: string): void {
    this.rows.get(id)?.el.focus();
  }

  clear(): void {
    this.sight.disconnect();
    this.inSight.clear();
    this.rows.clear();
    this.tabStop = "";
    this.top = undefined;
    this.paged = false;
    this.list.replaceChildren();
    this.empty.hidden = false;
    setText(this.count, "");
  }

  // tick refreshes the ages of the rows in sight; a row coming into sight
  // refreshes its own as it does.
  tick(now: number): void {
    for (const row of this.inSight) {
      row.tick(now);
    }
  }

  private markSelected(): void {
    for (const [id, row] of this.rows) {
      row.el.classList.toggle("selected", id === this.selected);
      if (id === this.selected) {
        row.el.setAttribute("aria-current", "true");
      } else {
        row.el.removeAttribute("aria-current");
      }
    }
  }
}

// BatchBar is the line above the list while it shows one batch: the
// batch's progress in words and as a bar of how its jobs ended, and the
// control that shows every job again.
export class BatchBar {
  private readonly name = h("strong", { class: "batch-name" });
  private readonly progress = h("span", { class: "batch-progress" });
  private readonly summary = h("span", { class: "batch-summary" }, this.name, ": ", this.progress);
  private readonly track = h("span", { class: "batch-track", "aria-hidden": "true" });
  private readonly parts = new Map<JobState, HTMLElement>();
  // While the list is narrowed to a queue too, the counts are still the
  // whole batch's (BatchProgress counts it in every queue): the line
  // says so rather than pass them off as the list's.
  private readonly scope = h("span", { class: "batch-scope muted" });

  constructor(
    private readonly el: HTMLElement,
    onClear: () => void,
  ) {
    const clear = h("button", { type: "button", class: "batch-clear", title: "clear the batch filter" }, "✕ Show all jobs");
    clear.addEventListener("click", onClear);
    this.el.append(h("div", { class: "batch-line" }, this.summary, this.scope, clear), this.track);
  }

  // show says how batch is going: progress, its line after its name, and
  // counts, or undefined while they are not known; queue and kind are the
  // queue and kind the list is narrowed to besides ("" for none).
  show(batch: string, status: string, progress: string, counts: BatchCounts | undefined, queue = "", kind = ""): void {
    this.el.hidden = false;
    const every = [queue === "" ? "" : "in every queue", kind === "" ? "" : "of every kind"].filter((w) => w !== "").join(" and ");
    const shows = [kind === "" ? "" : `kind “${kind}”`, queue === "" ? "" : `queue “${queue}”`].filter((w) => w !== "").join(" in ");
    setText(this.scope, every === "" ? "" : `the whole batch, ${every}; the list shows ${shows}`);
    this.scope.hidden = every === "";
    setData(this.el, "batch", batch);
    setData(this.el, "status", status);
    setText(this.name, batch);
    setText(this.progress, progress);
    this.track.hidden = counts === undefined || counts.total === 0;
    for (const { state, share } of counts === undefined ? [] : outcomeShares(counts)) {
      let part = this.parts.get(state);
      if (part === undefined) {
        part = h("span", { class: "batch-part", "data-state": stateName(state) });
        this.parts.set(state, part);
        this.track.append(part);
      }
      const width = `${(share * 100).toFixed(2)}%`;
      if (part.style.width !== width) {
        part.style.width = width;
      }
    }
  }

  hide(): void {
    this.el.hidden = true;
    setData(this.el, "batch", "");
  }
}

interface TimelineEntry {
  at: number;
  label: string;
  state: string;
  seen: boolean; // from the browser's own observation, not a server time
  note?: string; // an attempt's error
  gap?: boolean; // entries the server no longer keeps: no time of its own
}

// JobOps is what the detail's buttons do. Each returns what it did, in a
// sentence, or throws with why not; refusal is "" when the page's token
// may take the action, else why not.
export interface JobOps {
  refusal(action: Action): string;
  start(id: string): Promise<Said>;
  retry(id: string): Promise<Said>;
  cancel(id: string): Promise<Said>;
  delete(id: string): Promise<Said>;
}

// Detail shows one job in full, with its live log (logs, which follows
// the log of the job shown and of no other). It is built once per
// selection and then updated in place. openJob shows another job in its
// place (a job this one runs after).
// A timeline note longer than this shows its start, and the rest when
// clicked: an attempt's 4,000-character error would otherwise fill
// screens between the job's state and its buttons.
const noteShown = 240;

function noteView(note: string): HTMLElement {
  if (note.length <= noteShown) {
    return h("span", { class: "muted timeline-note" }, note);
  }
  return h("details", { class: "muted timeline-note" }, h("summary", {}, `${note.slice(0, noteShown)}… (${note.length} characters)`), note);
}

// previousErrorTitle names the attempt whose error a job that has not
// ended carries: the one before the attempt running now, or the last
// one made for a job waiting to run again.
function previousErrorTitle(job: Job): string {
  const nth = job.state === JobState.RUNNING ? job.attempt - 1 : job.attempt;
  return nth >= 1 ? `Error of the previous attempt (attempt ${nth})` : "Error of the previous attempt";
}

// cancelledAfterItsError reports whether a CANCELLED job's error is from
// before its cancel, which an operator made (the last entry of its
// history): such a cancel sets no error, so the job's error is an
// earlier attempt's, or a dependency's that a retry since put behind it.
// A cancel for a dependency that did not succeed is the server's, and
// its error says why the job ended.
function cancelledAfterItsError(job: Job, full: Job | undefined): boolean {
  if (job.state !== JobState.CANCELLED) {
    return false;
  }
  const history = full?.id === job.id ? full.attempts : job.attempts;
  const last = history[history.length - 1];
  return last !== undefined && last.state === JobState.CANCELLED && last.by !== "";
}

export class Detail {
  private jobId = "";
  // waitsAgain is true for a job that runs after others: a retry makes it
  // wait again for each of them that has not succeeded.
  private waitsAgain = false;
  // The title takes the keyboard when a job is opened from the keyboard
  // (tabindex -1: reachable by script, not a Tab stop of its own).
  private readonly title = h("h2", { id: "detail-title", tabindex: "-1" });
  private readonly badge = badge();
  private readonly attempts = h("span", { class: "muted attempts" });
  // The job's id is its own link (?job=ID): one to copy into a ticket or
  // a chat, which opens this job however old it is.
  private readonly id = h("a", { class: "job-id job-self-link" });
  private readonly progress = new ProgressView();
  private readonly facts = h("dl", { class: "facts" });
  private readonly resultBox = h("div", { class: "result-box" });
  private readonly result = h("pre", { class: "json result" });
  private readonly errorBox = h("div", { class: "error-box" });
  private readonly errorTitle = h("h3", {}, "Error");
  private readonly errorType = h("strong", { class: "error-type" });
  private readonly errorMessage = h("span", { class: "error-message" });
  private readonly payload = h("pre", { class: "json payload" });
  private readonly timeline = h("ol", { class: "timeline" });
  // body is all that shows the job's state; a deleted job's details show
  // gone in its place, not its last known state.
  private readonly body = h("div", { class: "detail-body" });
  private readonly gone = h("p", { class: "deleted-note", role: "status" });
  // Why a QUEUED job is not running (its queue paused, or held by its
  // rate), where the page knows.
  private readonly why = h("p", { class: "wait-reason" });
  private readonly confirm = new Confirm();
  private readonly start: ActionButton;
  private readonly retry: ActionButton;
  private readonly cancel: ActionButton;
  private readonly remove: ActionButton;
  // The job's batch among the facts, and a link that filters the list to
  // it (absent while the list shows that batch already).
  private readonly batchName = h("span", { class: "batch-name" });
  private readonly batchLink: HTMLAnchorElement;
  // listBatch is the batch the list is filtered to, "" for none.
  private listBatch = "";
  // A link beside the job's id that narrows the list to the job's kind
  // (absent while the list shows that kind already); listKind is the
  // kind the list is narrowed to, "" for none.
  private readonly kindLink: HTMLAnchorElement;
  private listKind = "";

  constructor(
    private readonly el: HTMLElement,
    onClose: () => void,
    private readonly ops: JobOps,
    private readonly logs: LogPane,
    private readonly links: BatchLinks,
    private readonly openJob: (id: string) => void,
    private readonly linkOf: (id: string) => string,
    private readonly whyWaiting: (job: Job) => string,
    private readonly kindLinks: FilterLinks,
  ) {
    this.batchLink = batchLink(links, "show-batch");
    this.kindLink = batchLink(kindLinks, "show-kind", "kind");
    const close = h("button", { type: "button", class: "ghost", "aria-label": "Close details" }, "✕");
    close.addEventListener("click", onClose);
    // A held job (submitted with hold, PENDING) runs once started.
    this.start = new ActionButton("start", "Start", () => {
      const id = this.jobId;
      this.confirm.request(`Start job ${id}? It was held when submitted; it is queued now, and runs when a worker takes it.`, "Start", () => ops.start(id), this.start.button);
    });
    this.retry = new ActionButton("retry", "Retry", () => {
      const id = this.jobId;
      const how = this.waitsAgain
        ? "It waits again for the jobs it runs after that have not succeeded (retry any that failed too, in any order), then is queued"
        : "It is queued again";
      this.confirm.request(`Retry job ${id}? ${how}, with as many more attempts as its queue's retry rule allows.`, "Retry", () => ops.retry(id), this.retry.button);
    });
    this.cancel = new ActionButton(
      "cancel",
      "Cancel job",
      () => {
        const id = this.jobId;
        this.confirm.request(`Cancel job ${id}? A running attempt is told to stop.`, "Cancel job", () => ops.cancel(id), this.cancel.button);
      },
      true,
    );
    this.remove = new ActionButton(
      "delete",
      "Delete",
      () => {
        const id = this.jobId;
        this.confirm.request(`Delete job ${id}? It is gone for good, with its history.`, "Delete", () => ops.delete(id), this.remove.button, true);
      },
      true,
    );
    this.el.setAttribute("aria-labelledby", "detail-title");
    this.body.append(
      this.why,
      this.progress.el,
      this.resultBox,
      this.errorBox,
      this.logs.el,
      h("h3", {}, "Timeline"),
      this.timeline,
      h("h3", {}, "Payload"),
      this.payload,
      this.facts,
      h("div", { class: "actions" }, this.start.el, this.retry.el, this.cancel.el, this.remove.el),
    );
    this.gone.hidden = true;
    this.el.append(
      h("div", { class: "panel-head" }, this.title, close),
      h("div", { class: "detail-line" }, this.badge, this.attempts, this.id, this.kindLink),
      this.gone,
      this.body,
      this.confirm.el,
    );
    this.resultBox.append(h("h3", {}, "Result"), this.result);
    this.errorBox.append(this.errorTitle, h("p", {}, this.errorType, " ", this.errorMessage));
  }

  get shown(): string {
    return this.jobId;
  }

  // focus puts the keyboard on the details' title, so that Tab goes on to
  // the job's own controls, not through the rest of the list.
  focus(): void {
    this.title.focus();
  }

  // dismissQuestion withdraws the question the details ask, if any, and
  // reports whether there was one: Escape takes back the question first,
  // and only then closes the details.
  dismissQuestion(): boolean {
    return this.confirm.dismiss();
  }

  // show renders job, the feed's summary, with the payload and result of
  // full, the same job as GetJob answered it (undefined while that call
  // runs). A payload never changes; a result comes with the job's end, so
  // a full job fetched before then has none yet.
  show(job: Job, book: JobBook, full: Job | undefined): void {
    if (this.jobId !== job.id) {
      this.confirm.reset();
      this.logs.open(job.id);
    }
    this.jobId = job.id;
    this.el.hidden = false;
    this.gone.hidden = true;
    this.body.hidden = false;
    setData(this.el, "jobId", job.id);
    setData(this.el, "state", stateName(job.state));
    setText(this.title, job.kind);
    setData(this.kindLink, "kind", job.kind);
    setText(this.kindLink, "show this kind");
    setAttr(this.kindLink, "href", this.kindLinks.href(job.kind));
    setAttr(this.kindLink, "title", `show only the jobs of kind ${job.kind}`);
    this.kindLink.hidden = job.kind === this.listKind;
    setBadge(this.badge, job.state);
    setText(this.attempts, job.attempt === 0 ? "not started" : `attempt ${job.attempt} of ${job.maxAttempts || 1}`);
    setText(this.id, job.id);
    setAttr(this.id, "href", this.linkOf(job.id));
    setAttr(this.id, "title", "a link to this job: copy it to share");
    setText(this.why, this.whyWaiting(job));
    this.why.hidden = this.why.textContent === "";
    this.progress.update(job);
    this.logs.jobChanged(job);

    const result = jsonText(full?.result ?? job.result);
    this.resultBox.hidden = result === "";
    setText(this.result, result);

    // A job re-queued after a failed attempt still carries the error of
    // that attempt: show it, it is why the job is running again, but say
    // whose it is and keep it quiet, so it is not taken for the run now.
    // So does a job an operator cancelled: the cancel gives no error, so
    // the one it carries came before it.
    this.errorBox.hidden = job.error === undefined;
    const cancelled = job.error !== undefined && cancelledAfterItsError(job, full);
    const previous = (job.error !== undefined && !isTerminal(job.state)) || cancelled;
    setData(this.errorBox, "previous", String(previous));
    setText(this.errorTitle, cancelled ? "Last error, before it was cancelled" : previous ? previousErrorTitle(job) : "Error");
    setText(this.errorType, plainText(job.error?.type ?? ""));
    setText(this.errorMessage, plainText(job.error?.message ?? ""));

    const payload = jsonText(full?.payload ?? job.payload);
    setText(this.payload, payload !== "" ? payload : full === undefined ? "loading…" : "(none)");
    setData(this.payload, "loaded", String(full !== undefined));

    this.waitsAgain = job.after.length > 0;
    this.renderFacts(job, book);
    this.renderTimeline(job, book, full);
    this.renderActions(job);
    this.confirm.withdrawIfMoot();
    this.confirm.recheck();
  }

  hide(): void {
    this.jobId = "";
    this.confirm.reset();
    this.logs.close();
    this.el.hidden = true;
  }

  // resumeLog follows the log again where the server stopped it for the
  // token it refused (see LogPane.resume).
  resumeLog(): void {
    this.logs.resume();
  }

  // deleted shows that job id, on screen, was deleted (on this page or
  // any other): its kind and id stay, to say which job, but its state,
  // payload, history and buttons go, as none of them is true any more. A
  // question about it not yet answered is taken back.
  // why replaces the sentence that says so, where the page knows only
  // that the server does not have the job.
  deleted(id: string, why = "This job was deleted: it is gone from the server, with its history."): void {
    if (id !== this.jobId) {
      return;
    }
    setData(this.el, "state", "deleted");
    setText(this.badge, "deleted");
    setData(this.badge, "state", "deleted");
    setText(this.attempts, "");
    setText(this.gone, why);
    this.gone.hidden = false;
    this.body.hidden = true;
    this.logs.close();
    this.confirm.withdraw();
  }

  // refreshActions shows what the page has since learned it may not do.
  refreshActions(job: Job | undefined): void {
    if (job !== undefined && job.id === this.jobId) {
      this.renderActions(job);
    }
  }

  // renderActions offers what applies to the job's state: cancel while it
  // has not ended; retry once it ended without succeeding; delete once it
  // ended (a running job must be cancelled first, and says so).
  private renderActions(job: Job): void {
    const ended = isTerminal(job.state);
    const retryable = job.state === JobState.FAILED || job.state === JobState.CANCELLED || job.state === JobState.LOST;
    this.start.set(this.ops.refusal("start"), job.state !== JobState.PENDING);
    this.retry.set(retryable ? this.ops.refusal("retry") : "it succeeded: nothing to retry", !ended);
    this.cancel.set(this.ops.refusal("cancel"), ended);
    this.remove.set(ended ? this.ops.refusal("delete") : "cancel it first: only an ended job can be deleted");
  }

  // filtered says which batch the list shows ("" for every job), so the
  // detail offers to show a job's batch only when the list does not.
  // So does kind ("" for every kind) for the job's kind.
  filtered(batch: string, kind = ""): void {
    this.listBatch = batch;
    this.batchLink.hidden = batch !== "" && batch === this.batchLink.dataset["batch"];
    this.listKind = kind;
    this.kindLink.hidden = kind !== "" && kind === this.kindLink.dataset["kind"];
  }

  private renderFacts(job: Job, book: JobBook): void {
    const facts: [string, string][] = [
      ["Tenant", job.tenant],
      ["Queue", job.queue],
      ["Batch", job.batch],
      ["Worker", job.workerId || "—"],
      ["Unique key", job.uniqueKey || "—"],
      ["Priority", String(job.priority)],
      ["Version", String(job.version)],
    ];
    if (job.batch === "") {
      facts.splice(2, 1);
    }
    // The jobs it runs after, each with its state as the page has it
    // (which changes the key, so the list is drawn again as they end).
    const deps = dependencies(job, (id) => book.get(id));
    if (job.after.length > 0) {
      facts.splice(job.batch === "" ? 2 : 3, 0, ["Runs after", ""], ["On a failed dependency", onDependencyFailureText(job.onDependencyFailure)]);
    }
    // A retry's backoff or a scheduled start, while the job waits for it:
    // a running job's run_at is the time it was due, already past, and an
    // ended job runs no more.
    if (job.runAt !== undefined && millis(job.runAt) > millis(job.createdAt) && !isTerminal(job.state) && job.state !== JobState.RUNNING) {
      facts.push(["Runs at", clockTime(timestampDate(job.runAt))]);
    }
    const key = JSON.stringify([facts, deps]);
    if (this.facts.dataset["key"] === key) {
      return;
    }
    this.facts.dataset["key"] = key;
    this.facts.replaceChildren(
      ...facts.flatMap(([k, v]) => {
        if (k === "Runs after") {
          return [h("dt", {}, k), h("dd", { class: "deps-fact" }, this.dependencyList(deps))];
        }
        if (k !== "Batch") {
          return [h("dt", {}, k), h("dd", {}, v)];
        }
        setText(this.batchName, v);
        setBatchLink(this.batchLink, this.links, v, "show this batch", `show only the jobs of batch ${v}`);
        this.filtered(this.listBatch);
        return [h("dt", {}, k), h("dd", { class: "batch-fact" }, this.batchName, " ", this.batchLink)];
      }),
    );
  }

  // dependencyList is the jobs of after, each a link that opens it, with
  // its state badge and kind once the page has it.
  private dependencyList(deps: Dependencies): HTMLElement {
    const items = deps.shown.map((d) => {
      const link = h("a", { href: `#job=${encodeURIComponent(d.id)}`, class: "job-link dep-link", title: `show job ${d.id}` }, d.id);
      link.addEventListener("click", (e) => {
        e.preventDefault();
        this.openJob(d.id);
      });
      const known: Node[] = [];
      if (d.state !== "") {
        const b = badge();
        setText(b, d.state);
        setData(b, "state", d.state);
        known.push(b, h("span", { class: "muted dep-kind" }, d.kind));
      }
      return h("li", { class: "dep", "data-job-id": d.id, "data-state": d.state }, link, ...known);
    });
    if (deps.more > 0) {
      items.push(h("li", { class: "muted dep-more" }, `and ${deps.more.toLocaleString("en-US")} more`));
    }
    return h("ul", { class: "deps" }, ...items);
  }

  private renderTimeline(job: Job, book: JobBook, full: Job | undefined): void {
    const entries: TimelineEntry[] = [];
    const server = (ts: typeof job.createdAt, label: string, state: JobState, note?: string) => {
      if (ts !== undefined && millis(ts) > 0) {
        entries.push({ at: millis(ts), label, state: stateName(state), seen: false, ...(note === undefined ? {} : { note }) });
      }
    };
    const sightings = book.sightings(job.id);
    // A job is submitted PENDING (held), WAITING (after jobs not yet
    // ended) or QUEUED: the page's first sighting says which.
    const first = sightings[0]?.state;
    server(job.createdAt, "submitted", first === JobState.PENDING || first === JobState.WAITING ? first : JobState.QUEUED);
    const history = full?.id === job.id ? full.attempts : [];
    if (history.length > 0) {
      // The server's history (GetJob's full view, fetched again on each
      // change of state) tells every attempt and action: the page's own
      // sightings would only repeat it.
      const ends = new Set<number>();
      const gap = historyGap(history);
      if (gap !== "") {
        // Just before the first entry kept, after the submission.
        const first = history[0]!;
        const at = millis(first.startedAt) || millis(first.finishedAt);
        entries.push({ at: at > 0 ? at - 0.5 : millis(job.createdAt) + 0.5, label: gap, state: "gap", seen: false, gap: true });
      }
      for (const a of history) {
        const nth = a.attempt > 1 ? ` (attempt ${a.attempt})` : "";
        server(a.startedAt, `started${nth}`, JobState.RUNNING, a.workerId === "" ? undefined : `worker ${a.workerId}`);
        const what = a.state !== JobState.QUEUED ? stateName(a.state) : a.by !== "" ? "retried" : a.error !== undefined ? "failed, to be tried again" : "ended, to be tried again";
        const by = a.by === "" ? "" : ` by ${a.by}`;
        const error = a.error === undefined ? undefined : plainText(`${a.error.type}: ${a.error.message}`);
        server(a.finishedAt, `${what}${a.by === "" ? nth : ""}${by}`, a.state, error);
        ends.add(millis(a.finishedAt));
      }
      const last = history[history.length - 1]!;
      if (millis(job.startedAt) > millis(last.finishedAt)) {
        server(job.startedAt, job.attempt > 1 ? `started (attempt ${job.attempt})` : "started", JobState.RUNNING);
      }
      if (isTerminal(job.state) && !ends.has(millis(job.finishedAt))) {
        server(job.finishedAt, stateName(job.state), job.state);
      }
      entries.sort((a, b) => a.at - b.at);
      this.drawTimeline(entries);
      return;
    }
    server(job.startedAt, "started", JobState.RUNNING);
    if (isTerminal(job.state)) {
      server(job.finishedAt, stateName(job.state), job.state);
    }
    // What the page itself saw fills the gaps between the server's times:
    // retries, re-queues, a lost lease. The first sighting of a state the
    // server has a time for is that same event, seen later.
    const covered = new Set(entries.map((e) => e.state));
    for (const s of sightings) {
      const name = stateName(s.state);
      if (covered.delete(name)) {
        continue;
      }
      const label = s.attempt > 1 ? `${name} (attempt ${s.attempt})` : name;
      entries.push({ at: s.at.getTime(), label, state: name, seen: true });
    }
    entries.sort((a, b) => a.at - b.at);
    this.drawTimeline(entries);
  }

  private drawTimeline(entries: TimelineEntry[]): void {
    const key = JSON.stringify(entries);
    if (this.timeline.dataset["key"] === key) {
      return;
    }
    this.timeline.dataset["key"] = key;
    this.timeline.replaceChildren(
      ...entries.map((e) =>
        h(
          "li",
          { "data-state": e.state, class: e.gap === true ? "timeline-gap" : "" },
          e.gap === true ? h("span", { class: "timeline-gap-mark", "aria-hidden": "true" }, "⋮") : h("time", { datetime: new Date(e.at).toISOString() }, clockTime(new Date(e.at))),
          h(
            "span",
            { class: "timeline-text" },
            h("span", { class: "timeline-label" }, e.label),
            ...(e.seen ? [" ", h("span", { class: "muted seen", title: "observed by this page" }, "seen")] : []),
            ...(e.note === undefined ? [] : [noteView(e.note)]),
          ),
        ),
      ),
    );
  }
}

// QueueTable shows ListQueues, one row per queue name, updated in place:
// the queue's name and rules (mode, limit, pools in use), its counts, how
// long the oldest job has waited, its drain or alert, and a sparkline of
// its depth over the last 15 minutes. Under each, a row that opens from
// the queue's "N tenants" button lists its busiest tenants.
export class QueueTable {
  private readonly rows = new Map<string, QueueRow>();
  private readonly confirm = new Confirm();
  private current = "";

  // confirmAt is where the pause and resume questions are asked.
  constructor(
    private readonly body: HTMLElement,
    confirmAt: HTMLElement,
    private readonly ops: QueueOps,
  ) {
    confirmAt.append(this.confirm.el);
    // Escape on the button that asked withdraws its question too (in the
    // question, the question itself sees to it).
    body.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.confirm.dismiss()) {
        e.preventDefault();
      }
    });
  }

  // update shows one queue as PauseQueue or ResumeQueue answered it.
  update(q: Queue, now: number): void {
    this.rows.get(q.name)?.update(q, now);
    this.confirm.recheck();
  }

  // refreshActions shows the buttons as what the page knows its token
  // may do now allows.
  refreshActions(): void {
    for (const row of this.rows.values()) {
      row.refreshActions();
    }
  }

  // relink points each queue's link at the list as the page now shows
  // it, and marks the queue the list is narrowed to ("" for none).
  relink(current: string): void {
    this.current = current;
    for (const [name, row] of this.rows) {
      row.relink(name === current);
    }
  }

  render(queues: Queue[], now: number): void {
    const names = new Set(queues.map((q) => q.name));
    for (const [name, row] of this.rows) {
      if (!names.has(name)) {
        row.el.remove();
        row.tenants.el.remove();
        this.rows.delete(name);
      }
    }
    // The server's order, each row moved only when it is out of place:
    // moving a row takes the keyboard from the button in it that has it
    // (Resume, as a poll comes in while its question is asked).
    let last: Element | null = null;
    for (const q of queues) {
      let row = this.rows.get(q.name);
      if (row === undefined) {
        row = new QueueRow(q.name, this.ops, this.confirm);
        row.relink(q.name === this.current);
        this.rows.set(q.name, row);
      }
      const here: Element | null = last === null ? this.body.firstElementChild : last.nextElementSibling;
      if (here !== row.el) {
        if (last === null) {
          this.body.prepend(row.el);
        } else {
          last.after(row.el);
        }
      }
      if (row.el.nextElementSibling !== row.tenants.el) {
        row.el.after(row.tenants.el);
      }
      last = row.tenants.el;
      row.update(q, now);
    }
    this.confirm.recheck();
  }

  // clear takes every queue off the panel, with any question asked of
  // one: what a token could read is not the next token's to see.
  clear(): void {
    this.confirm.reset();
    this.render([], Date.now());
  }

  // tick moves the "since" texts along between two answers.
  tick(now: number): void {
    for (const row of this.rows.values()) {
      row.tick(now);
    }
  }
}

// QueueOps is what the queue panel's buttons do (see JobOps), and
// what its queues' names link to: the job list narrowed to the queue, at
// an address of its own (href, so the link opens in another tab too),
// which a plain click opens in this page (open) without reloading it.
export interface QueueOps {
  refusal(action: Action): string;
  pause(queue: string): Promise<Said>;
  resume(queue: string): Promise<Said>;
  href(queue: string): string;
  open(queue: string): void;
}

const sparkWidth = 72;
const sparkHeight = 22;

class QueueRow {
  readonly el: HTMLTableRowElement;
  readonly tenants: TenantsRow;
  private readonly mode = h("span", { class: "mode" });
  private readonly pools = h("span", { class: "pools" });
  private readonly status = h("span", { class: "queue-status" });
  // The queue's rate (queues.ts' rateText), hidden for a queue without one.
  private readonly rate = h("span", { class: "queue-rate muted" });
  private readonly queued = h("td", { class: "num queued" });
  private readonly running = h("td", { class: "num running" });
  private readonly oldest = h("td", { class: "num oldest" });
  private readonly area = svg("polygon", { class: "spark-area" });
  private readonly line = svg("polyline", { class: "spark-line" });
  private readonly dot = svg("circle", { class: "spark-now", r: "2" });
  private readonly label = svg("title");
  // The baseline spans the whole 15 minutes, so a server that started
  // lately shows where its samples begin.
  private readonly spark = svg(
    "svg",
    { class: "spark", width: String(sparkWidth), height: String(sparkHeight), viewBox: `0 0 ${sparkWidth} ${sparkHeight}`, role: "img" },
    this.label,
    svg("line", { class: "spark-base", x1: "0", x2: String(sparkWidth), y1: String(sparkHeight - 0.5), y2: String(sparkHeight - 0.5) }),
    this.area,
    this.line,
    this.dot,
  );
  // What tick needs to say "since when" again: the alert's start, or the
  // last drain; 0 when the queue is not watched.
  private alertingSince = 0;
  private drainedAt = 0;
  private watched = false;
  private empty = true;
  private paused = false;
  private pausedAt = 0;
  private pausedBy = "";
  private readonly pause: ActionButton;
  private readonly resume: ActionButton;
  private readonly link: HTMLAnchorElement;

  constructor(
    private readonly name: string,
    private readonly ops: QueueOps,
    confirm: Confirm,
  ) {
    this.pause = new ActionButton("pause", "Pause", () =>
      confirm.request(`Pause queue ${name}? It hands out no jobs until resumed; running jobs finish, new ones are still accepted.`, "Pause", () => ops.pause(name), this.pause.button),
    );
    this.resume = new ActionButton("resume", "Resume", () =>
      confirm.request(`Resume queue ${name}? Its waiting jobs are handed out again.`, "Resume", () => ops.resume(name), this.resume.button),
    );
    this.tenants = new TenantsRow(name);
    this.link = h("a", { class: nameClass("name queue-link", name), href: ops.href(name), title: `show the jobs of queue ${name} in the list` }, name);
    this.link.addEventListener("click", (e) => {
      // A click meant for another tab or window goes to the browser.
      if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) {
        return;
      }
      e.preventDefault();
      ops.open(name);
    });
    this.el = h(
      "tr",
      { "data-queue": name },
      // A cell stays a table cell: the column is laid out inside it.
      h(
        "td",
        {},
        h(
          "div",
          { class: "queue-name" },
          this.link,
          h("span", { class: "muted rules" }, this.mode, this.pools),
          this.status,
          this.rate,
          this.tenants.toggle,
          h("span", { class: "queue-actions" }, this.pause.el, this.resume.el),
        ),
      ),
      this.queued,
      this.running,
      this.oldest,
      h("td", { class: "depth" }, this.spark),
    );
  }

  update(q: Queue, now: number): void {
    setText(this.mode, modeText(q));
    setText(this.pools, q.pools.map((p) => `${p.name} ${p.inUse}/${p.units}`).join(" · "));
    this.pools.title = q.pools.length === 0 ? "" : "pool: units held by running jobs of every queue that uses it / units";
    setText(this.queued, q.queued.toLocaleString("en-US"));
    setText(this.running, q.running.toLocaleString("en-US"));
    setText(this.oldest, q.queued > 0n ? durationText(q.oldestQueuedAge) : "—");
    setData(this.el, "alerting", String(q.alerting));
    this.alertingSince = q.alerting ? millis(q.alertingSince) : 0;
    this.watched = q.alertAfter !== undefined;
    this.drainedAt = millis(q.lastDrainedAt);
    this.empty = q.queued + q.running === 0n;
    this.status.title = this.watched ? `alert_after ${periodText(q.alertAfter)}` : "";
    setText(this.rate, rateText(q.rate));
    this.rate.hidden = q.rate === undefined;
    this.rate.classList.toggle("held", q.rate?.heldUntil !== undefined);
    setData(this.el, "paused", String(q.paused));
    this.pausedAt = q.paused ? millis(q.pausedAt) : 0;
    this.pausedBy = q.pausedBy;
    this.paused = q.paused;
    this.refreshActions();
    this.tick(now);
    this.drawSpark(q.depthHistory);
    this.tenants.update(q);
  }

  refreshActions(): void {
    this.pause.set(this.ops.refusal("pause"), this.paused);
    this.resume.set(this.ops.refusal("resume"), !this.paused);
  }

  // relink points the name's link at the list as the page now shows it
  // (its tenant and other filters), narrowed to the queue; current: the
  // list is narrowed to this queue now.
  relink(current: boolean): void {
    setAttr(this.link, "href", this.ops.href(this.name));
    if (current) {
      this.link.setAttribute("aria-current", "true");
    } else {
      this.link.removeAttribute("aria-current");
    }
  }

  tick(now: number): void {
    this.status.classList.toggle("alert", this.alertingSince > 0 && !this.paused);
    this.status.classList.toggle("paused", this.paused);
    if (this.paused) {
      // A paused queue does not alert for not draining: say why it waits.
      setText(this.status, pausedText(this.pausedAt, this.pausedBy, now));
    } else if (this.alertingSince > 0) {
      setText(this.status, alertingText(this.alertingSince, now));
    } else if (this.watched) {
      setText(this.status, drainedText(this.drainedAt, this.empty, now));
    } else {
      setText(this.status, "");
    }
    this.status.hidden = this.status.textContent === "";
  }

  private drawSpark(history: QueueDepth[]): void {
    const s = spark(history, sparkWidth, sparkHeight);
    const line = s.points.map(([x, y]) => `${x},${y}`).join(" ");
    setAttr(this.line, "points", line);
    const first = s.points[0];
    const last = s.points.at(-1);
    setAttr(this.area, "points", first === undefined || last === undefined ? "" : `${first[0]},${sparkHeight} ${line} ${last[0]},${sparkHeight}`);
    setAttr(this.dot, "cx", String(last?.[0] ?? 0));
    setAttr(this.dot, "cy", String(last?.[1] ?? sparkHeight));
    setAttr(this.spark, "data-samples", String(history.length));
    const text = `depth over the last 15 minutes: ${s.now} now, at most ${s.max}`;
    setAttr(this.spark, "aria-label", text);
    setText(this.label, text);
  }
}

// TenantsRow is the row under a queue's that lists its busiest tenants
// (ListQueues' tenants, busiest first) with their counts and oldest
// wait, and how many it leaves out. It opens and closes from toggle, in
// the queue's row, which says how many tenants have work in the queue;
// both hide while none has. It stays as the person left it across polls.
class TenantsRow {
  readonly el: HTMLTableRowElement;
  readonly toggle = h("button", { type: "button", class: "tenants-toggle", "aria-expanded": "false" });
  private readonly body = h("tbody");
  private readonly leftOut = h("div", { class: "muted tenants-left-out" });
  private open = false;
  private any = false;

  constructor(queue: string) {
    this.el = h(
      "tr",
      { class: "queue-tenants", "data-tenants-of": queue },
      h(
        "td",
        { colspan: "5" },
        h(
          "table",
          { class: "tenants", "aria-label": `tenants of queue ${queue}` },
          h("thead", {}, h("tr", {}, h("th", {}, "Tenant"), h("th", { class: "num" }, "Queued"), h("th", { class: "num" }, "Running"), h("th", { class: "num" }, "Oldest wait"))),
          this.body,
        ),
        this.leftOut,
      ),
    );
    this.toggle.addEventListener("click", () => {
      this.open = !this.open;
      this.show();
    });
    this.show();
  }

  update(q: Queue): void {
    const lines = tenantLines(q);
    // One row per place, rewritten in place: the order is the server's.
    while (this.body.rows.length > lines.length) {
      this.body.rows[this.body.rows.length - 1]!.remove();
    }
    while (this.body.rows.length < lines.length) {
      this.body.append(h("tr", {}, h("td", { class: "tenant" }), h("td", { class: "num queued" }), h("td", { class: "num running" }), h("td", { class: "num oldest" })));
    }
    lines.forEach((l, i) => {
      const row = this.body.rows[i]!;
      setData(row, "tenant", l.tenant);
      [l.tenant, l.queued, l.running, l.oldest].forEach((text, j) => setText(row.cells[j]!, text));
    });
    setText(this.leftOut, leftOutText(q.tenantsLeftOut));
    this.leftOut.hidden = q.tenantsLeftOut === 0;
    setText(this.toggle, tenantsLabel(lines.length, q.tenantsLeftOut));
    this.any = lines.length > 0;
    this.show();
  }

  private show(): void {
    this.toggle.hidden = !this.any;
    this.el.hidden = !this.any || !this.open;
    setAttr(this.toggle, "aria-expanded", String(this.open && this.any));
    this.toggle.classList.toggle("open", this.open);
  }
}

// ScheduleTable shows ListSchedules, one row per schedule, updated in
// place; the section is hidden while there are none.
export class ScheduleTable {
  private readonly rows = new Map<string, ScheduleRow>();

  constructor(
    private readonly section: HTMLElement,
    private readonly body: HTMLElement,
    private readonly onSelect: (id: string) => void,
  ) {}

  render(schedules: Schedule[], now: number): void {
    const names = new Set(schedules.map((s) => s.name));
    for (const [name, row] of this.rows) {
      if (!names.has(name)) {
        row.el.remove();
        this.rows.delete(name);
      }
    }
    for (const s of schedules) {
      let row = this.rows.get(s.name);
      if (row === undefined) {
        row = new ScheduleRow(s.name, this.onSelect);
        this.rows.set(s.name, row);
      }
      this.body.append(row.el);
      row.update(s, now);
    }
    this.section.hidden = this.rows.size === 0;
  }

  // clear takes every schedule off the page (see QueueTable.clear).
  clear(): void {
    this.render([], Date.now());
  }

  tick(now: number): void {
    for (const row of this.rows.values()) {
      row.tick(now);
    }
  }
}

// nameClass is classes, and long-name for a name that breaks anywhere
// (breaksAnywhere: style.css lets it).
function nameClass(classes: string, name: string): string {
  return breaksAnywhere(name) ? `${classes} long-name` : classes;
}

class ScheduleRow {
  readonly el: HTMLTableRowElement;
  private readonly kind = h("span", { class: "muted kind-of" });
  private readonly queue = h("td", { class: "schedule-queue" });
  // The queue again, under the name: a phone's narrow table shows it
  // there instead of in a column of its own (style.css).
  private readonly queueUnder = h("span", { class: "muted schedule-queue-under" });
  // How often it runs: its every ("1h"), or its cron expression with
  // the time zone it is read in.
  private readonly every = h("td", { class: "num every" });
  private readonly cron = h("code", { class: "cron" });
  private readonly zone = h("span", { class: "muted zone" });
  private readonly next = h("td", { class: "next-run" });
  private readonly last = badge();
  private readonly ended = h("span", { class: "muted ended" });
  private nextRun: NextRun = { kind: "none" };
  private key = "";

  constructor(
    name: string,
    private readonly onSelect: (id: string) => void,
  ) {
    this.el = h(
      "tr",
      { "data-schedule": name },
      h("td", {}, h("div", { class: "schedule-name" }, h("span", { class: nameClass("name", name) }, name), this.kind, this.queueUnder)),
      this.queue,
      this.every,
      this.next,
      h("td", {}, h("div", { class: "last-run" }, this.last, this.ended)),
    );
  }

  update(s: Schedule, now: number): void {
    setText(this.kind, s.tenant === "" ? s.kind : `${s.kind} · ${s.tenant}`);
    setText(this.queue, s.queue);
    setText(this.queueUnder, `queue ${s.queue}`);
    this.queue.classList.toggle("long-name", breaksAnywhere(s.queue));
    this.queueUnder.classList.toggle("long-name", breaksAnywhere(s.queue));
    if (s.cron === "") {
      if (this.every.firstElementChild !== null) {
        this.every.replaceChildren();
      }
      setText(this.every, periodText(s.every));
    } else {
      if (this.every.firstElementChild !== this.cron) {
        this.every.replaceChildren(this.cron, this.zone);
      }
      setText(this.cron, s.cron);
      const zone = s.timezone || "UTC";
      if (this.zone.textContent !== zone) {
        // A narrow column breaks a zone's name after its slashes
        // ("Europe/" "Amsterdam"), never inside a word.
        this.zone.replaceChildren(...zone.split(/(?<=\/)/).flatMap((part, i) => (i === 0 ? [part] : [h("wbr"), part])));
      }
    }
    // The next run in the schedule's own zone, where its cron is read.
    setAttr(this.next, "title", s.nextRunLocal === "" ? "" : `${s.nextRunLocal}${s.timezone === "" ? "" : ` (${s.timezone})`}`);
    const state = lastState(s);
    this.last.hidden = state === "";
    if (state !== "") {
      setText(this.last, state);
      setData(this.last, "state", state);
    }
    setText(this.ended, s.lastEndedAt === undefined ? (state === "" ? "no run yet" : "") : `ended ${clockTime(timestampDate(s.lastEndedAt))}`);
    this.nextRun = nextRun(s);
    this.tick(now);
  }

  tick(now: number): void {
    const n = this.nextRun;
    const key = n.kind === "at" ? `at ${clockTime(new Date(n.atMs))} ${age(now, n.atMs)}` : JSON.stringify(n);
    if (key === this.key) {
      return;
    }
    this.key = key;
    setData(this.next, "kind", n.kind);
    if (n.kind === "at") {
      const due = n.atMs - now < 1000; // "in now" says nothing "due" does not
      this.next.replaceChildren(h("span", { class: "next-at" }, clockTime(new Date(n.atMs))), h("span", { class: "muted" }, due ? " due" : ` in ${age(now, n.atMs)}`));
    } else if (n.kind === "run") {
      const link = h("a", { href: `#job=${encodeURIComponent(n.jobId)}`, class: "job-link" }, n.jobId);
      link.addEventListener("click", (e) => {
        e.preventDefault();
        this.onSelect(n.jobId);
      });
      this.next.replaceChildren(`${n.state}: `, link);
    } else {
      this.next.replaceChildren("—");
    }
  }
}
