// What the list is narrowed to beyond its tenant and batch: the jobs of
// some states (?state=failed), which the page asks the server for with
// ListJobs' states, never by filtering the jobs it happens to hold; and
// the job a link opens (?job=ID). web/test/filter.test.ts tests it in
// Node.
import { JobState } from "./gen/jobwatch/v1/jobwatch_pb";

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
