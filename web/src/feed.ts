// The live feed of one tenant's jobs: a single WatchJobs stream (never one
// stream per job: a browser allows only six HTTP/1.1 connections per
// origin), resumed with its resume_token after any drop, with backoff.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Job } from "./gen/jobwatch/v1/jobwatch_pb";
import type { JobClient } from "./api";

export type FeedStatus =
  | { kind: "connecting" }
  | { kind: "live" }
  | { kind: "reconnecting"; attempt: number; retryAt: number; reason: string }
  | { kind: "unauthenticated"; reason: string };

export interface FeedListener {
  jobs(batch: Job[]): void;
  status(s: FeedStatus): void;
}

// A stream that ran at least this long before ending OK was rotated by the
// server (its lifetime limit): dial again at once, without a banner.
const healthyStreamMs = 1000;

export function backoffMs(attempt: number): number {
  const ceiling = Math.min(5000, 250 * 2 ** attempt);
  return ceiling / 2 + (Math.random() * ceiling) / 2;
}

export class JobFeed {
  private resumeToken = "";
  private readonly abort = new AbortController();

  constructor(
    private readonly client: JobClient,
    private readonly tenant: string,
    private readonly listener: FeedListener,
    private readonly pageSize = 50,
  ) {}

  start(): void {
    void this.run();
  }

  stop(): void {
    this.abort.abort();
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    let failures = 0;
    this.listener.status({ kind: "connecting" });
    while (!signal.aborted) {
      const began = Date.now();
      let reason = "the stream ended";
      try {
        const stream = this.client.watchJobs(
          { tenant: this.tenant, resumeToken: this.resumeToken, pageSize: this.pageSize },
          {
            signal,
            timeoutMs: 0,
            // Headers mean the server accepted the stream, even before the
            // first batch: the banner can go.
            onHeader: () => {
              failures = 0;
              this.listener.status({ kind: "live" });
            },
          },
        );
        for await (const res of stream) {
          if (res.jobs.length > 0) {
            this.listener.jobs(res.jobs);
          }
          if (res.resumeToken !== "") {
            this.resumeToken = res.resumeToken;
          }
        }
        if (Date.now() - began >= healthyStreamMs) {
          continue;
        }
      } catch (err) {
        if (signal.aborted) {
          return;
        }
        const ce = ConnectError.from(err);
        if (ce.code === Code.Unauthenticated || ce.code === Code.PermissionDenied) {
          this.listener.status({ kind: "unauthenticated", reason: ce.rawMessage });
          return;
        }
        // A token the server no longer understands (another server, a
        // restored database): start over; merging by version keeps the
        // list free of duplicates.
        if (this.resumeToken !== "" && ce.code === Code.InvalidArgument) {
          this.resumeToken = "";
          continue;
        }
        reason = ce.code === Code.Unknown || ce.code === Code.Unavailable ? "the server cannot be reached" : ce.rawMessage;
      }
      const wait = backoffMs(failures);
      this.listener.status({ kind: "reconnecting", attempt: failures + 1, retryAt: Date.now() + wait, reason });
      failures++;
      await sleep(wait, signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}
