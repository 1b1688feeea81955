// The live feed of one tenant's jobs (or of one batch of them): a single
// WatchJobs stream (never one stream per job: a browser allows only six
// HTTP/1.1 connections per origin), resumed with its resume_token after
// any drop, with backoff. It carries summaries: no payload or result,
// which the list does not show (the detail fetches them with GetJob); and
// the ids of jobs deleted, wherever the deletion was made.
import { Code } from "@connectrpc/connect";
import { JobView, type Job } from "./gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "./api";
import { followStream, pageVisibility, whenShown, type StreamEnd, type Visibility } from "./stream";

export type FeedStatus =
  | { kind: "connecting" }
  | { kind: "live" }
  // The tab is out of sight and let go of its stream (see Visibility in
  // stream.ts): the list follows nothing until the tab is shown, and
  // then catches up from where it stopped.
  | { kind: "paused" }
  | { kind: "reconnecting"; attempt: number; retryAt: number; reason: string }
  | { kind: "unauthenticated"; reason: string }
  // The server knows the token but it may not watch this tenant (a
  // client token of another tenant, a worker token): asking for the same
  // token again cannot help.
  | { kind: "denied"; reason: string }
  // The server will not watch this tenant (an invalid name): asking
  // again cannot help, a different tenant can. byPage: the page itself
  // refused it, by the server's rule, and sent nothing. queue: what the
  // server refused was the queue the page's list is narrowed to (the
  // page's own ListJobs, not the feed's stream, which takes no queue);
  // ofKind: the kind it is narrowed to, as for the queue.
  | { kind: "refused"; reason: string; byPage?: boolean; queue?: string; ofKind?: string };

export interface FeedListener {
  jobs(batch: Job[]): void;
  // deleted names jobs deleted (DeleteJob, DeleteJobs) since the last
  // response; it comes after the same response's jobs, as a deleted job
  // changes no more.
  deleted(ids: string[]): void;
  status(s: FeedStatus): void;
  // synced says a stream started afresh (without a resume token: the
  // first, or one after the server refused the token) has sent the most
  // recent jobs: every change from here on reaches jobs(), across
  // reconnects. Something that needs more than the most recent jobs
  // (a batch's counts) reads the rest now.
  synced?(): void;
  // startedOver says the stream is being started afresh after one that
  // had a token: what the listener holds may include jobs the server no
  // longer has (it came back on another database, or one restored from
  // a backup), which no deletion will ever name. Until synced, jobs()
  // brings the most recent jobs the server has.
  startedOver?(): void;
}

export interface FeedOptions {
  // Only the jobs of this batch (Job.batch); "" or absent for all.
  batch?: string;
  // Jobs in the first batch of a fresh stream; 0 is the server's default.
  pageSize?: number;
  // A stream that delivers nothing, not even the server's keepalive
  // (every 15 s), for this long is presumed dead and dialled again: a
  // half-open connection (a laptop that slept, a NAT that forgot) gives
  // the browser no error for many minutes.
  silenceMs?: number;
  // A stream counts as live once a message arrives, or once it has stayed
  // open this long after its headers: Connect sends a stream's error
  // after a 200 and its headers, so headers alone prove nothing.
  settleMs?: number;
  // The wait before the attempt-th retry (0-based).
  backoffMs?: (attempt: number) => number;
  // Whether the tab is out of sight (default: the document's; null: never
  // asked), and how long it may be before the feed lets go of its stream
  // until it is shown again (see Visibility in stream.ts).
  visibility?: Visibility | null;
  hiddenMs?: number;
}

// A stream that ran at least this long and ended OK was rotated by the
// server (its lifetime limit): the feed dials again at once, without a
// banner. A shorter one that ended OK counts as a failure, so a server
// that ends every stream at once is not dialled in a tight loop.
const healthyStreamMs = 1000;

export function backoffMs(attempt: number): number {
  const ceiling = Math.min(5000, 250 * 2 ** attempt);
  return ceiling / 2 + (Math.random() * ceiling) / 2;
}

export class JobFeed {
  private resumeToken = "";
  private readonly abort = new AbortController();
  private readonly batch: string;
  private readonly pageSize: number;
  private readonly silenceMs: number;
  private readonly settleMs: number;
  private readonly backoffMs: (attempt: number) => number;
  private readonly visibility: Visibility | undefined;
  private readonly hiddenMs: number | undefined;

  constructor(
    private readonly client: JobClient,
    private readonly tenant: string,
    private readonly listener: FeedListener,
    opts: FeedOptions = {},
  ) {
    this.batch = opts.batch ?? "";
    this.pageSize = opts.pageSize ?? 50;
    this.silenceMs = opts.silenceMs ?? 45_000;
    this.settleMs = opts.settleMs ?? 500;
    this.backoffMs = opts.backoffMs ?? backoffMs;
    this.visibility = opts.visibility === undefined ? pageVisibility : (opts.visibility ?? undefined);
    this.hiddenMs = opts.hiddenMs;
  }

  start(): void {
    void this.run();
  }

  stop(): void {
    this.abort.abort();
  }

  private async run(): Promise<void> {
    const stopped = this.abort.signal;
    // failures counts the attempts of this outage. A stream that went
    // live ends the outage before it, however it ends itself (a server
    // shut down cleanly ends its streams OK): the next outage starts at
    // attempt 1, with the shortest wait. Time alone proves nothing: a
    // dial to a server that is down may hang for seconds before it fails.
    let failures = 0;
    this.listener.status({ kind: "connecting" });
    while (!stopped.aborted) {
      const began = Date.now();
      const end = await this.follow();
      if (stopped.aborted) {
        return;
      }
      if (end.live) {
        failures = 0;
      }
      if (end.kind === "hidden" && this.visibility !== undefined) {
        // Out of sight: the connection is let go of until the tab is
        // shown, and the stream resumes from its token then. Until
        // then the feed says so: "live" would claim changes still come.
        this.listener.status({ kind: "paused" });
        if (!(await whenShown(this.visibility, stopped))) {
          return;
        }
        this.listener.status({ kind: "connecting" });
        continue;
      }
      const healthy = Date.now() - began >= healthyStreamMs;
      let reason = "the stream ended";
      if (end.kind === "ended" && healthy) {
        continue;
      }
      if (end.kind === "silent") {
        reason = `no word from the server in ${Math.round(this.silenceMs / 1000)}s`;
      }
      if (end.kind === "failed") {
        const ce = end.error;
        if (ce.code === Code.Unauthenticated) {
          this.listener.status({ kind: "unauthenticated", reason: ce.rawMessage });
          return;
        }
        if (ce.code === Code.PermissionDenied) {
          this.listener.status({ kind: "denied", reason: ce.rawMessage });
          return;
        }
        if (ce.code === Code.InvalidArgument) {
          // A token the server no longer understands (another server, a
          // restored database): start over. Without a token, the request
          // itself (the tenant) is what the server refuses.
          if (this.resumeToken !== "") {
            this.startOver();
            continue;
          }
          this.listener.status({ kind: "refused", reason: ce.rawMessage });
          return;
        }
        reason = ce.code === Code.Unknown || ce.code === Code.Unavailable ? "the server cannot be reached" : ce.rawMessage;
      }
      // The server that answers after an outage may not be the one that
      // went away: restarted on an empty database or one restored from a
      // backup, it takes a token later than its changes as no token and
      // silently starts over, and the jobs it no longer has are never
      // named as deleted. So the stream after an outage starts over
      // itself, and says so (startedOver), for the listener to keep only
      // what the server has. A stream rotated by the server (above)
      // resumes: the same server, or a replica on the same database.
      if (this.resumeToken !== "") {
        this.startOver();
      }
      // A silent stream already waited silenceMs: dial again at once.
      const wait = end.kind === "silent" ? 0 : this.backoffMs(failures);
      this.listener.status({ kind: "reconnecting", attempt: failures + 1, retryAt: Date.now() + wait, reason });
      failures++;
      await sleep(wait, stopped);
    }
  }

  private startOver(): void {
    this.resumeToken = "";
    this.listener.startedOver?.();
  }

  // follow runs one WatchJobs stream until it ends, fails, goes silent or
  // the feed stops, passing its batches on.
  private follow(): Promise<StreamEnd> {
    let fresh = this.resumeToken === "";
    return followStream(
      {
        stopped: this.abort.signal,
        silenceMs: this.silenceMs,
        settleMs: this.settleMs,
        onLive: () => this.listener.status({ kind: "live" }),
        visibility: this.visibility,
        hiddenMs: this.hiddenMs,
      },
      (opts) =>
        this.client.watchJobs(
          { tenant: this.tenant, batch: this.batch, resumeToken: this.resumeToken, pageSize: this.pageSize, view: JobView.SUMMARY },
          opts,
        ),
      (res) => {
        if (res.startedOver) {
          // The server could not resume from the token (its database
          // restored from an older copy while the tab was out of
          // sight, say) and started over with the most recent jobs:
          // as after the feed's own start over, they are the truth,
          // and the first token says the stream is synced.
          this.listener.startedOver?.();
          fresh = true;
        }
        if (res.jobs.length > 0) {
          this.listener.jobs(res.jobs);
        }
        if (res.deletedJobIds.length > 0) {
          this.listener.deleted(res.deletedJobIds);
        }
        // The first jobs of a fresh stream may take several responses,
        // only the last of which carries a token: keep the last one seen.
        if (res.resumeToken !== "") {
          this.resumeToken = res.resumeToken;
          if (fresh) {
            fresh = false;
            this.listener.synced?.();
          }
        }
      },
    );
  }
}

// sleep waits ms, or less if signal aborts first.
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}
