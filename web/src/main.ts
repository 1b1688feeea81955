// The jobwatch page: a tenant's recent jobs (or one batch's, with its
// progress), live over one WatchJobs stream; a job's details; the queues.
// It talks only to the origin that served it.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import {
  AlreadyActiveError,
  Code,
  JobwatchError,
  PermissionDeniedError,
  QuotaExceededError,
  UnauthenticatedError,
  toJobwatchError,
} from "@jobwatch/client";
import {
  accessReason,
  ActionButton,
  ActionError,
  bulkStoppedOf,
  cancelledText,
  Confirm,
  quotaRefusedText,
  Refusals,
  retriedText,
  retryHeldText,
  unreachable,
  unreachableText,
  type Access,
  type Action,
  type Said,
} from "./actions";
import { client, jobClient, queueClient, savedToken, saveToken } from "./api";
import { BatchProgress, batchFromURL, urlWithBatch } from "./batch";
import { byId, h, setData, setText } from "./dom";
import { aboutJob } from "./format";
import { JobFeed, type FeedStatus } from "./feed";
import {
  countText,
  jobLink,
  linkedJobFromURL,
  noJobsText,
  kindFromURL,
  kindsHeldText,
  queueFromURL,
  queueLink,
  refusesName,
  retryFailedFilter,
  stateFilterFromURL,
  stateFilters,
  statesOf,
  unknownState,
  unknownStateText,
  urlWithKind,
  urlWithoutJob,
  urlWithQueue,
  urlWithState,
  viewLabel as viewLabelOf,
  viewShows,
  type StateFilter,
} from "./filter";
import { JobState, JobView, type Job, type ListJobsRequestSchema, type Queue } from "./gen/jobwatch/v1/jobwatch_pb";
import { otherTenantsText, queuesLeftOutText, tenantBacklogText, waitingReason } from "./queues";
import { LogPane } from "./logview";
import { isTerminal, JobBook, millis, stateName, summaryOf } from "./model";
import { createdNs, deeper, readEach, sortUnread, upTo, worthNextPage, type ReadTo } from "./refill";
import { initialTenant, rememberTenant, tenantKey, tenantReason } from "./tenant";
import { BatchBar, Detail, JobList, QueueTable, ScheduleTable, type BatchLinks, type JobOps, type QueueOps } from "./views";
import "./style.css";

const queuePollMs = 5000;
// The list keeps every job that has not ended, and the newest this many
// of those that have (besides the jobs ListJobs read for the view, and
// the one shown): the most recent outcomes stay in sight however many
// jobs wait, and older ones are a click away (Show older jobs).
const maxEndedShown = 200;
// The list keeps at most this many of the jobs that have not ended (again
// besides the jobs ListJobs read for the view, and the one shown):
// running ones first, then the newest. A queue filling faster than its
// workers take from it would otherwise bring every job it holds into the
// page (an outside probe's 100,000 queued jobs made 1.4 M elements and
// a click that took 52 s); the header then says that only these are shown,
// and how to narrow the view.
const maxUnendedShown = 1000;
// The list holds at most this many rows: Show older jobs past it lets the
// newest go (Show newer jobs brings the view's start back), so an
// operator paging far back keeps a page that answers at once.
const maxRowsShown = 2000;

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
const jobsEmpty = byId<HTMLElement>("jobs-empty");
const stateSelect = byId<HTMLSelectElement>("state-filter");
const queueChip = byId<HTMLElement>("queue-filter");
const queueChipName = byId<HTMLElement>("queue-filter-name");
const kindChip = byId<HTMLElement>("kind-filter");
const kindChipName = byId<HTMLElement>("kind-filter-name");
const openForm = byId<HTMLFormElement>("open-form");
const openInput = byId<HTMLInputElement>("open-job");
const openNote = byId<HTMLElement>("open-note");
// Says, while the address names a state the page does not know
// (?state=bogus), that the list shows all jobs instead.
const stateNote = byId<HTMLElement>("state-note");
const olderButton = byId<HTMLButtonElement>("jobs-older");
const olderNote = byId<HTMLElement>("jobs-older-note");
// Above the list once it has let its newest rows go (maxRowsShown).
const newerButton = h("button", { id: "jobs-newer", type: "button" }, "Show newer jobs");
const newerBar = h(
  "p",
  { class: "jobs-newer" },
  newerButton,
  " ",
  h("span", { class: "muted" }, `Newer jobs are not shown: the list keeps at most ${maxRowsShown.toLocaleString("en-US")}.`),
);
newerBar.hidden = true;
byId("jobs").before(newerBar);
// Says, once the list has let go of jobs that have not ended
// (maxUnendedShown), that only some are shown, and how to see others.
const cappedNote = byId<HTMLElement>("jobs-capped");
// The first page ListJobs reads for a view, as many as the stream starts
// with; and each older page asked for.
const firstPageSize = 50;
const olderPageSize = 200;

// access is what GetServerInfo said of the page's token, and refusals
// what the server answered when this token tried anyway (an older server
// does not say who the caller is); a new token starts afresh with both.
let access: Access = { kind: "unknown" };
// callerName is the token's name as GetServerInfo gave it ("" unknown),
// as the history's "by" names the token's own actions.
let callerName = "";
const refusals = new Refusals();

// refusal is why the page's token may not take action, "" if it may.
function refusal(action: Action): string {
  return accessReason(access, action) || refusals.reason(action);
}

const jobOps: JobOps = {
  refusal,
  start: (id) =>
    act("start", "Start", async () => {
      const era = book.era;
      const job = await client.startJob(id);
      if (adopt(job, era)) {
        refreshDetail();
      }
      return `Started job ${id}: it is queued.`;
    }),
  retry: (id) =>
    act("retry", "Retry", async (): Promise<Said> => {
      const era = book.era;
      const job = await client.retryJob(id);
      if (adopt(job, era)) {
        refreshDetail();
      }
      // Said until the new run has ended, then how it ended (the details
      // show it too): a run that ends within a second leaves no empty box.
      return {
        text: `Retried: job ${id} is queued again. Its new run shows here as it happens.`,
        staleWhen: () => {
          const now = book.get(id);
          return now === undefined || isTerminal(now.state);
        },
        afterwards: () => {
          const now = book.get(id);
          if (now === undefined) {
            return undefined;
          }
          const how = now.state === JobState.CANCELLED || now.state === JobState.LOST ? `was ${stateName(now.state)}` : stateName(now.state);
          return `Retried job ${id}: its new run ${how}.`;
        },
      };
    }, id),
  cancel: (id) =>
    act("cancel", "Cancel", async () => {
      const before = book.get(id);
      const era = book.era;
      const job = await client.cancelJob(id);
      if (adopt(job, era)) {
        refreshDetail();
      }
      return cancelledText(id, job, before, callerName);
    }),
  delete: (id) =>
    act("delete", "Delete", async () => {
      await client.deleteJob(id);
      // Drop it now: the stream says so too, but later (and an older
      // server's stream never does).
      dropDeleted([id]);
      return `Deleted job ${id}: it is gone for good.`;
    }),
};

// queueChanged shows queue name as a Pause or Resume answered it. The
// answers of polls asked before it show the queue as it was: they are
// dropped, or one that came after would undo it on screen (and take the
// action's outcome with it); soonPollQueues asks again.
function queueChanged(name: string, queue: Queue | undefined): void {
  queueShown = queueCalls;
  if (queue !== undefined) {
    queuesKnown.set(name, queue);
    queues.update(queue, Date.now());
    refreshDetail();
  }
  soonPollQueues();
}

const queueOps: QueueOps = {
  refusal,
  pause: (name) =>
    act("pause", "Pause", async () => {
      const res = await queueClient.pauseQueue({ queue: name });
      queueChanged(name, res.queue);
      return { text: `Paused queue ${name}: it hands out no jobs until resumed.`, staleWhen: () => queuesKnown.get(name)?.paused === false };
    }),
  resume: (name) =>
    act("resume", "Resume", async () => {
      const res = await queueClient.resumeQueue({ queue: name });
      queueChanged(name, res.queue);
      return { text: `Resumed queue ${name}.`, staleWhen: () => queuesKnown.get(name)?.paused === true };
    }),
  // A queue's name links to the list narrowed to it (?queue=NAME, beside
  // ?tenant= and the other filters), so a reload, a shared link or one
  // opened in another tab shows the same view.
  href: (name) => queueLink(new URL(location.href), name, tenant).href,
  open: (name) => showQueue(name, true),
};

// A batch's label links to the list filtered to it: the address carries
// the batch (?batch=NAME, beside ?tenant=), so a reload or a shared link
// opens the same view.
const batchLinks: BatchLinks = {
  href: (name) => {
    const url = urlWithBatch(new URL(location.href), name, tenant);
    url.hash = "";
    return url.href;
  },
  open: (name) => showBatch(name),
};

const list = new JobList(byId("jobs"), jobsEmpty, byId("jobs-count"), select, batchLinks);
// queuesKnown is the queue panel's last answer, by name: why a queued
// job waits, where it says (only an admin's page may read the queues).
let queuesKnown = new Map<string, Queue>();
const detail = new Detail(
  byId("detail"),
  closeDetail,
  jobOps,
  new LogPane(jobClient),
  batchLinks,
  select,
  (id) => jobLink(new URL(location.href), id, tenant).href,
  (job) => waitingReason(job.state, queuesKnown.get(job.queue), Date.now(), job.tenant, millis(job.runAt)),
  // A job's kind links to the list narrowed to it (?kind=NAME), as a
  // queue's name in the queue panel does to its queue.
  {
    href: (name) => {
      const url = urlWithoutJob(urlWithKind(new URL(location.href), name, tenant));
      url.hash = "";
      return url.href;
    },
    open: (name) => showKind(name),
  },
);
const batchBar = new BatchBar(byId("batch-bar"), () => showBatch(""));
const queues = new QueueTable(byId("queues"), byId("queues-confirm"), queueOps);
const jobsConfirm = new Confirm();
// retryingAll: a Retry all failed is running, page after page; another
// click would only ask to do again what it is doing.
let retryingAll = false;
const retryFailed = new ActionButton("retry-failed", "Retry all failed", () =>
  jobsConfirm.request(
    `Retry every failed job of ${viewLabel()}? ${failedText()}`,
    "Retry all failed",
    (report) => {
      const total = failedOfView();
      retryingAll = true;
      refreshActions();
      return act("retry-failed", "Retry all failed", () => retryAllFailed(total, report)).finally(() => {
        retryingAll = false;
        refreshActions();
      });
    },
    retryFailed.button,
  ),
);
byId("jobs-actions").append(retryFailed.el);
byId("jobs-actions").addEventListener("keydown", (e) => {
  if (e.key === "Escape" && jobsConfirm.dismiss()) {
    e.preventDefault();
  }
});
byId("jobs-confirm").append(jobsConfirm.el);
const schedules = new ScheduleTable(byId("schedules-panel"), byId("schedules"), select);

// tenant is the tenant the page asks for; "" asks for the caller's own.
// The server confines a client token to its tenant and reads an empty
// tenant as that one (and as "default" for a caller confined to none), so
// a client token opens its own tenant without the page having to know
// its name: the page asks for "" unless the user named a tenant, in this
// tab (tenant.ts).
let tenant = initialTenant(new URL(location.href), sessionStorage, localStorage);
// ownTenant is the name the server gave "" (learned from the jobs it
// sends, which carry their tenant); "" until one arrives.
let ownTenant = "";
// deniedTenant is the tenant the token was refused (permission_denied: a
// client token of another tenant), while the page shows the token's own
// instead; "" when nothing was refused.
let deniedTenant = "";
let feed: JobFeed | undefined;
let feedStatus: FeedStatus = { kind: "connecting" };
// feedHeard: the feed's stream has answered since it started, so an empty
// list means no jobs, not no answer yet. slowConnect: the feed has been
// connecting for slowConnectMs without an answer, which the banner
// explains.
let feedHeard = false;
let slowConnect = false;
let slowConnectTimer: ReturnType<typeof setTimeout> | undefined;
const slowConnectMs = 10_000;
// batch is the batch the list is filtered to, "" for every job of the
// tenant; progress counts its jobs while it is set.
let batch = batchFromURL(new URL(location.href));
let progress: BatchProgress | undefined;
// stateFilter narrows the list to jobs of some states (?state=), read
// from the server with ListJobs; the stream's changes then show only for
// the jobs that match.
let stateFilter = stateFilterFromURL(new URL(location.href));
// queueFilter narrows the list to the jobs of one queue (?queue=), ""
// for every queue: read from the server with ListJobs' queue, as the
// state filter is; WatchJobs takes no queue, so the stream's changes
// show only for the jobs of the queue (viewShows).
let queueFilter = queueFromURL(new URL(location.href));
// kindFilter narrows the list to the jobs of one kind (?kind=), "" for
// every kind, as queueFilter does to a queue.
let kindFilter = kindFromURL(new URL(location.href));
// listed holds the jobs ListJobs read for the view (its first page, and
// every older page asked for): the book keeps them however old. olderToken
// is the page Show older jobs reads next ("" for the view's first), and
// olderLeft says there is one: once the view's last job was read (then
// listedAll) there is none, until the book lets go of a job of the view,
// which may sit anywhere in its order: then Show older jobs reads the view
// again from its first page, past the jobs shown (rewindOlder; rewinds
// counts them, so a page on its way meanwhile does not undo one). listing
// numbers the views, so an answer for one the user has left is dropped.
let listed = new Set<string>();
// listedTo is the job listed furthest down the view (in the server's
// order, which ListJobs pages follow): after an outage the view is read
// again down to it, and no further (dropVanished).
let listedTo: Job | undefined;
let olderToken = "";
let olderLeft = false;
let rewinds = 0;
let listedAll = false;
// trimmedFailed: the book has let go of a failed job of the view since
// it was listed in full, so its count of them is no longer the view's.
let trimmedFailed = false;
// unendedLetGo: the book has let go of jobs of the view that have not
// ended (maxUnendedShown), so the list shows only some of them.
let unendedLetGo = false;
let listing = 0;

// shownTenant is the name of the tenant on screen, "" while the page asks
// for its own and has not learned the name yet.
function shownTenant(): string {
  return tenant || ownTenant;
}

// emptyText is what the job list says when the feed has no job to show.
function emptyText(): string {
  if (!feedHeard) {
    return "Waiting for the server's first answer…";
  }
  const narrowed = noJobsText(stateFilter, batch, queueFilter, kindFilter);
  if (narrowed !== "") {
    // A queue named by hand (a typo, say) may be no queue at all: where
    // the queue panel lists every queue, say that it does not list it.
    const unknown = queueFilter !== "" && queuesKnown.size > 0 && queuesLeftOut === 0 && !queuesKnown.has(queueFilter);
    if (unknown) {
      return `${narrowed} The queue panel shows no queue of that name.`;
    }
    // A kind no job has (one mistyped, say): the kinds the stream brought,
    // which are every kind's.
    const kindOnly = kindFilter !== "" && stateFilter === "all" && batch === "" && queueFilter === "";
    const kinds = kindOnly ? kindsHeldText(book.newestFirst().flatMap((job) => (job.tenant === shownTenant() ? [job.kind] : []))) : "";
    return kinds === "" ? narrowed : `${narrowed} ${kinds}`;
  }
  // An admin (or anyone, on a server without tokens) lands on the
  // default tenant, where there may be nothing while other tenants' jobs
  // fill the queues.
  const anyTenant = access.kind === "open" || (access.kind === "token" && access.role === "admin");
  const others = anyTenant ? otherTenantsText(queuesKnown.values(), shownTenant() || "default") : "";
  return others === "" ? "No jobs for this tenant yet." : `No jobs for this tenant yet. ${others}`;
}

// tenantLabel names the tenant on screen for a sentence.
function tenantLabel(): string {
  const name = shownTenant();
  if (name !== "") {
    return `tenant “${name}”`;
  }
  return savedToken() === "" ? "the default tenant" : "the token's own tenant";
}

// learnOwnTenant records the name the server gave "" and lists the jobs
// of that tenant the book took before the page knew it: a GetJob for a
// link (?job=) that answered before the first page of jobs came in went
// into the book and the details, but not into the list.
function learnOwnTenant(name: string): void {
  ownTenant = name;
  showTenantName();
  showBacklog();
  const waiting = book
    .newestFirst()
    .filter((job) => name !== "" && job.tenant === name && (batch === "" || job.batch === batch) && !list.has(job.id))
    .map((job) => job.id);
  if (waiting.length > 0) {
    list.render(book, waiting);
  }
}

// tenantRefused: the tenant the user entered was refused (the banner
// says which), so the field names the tenant shown once it is known,
// though the keyboard is still there.
let tenantRefused = false;

// showTenantName puts the tenant shown in the field, but while the user
// is typing there (unless what they typed was refused).
function showTenantName(): void {
  if (tenantRefused || document.activeElement !== tenantInput) {
    tenantInput.value = shownTenant();
    tenantRefused &&= tenantInput.value === "";
  }
  tenantInput.placeholder = savedToken() === "" ? "default" : "the token's own";
}

// feedWaits: the page has no token and GetServerInfo has not yet said
// whether the server needs one; the feed and the view's first page start
// once it has (loadServerInfo), so that a first load on a server with
// tokens sends neither to be refused for want of one. So does the GetJob
// of a job linked (?job=): on a server with tokens it is asked for once
// a token is entered, and the banner alone says one is needed.
let feedWaits = false;

// mayAskWithoutToken reports whether a call without a token may be
// sent: the page has a token, or GetServerInfo said the server needs
// none (or could not be asked: then the feed's own banner says why).
function mayAskWithoutToken(): boolean {
  return savedToken() !== "" || (infoHeard && access.kind !== "none") || infoFailed;
}

// startFeed starts the view afresh: the feed, and its first page. waited:
// it starts the view the page's last call of it left waiting for
// GetServerInfo (feedWaits), which cleared what was shown then; a job
// that came meanwhile (the GetJob of a link) stays, with its row.
function startFeed(waited = false): void {
  feed?.stop();
  feed = undefined;
  unconfirmed = undefined;
  feedWaits = false;
  feedHeard = false;
  progress?.stop();
  progress = undefined;
  if (!waited) {
    book.clear();
    list.clear();
    renderJobs.clear();
  }
  const shownFilter = stateFilter;
  const shownQueue = queueFilter;
  const shownKind = kindFilter;
  list.filter(
    (job) => viewShows(shownFilter, shownQueue, job, shownKind),
    (rows, paged) => countText(shownFilter, rows, paged),
  );
  showQueueFilter();
  showStateNote();
  showBacklog();
  listed = new Set();
  listedTo = undefined;
  olderToken = "";
  olderLeft = false;
  firstPageIn = false;
  lookedPastEmpty = false;
  listedAll = false;
  trimmedFailed = false;
  unendedLetGo = false;
  showCapped();
  listing++;
  showOlder();
  jobsConfirm.reset();
  const refusedHere = tenantReason(tenant);
  if (refusedHere !== "" || !mayAskWithoutToken()) {
    detail.filtered(batch, kindFilter);
    renderBatch();
    if (refusedHere !== "") {
      // Nothing is sent for a tenant the server would refuse, or one the
      // page cannot watch ("*": see tenantReason).
      showStatus({ kind: "refused", reason: refusedHere, byPage: true });
    } else if (infoHeard) {
      showStatus({ kind: "unauthenticated", reason: "a bearer token is required" });
    } else {
      feedWaits = true;
      showStatus({ kind: "connecting" });
    }
    refreshActions();
    return;
  }
  // The batch's counts: from the feed, and from ListJobs once the feed's
  // stream is synced (the feed starts with the most recent jobs only).
  const counting =
    batch === ""
      ? undefined
      : new BatchProgress(jobClient, tenant, batch, () => {
          if (progress === counting) {
            soonRender({ batch: true });
          }
        });
  progress = counting;
  setText(jobsEmpty, emptyText());
  detail.filtered(batch, kindFilter);
  renderBatch();
  refreshActions();
  const current = new JobFeed(jobClient, tenant, {
    jobs: (jobs) => {
      if (feed !== current) {
        return;
      }
      if (tenant === "" && ownTenant === "" && jobs[0] !== undefined) {
        learnOwnTenant(jobs[0].tenant);
      }
      counting?.jobs(jobs);
      const changed: string[] = [];
      for (const job of jobs) {
        unconfirmed?.delete(job.id);
        // A job the book has already (a GetJob for the detail answered
        // first, before the page knew its tenant) still needs its row.
        if (book.merge(job) || !list.has(job.id)) {
          changed.push(job.id);
        }
      }
      if (changed.length > 0) {
        soonRender({ jobs: changed });
      }
    },
    deleted: (ids) => {
      if (feed === current) {
        dropDeleted(ids);
      }
    },
    startedOver: () => {
      if (feed !== current) {
        return;
      }
      // The server may have gone back (a database restored from an older
      // copy): what it answers from now on is taken whatever its version.
      book.startOver();
      if (unconfirmed === undefined) {
        unconfirmed = new Set(book.newestFirst().map((job) => job.id));
      }
    },
    synced: () => {
      if (feed === current) {
        counting?.synced();
        if (unconfirmed !== undefined) {
          void dropVanished(unconfirmed);
        }
      }
    },
    status: (s) => {
      if (feed !== current) {
        return;
      }
      if (s.kind === "denied" && tenant !== "") {
        // The token is good, for another tenant: show its own, and say
        // which one was refused, rather than ask for a token again.
        deniedTenant = tenant;
        if (sessionStorage.getItem(tenantKey) === tenant) {
          // Remembered, it would be asked for and refused again at each
          // load of this tab, the field showing the token's own.
          rememberTenant(sessionStorage, "");
        }
        tenant = "";
        ownTenant = "";
        tenantRefused = true;
        showTenantName();
        select("");
        startFeed();
        return;
      }
      if (s.kind === "refused" || s.kind === "denied" || s.kind === "unauthenticated") {
        counting?.refuse(s.reason);
      }
      if (s.kind === "refused") {
        // What ListJobs answered for a view the server will not watch
        // would stay on screen frozen, as if live, and the actions on
        // the view would act on it: it goes.
        dropView();
      }
      showStatus(s);
    },
  }, { batch });
  feed = current;
  current.start();
  void listOlder(true);
}

// A burst of changes (a bulk action's thousands, in responses of up to 50
// jobs) is drawn once per frame, not once per response: the book takes
// each response at once, and the list, the details, the buttons and the
// batch's line follow at the next frame (or within 100 ms where the
// browser draws no frames, as in a tab in the background).
let renderJobs = new Set<string>();
let renderBatchSoon = false;
let renderFrame = 0;
let renderTimer: ReturnType<typeof setTimeout> | undefined;

function soonRender(what: { jobs?: Iterable<string>; batch?: boolean }): void {
  for (const id of what.jobs ?? []) {
    renderJobs.add(id);
  }
  renderBatchSoon ||= what.batch === true;
  if (renderTimer !== undefined) {
    return;
  }
  renderFrame = requestAnimationFrame(renderNow);
  renderTimer = setTimeout(renderNow, 100);
}

function renderNow(): void {
  cancelAnimationFrame(renderFrame);
  clearTimeout(renderTimer);
  renderTimer = undefined;
  const changed = renderJobs;
  renderJobs = new Set();
  if (renderBatchSoon) {
    renderBatchSoon = false;
    renderBatch();
  }
  if (changed.size === 0) {
    return;
  }
  // The book is trimmed first, so that a job it lets go at once (one of
  // thousands queued in a burst) never gets a row.
  const failedBefore = book.count(JobState.FAILED);
  const kept = (id: string) => listed.has(id);
  const unended = book.trimUnended(maxUnendedShown, detail.shown, kept);
  const trimmed = [...book.trim(maxEndedShown, detail.shown, kept), ...unended.map((job) => job.id)];
  if (trimmed.some((id) => list.has(id))) {
    rewindOlder();
  }
  list.remove(trimmed);
  trimmedFailed ||= book.count(JobState.FAILED) < failedBefore;
  if (!unendedLetGo && unended.some((job) => viewShows(stateFilter, queueFilter, job, kindFilter))) {
    unendedLetGo = true;
    showCapped();
  }
  list.render(book, changed);
  if (list.size === 0) {
    // What it says may name the kinds the page holds.
    showEmptyText();
  }
  lookPastEmpty();
  refreshDetail();
  refreshActions();
  jobsConfirm.recheck();
  soonPollQueues();
}

// viewPage is ListJobs' request for a page of the view on screen (its
// tenant, batch, states, queue and kind) from pageToken ("" for its first).
function viewPage(pageSize: number, pageToken: string): MessageInitShape<typeof ListJobsRequestSchema> {
  return { tenant, batch, queue: queueFilter, kind: kindFilter, states: statesOf(stateFilter), pageSize, pageToken, view: JobView.SUMMARY };
}

// listOlder reads the view's first page with ListJobs (first), or on
// request its next: with a state filter, the jobs of those states
// however old; without one, the jobs older than the stream's first page.
// A page whose jobs are all shown already (the view read again from its
// start, past the jobs kept) is followed by the next at once, so that a
// click shows more whenever there is more. It reports whether it read
// them (for the view still on screen).
async function listOlder(first = false): Promise<boolean> {
  const view = listing;
  olderButton.disabled = true;
  setText(olderNote, first ? "" : "loading…");
  try {
    let added = 0;
    let more: boolean;
    do {
      const rewound = rewinds;
      const era = book.era;
      const res = await jobClient.listJobs(viewPage(first ? firstPageSize : olderPageSize, olderToken));
      if (view !== listing) {
        return false;
      }
      if (tenant === "" && ownTenant === "" && res.jobs[0] !== undefined) {
        learnOwnTenant(res.jobs[0].tenant);
      }
      const changed: string[] = [];
      const fresh: string[] = [];
      for (const job of res.jobs) {
        if (list.aboveTop(job)) {
          // Newer than the rows kept (a view read again from its start).
          continue;
        }
        listed.add(job.id);
        if (deeper(job, listedTo)) {
          listedTo = job;
        }
        const shown = list.has(job.id);
        if (book.merge(job, era) || !shown) {
          changed.push(job.id);
        }
        if (!shown) {
          fresh.push(job.id);
        }
      }
      list.render(book, changed);
      added += fresh.filter((id) => list.has(id)).length;
      if (!first) {
        list.pagedBack();
        keepToBound();
      }
      if (rewound !== rewinds) {
        // The book let go of a job of the view meanwhile: the next click
        // reads the view again from its start.
        break;
      }
      olderToken = res.nextPageToken;
      olderLeft = olderToken !== "";
      listedAll = !olderLeft;
      more = !first && added === 0 && olderLeft;
    } while (more);
    setText(olderNote, "");
    refreshActions();
    return true;
  } catch (err) {
    if (view !== listing) {
      return false;
    }
    const refused = refusalOf(err);
    if (refusesName("queue", queueFilter, refused.code, refused.rawMessage)) {
      refuseFilter({ queue: queueFilter }, refused.rawMessage);
      return false;
    }
    if (refusesName("kind", kindFilter, refused.code, refused.rawMessage)) {
      refuseFilter({ ofKind: kindFilter }, refused.rawMessage);
      return false;
    }
    // The stream's own banner says when the server cannot be reached or
    // refuses the token; this says only that the page is short.
    setText(olderNote, `older jobs could not be read: ${unreachable(err) ? "the server cannot be reached" : callNames(refusalOf(err).rawMessage)}`);
    return false;
  } finally {
    if (view === listing) {
      olderButton.disabled = false;
      showOlder();
      if (first) {
        firstPageIn = true;
        reveal();
      }
      lookPastEmpty();
    }
  }
}

// unconfirmed holds, while the feed starts over (see
// FeedListener.startedOver), the jobs the page had then that neither the
// fresh stream nor the view's first page read again has brought back.
let unconfirmed: Set<string> | undefined;
// refills numbers the calls of dropVanished: one that a later one (after
// another start over) took over from stops where it is.
let refills = 0;

// refillParallel is how many GetJob calls dropVanished has on their way
// at once: the browser's six connections to the server are shared by
// every tab, and the page's streams hold one or two of them.
const refillParallel = 4;

// dropVanished reads the view again, as a reload would, once the feed
// that started over is synced, down to the last job the page had listed
// (its first page and the older pages asked for: the list's own window),
// and then looks for the other jobs of left (the jobs the page held when
// it started over): those it held only because they changed (an old job
// of a backlog a worker took) may be far older than the list, and the
// view read down to them would list every job between, which the page
// never showed. It reads on past the jobs listed only while a page holds
// many of them, taking those and no other, and asks for the rest by id
// (see refill.ts). It takes off the screen the jobs of left that no read
// nor the stream brought back: a server restarted on an empty or
// restored database no longer has them and never names them as deleted.
// The jobs it reads refresh the rows kept, and bring those that came
// while the page could not hear of them, so the list is the one it was
// before the outage (the bounds trim it as ever). The job shown is asked
// for again (it may be older than what is read): its details say so if
// the server no longer has it (fetchFull).
async function dropVanished(left: Set<string>): Promise<void> {
  const view = listing;
  const refill = ++refills;
  const current = () => view === listing && refill === refills && left === unconfirmed;
  const listedBefore = listed;
  const lastListed = listedTo;
  listed = new Set();
  listedTo = undefined;
  olderToken = "";
  olderLeft = false;
  listedAll = false;
  readBack = new Set();
  // A list that let its newest rows go shows them again, as a reload
  // would.
  list.fromNewest();
  const windowRead = (await listOlder(true)) && current() ? await readBackTo(lastListed, listedBefore, current) : undefined;
  const read = windowRead !== undefined && current() ? await readHeld(left, windowRead, current) : undefined;
  if (!current()) {
    return;
  }
  if (read === undefined) {
    // Without the view read again, the jobs the page held may still be
    // the server's: they stay until it can be read.
    unconfirmed = undefined;
    readBack = new Set();
    return;
  }
  const { gone, older } = sortUnread(unreadOf(left), read);
  // Only the older jobs with a row (or the one shown) are asked for:
  // the others (of another state than the list shows, say) show nowhere.
  const ask: string[] = [];
  for (const job of older) {
    (list.has(job.id) || job.id === selected ? ask : gone).push(job.id);
  }
  const era = book.era;
  const answers = await readEach(ask, getSummary, refillParallel, current);
  if (!current()) {
    return;
  }
  unconfirmed = undefined;
  readBack = new Set();
  const changed: string[] = [];
  for (const job of answers.found) {
    if (listedBefore.has(job.id)) {
      listed.add(job.id);
    }
    if (book.merge(job, era)) {
      changed.push(job.id);
    }
  }
  soonRender({ jobs: changed });
  // A job the stream brought meanwhile is the server's.
  const vanished = [...gone, ...answers.missing].filter((id) => left.has(id));
  if (vanished.length === 0) {
    return;
  }
  // Dropped, not forgotten as deleted ones are: the server may come
  // back on the database that has them, and its stream bring them again.
  for (const id of vanished) {
    if (id !== selected) {
      book.drop(id);
    }
  }
  list.remove(vanished);
  if (vanished.includes(selected)) {
    fetchFull(selected);
  }
  refreshActions();
  refreshDetail();
  soonPollQueues();
}

// unreadOf is the jobs of held (ids) the page still has that no read of
// the view since the feed started over brought back (the stream's take
// themselves out of held).
function unreadOf(held: Set<string>): Job[] {
  return [...held].flatMap((id) => {
    const job = listed.has(id) || readBack.has(id) ? undefined : book.get(id);
    return job === undefined ? [] : [job];
  });
}

// getSummary is GetJob's answer for id as the list keeps it, or undefined
// where the server has no such job.
async function getSummary(id: string): Promise<Job | undefined> {
  try {
    return summaryOf(await client.getJob(id));
  } catch (err) {
    if (refusalOf(err).code === Code.NotFound) {
      return undefined;
    }
    throw err;
  }
}

// readBack holds the ids dropVanished's reads of the view brought back.
let readBack = new Set<string>();

// maxReadBack bounds how many jobs readBackTo reads past the view's first
// page, and readHeld past those: more than the list keeps (maxRowsShown,
// maxUnendedShown and maxEndedShown); the jobs of a list paged further
// back are asked for by id.
const maxReadBack = 5000;

// A read of the view again, and the page token it goes on with.
type ReadOn = ReadTo & { token: string };

// A page readPages read, as its reader took it: the jobs to draw again,
// the job it read down to, whether it went past what it looks for (the
// page is read again from its start by what comes next: its token is
// not taken), and whether the next page is worth reading.
type PageTaken = { changed: string[]; to: Job | undefined; past?: boolean; next: boolean };

// readPages reads the view's pages from from's token on, for
// dropVanished, while goOn (given the job read down to) says to and
// maxReadBack jobs have not been read, giving each page's jobs to take,
// which merges those it wants (era: the book's when the page was asked
// for). It reports how far it read, or undefined if it could not (or
// current says the view it read for is no longer wanted).
async function readPages(
  from: ReadOn,
  goOn: (to: Job | undefined) => boolean,
  take: (jobs: readonly Job[], era: number, to: Job | undefined) => PageTaken,
  current: () => boolean,
): Promise<ReadOn | undefined> {
  let { to, token } = from;
  let read = 0;
  while (token !== "" && read < maxReadBack && goOn(to)) {
    let res;
    const era = book.era;
    try {
      res = await jobClient.listJobs(viewPage(500, token));
    } catch {
      return undefined;
    }
    if (!current()) {
      return undefined;
    }
    const taken = take(res.jobs, era, to);
    soonRender({ jobs: taken.changed });
    read += res.jobs.length;
    to = taken.to;
    if (taken.past) {
      break;
    }
    token = res.nextPageToken;
    if (!taken.next) {
      break;
    }
  }
  return { all: token === "", to, token };
}

// readBackTo reads the view's pages after its first (listOlder's), down
// to last (the last job listed before: undefined, none) and no further
// (upTo), or maxReadBack jobs, merging every job it reads: those held
// are refreshed, those the stream did not bring (made during the outage)
// come in, and the bounds trim the list as ever. A job of wasListed (a
// page the user asked for) is listed again. Show older jobs goes on from
// where it stopped: a page read in part is read again, past the jobs
// shown. It reports how far it read, or undefined if it could not (or
// current says the view it read for is no longer wanted).
async function readBackTo(last: Job | undefined, wasListed: Set<string>, current: () => boolean): Promise<ReadOn | undefined> {
  const from = { all: olderToken === "", to: listedTo, token: olderToken };
  const read = await readPages(
    from,
    () => last !== undefined,
    (page, era, to) => {
      const { jobs, past } = upTo(page, last!);
      const changed: string[] = [];
      for (const job of jobs) {
        readBack.add(job.id);
        to = job;
        if (wasListed.has(job.id)) {
          listed.add(job.id);
        }
        if (book.merge(job, era) || !list.has(job.id)) {
          changed.push(job.id);
        }
      }
      return { changed, to, past, next: true };
    },
    current,
  );
  if (read === undefined) {
    return undefined;
  }
  if (read.to !== from.to) {
    list.pagedBack();
  }
  listedTo = read.to;
  olderToken = read.token;
  olderLeft = read.token !== "";
  listedAll = !olderLeft;
  showOlder();
  return read;
}

// readHeld reads on past the jobs readBackTo read (from its token), for
// the jobs of held that no read has brought back yet (held only because
// they changed), taking those and no other: the jobs between, which the
// page never listed, stay out. It goes on while a page holds many of
// them (worthNextPage: a bulk change the page saw), and only while some
// may be further down; dropVanished asks for the others by id. Show
// older jobs still goes on from where readBackTo stopped. It reports how
// far it read, or undefined if it could not.
async function readHeld(held: Set<string>, from: ReadOn, current: () => boolean): Promise<ReadTo | undefined> {
  const further = (to: Job | undefined) => unreadOf(held).some((job) => to === undefined || createdNs(job) <= createdNs(to));
  return readPages(
    from,
    further,
    (jobs, era, to) => {
      const changed: string[] = [];
      let found = 0;
      for (const job of jobs) {
        if (!held.has(job.id) || listed.has(job.id) || readBack.has(job.id)) {
          continue;
        }
        found++;
        readBack.add(job.id);
        if (book.merge(job, era)) {
          changed.push(job.id);
        }
      }
      return { changed, to: jobs.at(-1) ?? to, next: worthNextPage(found, jobs.length) };
    },
    current,
  );
}

// refuseFilter shows the server's refusal of the queue or kind the list
// is narrowed to (a name its rule refuses) as the page shows a stream the
// server refused: no list, a banner in the server's words, no action on
// the view. The feed stops too: nothing it brings could be of the view.
// Clearing the filter (or another queue or kind) starts the view afresh.
function refuseFilter(which: { queue: string } | { ofKind: string }, reason: string): void {
  feed?.stop();
  feed = undefined;
  progress?.refuse(reason);
  dropView();
  showStatus({ kind: "refused", reason, ...which });
}

// dropView takes the view's jobs off the screen, and drops the answers
// of ListJobs still on their way for it: the feed will not show it live.
function dropView(): void {
  listing++;
  unendedLetGo = false;
  showCapped();
  book.clear();
  list.clear();
  renderJobs.clear();
  listed = new Set();
  listedTo = undefined;
  olderToken = "";
  olderLeft = false;
  listedAll = false;
  olderButton.disabled = false;
  setText(olderNote, "");
  showOlder();
  jobsConfirm.withdraw();
  refreshActions();
}

// keepToBound lets the list's newest rows go past maxRowsShown, and the
// book the jobs of those (but the one whose details show): the stream
// may bring them again, but the list shows none above the rows it kept
// until Show newer jobs starts the view afresh.
function keepToBound(): void {
  const dropped = list.keepOldest(maxRowsShown, book);
  for (const id of dropped) {
    listed.delete(id);
    if (id !== detail.shown) {
      book.drop(id);
    }
  }
  if (dropped.length > 0) {
    showOlder();
  }
}

// rewindOlder makes Show older jobs read the view again from its first
// page: the book let go of a job of the view (trim), which may be newer
// than the next page's jobs.
function rewindOlder(): void {
  rewinds++;
  olderToken = "";
  olderLeft = true;
  listedAll = false;
  showOlder();
}

// queuesLeftOut is the queues ListQueues' last answer left out.
let queuesLeftOut = 0;

// showBacklog puts after the list's count how many jobs the tenant has
// queued and running in all, where the queue panel tells it (an admin's
// page): the list's rows may be a few of them. A batch's or an ended
// state's jobs are not counted there.
function showBacklog(): void {
  // Nor a kind's.
  const counted = batch === "" && kindFilter === "" && (stateFilter === "all" || stateFilter === "waiting" || stateFilter === "running");
  const name = shownTenant();
  // Narrowed to a queue, the count is the tenant's in that queue only.
  list.setBacklog(counted && name !== "" ? tenantBacklogText(queuesKnown.values(), queuesLeftOut, name, queueFilter) : "");
}

// showCapped says, while the list has let go of jobs of the view that
// have not ended, that it shows only some, and how to see the others.
function showCapped(): void {
  cappedNote.hidden = !unendedLetGo;
  if (!unendedLetGo) {
    return;
  }
  const narrower =
    stateFilter === "all" ? "pick a state under Show, open a batch," : batch === "" ? "open a batch," : "page with Show older jobs,";
  setText(
    cappedNote,
    `More jobs have not ended than the page keeps: it shows ${number(maxUnendedShown)} of them, those running first, then the newest. ` +
      `To see others, ${narrower} or run jobwatch list.`,
  );
}

// showStateNote says, while the address names a state the page does not
// know, that the list shows all jobs instead, and which states there
// are: a typo in a link must not pass for a filter.
function showStateNote(): void {
  const unknown = unknownState(new URL(location.href));
  stateNote.hidden = unknown === "";
  setText(stateNote, unknown === "" ? "" : unknownStateText(unknown));
}

// showOlder offers the next page while there is one, and the view's
// start again while the list has let it go.
function showOlder(): void {
  olderButton.hidden = !olderLeft;
  newerBar.hidden = !list.windowed;
}

// lookedPastEmpty: the list was empty while Show older jobs was offered,
// and the page read on as that click would: once, until the list shows
// a job again.
let lookedPastEmpty = false;

// lookPastEmpty reads on past an empty list that offers Show older jobs,
// as a click would, so that an empty list never sits beside the button:
// its jobs may all have left the view (retried, deleted, changed state)
// since the server's token said there were more, or been let go by the
// book's bounds. The older jobs show, or the button goes and the list
// says, in its filter's words, that there are none.
function lookPastEmpty(): void {
  if (list.size > 0) {
    lookedPastEmpty = false;
    return;
  }
  if (lookedPastEmpty || !olderLeft || olderButton.disabled || !firstPageIn || feedStatus.kind !== "live") {
    return;
  }
  lookedPastEmpty = true;
  void listOlder();
}

// showBatch filters the list to the jobs of name ("" shows every job
// again), as a new entry in the browser's history, so Back returns to the
// list as it was. The job shown stays shown.
function showBatch(name: string): void {
  if (name === batch) {
    return;
  }
  batch = name;
  history.pushState(null, "", urlWithBatch(new URL(location.href), name, tenant));
  filterChanged();
}

// showQueue narrows the list to the jobs of queue name ("" shows every
// queue's again), as a new entry in the browser's history, as showBatch
// does. fromPanel: asked from the queue panel, which on a narrow screen
// sits below the list: the list is brought into view.
function showQueue(name: string, fromPanel = false): void {
  if (fromPanel) {
    const head = byId("jobs-title");
    if (head.getBoundingClientRect().top < 0) {
      head.scrollIntoView({ block: "start" });
    }
  }
  if (name === queueFilter) {
    return;
  }
  queueFilter = name;
  history.pushState(null, "", urlWithQueue(new URL(location.href), name, tenant));
  filterChanged();
}

// showKind narrows the list to the jobs of kind name ("" shows every
// kind's again), as a new entry in the browser's history, as showQueue
// does.
function showKind(name: string): void {
  if (name === kindFilter) {
    return;
  }
  kindFilter = name;
  history.pushState(null, "", urlWithKind(new URL(location.href), name, tenant));
  filterChanged();
}

// showQueueFilter shows the queue and the kind the list is narrowed to
// beside Show, and points the queue panel's links at the list as it is
// now.
function showQueueFilter(): void {
  queueChip.hidden = queueFilter === "";
  setText(queueChipName, queueFilter);
  queueChip.title = queueFilter === "" ? "" : `the list shows the jobs of queue ${queueFilter} only`;
  queues.relink(queueFilter);
  kindChip.hidden = kindFilter === "";
  setText(kindChipName, kindFilter);
  kindChip.title = kindFilter === "" ? "" : `the list shows the jobs of kind ${kindFilter} only`;
}

function filterChanged(): void {
  stateSelect.value = stateFilter;
  startFeed();
  // The stream of another filter may not bring the job shown: ask for it,
  // so the detail keeps following it.
  if (selected !== "") {
    fetchFull(selected);
  }
}

// renderBatch shows the batch's summary line, or hides it with no batch.
function renderBatch(): void {
  if (progress === undefined) {
    batchBar.hide();
    return;
  }
  const status = progress.status;
  batchBar.show(progress.batch, status.kind, progress.progress(), status.kind === "counted" ? progress.tally.counts() : undefined, queueFilter, kindFilter);
  refreshActions();
}

// failedOfView is how many failed jobs the view has, where the page knows
// it: the batch's counts, or the book once ListJobs has read every job of
// the view (all of them, or all its failed ones) and it has let none go;
// undefined where it does not.
function failedOfView(): number | undefined {
  // The batch's counts are the whole batch's, in every queue: they are
  // not a queue's.
  if (progress !== undefined && queueFilter === "" && kindFilter === "") {
    return progress.status.kind === "counted" ? (progress.tally.counts().byState.get(JobState.FAILED) ?? 0) : undefined;
  }
  if (listedAll && !trimmedFailed && !list.windowed && (stateFilter === "all" || stateFilter === "failed")) {
    // Only those with a row: a job opened by a link from another tenant
    // or batch is in the book too.
    return book.count(JobState.FAILED, (id) => list.has(id));
  }
  return undefined;
}

// failedHeld is how many failed jobs of the view's queue and kind (any,
// with no such filter) the page holds: the stream brings every queue's.
function failedHeld(): number {
  return book.count(JobState.FAILED, (id) => {
    const job = book.get(id);
    return job !== undefined && viewShows("all", queueFilter, job, kindFilter);
  });
}

// failedText says how many jobs Retry all failed is about: the exact
// count where the page knows it, else how many it holds, and that older
// ones count too.
function failedText(): string {
  const exact = failedOfView();
  if (exact !== undefined) {
    return `That is ${exact === 1 ? "1 job" : `${exact.toLocaleString("en-US")} jobs`}.`;
  }
  const count = failedHeld();
  const others = list.windowed ? "other" : "older";
  if (count === 0) {
    return `None is shown here: any ${others} failed jobs of the view, if there are some.`;
  }
  const held = count.toLocaleString("en-US");
  return stateFilter === "all" || stateFilter === "failed" ? `${held} shown here, and any ${others} ones.` : `${held} known to this page, and any ${others} ones.`;
}

const statusText: Record<FeedStatus["kind"], string> = {
  connecting: "connecting…",
  live: "live",
  paused: "paused while out of sight",
  reconnecting: "reconnecting…",
  unauthenticated: "token needed",
  denied: "not allowed",
  refused: "not watching",
};

// showEmptyText says what the job list says while it has no job (it is
// hidden while it has one).
function showEmptyText(): void {
  // Nothing could be read: the list is not "no jobs yet".
  const blocked = feedStatus.kind === "unauthenticated" || feedStatus.kind === "denied" || feedStatus.kind === "refused";
  setText(jobsEmpty, blocked ? "Nothing shown: see the message above." : emptyText());
}

function showStatus(s: FeedStatus): void {
  feedStatus = s;
  if (s.kind === "live") {
    feedHeard = true;
    serverAnswered();
  }
  clearTimeout(slowConnectTimer);
  slowConnect = false;
  if (s.kind === "connecting") {
    slowConnectTimer = setTimeout(() => {
      if (feedStatus === s) {
        slowConnect = true;
        renderBanner(Date.now());
      }
    }, slowConnectMs);
  }
  setData(statusEl, "status", s.kind);
  setText(statusEl, s.kind === "unauthenticated" && savedToken() !== "" ? "token refused" : statusText[s.kind]);
  statusEl.title =
    s.kind === "paused"
      ? "Out of sight, this tab let go of its connection to the server, so other tabs have it: the list shows nothing new until the tab is shown again, and then catches up."
      : "";
  showEmptyText();
  if (s.kind === "unauthenticated" || s.kind === "denied") {
    tokenForm.hidden = false;
    tokenInput.focus();
  }
  refreshActions();
  renderBanner(Date.now());
}

// The banner says plainly that what is shown may be stale, and when the
// page tries again. The countdown is outside the live region, so a screen
// reader announces the news once, not a number every second.
function renderBanner(now: number): void {
  const s = feedStatus;
  if (s.kind === "connecting" && slowConnect) {
    setText(
      bannerText,
      `No answer from the server in ${slowConnectMs / 1000}s. A browser opens at most six connections to one server ` +
        "and shares them among its tabs; each jobwatch tab in sight holds one or two, and one out of sight lets go of " +
        "its own after a few seconds. If other jobwatch tabs of this server are open in other windows, close some: " +
        "until a connection is free, this tab's calls wait, actions included.",
    );
    setText(bannerWhen, "");
  } else if (s.kind === "reconnecting") {
    setText(bannerText, `Reconnecting… ${s.reason}. The jobs below show the last known state.`);
    const secs = Math.max(0, Math.ceil((s.retryAt - now) / 1000));
    setText(bannerWhen, secs === 0 ? `Trying now (attempt ${s.attempt}).` : `Next try in ${secs}s (attempt ${s.attempt}).`);
  } else if (s.kind === "unauthenticated" && savedToken() !== "") {
    setText(bannerText, `The server does not take this token: ${s.reason}. Enter another token.`);
    setText(bannerWhen, "");
  } else if (s.kind === "unauthenticated") {
    // With no tenant named, which one the page shows depends on the token
    // still to come (a client token's own): name none yet.
    const of = shownTenant() === "" ? "" : ` for ${tenantLabel()}`;
    setText(bannerText, `The server wants a token${of}: ${s.reason}`);
    setText(bannerWhen, "");
  } else if (s.kind === "denied" && /worker token/.test(s.reason)) {
    // A worker token has no tenant to show: it claims and runs jobs.
    setText(bannerText, `A worker token claims and runs jobs; it may not show them (${callNames(s.reason)}). Enter a client or admin token.`);
    setText(bannerWhen, "");
  } else if (s.kind === "denied") {
    setText(bannerText, `This token may not show ${tenantLabel()}: ${callNames(s.reason)}. Enter another token.`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused" && s.byPage === true) {
    setText(bannerText, `The page does not ask for tenant “${tenant}”: ${s.reason}. Enter another tenant.`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused" && s.ofKind !== undefined) {
    setText(bannerText, `The server will not list kind “${s.ofKind}” of ${tenantLabel()}: ${s.reason}. Show all kinds.`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused" && s.queue !== undefined) {
    setText(bannerText, `The server will not list queue “${s.queue}” of ${tenantLabel()}: ${s.reason}. Show all queues, or pick one in the queue panel.`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused" && batch !== "") {
    setText(bannerText, `The server will not watch batch “${batch}” of ${tenantLabel()}: ${s.reason}. Show all jobs, or enter another tenant.`);
    setText(bannerWhen, "");
  } else if (s.kind === "refused") {
    setText(bannerText, `The server will not watch ${tenantLabel()}: ${s.reason}. Enter another tenant.`);
    setText(bannerWhen, "");
  } else if (deniedTenant !== "") {
    setText(bannerText, `This token may not use tenant “${deniedTenant}”: showing ${tenantLabel()}, the token's own.`);
    setText(bannerWhen, "");
  }
  const trouble =
    s.kind === "reconnecting" || s.kind === "unauthenticated" || s.kind === "denied" || s.kind === "refused" || (s.kind === "connecting" && slowConnect);
  const shown = trouble || ((s.kind === "live" || s.kind === "paused") && deniedTenant !== "");
  setData(banner, "kind", trouble ? s.kind : "note");
  banner.hidden = !shown;
}

// callNames puts a call's name where the server's refusal names its
// path: "may not call WatchJobs", not "/jobwatch.v1.JobService/WatchJobs".
function callNames(reason: string): string {
  return reason.replace(/\/jobwatch\.v1\.\w+\/(\w+)/g, "$1");
}

// dropDeleted takes jobs deleted, here or on any other page, out of the
// list and its counts; the details of one of them say it was deleted.
function dropDeleted(ids: string[]): void {
  progress?.deleted(ids);
  for (const id of ids) {
    book.forget(id);
    detail.deleted(id);
  }
  list.remove(ids);
  refreshActions();
  // What the details say of another job (the one that held a unique
  // key) may no longer hold.
  refreshDetail();
  soonPollQueues();
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
// fetches numbers the GetJob calls of fetchFull: a refusal that comes after
// a newer call began (one with another token) is not the news.
let fetches = 0;

// select shows job id's details ("" hides them). byKeyboard (Enter on
// its row) takes the keyboard into them: Escape brings it back to the
// row.
function select(id: string, byKeyboard = false): void {
  selected = id;
  setText(openNote, "");
  full = undefined;
  list.select(id);
  // The address follows the job shown with #job=; a ?job= it was opened
  // with goes, or a reload would open that job again.
  const url = urlWithoutJob(new URL(location.href));
  url.hash = id === "" ? "" : `#job=${encodeURIComponent(id)}`;
  if (url.href !== location.href) {
    history.replaceState(null, "", url);
  }
  revealing = id;
  if (id === "") {
    detail.hide();
    return;
  }
  const job = book.get(id);
  if (job !== undefined) {
    detail.show(job, book, undefined);
    if (byKeyboard) {
      detail.focus();
    }
  }
  reveal();
  // Also for a job older than the stream's first page, or a link from
  // elsewhere: its answer puts the job in the book.
  fetchFull(id);
}

// revealing is the job whose details are to be brought into view once
// they show: at once for a job the page has, when GetJob answers for one
// it has not (a link, an id typed), and again once the view's first page
// is in (firstPageIn), whose rows, above the details in one column, push
// them down.
let revealing = "";
let firstPageIn = false;

// reveal brings the details of the job selected into view, if they show
// it. In one column (a narrow window) the details sit below the whole
// list, and in two at the top of the page, above a row far down the
// list: a click on a row, or a link opened, would otherwise seem to do
// nothing.
function reveal(): void {
  if (revealing === "" || detail.shown !== revealing) {
    return;
  }
  if (firstPageIn) {
    revealing = "";
  }
  // Rows waiting for the next frame go in first: laid out after the
  // measure, above the details in one column, they would push them out
  // of view, the page still at its top (no scroll to anchor to).
  renderNow();
  const panel = byId("detail");
  const top = panel.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight * 0.8) {
    panel.scrollIntoView({ block: "start" });
  }
}

function fetchFull(id: string): void {
  if (fetching === id || !mayAskWithoutToken()) {
    // Without a token, before GetServerInfo has said the server needs
    // none: startWaiting asks, or the token's entry (select).
    return;
  }
  fetching = id;
  const call = ++fetches;
  // An answer read with another token than the one in use now is not
  // this one's to show (nor to end the fetch of the same job with it).
  const token = savedToken();
  const era = book.era;
  client.getJob(id).then(
    (job) => {
      if (savedToken() !== token) {
        return;
      }
      if (fetching === id) {
        fetching = "";
      }
      if (era !== book.era) {
        // Asked before the feed started over: the answer may be the
        // server's before it went back (a database restored from an
        // older copy). Ask the server as it is now.
        if (selected === id) {
          fetchFull(id);
        }
        return;
      }
      // The server's answer now: whatever the page heard of the job
      // before it started over (a later version, a deletion on a
      // database the server has since left), the book takes it.
      adopt(job, era);
      if (selected === id) {
        full = job;
        refreshDetail(id);
        reveal();
      }
    },
    (err) => {
      if (call !== fetches || savedToken() !== token) {
        return;
      }
      if (fetching === id) {
        fetching = "";
      }
      if (refusalOf(err).code === Code.NotFound && detail.shown === id) {
        // The job shown is not on the server (any more): its details
        // say so, without buttons, rather than offer actions that fail.
        // Dropped, not forgotten: a deletion the stream names forgets it,
        // and a server back on the database that has it brings it again.
        book.drop(id);
        list.remove([id]);
        detail.deleted(id, "The server has no such job: it was deleted, or the server now runs on another database.");
        refreshActions();
        return;
      }
      showError(`Job ${id}`, err, id);
      // A link or an id typed that opens nothing: the details of the job
      // shown before must not stand in for it, and the box says why.
      if (selected === id && detail.shown !== id) {
        detail.hide();
        list.select("");
        setText(openNote, `No job ${id} to show: ${unreachable(err) ? "the server cannot be reached" : aboutJob(id, refusalOf(err).rawMessage)}`);
      }
    },
  );
}

// adopt merges a job from a unary answer (GetJob, CancelJob, SubmitJob)
// into what the stream keeps, as a summary; askedIn is the book's era
// when the call was sent (see JobBook). It gets a row only while its
// tenant (and batch, while the list shows one) is the one on screen: the
// answer may arrive after the user switched tenants, or come from a link
// to another tenant's job (its details still show).
function adopt(job: Job, askedIn = book.era): boolean {
  const onScreen = job.tenant === shownTenant();
  if (onScreen) {
    progress?.jobs([job]);
  }
  if (!book.merge(summaryOf(job), askedIn)) {
    return false;
  }
  if (onScreen && (batch === "" || job.batch === batch)) {
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
  // A new state or attempt brings a result or an entry of the history
  // (a run's end, a retry): ask for them. So does a version lower than
  // the answer's: the server went back (a database restored from an
  // older copy), and the history shown may hold what it no longer has.
  if (shownFull !== undefined && (shownFull.state !== job.state || shownFull.attempt !== job.attempt || shownFull.version > job.version)) {
    fetchFull(id);
  }
}

// refreshActions shows the buttons as the jobs on screen and what the
// token may do allow.
function refreshActions(): void {
  // Where the view has older jobs the page has not read, some of them may
  // have failed: the button stays, and its question says "any older ones".
  // So may the newer jobs the list let go.
  const unread = (!listedAll || list.windowed) && (stateFilter === "all" || stateFilter === "failed");
  const failed = failedOfView() ?? (unread ? undefined : failedHeld());
  // A view the page does not show live (the server refused its stream,
  // or the page would not send it) has nothing to act on.
  const notLive = feedStatus.kind === "refused" || feedStatus.kind === "denied" || feedStatus.kind === "unauthenticated" || feedWaits;
  retryFailed.set(
    refusal("retry-failed") ||
      (retryingAll
        ? "retrying every failed job: see below"
        : notLive
          ? "the list is not live: see the message above"
          : failed === 0
            ? "no failed job in this view"
            : ""),
  );
  detail.refreshActions(book.get(detail.shown));
  queues.refreshActions();
}

// act runs an operator's action; a refusal the server gives for the
// token's role (permission_denied) or for its own age (unimplemented)
// disables that action, with the reason, until the token changes.
async function act(action: Action, what: string, run: () => Promise<Said>, jobId = ""): Promise<Said> {
  try {
    return await run();
  } catch (err) {
    throw actionError(action, what, err, jobId);
  } finally {
    // The stream may have brought the change before the answer did: draw
    // it now, so the question's outcome finds the buttons as they are
    // (the one that asked gone or not) when it places the keyboard.
    if (renderTimer !== undefined) {
      renderNow();
    }
  }
}

// actionError is what an action's outcome says of err, for an action on
// job jobId ("" for one on a queue or on many jobs).
function actionError(action: Action, what: string, err: unknown, jobId = ""): Error {
  if (err instanceof ActionError) {
    // Said already in the page's words (retryAllFailed's).
    return err.whole ? err : new ActionError(`${what}: ${err.message}`, err.staleWhen);
  }
  if (unreachable(err)) {
    // True until the server next answers the page.
    const at = answered;
    return new ActionError(`${what}: ${unreachableText(action)}`, () => answered > at);
  }
  const e = refusalOf(err);
  if (e instanceof PermissionDeniedError) {
    refusals.refuse(action, `not with this token: ${e.rawMessage}`);
  } else if (e.code === Code.Unimplemented) {
    refusals.refuse(action, "this server cannot do that yet");
  } else if (e instanceof UnauthenticatedError) {
    tokenForm.hidden = false;
  }
  refreshActions();
  if (e instanceof QuotaExceededError) {
    // The server's words are a program's ("wait for some to start or
    // end"), the tenant quoted as in Go.
    return new Error(`${what}: ${quotaRefusedText(e)}`);
  }
  if (e instanceof AlreadyActiveError && e.activeJobId !== "") {
    // A retry of a job whose unique key another job took meanwhile:
    // name that job, and what to do.
    // True until that job ends or goes (as the page sees it: the list
    // shows the jobs of the tenant), or this job changes: the refusal
    // then says nothing of what Retry would do now. A holder the page
    // does not have (another batch's, while the list shows one) leaves
    // the message until this job changes or the user acts again.
    const holder = e.activeJobId;
    const heldBy = book.get(holder) !== undefined;
    const version = book.get(jobId)?.version;
    return new ActionError(
      `${what}: job ${holder} holds the unique key “${e.uniqueKey}” and has not ended: retry this job once that one has ended, or cancel that one first.`,
      () => {
        const now = book.get(holder);
        const ended = heldBy && (now === undefined || isTerminal(now.state));
        return ended || book.get(jobId)?.version !== version;
      },
    );
  }
  return new Error(`${what}: ${e.rawMessage || e.codeName}`);
}

// refusalOf is err as the library's JobwatchError (one of its classes for
// the refusals the page handles by name), whether it came from one of the
// library's typed calls or from a generated client's; anything else (the
// network, a bug) counts as unknown, with its message.
function refusalOf(err: unknown): JobwatchError {
  const e = toJobwatchError(err);
  if (e instanceof JobwatchError) {
    return e;
  }
  const ce = ConnectError.from(e);
  return new JobwatchError(ce.code, ce.rawMessage, { cause: e });
}

// retryAllFailed retries every failed job in view (the tenant on
// screen's, or the batch's shown; of the queue the list is narrowed to,
// only: see retryFailedFilter), a page (at most 1,000 jobs) per call,
// as RetryJobs allows. Only jobs created before the click are looked at,
// so the call ends. The tenant's max_queued stops it: the page says in
// its own words how many of the jobs matched so far were retried (the
// pages before, and the one the quota stopped, from its BulkStopped),
// and when to retry again; the pages after would be held back the same
// way, as the view is one tenant's. Another refusal partway says what
// the pages before it did; its own message says what its page did.
// After each page it reports how far it has got: of total, where the
// page knew how many there were.
async function retryAllFailed(total: number | undefined, report: (progress: string) => void): Promise<string> {
  const filter = retryFailedFilter(tenant, batch, queueFilter, new Date(), kindFilter);
  let matched = 0n;
  let changed = 0n;
  let pageToken = "";
  do {
    try {
      const res = await jobClient.retryJobs({ filter, pageToken });
      matched += res.matched;
      changed += res.changed;
      pageToken = res.nextPageToken;
      if (pageToken !== "") {
        report(total === undefined || BigInt(total) < matched ? `Retrying… ${number(matched)} done so far.` : `Retrying… ${number(matched)} of ${number(total)} done.`);
      }
    } catch (err) {
      const quota = refusalOf(err);
      if (quota instanceof QuotaExceededError) {
        const stopped = bulkStoppedOf(err);
        throw new ActionError(retryHeldText(changed + (stopped?.changed ?? 0n), matched + (stopped?.matched ?? 0n), quota), () => false, true);
      }
      if (matched > 0n && unreachable(err)) {
        const at = answered;
        throw new ActionError(
          `the server cannot be reached; the pages before it retried ${number(changed)} of ${number(matched)}. Try again once the page is live.`,
          () => answered > at,
        );
      }
      if (matched > 0n) {
        const e = refusalOf(err);
        throw new JobwatchError(e.code, `${e.rawMessage} (the pages before it retried ${number(changed)} of ${number(matched)})`, { cause: err });
      }
      throw err;
    }
  } while (pageToken !== "");
  return retriedText(changed, matched, viewLabel());
}

function number(n: number | bigint): string {
  return n.toLocaleString("en-US");
}

// viewLabel names what the job list shows, for a sentence: the tenant,
// or a batch or queue of it.
function viewLabel(): string {
  return viewLabelOf(tenantLabel(), batch, queueFilter, kindFilter);
}

// answered counts the times the server answered the page after it could
// not be reached or on a poll (the stream live again, ListQueues): an
// outcome that said the server could not be reached goes once it grows.
let answered = 0;

function serverAnswered(): void {
  answered++;
  jobsConfirm.recheck();
  refreshDetail();
  queues.refreshActions();
}

let errorTimer: ReturnType<typeof setTimeout> | undefined;

// showError says what failed, and why, for a few seconds; a failure of a
// call on one job (jobId) names the job in what, and its reason the id
// no second time.
function showError(what: string, err: unknown, jobId = ""): void {
  const e = refusalOf(err);
  if (e instanceof UnauthenticatedError) {
    tokenForm.hidden = false;
  }
  setText(errorEl, `${what}: ${unreachable(err) ? "the server cannot be reached" : aboutJob(jobId, e.rawMessage) || e.codeName}`);
  errorEl.hidden = false;
  clearTimeout(errorTimer);
  errorTimer = setTimeout(() => (errorEl.hidden = true), 6000);
}

// infoAsked numbers the GetServerInfo calls: only the latest one's
// answer (the token now in use) may set access. infoHeard: that answer
// has come, so access is what the server said of the token.
let infoAsked = 0;
let infoHeard = false;
// infoFailed: GetServerInfo failed (the server cannot be reached, say),
// so the feed starts without its answer: its banner says what is wrong,
// and tries again.
let infoFailed = false;

// loadServerInfo asks the server, with the page's token, whether it
// needs one, who the token is (caller: set by a server that runs with
// tokens for a token it knows), and whether it runs the demo. The queues
// are asked for once it has answered, if the token may read them.
async function loadServerInfo(): Promise<void> {
  const asked = ++infoAsked;
  try {
    const info = await jobClient.getServerInfo({});
    if (asked !== infoAsked) {
      return;
    }
    callerName = info.caller?.name ?? "";
    if (info.caller !== undefined) {
      access = { kind: "token", role: info.caller.role };
      // The tenant on screen, named before any job arrives: a client's
      // own, or for a token confined to none (an admin's) the default
      // tenant, which the server reads an empty tenant as.
      if (tenant === "" && ownTenant === "") {
        learnOwnTenant(info.caller.tenant || (info.caller.role === "admin" ? "default" : ""));
      }
    } else if (info.authRequired && savedToken() === "") {
      access = { kind: "none" };
    } else {
      access = info.authRequired ? { kind: "unknown" } : { kind: "open" };
    }
    infoHeard = true;
    refreshActions();
    tokenForm.hidden = !info.authRequired && savedToken() === "";
    startWaiting();
    if (info.demo && info.demoKinds.length > 0) {
      demoKind.replaceChildren(...info.demoKinds.map((k) => new Option(k, k)));
      demoForm.hidden = false;
    }
    void pollQueues();
  } catch (err) {
    if (asked !== infoAsked) {
      return;
    }
    if (refusalOf(err) instanceof UnauthenticatedError) {
      tokenForm.hidden = false;
      if (feedWaits) {
        showStatus({ kind: "unauthenticated", reason: refusalOf(err).rawMessage });
      }
      return;
    }
    infoFailed = true;
    startWaiting();
    setTimeout(() => {
      if (asked === infoAsked) {
        void loadServerInfo();
      }
    }, queuePollMs);
  }
}

// startWaiting starts the feed and the view's first page where they
// waited for GetServerInfo's answer, and asks for the job linked; where
// the server needs a token the page has not, it asks for none of them:
// each call would be refused.
function startWaiting(): void {
  if (feedWaits) {
    startFeed(true);
  }
  if (selected !== "" && detail.shown !== selected) {
    fetchFull(selected);
  }
}

let queueTimer: ReturnType<typeof setTimeout> | undefined;
// deniedBy is ListQueues' refusal of the page's token (permission_denied:
// its role; unauthenticated: a token the server does not know), after
// which the page asks for the queues and schedules no more until the
// token changes: asking again would only be refused again.
let deniedBy: JobwatchError | undefined;
let queueCalls = 0;
let queueShown = 0;

// queuesWithheld is why the page does not ask for the queues and
// schedules, which take an admin token (or a server without tokens), as
// the queue panel's note says it ("" to say nothing); undefined when it
// asks. It asks for none before GetServerInfo has said what the token is,
// none without a token where the server needs one, none for a token of
// another role or one the server does not know, and none once ListQueues
// refused the token: each call
// would be refused, every few seconds, for as long as the page is open.
function queuesWithheld(): string | undefined {
  if (deniedBy !== undefined) {
    return queuesRefused(deniedBy);
  }
  if (!infoHeard) {
    return "";
  }
  if (access.kind === "none") {
    return "seeing and pausing queues takes an admin token: enter one";
  }
  if (access.kind === "token" && access.role !== "admin") {
    return `seeing and pausing queues takes an admin token; this is a ${access.role} token`;
  }
  if (access.kind === "unknown") {
    // GetServerInfo said the server needs a token and named no caller
    // for this one: it does not know it (the page is its own, so not
    // one too old to say).
    return "seeing and pausing queues takes an admin token; the server does not know this one";
  }
  return undefined;
}

// pollQueues may run twice at once (the timer and a job change); only an
// answer to a later call than the one on screen is shown, so a call that
// failed while the server restarted cannot overwrite a fresh answer. The
// schedules come with the queues, at the same pace.
async function pollQueues(): Promise<void> {
  clearTimeout(queueTimer);
  const note = byId("queues-note");
  const withheld = queuesWithheld();
  if (withheld !== undefined) {
    setText(note, withheld);
    return;
  }
  queueTimer = setTimeout(() => void pollQueues(), queuePollMs);
  const call = ++queueCalls;
  void pollSchedules(call);
  try {
    const res = await queueClient.listQueues({});
    if (call > queueShown) {
      queueShown = call;
      queuesKnown = new Map(res.queues.map((q) => [q.name, q]));
      queues.render(res.queues, Date.now());
      showEmptyText(); // it may name the tenants with work
      setText(note, queuesLeftOutText(res.queues.length, res.queuesLeftOut));
      queuesLeftOut = res.queuesLeftOut;
      showBacklog();
      serverAnswered();
    }
  } catch (err) {
    const refusal = refusalOf(err);
    // A call older than the one on screen, or than the last token
    // change (forgetQueues), was refused another token: it says
    // nothing of this one.
    if (call > queueShown && (refusal.code === Code.PermissionDenied || refusal.code === Code.Unauthenticated)) {
      // Neither the token's role nor whether the server knows it will
      // change by asking again; and what an answer to it showed before
      // (a token revoked, or its role changed) is no longer its to see.
      deniedBy = refusal;
      clearTimeout(queueTimer);
      forgetQueues();
    }
    if (call > queueShown) {
      queueShown = call;
      setText(note, queuesRefused(refusal));
    }
  }
}

// queuesRefused says why ListQueues answered err: in the words of the
// page's buttons once GetServerInfo has named the token's role.
function queuesRefused(err: JobwatchError): string {
  if (err.code === Code.Unknown || err.code === Code.Unavailable) {
    return "server unreachable; retrying";
  }
  if (err.code === Code.PermissionDenied && access.kind === "token") {
    return `seeing and pausing queues takes an admin token; this is a ${access.role} token`;
  }
  return err.rawMessage;
}

let schedulesShown = 0;

// forgetQueues takes the queues and schedules off the page, and drops the
// answers of the calls still on their way: made with a token, they show
// what the page's token now may not see.
function forgetQueues(): void {
  queuesKnown = new Map();
  queueShown = queueCalls;
  schedulesShown = queueCalls;
  queues.clear();
  schedules.clear();
  showBacklog();
  refreshDetail();
}

// pollSchedules shows ListSchedules. A server without schedules support
// (unimplemented) has none, and a token refused them may see none; any
// other failure keeps what is shown, and the queues' note already says
// when the server cannot be reached.
async function pollSchedules(call: number): Promise<void> {
  try {
    const res = await queueClient.listSchedules({});
    if (call > schedulesShown) {
      schedulesShown = call;
      schedules.render(res.schedules, Date.now());
    }
  } catch (err) {
    const code = refusalOf(err).code;
    if (call > schedulesShown && (code === Code.Unimplemented || code === Code.PermissionDenied || code === Code.Unauthenticated)) {
      schedulesShown = call;
      schedules.clear();
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
  // An empty field asks for the caller's own tenant again.
  const next = tenantInput.value.trim();
  if (next === shownTenant() && deniedTenant === "") {
    return;
  }
  tenant = next;
  ownTenant = "";
  deniedTenant = "";
  tenantRefused = false;
  showTenantName();
  // A tenant the page refuses (tenantReason) is not kept for a reload.
  rememberTenant(sessionStorage, tenantReason(tenant) === "" ? tenant : "");
  // A ?tenant= in the address would bring the old tenant back on reload;
  // a batch is a tenant's, so another tenant shows all its jobs.
  batch = "";
  const url = urlWithBatch(new URL(location.href), "", tenant);
  if (url.searchParams.has("tenant")) {
    if (tenant === "") {
      url.searchParams.delete("tenant");
    } else {
      url.searchParams.set("tenant", tenant);
    }
  }
  url.hash = "";
  if (url.href !== location.href) {
    history.replaceState(null, "", url);
  }
  select("");
  startFeed();
});
tenantInput.addEventListener("change", () => tenantForm.requestSubmit());
// Escape on the list closes the details a click on a row opened (the
// row keeps the keyboard), as Escape in them does.
byId("jobs").addEventListener("keydown", (e) => {
  if (e.key === "Escape" && detail.shown !== "") {
    e.preventDefault();
    closeDetail();
  }
});
// Escape withdraws the question the details ask, if any; the next one
// closes them.
byId("detail").addEventListener("keydown", (e) => {
  if (e.key === "Escape" && !detail.dismissQuestion()) {
    closeDetail();
  }
});

tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const before = savedToken();
  saveToken(tokenInput.value.trim());
  const changed = savedToken() !== before;
  // A job the page was opened on (a link) that the last token could not
  // read is asked for again with this one, below.
  const unread = selected !== "" && detail.shown !== selected ? selected : "";
  // GetJob answers on their way were read with the last token, and
  // what was refused to it ("a bearer token is required") is moot.
  fetching = "";
  clearTimeout(errorTimer);
  errorEl.hidden = true;
  if (changed && detail.shown !== "") {
    // The details the last token opened are its own to see: they close,
    // and the stream of their log with them.
    select("");
  }
  // What the last token could do says nothing of this one: ask again.
  access = { kind: "unknown" };
  callerName = "";
  infoHeard = false;
  infoFailed = false;
  refusals.clear();
  deniedBy = undefined;
  // The queues and schedules shown are the last token's to see: they go,
  // and come back only if GetServerInfo says this one may read them.
  forgetQueues();
  setText(byId("queues-note"), "");
  refreshActions();
  // A new token may be for another tenant: a tenant it was refused is
  // asked for again.
  if (deniedTenant !== "") {
    tenant = deniedTenant;
    deniedTenant = "";
  }
  ownTenant = "";
  showTenantName();
  startFeed();
  void loadServerInfo();
  if (unread !== "") {
    select(unread);
  } else if (detail.shown !== "") {
    // The same token again, as after the server refused it and was given
    // it back: the log takes up where the refusal stopped it, and the
    // job is read again, as the feed, started afresh, may not bring it.
    detail.resumeLog();
    fetchFull(detail.shown);
  }
});

demoForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const button = byId<HTMLButtonElement>("demo-submit");
  button.disabled = true;
  const asked = tenant;
  client
    .submitJob({ tenant, kind: demoKind.value })
    .then(
      (job) => {
        // The server resolves an empty tenant as WatchJobs does: the
        // answer names the tenant on screen. The user may have switched
        // tenants while the call ran.
        if (tenant === "" && ownTenant === "" && asked === "") {
          learnOwnTenant(job.tenant);
        }
        if (job.tenant === shownTenant()) {
          adopt(job);
          select(job.id);
        }
      },
      (err) => showError("Submit", err),
    )
    .finally(() => (button.disabled = false));
});

// Ages and countdowns move each second while the page is in sight; a tab
// out of sight does nothing, and catches up as it is shown again.
function tick(): void {
  if (document.visibilityState === "hidden") {
    return;
  }
  const now = Date.now();
  list.tick(now);
  queues.tick(now);
  schedules.tick(now);
  renderBanner(now);
}
setInterval(tick, 1000);
document.addEventListener("visibilitychange", tick);

// Back and Forward move between the filters (showBatch, showQueue,
// showKind and the state menu add an entry in the history for each).
window.addEventListener("popstate", () => {
  const next = batchFromURL(new URL(location.href));
  const nextState = stateFilterFromURL(new URL(location.href));
  const nextQueue = queueFromURL(new URL(location.href));
  const nextKind = kindFromURL(new URL(location.href));
  if (next !== batch || nextState !== stateFilter || nextQueue !== queueFilter || nextKind !== kindFilter) {
    batch = next;
    stateFilter = nextState;
    queueFilter = nextQueue;
    kindFilter = nextKind;
    filterChanged();
  }
  // Back from ?state=bogus to the list of all jobs changes no filter.
  showStateNote();
  const shown = linkedJob();
  if (shown !== selected) {
    select(shown);
  }
});

// linkedJob is the job the address shows (?job=ID or #job=ID), "" for
// none.
function linkedJob(): string {
  return linkedJobFromURL(new URL(location.href));
}

stateSelect.replaceChildren(...stateFilters.map((f) => new Option(f.label, f.value)));
stateSelect.value = stateFilter;
stateSelect.addEventListener("change", () => {
  const next = stateSelect.value as StateFilter;
  if (next === stateFilter) {
    return;
  }
  stateFilter = next;
  history.pushState(null, "", urlWithState(new URL(location.href), next));
  filterChanged();
});
byId("queue-filter-clear").addEventListener("click", () => {
  // The button goes with the filter: the keyboard stays on the list's
  // tools, on Show.
  const hadKeyboard = document.activeElement === byId("queue-filter-clear");
  showQueue("");
  if (hadKeyboard) {
    stateSelect.focus();
  }
});
byId("kind-filter-clear").addEventListener("click", () => {
  const hadKeyboard = document.activeElement === byId("kind-filter-clear");
  showKind("");
  if (hadKeyboard) {
    stateSelect.focus();
  }
});
olderButton.addEventListener("click", () => void listOlder());
// The view from its start, as the Show menu starts one: the stream's
// fresh start and first page bring the newest jobs as they are now.
newerButton.addEventListener("click", () => filterChanged());
// The box opens any job of the tenant by its id, in the list or not: its
// details come from GetJob.
openForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const id = openInput.value.trim();
  if (id !== "") {
    select(id);
  }
});

showTenantName();
tokenInput.value = savedToken();
startFeed();
void loadServerInfo();
if (linkedJob() !== "") {
  select(linkedJob());
}
