// The jobwatch page: a tenant's recent jobs, live over one WatchJobs
// stream; a job's details; the queues. It talks only to the origin that
// served it.
import { Code, ConnectError } from "@connectrpc/connect";
import { jobClient, queueClient, savedToken, saveToken } from "./api";
import { byId, setData, setText } from "./dom";
import { JobFeed, type FeedStatus } from "./feed";
import type { Job } from "./gen/jobwatch/v1/jobwatch_pb";
import { isTerminal, JobBook, summaryOf } from "./model";
import { Detail, JobList, QueueTable, ScheduleTable } from "./views";
import "./style.css";

const tenantKey = "jobwatch.tenant";
const queuePollMs = 5000;
// The list keeps every active job and at most this many in all.
const maxJobsShown = 200;

const book = new JobBook();
const statusEl = byId<HTMLElement>("status");
const banner = byId<HTMLElement>("banner");
const bannerText = byId<HTMLElement>("banner-text");
const bannerWhen = byId<HTMLElement>("banner-when");
const tenantForm = byId<HTMLFormElement>("tenant-form");
const tenantInput = byId<HTMLInputElement>("tenant");
const tokenForm = byId<HTMLFormElement>("token-form");
const tokenInput = byId<HTMLInputElement>("token");
const demoForm = byId<HTMLFormElement>("demo-form");
const demoKind = byId<HTMLSelectElement>("demo-kind");
const errorEl = byId<HTMLElement>("error");

const list = new JobList(byId("jobs"), byId("jobs-empty"), byId("jobs-count"), select);
const detail = new Detail(byId("detail"), closeDetail, cancelJob);
const queues = new QueueTable(byId("queues"));
const schedules = new ScheduleTable(byId("schedules-panel"), byId("schedules"), select);

let tenant = initialTenant();
let feed: JobFeed | undefined;
let feedStatus: FeedStatus = { kind: "connecting" };

function initialTenant(): string {
  const fromURL = new URLSearchParams(location.search).get("tenant");
  return fromURL || localStorage.getItem(tenantKey) || "default";
}

function startFeed(): void {
  feed?.stop();
  book.clear();
  list.clear();
  const current = new JobFeed(jobClient, tenant, {
    jobs: (batch) => {
      if (feed !== current) {
        return;
      }
      const changed: string[] = [];
      for (const job of batch) {
        if (book.merge(job)) {
          changed.push(job.id);
        }
      }
      if (changed.length > 0) {
        list.render(book, changed);
        list.remove(book.trim(maxJobsShown, detail.shown));
        refreshDetail();
        soonPollQueues();
      }
    },
    status: (s) => {
      if (feed === current) {
        showStatus(s);
      }
    },
  });
  feed = current;
  current.start();
}

const statusText: Record<FeedStatus["kind"], string> = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  unauthenticated: "token needed",
  refused: "not watching",
};

function showStatus(s: FeedStatus): void {
  feedStatus = s;
  setData(statusEl, "status", s.kind);
  setText(statusEl, statusText[s.kind]);
  if (s.kind === "unauthenticated") {
    tokenForm.hidden = false;
    tokenInput.focus();
  }
  renderBanner(Date.now());
}

// The banner says plainly that what is shown may be stale, and when the
// page tries again. The countdown is outside the live region, so a screen
// reader announces the news once, not a number every second.
function renderBanner(now: number): void {
  const s = feedStatus;
  if (s.kind === "reconnecting") {
    setText(bannerText, `Reconnecting… ${s.reason}. The jobs below show the last known state.`);
    const secs = Math.max(0, Math.ceil((s.retryAt - now) / 1000));
    setText(bannerWhen, secs === 0 ? `Trying now (attempt ${s.attempt}).` : `Next try in ${secs}s (attempt ${s.attempt}).`);
  } else if (s.kind === "unauthenticated") {
    setText(bannerText, `The server wants a token for tenant “${tenant}”: ${s.reason}`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused") {
    setText(bannerText, `The server will not watch tenant “${tenant}”: ${s.reason}. Enter another tenant.`);
    setText(bannerWhen, "");
  }
  const shown = s.kind === "reconnecting" || s.kind === "unauthenticated" || s.kind === "refused";
  setData(banner, "kind", s.kind);
  banner.hidden = !shown;
}

// selected is the job the user asked to see; an answer that arrives after
// they chose another must not take the detail panel back.
let selected = "";
// full is the selected job as GetJob answered it: the payload and result
// that the feed's summaries leave out. A payload never changes and a
// result comes only with the job's end, so it is fetched when the detail
// opens and once more when the feed says the job has ended.
let full: Job | undefined;
let fetching = "";

function select(id: string): void {
  selected = id;
  full = undefined;
  list.select(id);
  history.replaceState(null, "", id === "" ? location.pathname + location.search : `#job=${encodeURIComponent(id)}`);
  if (id === "") {
    detail.hide();
    return;
  }
  const job = book.get(id);
  if (job !== undefined) {
    detail.show(job, book, undefined);
  }
  // Also for a job older than the stream's first page, or a link from
  // elsewhere: its answer puts the job in the book.
  fetchFull(id);
}

function fetchFull(id: string): void {
  if (fetching === id) {
    return;
  }
  fetching = id;
  jobClient.getJob({ jobId: id }).then(
    (res) => {
      if (fetching === id) {
        fetching = "";
      }
      if (res.job === undefined) {
        return;
      }
      adopt(res.job);
      if (selected === id) {
        full = res.job;
        refreshDetail(id);
      }
    },
    (err) => {
      if (fetching === id) {
        fetching = "";
      }
      showError(`Job ${id}`, err);
    },
  );
}

// adopt merges a job from a unary answer (GetJob, CancelJob, SubmitJob)
// into what the stream keeps, as a summary. It gets a row only while its
// tenant is the one on screen: the answer may arrive after the user
// switched tenants, or come from a link to another tenant's job (its
// details still show).
function adopt(job: Job): boolean {
  if (!book.merge(summaryOf(job))) {
    return false;
  }
  if (job.tenant === tenant) {
    list.render(book, [job.id]);
  }
  return true;
}

// closeDetail hides the details and puts the keyboard back on the job's
// row, where the user opened them.
function closeDetail(): void {
  const was = selected;
  select("");
  list.focus(was);
}

function refreshDetail(id = detail.shown): void {
  const job = id === "" ? undefined : book.get(id);
  if (job === undefined) {
    return;
  }
  const shownFull = full?.id === id ? full : undefined;
  detail.show(job, book, shownFull);
  if (shownFull !== undefined && isTerminal(job.state) && !isTerminal(shownFull.state)) {
    fetchFull(id); // for the result
  }
}

function cancelJob(id: string): void {
  jobClient.cancelJob({ jobId: id }).then(
    (res) => {
      if (res.job !== undefined && adopt(res.job)) {
        refreshDetail();
      }
    },
    (err) => showError("Cancel", err),
  );
}

let errorTimer: ReturnType<typeof setTimeout> | undefined;

function showError(what: string, err: unknown): void {
  const ce = ConnectError.from(err);
  if (ce.code === Code.Unauthenticated) {
    tokenForm.hidden = false;
  }
  setText(errorEl, `${what}: ${ce.rawMessage || Code[ce.code]}`);
  errorEl.hidden = false;
  clearTimeout(errorTimer);
  errorTimer = setTimeout(() => (errorEl.hidden = true), 6000);
}

async function loadServerInfo(): Promise<void> {
  try {
    const info = await jobClient.getServerInfo({});
    tokenForm.hidden = !info.authRequired && savedToken() === "";
    if (info.demo && info.demoKinds.length > 0) {
      demoKind.replaceChildren(...info.demoKinds.map((k) => new Option(k, k)));
      demoForm.hidden = false;
    }
  } catch (err) {
    const ce = ConnectError.from(err);
    if (ce.code === Code.Unauthenticated) {
      tokenForm.hidden = false;
      return;
    }
    setTimeout(() => void loadServerInfo(), queuePollMs);
  }
}

let queueTimer: ReturnType<typeof setTimeout> | undefined;
let queueCalls = 0;
let queueShown = 0;

// pollQueues may run twice at once (the timer and a job change); only an
// answer to a later call than the one on screen is shown, so a call that
// failed while the server restarted cannot overwrite a fresh answer. The
// schedules come with the queues, at the same pace.
async function pollQueues(): Promise<void> {
  clearTimeout(queueTimer);
  queueTimer = setTimeout(() => void pollQueues(), queuePollMs);
  const call = ++queueCalls;
  const note = byId("queues-note");
  void pollSchedules(call);
  try {
    const res = await queueClient.listQueues({});
    if (call > queueShown) {
      queueShown = call;
      queues.render(res.queues, Date.now());
      setText(note, "");
    }
  } catch (err) {
    if (call > queueShown) {
      queueShown = call;
      const ce = ConnectError.from(err);
      setText(note, ce.code === Code.Unknown || ce.code === Code.Unavailable ? "server unreachable; retrying" : ce.rawMessage);
    }
  }
}

let schedulesShown = 0;

// pollSchedules shows ListSchedules. A server without schedules support
// (unimplemented) has none; any other failure keeps what is shown, and
// the queues' note already says when the server cannot be reached.
async function pollSchedules(call: number): Promise<void> {
  try {
    const res = await queueClient.listSchedules({});
    if (call > schedulesShown) {
      schedulesShown = call;
      schedules.render(res.schedules, Date.now());
    }
  } catch (err) {
    if (call > schedulesShown && ConnectError.from(err).code === Code.Unimplemented) {
      schedulesShown = call;
      schedules.render([], Date.now());
    }
  }
}

// Job changes move queue depths: look again shortly, coalescing a burst
// of changes into one ListQueues call.
let queuesSoon = false;

function soonPollQueues(): void {
  if (queuesSoon) {
    return;
  }
  queuesSoon = true;
  setTimeout(() => {
    queuesSoon = false;
    void pollQueues();
  }, 500);
}

tenantForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const next = tenantInput.value.trim() || "default";
  tenantInput.value = next;
  if (next === tenant) {
    return;
  }
  tenant = next;
  localStorage.setItem(tenantKey, tenant);
  // A ?tenant= in the address would bring the old tenant back on reload.
  const url = new URL(location.href);
  if (url.searchParams.has("tenant")) {
    url.searchParams.set("tenant", tenant);
    url.hash = "";
    history.replaceState(null, "", url);
  }
  select("");
  startFeed();
});
tenantInput.addEventListener("change", () => tenantForm.requestSubmit());
byId("detail").addEventListener("keydown", (e) => {
  if (e.key === "Escape") {
    closeDetail();
  }
});

tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  saveToken(tokenInput.value.trim());
  startFeed();
  void loadServerInfo();
  void pollQueues();
});

demoForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const button = byId<HTMLButtonElement>("demo-submit");
  button.disabled = true;
  jobClient
    .submitJob({ tenant, kind: demoKind.value })
    .then(
      (res) => {
        // The user may have switched tenants while the call ran.
        if (res.job !== undefined && res.job.tenant === tenant) {
          adopt(res.job);
          select(res.job.id);
        }
      },
      (err) => showError("Submit", err),
    )
    .finally(() => (button.disabled = false));
});

setInterval(() => {
  const now = Date.now();
  list.tick(now);
  queues.tick(now);
  schedules.tick(now);
  renderBanner(now);
}, 1000);

tenantInput.value = tenant;
tokenInput.value = savedToken();
startFeed();
void loadServerInfo();
void pollQueues();
const linked = /^#job=(.+)$/.exec(location.hash);
if (linked?.[1] !== undefined) {
  select(decodeURIComponent(linked[1]));
}
