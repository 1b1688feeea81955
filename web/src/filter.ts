// What the list is narrowed to beyond its tenant and batch: the jobs of
// some states (?state=failed), of one queue (?queue=NAME) and of one kind
// (?kind=NAME), which the page asks the server for with ListJobs'
// states, queue and kind, never by
// filtering the jobs it happens to hold; and the job a link opens
// (?job=ID). WatchJobs takes neither filter: the stream brings every job
// of the tenant (or batch) that changes, and the page matches each one
// (viewShows) so that a job joins or leaves the list as it changes into
// or out of the view. web/test/filter.test.ts tests it in Node.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import { JobState, type Job, type JobFilterSchema } from "./gen/jobwatch/v1/jobwatch_pb";

export type StateFilter = "all" | "failed" | "running" | "waiting" | "succeeded" | "cancelled";

// stateFilters are the list's choices, in the order the menu offers them.
export const stateFilters: readonly { value: StateFilter; label: string; states: readonly JobState[] }[] = [
  { value: "all", label: "all jobs", states: [] },
  { value: "failed", label: "failed", states: [JobState.FAILED] },
  { value: "running", label: "running", states: [JobState.RUNNING] },
  { value: "waiting", label: "queued or waiting", states: [JobState.QUEUED, JobState.WAITING, JobState.PENDING] },
  { value: "succeeded", label: "succeeded", states: [JobState.SUCCEEDED] },
  { value: "cancelled", label: "cancelled or lost", states: [JobState.CANCELLED, JobState.LOST] },
];

export const stateParam = "state";
export const queueParam = "queue";
export const kindParam = "kind";
export const jobParam = "job";

// statesOf is what ListJobs is asked for: no state for "all".
export function statesOf(f: StateFilter): JobState[] {
  return [...(stateFilters.find((s) => s.value === f)?.states ?? [])];
}

// matches reports whether a job in state belongs in the list filtered to f.
export function matches(f: StateFilter, state: JobState): boolean {
  const states = statesOf(f);
  return states.length === 0 || states.includes(state);
}

export function filterLabel(f: StateFilter): string {
  return stateFilters.find((s) => s.value === f)?.label ?? "all jobs";
}

// countText is what the list's count says of its rows, rows of them,
// filtered to f: "12 most recent shown" while they are the view's
// newest; "1,973 jobs shown" once paged (Show older jobs read past the
// view's first page, and the list may have let its newest go), when
// they no longer are; "3 failed shown" with a state filter. The number is
// the rows', never the view's, which may hold many more.
export function countText(f: StateFilter, rows: number, paged: boolean): string {
  const n = rows.toLocaleString("en-US");
  if (f !== "all") {
    return `${n} ${filterLabel(f)} shown`;
  }
  return paged ? `${n} ${rows === 1 ? "job" : "jobs"} shown` : `${n} most recent shown`;
}

// stateAliases are the states an address may name that the menu offers
// together with others: ?state=queued shows the queued or waiting jobs,
// as a person typing the address means, not every job.
const stateAliases = new Map<string, StateFilter>([
  ["queued", "waiting"],
  ["pending", "waiting"],
  ["lost", "cancelled"],
]);

// stateFilterFromURL is the filter the address names (in any case, by a
// choice's value or a state it shows); anything it does not know shows
// every job.
export function stateFilterFromURL(url: URL): StateFilter {
  const v = (url.searchParams.get(stateParam) ?? "").trim().toLowerCase();
  return stateFilters.find((s) => s.value === v)?.value ?? stateAliases.get(v) ?? "all";
}

// unknownState is the state the address names (?state=) that the page
// does not know, as written; "" where it names none, or one it knows.
// The list then shows every job (stateFilterFromURL), and says why
// (unknownStateText), rather than leave a typo looking like a filter.
export function unknownState(url: URL): string {
  const v = (url.searchParams.get(stateParam) ?? "").trim();
  if (v === "" || stateFilters.some((s) => s.value === v.toLowerCase()) || stateAliases.has(v.toLowerCase())) {
    return "";
  }
  return v;
}

// stateNames are the states an address may name, in the menu's order,
// each followed by the states it shows with it.
export const stateNames: readonly string[] = stateFilters.flatMap((f) => [
  f.value,
  ...[...stateAliases].filter(([, to]) => to === f.value).map(([alias]) => alias),
]);

// unknownStateText says that the address names a state the page does not
// know (name, as written), what the list shows instead, and the states
// it knows.
export function unknownStateText(name: string): string {
  const known = stateNames.slice(0, -1).join(", ") + " or " + stateNames.at(-1);
  return `The address asks for state “${name}”, which is no state: the list shows all jobs. The states are ${known} (or pick one under Show).`;
}

// urlWithState is url filtered to f ("all" clears the parameter).
export function urlWithState(url: URL, f: StateFilter): URL {
  const next = new URL(url.href);
  if (f === "all") {
    next.searchParams.delete(stateParam);
  } else {
    next.searchParams.set(stateParam, f);
  }
  return next;
}

// queueFromURL is the queue the address narrows the list to (?queue=),
// "" for every queue. The name is taken as written: one the server's rule
// refuses is the server's to refuse (see refusesQueue), in its words, as
// for any other request.
export function queueFromURL(url: URL): string {
  return url.searchParams.get(queueParam) ?? "";
}

// kindFromURL is the kind the address narrows the list to (?kind=), ""
// for every kind, taken as written as the queue is.
export function kindFromURL(url: URL): string {
  return url.searchParams.get(kindParam) ?? "";
}

// urlWithQueue is url narrowed to queue ("" clears it); the other filters
// and the job shown (the hash) stay. A named tenant goes into the address
// with it, as with a batch, so that a link opened in another tab (the
// queue panel's) shows the same tenant's jobs.
export function urlWithQueue(url: URL, queue: string, tenant: string): URL {
  return urlNarrowed(url, queueParam, queue, tenant);
}

// urlWithKind is url narrowed to kind ("" clears it), as urlWithQueue.
export function urlWithKind(url: URL, kind: string, tenant: string): URL {
  return urlNarrowed(url, kindParam, kind, tenant);
}

function urlNarrowed(url: URL, param: string, name: string, tenant: string): URL {
  const next = new URL(url.href);
  if (name === "") {
    next.searchParams.delete(param);
    return next;
  }
  if (tenant !== "") {
    next.searchParams.set("tenant", tenant);
  }
  next.searchParams.set(param, name);
  return next;
}

// queueLink is the address of the list narrowed to queue, for a link
// that opens it (in this tab or another): the page's address with
// ?queue=, without the job shown.
export function queueLink(url: URL, queue: string, tenant: string): URL {
  const next = urlWithoutJob(urlWithQueue(url, queue, tenant));
  next.hash = "";
  return next;
}

// viewShows reports whether job belongs in the list narrowed to the
// states of f, to queue and to kind ("" for every queue, every kind).
export function viewShows(f: StateFilter, queue: string, job: Pick<Job, "state" | "queue" | "kind">, kind = ""): boolean {
  return matches(f, job.state) && (queue === "" || job.queue === queue) && (kind === "" || job.kind === kind);
}

// refusesName reports whether a ListJobs error is the server refusing
// name, the queue or kind (field) the list is narrowed to (an invalid
// name: invalid_argument, "queue: …"), which asking again cannot change.
export function refusesName(field: string, name: string, code: Code, message: string): boolean {
  return name !== "" && code === Code.InvalidArgument && message.startsWith(`${field}:`);
}

// viewLabel names what the list shows, for a sentence, with tenant the
// tenant's own label ("tenant “acme”"): "batch “b” in queue “q” of
// tenant “acme”", "kind “k” in queue “q” of tenant “acme”".
export function viewLabel(tenant: string, batch: string, queue: string, kind = ""): string {
  const parts = [kind === "" ? "" : `kind “${kind}”`, batch === "" ? "" : `batch “${batch}”`, queue === "" ? "" : `queue “${queue}”`].filter((p) => p !== "");
  return parts.length === 0 ? tenant : `${parts.join(" in ")} of ${tenant}`;
}

// noJobsText is what the empty list says when it is narrowed by state,
// batch, queue or kind ("No failed jobs in queue “q”.", "No jobs of kind
// “k” for this tenant."); "" when it is not (the page says more of a
// whole tenant with no jobs).
export function noJobsText(f: StateFilter, batch: string, queue: string, kind = ""): string {
  const what = (f === "all" ? "jobs" : `${filterLabel(f)} jobs`) + (kind === "" ? "" : ` of kind “${kind}”`);
  if (batch !== "" && queue !== "") {
    return `No ${what} of batch “${batch}” in queue “${queue}”.`;
  }
  if (batch !== "") {
    return f === "all" && kind === "" ? `No jobs in batch “${batch}” yet.` : `No ${what} in batch “${batch}”.`;
  }
  if (queue !== "") {
    return `No ${what} in queue “${queue}”.`;
  }
  return f === "all" && kind === "" ? "" : `No ${what} for this tenant.`;
}

// kindsHeldText follows the empty list of a kind (narrowed by nothing
// else) with the kinds the tenant's newest jobs are of (kinds: those the
// page holds), as a queue no job is in is followed by what the queue
// panel says: a kind mistyped in the address (in another case, say)
// shows the names there are. "" where the page holds no job.
export function kindsHeldText(kinds: Iterable<string>): string {
  const names = [...new Set(kinds)].sort();
  if (names.length === 0) {
    return "";
  }
  const quoted = names.slice(0, maxKindsSaid).map((k) => `“${k}”`);
  const more = names.length - quoted.length;
  const last = more > 0 ? `${more} more` : quoted.pop();
  const list = quoted.length === 0 ? last : `${quoted.join(", ")} and ${last}`;
  return `Kinds are matched exactly, case and all; the newest jobs are of ${names.length === 1 ? "kind" : "kinds"} ${list}.`;
}

// maxKindsSaid is how many kinds kindsHeldText names.
const maxKindsSaid = 8;

// retryFailedFilter is what Retry all failed asks RetryJobs for: the
// failed jobs of the view (its tenant, batch, queue and kind) created
// before now, so that the call ends. A list narrowed to a queue retries
// that queue's failed jobs only (and to a kind, that kind's): the
// question names the queue, and an operator working through one stuck
// queue must not restart every other queue's failures behind it.
export function retryFailedFilter(tenant: string, batch: string, queue: string, now: Date, kind = ""): MessageInitShape<typeof JobFilterSchema> {
  return {
    tenant,
    batch,
    queues: queue === "" ? [] : [queue],
    kinds: kind === "" ? [] : [kind],
    states: [JobState.FAILED],
    createdBefore: timestampFromDate(now),
  };
}

// linkedJobFromURL is the job the address opens: ?job=ID, or the older
// #job=ID the page writes as the user moves between jobs; "" for none.
export function linkedJobFromURL(url: URL): string {
  const param = url.searchParams.get(jobParam)?.trim() ?? "";
  if (param !== "") {
    return param;
  }
  const hash = /^#job=(.+)$/.exec(url.hash);
  return hash?.[1] === undefined ? "" : decodeURIComponent(hash[1]);
}

// jobLink is the address that opens job id on its own: the page's address
// with ?job=ID, and the tenant named when the page names one, so that it
// opens the same job for someone whose page remembers another tenant.
// Filters and the #job= of the page it was copied from are left out.
export function jobLink(url: URL, id: string, tenant: string): URL {
  const next = new URL(url.origin + url.pathname);
  if (tenant !== "") {
    next.searchParams.set("tenant", tenant);
  }
  next.searchParams.set(jobParam, id);
  return next;
}

// urlWithoutJob is url without the ?job= it was opened with: once the
// job shown changes, the address follows with #job= (as it always has).
export function urlWithoutJob(url: URL): URL {
  const next = new URL(url.href);
  next.searchParams.delete(jobParam);
  return next;
}
