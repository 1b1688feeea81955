// What the page reads again once its feed has started over after an
// outage (see FeedListener.startedOver): the view, with ListJobs, down to
// the last job the page had listed (its first page and the older pages
// asked for), and no further; and each older job it held only because
// that job changed (a worker took an old job of a backlog): past the
// jobs listed, the view's next pages while they hold many of those (a
// bulk change the page saw), then one GetJob each. Reading the view down
// to the oldest of them would list every job between, which the page
// never showed: an old job of a backlog 25 minutes deep brought a
// thousand queued jobs into a list of fifty. The jobs the page held that
// no read brings back are the ones the server no longer has.
// web/test/refill.test.ts tests it in Node.
import type { Job } from "./gen/jobwatch/v1/jobwatch_pb";

// createdNs is when job was created, in nanoseconds. ListJobs orders by
// it (at the store's precision), then by the order the jobs were stored
// in, which the page cannot see: not by id, as a batch's jobs share their
// time. So where two jobs were created at the same time, only the
// server's order says which is further down the view.
export function createdNs(job: Job): bigint {
  const t = job.createdAt;
  return t === undefined ? 0n : t.seconds * 1_000_000_000n + BigInt(t.nanos);
}

// deeper reports whether job, read after last (in the server's order, or
// in a later read of the view), is as far down the view as last or
// further: the job it was read after, if any, is then the one the list
// goes down to.
export function deeper(job: Job, last: Job | undefined): boolean {
  return last === undefined || createdNs(job) <= createdNs(last);
}

// upTo is the jobs of page (a page of the view, in the server's order)
// down to last, the last job listed before: those created after it, and
// those created at its time up to it (at its time, others may come after
// it in the server's order, which the page never listed). past: the page
// goes on beyond last (a job created before it, or last itself), so the
// view read again ends here. A last the server no longer has ends the
// read at the first job created before its time.
export function upTo(page: readonly Job[], last: Job): { jobs: Job[]; past: boolean } {
  const at = createdNs(last);
  const jobs: Job[] = [];
  for (const job of page) {
    if (createdNs(job) < at) {
      return { jobs, past: true };
    }
    jobs.push(job);
    if (job.id === last.id) {
      return { jobs, past: true };
    }
  }
  return { jobs, past: false };
}

// denseShare: a page of the view read past the jobs listed, for the jobs
// held only because they changed, is worth the next page while at least
// this share of it is such jobs (a bulk change the page saw: a batch
// submitted, a bulk retry); below it the rest are asked for one by one,
// as a backlog between them would be read through for nothing.
export const denseShare = 0.1;

// worthNextPage reports whether, after a page of read jobs of which
// found were jobs held only because they changed, the next page is worth
// reading for the others.
export function worthNextPage(found: number, read: number): boolean {
  return read > 0 && found >= read * denseShare;
}

// ReadTo is how far the view was read again: to its end (all), or down
// to the job to (undefined: nothing was read).
export interface ReadTo {
  all: boolean;
  to: Job | undefined;
}

// sortUnread sorts the jobs the page held that no read of the view
// brought back (unread) by where they sort: those created after what was
// read are no longer the view's (gone: the server does not have them, or
// they left the view), and the others (older: created before it, or at
// its time, where only the server's order tells) must be asked for by id.
export function sortUnread(unread: readonly Job[], read: ReadTo): { gone: string[]; older: Job[] } {
  const gone: string[] = [];
  const older: Job[] = [];
  const to = read.to === undefined ? undefined : createdNs(read.to);
  for (const job of unread) {
    if (read.all || (to !== undefined && createdNs(job) > to)) {
      gone.push(job.id);
    } else {
      older.push(job);
    }
  }
  return { gone, older };
}

// ReadEach is what readEach found: the jobs the server has, the ids it
// has no job of, and those it could not be asked about (the server could
// not be reached, a refusal): of these the page knows nothing new.
export interface ReadEach {
  found: Job[];
  missing: string[];
  unknown: string[];
}

// readEach asks get for each of ids, at most parallel calls at a time (a
// browser shares six HTTP/1.1 connections to the server among its tabs,
// and the page's streams hold one or two of them). get answers undefined
// for a job the server does not have (not_found). It stops asking once
// wanted says the answers are no longer wanted (the view changed); the
// ids not asked for count as unknown.
export async function readEach(
  ids: readonly string[],
  get: (id: string) => Promise<Job | undefined>,
  parallel: number,
  wanted: () => boolean = () => true,
): Promise<ReadEach> {
  const out: ReadEach = { found: [], missing: [], unknown: [] };
  let next = 0;
  const worker = async () => {
    while (next < ids.length) {
      const id = ids[next++]!;
      if (!wanted()) {
        out.unknown.push(id);
        continue;
      }
      try {
        const job = await get(id);
        if (job === undefined) {
          out.missing.push(id);
        } else {
          out.found.push(job);
        }
      } catch {
        out.unknown.push(id);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(parallel, ids.length)) }, worker));
  return out;
}
