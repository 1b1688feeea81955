// What the tests know of the jobwatch server they run against: the Go
// test in ts/tstest starts it (a real server over HTTP, on SQLite or
// PostgreSQL) with short caps, and passes its address, tokens and caps in
// the environment.
import { randomUUID } from "node:crypto";
import * as net from "node:net";
import type { Transport } from "@connectrpc/connect";
import { createClient, nodeTransport, type JobwatchClient, type NodeClientOptions } from "../src/node.js";

function env(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === "") {
    throw new Error(`${name} is not set: run these tests through the Go test (go test ./ts/tstest), which starts the server`);
  }
  return v;
}

export const server = {
  url: env("JOBWATCH_URL"),
  /**
   * A second server like the first that traces its calls: a job submitted
   * in a trace (a traceparent header) carries the trace context of the
   * server's SubmitJob span.
   */
  tracedUrl: env("JOBWATCH_TRACED_URL"),
  /**
   * A third server that parks one call at most, with a wait cap of a
   * minute: while one wait is parked there, every other WaitJob and
   * WaitJobs is answered at once with the current state and the header
   * Jobwatch-Parked-Calls: full.
   */
  fullUrl: env("JOBWATCH_FULL_URL"),
  /** A client token of tenant "ts". */
  clientToken: env("JOBWATCH_CLIENT_TOKEN"),
  /** A worker token for any kind. */
  workerToken: env("JOBWATCH_WORKER_TOKEN"),
  /** How often the server sends a keepalive on an idle stream. */
  keepaliveMs: Number(env("JOBWATCH_KEEPALIVE_MS")),
  /** A client token of tenant "ts-quota", whose max_queued is one job. */
  quotaToken: env("JOBWATCH_QUOTA_TOKEN"),
  /** A worker token that may claim only kind "ts.narrow". */
  narrowWorkerToken: env("JOBWATCH_NARROW_WORKER_TOKEN"),
  waitCapMs: Number(env("JOBWATCH_WAIT_CAP_MS")),
  streamLifetimeMs: Number(env("JOBWATCH_STREAM_LIFETIME_MS")),
  leaseMs: Number(env("JOBWATCH_LEASE_MS")),
};

/** A kind no other test claims, so tests running side by side never take each other's jobs. */
export function uniqueKind(what: string): string {
  return `ts.${what}.${randomUUID().slice(0, 8)}`;
}

/** quiet is a logger for workers under test: only errors, which a test should not cause. */
export const quiet = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: (m: string, ...a: unknown[]) => console.error(m, ...a),
};

export function clientOf(options: Partial<NodeClientOptions> = {}): JobwatchClient {
  return createClient({ url: server.url, token: server.clientToken, ...options });
}

export function workerClientOf(options: Partial<NodeClientOptions> = {}): JobwatchClient {
  return createClient({ url: server.url, token: server.workerToken, ...options });
}

/**
 * eventually polls cond until it holds, failing after a deadline that only
 * a broken build reaches (the machine is small and busy).
 */
export async function eventually<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 30_000): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== false) {
      return v;
    }
    if (performance.now() > deadline) {
      throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A call a tapped transport saw: the RPC's name and the request it sent. */
export interface Call {
  method: string;
  request: Record<string, unknown>;
}

/** tap is t recording every call it makes, request included, in calls. */
export function tap(t: Transport, calls: Call[]): Transport {
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) => {
      calls.push({ method: method.name, request: input as Record<string, unknown> });
      return t.unary(method, signal, timeoutMs, header, input, contextValues);
    },
    stream: (method, signal, timeoutMs, header, input, contextValues) => {
      async function* recorded() {
        for await (const m of input) {
          calls.push({ method: method.name, request: m as Record<string, unknown> });
          yield m;
        }
      }
      return t.stream(method, signal, timeoutMs, header, recorded(), contextValues);
    },
  };
}

/** tappedClient is a client whose long calls (waits, watches, claims) are recorded in calls. */
export function tappedClient(calls: Call[], token = server.clientToken, url = server.url): JobwatchClient {
  return createClient({
    url,
    token,
    longTransport: tap(nodeTransport(url), calls),
    backoff: { initialMs: 20, maxMs: 200 },
  });
}

/**
 * Proxy is a TCP proxy in front of the server, so a test can cut every
 * connection through it (a network failure) or stop listening (a server
 * that cannot be reached) and start again on the same port.
 */
export class Proxy {
  private listener: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  async start(): Promise<void> {
    const target = new URL(server.url);
    const listener = net.createServer((down) => {
      const up = net.connect(Number(target.port), target.hostname);
      for (const s of [down, up]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => {
          down.destroy();
          up.destroy();
        });
      }
      down.pipe(up);
      up.pipe(down);
    });
    await new Promise<void>((resolve, reject) => {
      listener.once("error", reject);
      listener.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.port = (listener.address() as net.AddressInfo).port;
    this.listener = listener;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /**
   * freeze stops passing bytes either way without closing anything, as a
   * peer that died without a word (or a network that lost its route)
   * does; thaw lets them through again.
   */
  freeze(): void {
    for (const s of this.sockets) {
      s.pause();
    }
  }

  thaw(): void {
    for (const s of this.sockets) {
      s.resume();
    }
  }

  /** cut breaks every connection through the proxy, as a network failure would. */
  cut(): void {
    for (const s of this.sockets) {
      s.destroy();
    }
  }

  /** stop stops listening and cuts every connection: the server cannot be reached until start(). */
  async stop(): Promise<void> {
    const listener = this.listener;
    this.listener = undefined;
    this.cut();
    if (listener !== undefined) {
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    }
  }
}

/**
 * claimOne claims the next job of kind as a worker would (a test playing
 * the worker by hand), waiting through the server's claim cap.
 */
export async function claimOne(workers: JobwatchClient, kind: string): Promise<{ jobId: string; leaseId: string }> {
  return eventually(`a job of kind ${kind} to claim`, async () => {
    const resp = await workers.longWorkerService.claimJob({ workerId: "ts-test", kinds: [kind] });
    return resp.job === undefined ? undefined : { jobId: resp.job.id, leaseId: resp.leaseId };
  });
}
