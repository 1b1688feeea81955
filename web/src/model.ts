// What the page knows about jobs: the latest snapshot of each, merged by
// version, and the states the page saw each job pass through.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { JobState, type Job, type JobAttempt } from "./gen/jobwatch/v1/jobwatch_pb";

export interface Sighting {
  state: JobState;
  attempt: number;
  at: Date; // the browser's clock when the snapshot arrived
}

// A deleted job's id is remembered (at most this many, the latest) so
// that a snapshot still on its way (a GetJob or RetryJob answer sent
// before the deletion) cannot bring the job back.
const maxGone = 10_000;

// Versions only go up on one database, but a server restarted on its
// database restored from an older copy has the jobs the page holds at
// lower versions (or at the same ones, reached by other changes), and
// never says so. The book counts eras: startOver begins one where the
// feed starts over (after an outage, or a token refused), as the server
// may have gone back. Within an era the higher version wins; a snapshot
// asked for in a later era than the one the book's was (or its deletion
// was) heard in is the server's answer now, and is taken whatever its
// version; one asked for in an earlier era (an answer still on its way
// from before the outage) changes nothing.
export class JobBook {
  private readonly jobs = new Map<string, Job>();
  private readonly seen = new Map<string, Sighting[]>();
  // heardIn is the era of each job's snapshot in jobs; gone is the era
  // of each deletion remembered.
  private readonly heardIn = new Map<string, number>();
  private readonly gone = new Map<string, number>();
  private eraNow = 0;

  // era is the current era: a caller that merges the answer to a call
  // passes the era it was asked in (read before the call is sent).
  get era(): number {
    return this.eraNow;
  }

  // startOver begins a new era: the server may have gone back to an
  // older state, and the next snapshot of each job asked for from now
  // on is taken as the truth.
  startOver(): void {
    this.eraNow++;
  }

  // merge keeps the higher version: a resumed stream may repeat a
  // snapshot, and a late one must never overwrite a newer one; a deleted
  // job stays deleted. Across eras, the later one wins (see JobBook).
  // askedIn is the era the snapshot was asked for in (the current one for
  // the stream's). It reports whether the snapshot changed anything.
  merge(job: Job, askedIn = this.eraNow): boolean {
    const deletedIn = this.gone.get(job.id);
    if (deletedIn !== undefined) {
      if (askedIn <= deletedIn) {
        return false;
      }
      this.gone.delete(job.id);
    }
    const have = this.jobs.get(job.id);
    if (have !== undefined) {
      const heard = this.heardIn.get(job.id) ?? 0;
      if (askedIn < heard || (askedIn === heard && have.version >= job.version)) {
        return false;
      }
    }
    this.jobs.set(job.id, job);
    this.heardIn.set(job.id, askedIn);
    const sightings = this.seen.get(job.id) ?? [];
    const last = sightings.at(-1);
    if (last === undefined || last.state !== job.state || last.attempt !== job.attempt) {
      sightings.push({ state: job.state, attempt: job.attempt, at: new Date() });
      this.seen.set(job.id, sightings);
    }
    return true;
  }

  get(id: string): Job | undefined {
    return this.jobs.get(id);
  }

  sightings(id: string): readonly Sighting[] {
    return this.seen.get(id) ?? [];
  }

  // newestFirst orders as ListJobs does: by creation, then id.
  newestFirst(): Job[] {
    // Each job's time is read once, not at every comparison: the list
    // orders thousands of jobs in a burst of changes.
    return [...this.jobs.values()]
      .map((job) => ({ job, at: millis(job.createdAt) }))
      .sort((a, b) => b.at - a.at || (a.job.id < b.job.id ? 1 : a.job.id > b.job.id ? -1 : 0))
      .map((e) => e.job);
  }

  // trim forgets the ended jobs older than the newest max of them (never
  // keep, or those kept reports true for: jobs the user asked for, which
  // do not count), so a page left open for days stays small. Jobs that
  // have not ended are not trimmed here (see trimUnended), and never
  // count: however many wait, the newest ended jobs stay. An ended job never changes again, so it
  // cannot come back through the stream. It returns the ids forgotten,
  // newest first.
  trim(max: number, keep: string, kept: (id: string) => boolean = () => false): string[] {
    const trimmable = (job: Job) => isTerminal(job.state) && job.id !== keep && !kept(job.id);
    let ended = 0;
    for (const job of this.jobs.values()) {
      if (trimmable(job)) {
        ended++;
      }
    }
    if (ended <= max) {
      return []; // without ordering the book, as each burst of changes asks
    }
    const removed: string[] = [];
    let newer = 0;
    for (const job of this.newestFirst()) {
      if (!trimmable(job) || ++newer <= max) {
        continue;
      }
      this.jobs.delete(job.id);
      this.heardIn.delete(job.id);
      this.seen.delete(job.id);
      removed.push(job.id);
    }
    return removed;
  }

  // trimUnended lets go of the jobs that have not ended past the max most
  // relevant of them (never keep, or those kept reports true for, which
  // do not count): running jobs first, then the newest by creation. A
  // queue that fills faster than workers take from it would otherwise
  // bring every job into the page. A job let go is dropped, not
  // forgotten: the stream brings it again when it changes (claimed, or
  // ended), and this lets it go again if it is still not among the max.
  // It returns the jobs let go.
  trimUnended(max: number, keep: string, kept: (id: string) => boolean = () => false): Job[] {
    const candidates: Job[] = [];
    for (const job of this.jobs.values()) {
      if (!isTerminal(job.state) && job.id !== keep && !kept(job.id)) {
        candidates.push(job);
      }
    }
    if (candidates.length <= max) {
      return [];
    }
    const running = (job: Job) => (job.state === JobState.RUNNING ? 0 : 1);
    const removed = candidates
      .map((job) => ({ job, rank: running(job), at: millis(job.createdAt) }))
      .sort((a, b) => a.rank - b.rank || b.at - a.at || (a.job.id < b.job.id ? 1 : a.job.id > b.job.id ? -1 : 0))
      .slice(max)
      .map((e) => e.job);
    for (const job of removed) {
      this.drop(job.id);
    }
    return removed;
  }

  // drop lets go of a job the list no longer shows, without holding it
  // deleted (as forget does): the stream or a page read may bring it back.
  drop(id: string): void {
    this.jobs.delete(id);
    this.heardIn.delete(id);
    this.seen.delete(id);
  }

  // forget drops a job that was deleted, for good: it reports whether
  // the book had it.
  forget(id: string): boolean {
    this.gone.delete(id);
    this.gone.set(id, this.eraNow);
    if (this.gone.size > maxGone) {
      this.gone.delete(this.gone.keys().next().value!);
    }
    this.seen.delete(id);
    this.heardIn.delete(id);
    return this.jobs.delete(id);
  }

  // count is how many jobs in the book are in state (of those in reports
  // true for, if given).
  count(state: JobState, within?: (id: string) => boolean): number {
    let n = 0;
    for (const job of this.jobs.values()) {
      if (job.state === state && (within === undefined || within(job.id))) {
        n++;
      }
    }
    return n;
  }

  clear(): void {
    this.jobs.clear();
    this.seen.clear();
    this.heardIn.clear();
    this.gone.clear();
  }
}

// summaryOf is job as the feed sends it: without payload and result, which
// only the detail shows (from its own GetJob), so the book stays small.
export function summaryOf(job: Job): Job {
  return { ...job, payload: undefined, result: undefined };
}

export function compareNewestFirst(a: Job, b: Job): number {
  const d = millis(b.createdAt) - millis(a.createdAt);
  if (d !== 0) {
    return d;
  }
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

// Place is where a job sorts in the list, as ListJobs orders: newest
// first by creation, then by id.
export interface Place {
  at: number;
  id: string;
}

export function placeOf(job: Job): Place {
  return { at: millis(job.createdAt), id: job.id };
}

// sortsBefore reports whether a comes before b, newest first.
export function sortsBefore(a: Place, b: Place): boolean {
  return a.at > b.at || (a.at === b.at && a.id > b.id);
}

// keepOldest is what a list of rows (rows: their places, newest first)
// lets go of to hold at most max: the newest beyond max, so the older
// page just read stays in sight. top is the newest row kept, above which
// the list shows nothing more (undefined when nothing goes).
export function keepOldest(rows: readonly Place[], max: number): { drop: string[]; top: Place | undefined } {
  const over = rows.length - max;
  if (over <= 0) {
    return { drop: [], top: undefined };
  }
  return { drop: rows.slice(0, over).map((p) => p.id), top: rows[over] };
}

export function millis(ts: Timestamp | undefined): number {
  return ts === undefined ? 0 : timestampDate(ts).getTime();
}

export function isTerminal(s: JobState): boolean {
  return s === JobState.SUCCEEDED || s === JobState.FAILED || s === JobState.CANCELLED || s === JobState.LOST;
}

export function stateName(s: JobState): string {
  return (JobState[s] ?? "unknown").toLowerCase();
}

// maxHistory is how many entries of its history the server keeps for a
// job (Job.attempts: the last 20; jobtype.MaxHistory).
export const maxHistory = 20;

// historyGap says what a job's history (GetJob's attempts, oldest first)
// no longer holds, "" where nothing shows that anything was dropped.
// Attempts are numbered from 1, a retry keeping the count going, and
// each run that ended has an entry: a first entry about run 8 means those
// of runs 1 to 7 are no longer kept, and a first entry that is an action
// on the job after run 8 (a retry: it has no start) means run 8's is not
// kept either. A full history that starts before any run may have lost
// entries too (a job cancelled and retried before it ever ran), which
// the entries cannot tell.
export function historyGap(history: readonly Pick<JobAttempt, "attempt" | "startedAt">[]): string {
  const first = history[0];
  if (first === undefined) {
    return "";
  }
  const n = millis(first.startedAt) > 0 ? first.attempt - 1 : first.attempt;
  if (n > 0) {
    return `… ${n.toLocaleString("en-US")} earlier ${n === 1 ? "attempt" : "attempts"} not kept (a job keeps the last ${maxHistory} entries of its history)`;
  }
  if (history.length >= maxHistory) {
    return `… earlier entries, if any, not kept (a job keeps the last ${maxHistory} entries of its history)`;
  }
  return "";
}
