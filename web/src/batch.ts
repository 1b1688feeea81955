// What the page shows of one batch (SubmitJobRequest.batch) while the list
// is filtered to it: how many jobs the batch has, how many ended and how,
// kept live from the feed. The feed starts with the batch's most recent
// jobs only (50), so the page counts the rest once, paging through
// ListJobs with the batch, each time the feed's stream starts afresh; from
// then on the feed brings every change. web/test/batch.test.ts tests it
// in Node.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobState, JobView, type Job } from "./gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "./api";
import { backoffMs, sleep } from "./feed";
import { isTerminal } from "./model";

// maxCountedJobs bounds what the page counts and keeps of one batch (an
// id, a state and a version each): 40 ListJobs calls at most. A batch
// larger than this is said to be so, not counted.
export const maxCountedJobs = 20_000;

// countPageSize is ListJobs' largest page.
const countPageSize = 500;

// A deleted job's id is remembered (at most this many, the latest), so
// that a ListJobs page read before the deletion cannot count it again.
const maxGone = 10_000;

// outcomes are the ways a job ends, in the order the summary names them.
const outcomes: [JobState, string][] = [
  [JobState.SUCCEEDED, "succeeded"],
  [JobState.FAILED, "failed"],
  [JobState.CANCELLED, "cancelled"],
  [JobState.LOST, "lost"],
];

export interface BatchCounts {
  total: number;
  ended: number;
  // How many jobs are in each state; a state with none is absent.
  byState: ReadonlyMap<JobState, number>;
}

// BatchTally counts one batch's jobs by state, each job once at its
// highest version seen, from the feed and ListJobs pages alike, in any
// order: a page read before a change and received after it cannot undo
// it, and a deleted job stays uncounted.
export class BatchTally {
  private readonly jobs = new Map<string, { state: JobState; version: bigint }>();
  private readonly byState = new Map<JobState, number>();
  private readonly gone = new Set<string>();
  private ended = 0;

  constructor(readonly batch: string) {}

  // merge counts job if it is of the batch and newer than what the tally
  // has; it reports whether a count changed.
  merge(job: Pick<Job, "id" | "version" | "state" | "batch">): boolean {
    if (job.batch !== this.batch || this.gone.has(job.id)) {
      return false;
    }
    const have = this.jobs.get(job.id);
    if (have !== undefined && have.version >= job.version) {
      return false;
    }
    this.jobs.set(job.id, { state: job.state, version: job.version });
    if (have?.state === job.state) {
      return false;
    }
    if (have !== undefined) {
      this.add(have.state, -1);
    }
    this.add(job.state, 1);
    return true;
  }

  // forget uncounts a deleted job, for good; it reports whether the tally
  // had it.
  forget(id: string): boolean {
    this.gone.delete(id);
    this.gone.add(id);
    if (this.gone.size > maxGone) {
      this.gone.delete(this.gone.values().next().value!);
    }
    const have = this.jobs.get(id);
    if (have === undefined) {
      return false;
    }
    this.jobs.delete(id);
    this.add(have.state, -1);
    return true;
  }

  // reset forgets every count, but not the deletions.
  reset(): void {
    this.jobs.clear();
    this.byState.clear();
    this.ended = 0;
  }

  get size(): number {
    return this.jobs.size;
  }

  counts(): BatchCounts {
    return { total: this.jobs.size, ended: this.ended, byState: new Map(this.byState) };
  }

  private add(state: JobState, n: number): void {
    const now = (this.byState.get(state) ?? 0) + n;
    if (now === 0) {
      this.byState.delete(state);
    } else {
      this.byState.set(state, now);
    }
    if (isTerminal(state)) {
      this.ended += n;
    }
  }
}

// How the count of a batch is going.
export type CountStatus =
  // Waiting for the feed, or paging through ListJobs.
  | { kind: "counting" }
  | { kind: "counted" }
  // More than maxCountedJobs: not counted.
  | { kind: "too-many"; limit: number }
  // A ListJobs call failed; the count starts again at retryAt.
  | { kind: "retrying"; reason: string; retryAt: number }
  // The server refused the count (the token, the batch's name): asking
  // again cannot help; the feed's banner says the same.
  | { kind: "refused"; reason: string };

// batchSummary is the summary line: "thumbs: 500 jobs · 312 ended (309
// succeeded, 3 failed) · 188 to go", and of those to go, how many wait
// for other jobs: "· 188 to go (1 waiting)".
export function batchSummary(batch: string, status: CountStatus, counts: BatchCounts): string {
  return `${batch}: ${batchProgress(status, counts)}`;
}

// batchProgress is the summary line after the batch's name.
export function batchProgress(status: CountStatus, counts: BatchCounts): string {
  switch (status.kind) {
    case "counting":
      return counts.total === 0 ? "counting jobs…" : `counting jobs… ${number(counts.total)} so far`;
    case "too-many":
      return `more than ${number(status.limit)} jobs, too many for this page to count`;
    case "retrying":
      return `cannot count the jobs (${status.reason}); trying again`;
    case "refused":
      return `cannot count the jobs: ${status.reason}`;
  }
  if (counts.total === 0) {
    return "no jobs";
  }
  const split = outcomes.flatMap(([state, name]) => {
    const n = counts.byState.get(state) ?? 0;
    return n === 0 ? [] : [`${number(n)} ${name}`];
  });
  const ended = split.length === 0 ? `${number(counts.ended)} ended` : `${number(counts.ended)} ended (${split.join(", ")})`;
  const jobs = counts.total === 1 ? "1 job" : `${number(counts.total)} jobs`;
  const waiting = counts.byState.get(JobState.WAITING) ?? 0;
  const toGo = `${number(counts.total - counts.ended)} to go`;
  return `${jobs} · ${ended} · ${waiting === 0 ? toGo : `${toGo} (${number(waiting)} waiting)`}`;
}

// outcomeShares are the parts of the batch's bar: each way of ending, as
// a fraction of the batch, in the summary's order.
export function outcomeShares(counts: BatchCounts): { state: JobState; share: number }[] {
  if (counts.total === 0) {
    return [];
  }
  return outcomes.map(([state]) => ({ state, share: (counts.byState.get(state) ?? 0) / counts.total }));
}

function number(n: number): string {
  return n.toLocaleString("en-US");
}

export interface BatchProgressOptions {
  pageSize?: number;
  maxJobs?: number;
  backoffMs?: (attempt: number) => number;
}

// BatchProgress keeps the counts of one batch of one tenant: the page
// passes it what the feed hears (jobs, deleted, synced), and it pages
// through ListJobs itself when told the feed is synced. onChange is
// called whenever the summary may read differently.
export class BatchProgress {
  readonly tally: BatchTally;
  private statusNow: CountStatus = { kind: "counting" };
  private pass: AbortController | undefined;
  private stopped = false;
  private readonly pageSize: number;
  private readonly maxJobs: number;
  private readonly backoffMs: (attempt: number) => number;

  constructor(
    private readonly client: Pick<JobClient, "listJobs">,
    private readonly tenant: string,
    readonly batch: string,
    private readonly onChange: () => void,
    opts: BatchProgressOptions = {},
  ) {
    this.tally = new BatchTally(batch);
    this.pageSize = opts.pageSize ?? countPageSize;
    this.maxJobs = opts.maxJobs ?? maxCountedJobs;
    this.backoffMs = opts.backoffMs ?? backoffMs;
  }

  get status(): CountStatus {
    return this.statusNow;
  }

  summary(): string {
    return batchSummary(this.batch, this.statusNow, this.tally.counts());
  }

  // progress is summary() after the batch's name.
  progress(): string {
    return batchProgress(this.statusNow, this.tally.counts());
  }

  // jobs takes a batch of the feed's jobs.
  jobs(jobs: Job[]): void {
    if (this.statusNow.kind === "too-many") {
      return;
    }
    let changed = false;
    for (const job of jobs) {
      changed = this.tally.merge(job) || changed;
    }
    if (this.tally.size > this.maxJobs) {
      // The batch grew past what the page keeps while it watched.
      this.pass?.abort();
      this.tally.reset();
      this.set({ kind: "too-many", limit: this.maxJobs });
      return;
    }
    if (changed) {
      this.onChange();
    }
  }

  deleted(ids: string[]): void {
    let changed = false;
    for (const id of ids) {
      changed = this.tally.forget(id) || changed;
    }
    if (changed) {
      this.onChange();
    }
  }

  // synced says a feed stream started afresh has sent the batch's most
  // recent jobs, and every change after that reaches jobs(): the count
  // starts over, from ListJobs pages read from now on. What the feed
  // brings meanwhile merges with them by version, so no change is lost
  // between the two and none is counted twice. (A stream that resumed
  // with its token lost nothing: the counts stand.)
  synced(): void {
    if (this.stopped) {
      return;
    }
    this.pass?.abort();
    const pass = new AbortController();
    this.pass = pass;
    this.tally.reset();
    void this.count(pass.signal);
  }

  // refuse says the feed itself was refused (the batch's name, the
  // token): there is nothing to count until the page starts anew.
  refuse(reason: string): void {
    this.stop();
    this.set({ kind: "refused", reason });
  }

  stop(): void {
    this.stopped = true;
    this.pass?.abort();
  }

  private set(status: CountStatus): void {
    this.statusNow = status;
    this.onChange();
  }

  // count pages through the batch with ListJobs until it has counted
  // every job, retrying with backoff after a failure (merging again is
  // harmless), or until signal aborts.
  private async count(signal: AbortSignal): Promise<void> {
    for (let failures = 0; !signal.aborted; failures++) {
      this.set({ kind: "counting" });
      try {
        const counted = await this.countOnce(signal);
        if (signal.aborted) {
          return;
        }
        if (!counted) {
          this.tally.reset();
          this.set({ kind: "too-many", limit: this.maxJobs });
          return;
        }
        this.set({ kind: "counted" });
        return;
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        const ce = ConnectError.from(err);
        if (ce.code === Code.Unauthenticated || ce.code === Code.PermissionDenied || ce.code === Code.InvalidArgument) {
          this.set({ kind: "refused", reason: ce.rawMessage });
          return;
        }
        const wait = this.backoffMs(failures);
        const reason = ce.code === Code.Unknown || ce.code === Code.Unavailable ? "the server cannot be reached" : ce.rawMessage;
        this.set({ kind: "retrying", reason, retryAt: Date.now() + wait });
        await sleep(wait, signal);
      }
    }
  }

  // countOnce merges every page of the batch into the tally; it returns
  // false once the batch has more than maxJobs jobs.
  private async countOnce(signal: AbortSignal): Promise<boolean> {
    let listed = 0;
    let pageToken = "";
    do {
      const res = await this.client.listJobs(
        { tenant: this.tenant, batch: this.batch, pageSize: this.pageSize, pageToken, view: JobView.SUMMARY },
        { signal },
      );
      if (signal.aborted) {
        return true;
      }
      listed += res.jobs.length;
      if (listed > this.maxJobs) {
        return false;
      }
      for (const job of res.jobs) {
        this.tally.merge(job);
      }
      pageToken = res.nextPageToken;
      if (pageToken !== "") {
        this.onChange();
      }
    } while (pageToken !== "");
    return true;
  }
}

// batchParam is the address's query parameter that filters the list.
export const batchParam = "batch";

// batchFromURL is the batch the address filters the list to, "" for none.
export function batchFromURL(url: URL): string {
  return url.searchParams.get(batchParam) ?? "";
}

// urlWithBatch is url filtered to batch ("" clears the filter). A named
// tenant goes into the address with it, so that a shared link opens the
// same batch for someone whose page remembers another tenant; the job
// shown (the hash) stays.
export function urlWithBatch(url: URL, batch: string, tenant: string): URL {
  const next = new URL(url.href);
  if (batch === "") {
    next.searchParams.delete(batchParam);
    return next;
  }
  if (tenant !== "") {
    next.searchParams.set("tenant", tenant);
  }
  next.searchParams.set(batchParam, batch);
  return next;
}
