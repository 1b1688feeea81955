// The Node worker: it claims jobs of the kinds it has handlers for, runs
// them, heartbeats while they run and reports how they ended, as the Go
// Worker does (client/worker.go), over WorkerService.
import { hostname } from "node:os";
import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampMs, timestampNow, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import { context as otelContext, type Tracer, type TracerProvider } from "@opentelemetry/api";
import { Code } from "./errors.js";
import { JobwatchClient, recursionLimit, type ClientOptions } from "./client.js";
import { jsonText } from "./json.js";
import { ClaimSchema, type Claim, type Job } from "./gen/jobwatch/v1/jobwatch_pb.js";
import { Retrier, backoffWithDefaults, sleep } from "./backoff.js";
import { toJobwatchError, transient } from "./errors.js";
import { nodeTransports, type NodeClientOptions } from "./node-transport.js";
import { endHandleSpan, startHandleSpan, tracerOf } from "./tracing.js";

/**
 * Handler runs one job: it reports progress as it goes and returns the
 * job's result (anything JSON.stringify takes; undefined for none), or
 * throws. Its signal is aborted when the job is cancelled (reason a
 * JobCancelledError), the lease is lost (LeaseLostError) or the worker
 * stops without waiting any longer (WorkerStoppedError); what it returns
 * then is not reported.
 *
 * A thrown error fails the job with error.type its `errorType` property,
 * else its class name (TypeError, a class of your own; "Error" for a
 * plain Error or a thrown non-error), and an error.message only if it has
 * `public: true` (then its message) or a string `publicMessage`: messages
 * tend to carry hostnames, SQL and customer data. With `retryable: true`
 * the job runs again if it has attempts left. HandlerError sets all
 * three.
 */
export type Handler = (job: Job, progress: Progress, signal: AbortSignal) => unknown;

/**
 * Progress records how far the job is: percent 0..100 (clamped; the server
 * never lets it go backwards) and a step text such as "batch 5 of 11"
 * (omitted or "" keeps the last step; over 1,024 bytes is cut). It never
 * blocks: the latest values reach the server with the next heartbeat,
 * which a change brings forward.
 *
 * progress.log(...texts) adds lines to the job's log, which
 * WatchJobLogs, `jobwatch logs -f` and the page's log pane follow; a text
 * holding newlines is the lines it holds. It never blocks either: lines
 * are sent in batches (AppendJobLogs), at least every 200 ms or 64 KiB,
 * and the last before the job's outcome. While the server cannot take
 * them, at most 1 MiB waits; past that the oldest are dropped, and a line
 * says how many.
 */
export type Progress = ((percent: number, step?: string) => void) & {
  log(...texts: string[]): void;
};

/** Where the worker logs: console has these methods. */
export interface WorkerLogger {
  debug(message: string, ...args: unknown[]): void;
  info(message: string, ...args: unknown[]): void;
  warn(message: string, ...args: unknown[]): void;
  error(message: string, ...args: unknown[]): void;
}

export interface WorkerOptions extends NodeClientOptions {
  /** A handler for each kind of job the worker runs. */
  handlers: Record<string, Handler>;
  /** The kinds to claim: some of handlers' kinds. Default: every kind in handlers. */
  kinds?: string[] | undefined;
  /** The queues to claim from. Default: any. */
  queues?: string[] | undefined;
  /**
   * How many handlers run at once. Default 1. Every free slot is claimed
   * for in one ClaimJob (max_jobs), at most 100 at a time.
   */
  concurrency?: number | undefined;
  /** The worker's id in claims and in its jobs' worker_id. Default hostname-pid-random. */
  id?: string | undefined;
  /**
   * How often a running job's lease is extended. Default 10 s, and never
   * more than a third of the lease, so two heartbeats can fail before the
   * lease is lost.
   */
  heartbeatIntervalMs?: number | undefined;
  /** The least time between two heartbeats that progress brings forward. Default 200 ms. */
  progressIntervalMs?: number | undefined;
  /**
   * How long stop() waits for running handlers before it aborts their
   * signals (reason WorkerStoppedError) and fails their jobs as retryable
   * with error.type "WorkerStopped". Default 60 s, as `jobwatch worker
   * --drain-timeout`; Infinity waits as long as they take.
   */
  drainTimeoutMs?: number | undefined;
  /**
   * Whether run() stops the worker gracefully on SIGTERM, SIGINT and
   * SIGHUP (its terminal closing; a second signal then kills the process
   * the default way). Default true.
   */
  handleSignals?: boolean | undefined;
  /** Default: info, warn and error to the console; debug dropped. */
  logger?: WorkerLogger | undefined;
  /** A client to use instead of making one from url, token and transports. */
  client?: JobwatchClient | undefined;
  /**
   * Where the span a handler runs in comes from. A job submitted by a
   * traced call (it carries a traceparent) runs its handler in a span
   * "jobwatch.job.handle" (kind consumer) that continues the submitter's
   * trace, and inside that span's context, so the handler's own spans
   * are its children when the application has registered a context
   * manager. Default: the global provider (trace.getTracer), which makes
   * no spans until the application registers one.
   */
  tracerProvider?: TracerProvider | undefined;
}

/** The signal's reason when the job was cancelled while its handler ran. */
export class JobCancelledError extends Error {
  constructor() {
    super("job was cancelled");
    this.name = "JobCancelledError";
  }
}

/**
 * The signal's reason when the worker no longer holds the job's lease (it
 * expired, or the job was claimed again): whatever the handler does now
 * will be refused.
 */
export class LeaseLostError extends Error {
  constructor(why: string) {
    super(`lease lost: ${why}`);
    this.name = "LeaseLostError";
  }
}

/** timedOut reports whether err is a call that ran out of time. */
function timedOut(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.DeadlineExceeded;
}

/** stopSignals stop a worker gracefully when it handles signals. */
const stopSignals: NodeJS.Signals[] = ["SIGTERM", "SIGINT", "SIGHUP"];

/**
 * The signal's reason when the worker stopped and its drain timeout passed
 * before the handler returned. The job fails as retryable, error.type
 * "WorkerStopped", so another worker runs it again if attempts remain.
 */
export class WorkerStoppedError extends Error {
  readonly errorType = "WorkerStopped";
  readonly retryable = true;
  readonly public = true;
  constructor() {
    super("worker stopped before the job ended");
    this.name = "WorkerStoppedError";
  }
}

export interface HandlerErrorOptions {
  /** error.type; default the cause's type, or "Error". */
  type?: string | undefined;
  /** Run the job again if attempts remain. */
  retryable?: boolean | undefined;
  /** Send the message to callers (it is shown on the job). */
  public?: boolean | undefined;
  cause?: unknown;
}

/**
 * HandlerError fails a job the way its options say:
 *
 *     throw new HandlerError("the image service is down", { type: "Upstream", retryable: true, public: true });
 */
export class HandlerError extends Error {
  readonly errorType: string;
  readonly retryable: boolean;
  readonly public: boolean;
  constructor(message: string, options: HandlerErrorOptions = {}) {
    super(message, { cause: options.cause });
    this.name = "HandlerError";
    this.errorType = options.type ?? (options.cause !== undefined ? errorType(options.cause) : "Error");
    this.retryable = options.retryable === true;
    this.public = options.public === true;
  }
}

/** The server's bounds on what a worker reports (jobtype/limits.go). */
const maxStepBytes = 1024;
const maxErrorTypeBytes = 256;
const maxErrorMessageBytes = 4096;
/** The most jobs one ClaimJob may ask for (jobtype.MaxClaimJobs). */
const maxClaimJobs = 100;
/**
 * How long a claim in flight may still answer after stop(): ample for a
 * reply already on the wire, short enough that an idle worker stops at once
 * to a person's eye.
 */
const claimGraceMs = 250;

/**
 * How long a claim in flight may still answer after stop() once the server
 * has been asked to answer it at once (StopClaiming): milliseconds, unless
 * it is parked on a replica that has not heard of the stop.
 */
const stoppedClaimGraceMs = 2000;

/** releaseTimeoutMs bounds giving back one job as the worker stops. */
const releaseTimeoutMs = 5000;
/** A claim answered with nothing quicker than this came from a server shutting down. */
const minParkMs = 20;
/** A lease's length when the server did not say. */
const defaultLeaseMs = 30_000;

const consoleLogger: WorkerLogger = {
  debug: () => {},
  info: (m, ...a) => console.error(m, ...a),
  warn: (m, ...a) => console.error(m, ...a),
  error: (m, ...a) => console.error(m, ...a),
};

/**
 * Worker claims and runs jobs until stop() (or SIGTERM), then drains: it
 * stops claiming, waits for the running handlers (up to drainTimeoutMs)
 * and reports how their jobs ended before run() resolves.
 *
 *     const worker = new Worker({
 *       url: "http://127.0.0.1:8080",
 *       token: process.env.JOBWATCH_TOKEN,
 *       concurrency: 4,
 *       handlers: {
 *         async resize(job, progress, signal) {
 *           progress(50, "half way");
 *           return { thumbnails: 3 };
 *         },
 *       },
 *     });
 *     await worker.run();
 */
export class Worker {
  /** The worker's id as the server sees it. */
  readonly id: string;
  readonly client: JobwatchClient;
  private readonly handlers: ReadonlyMap<string, Handler>;
  private readonly kinds: string[];
  private readonly queues: string[];
  private readonly concurrency: number;
  private readonly heartbeatIntervalMs: number;
  private readonly progressIntervalMs: number;
  private readonly drainTimeoutMs: number;
  private readonly handleSignals: boolean;
  private readonly log: WorkerLogger;
  private readonly tracer: Tracer;

  /** Jobs whose handler holds a slot, counting claims in flight for them. */
  private handling = 0;
  /** Jobs whose outcome is being reported: at most concurrency. */
  private reporting = 0;
  /** Wakes whoever waits for a slot or a report place. */
  private slotFreed = new Wake();
  private readonly running = new Set<Promise<void>>();
  private readonly leases = new Set<Lease>();
  private readonly stopping = new AbortController();
  private claimAbort: AbortController | undefined;
  private done: Promise<void> | undefined;

  constructor(options: WorkerOptions) {
    const handlers = new Map(Object.entries(options.handlers ?? {}));
    if (handlers.size === 0) {
      throw new TypeError("jobwatch Worker: no handlers: give handlers: { kind: (job, progress, signal) => result }");
    }
    for (const [kind, h] of handlers) {
      if (typeof h !== "function") {
        throw new TypeError(`jobwatch Worker: the handler of kind ${JSON.stringify(kind)} is not a function`);
      }
    }
    const kinds = options.kinds ?? [...handlers.keys()];
    for (const kind of kinds) {
      if (!handlers.has(kind)) {
        throw new TypeError(`jobwatch Worker: kinds names ${JSON.stringify(kind)}, which has no handler`);
      }
    }
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new TypeError(`jobwatch Worker: concurrency must be a whole number of at least 1, not ${concurrency}`);
    }
    this.client = options.client ?? new JobwatchClient(nodeTransports(options), options as ClientOptions);
    this.handlers = handlers;
    this.kinds = [...kinds].sort();
    this.queues = options.queues ?? [];
    this.concurrency = concurrency;
    this.id = options.id ?? `${hostname()}-${process.pid}-${Math.floor(Math.random() * 0x10000).toString(16).padStart(4, "0")}`;
    this.heartbeatIntervalMs = positive(options.heartbeatIntervalMs, 10_000);
    this.progressIntervalMs = positive(options.progressIntervalMs, 200);
    this.drainTimeoutMs = positive(options.drainTimeoutMs, 60_000);
    this.handleSignals = options.handleSignals ?? true;
    this.tracer = tracerOf(options.tracerProvider);
    const log = options.logger ?? consoleLogger;
    const prefix = `jobwatch worker ${this.id}:`;
    // A logger given from plain JavaScript may lack a level, or throw: a
    // line is then written at info (or lost), and the worker goes on.
    const at =
      (level: keyof WorkerLogger) =>
      (m: string, ...a: unknown[]) => {
        try {
          const write = (log as Partial<WorkerLogger>)[level] ?? (log as Partial<WorkerLogger>).info;
          write?.call(log, `${prefix} ${m}`, ...a);
        } catch {
          // The line is lost; the job is not.
        }
      };
    this.log = { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
  }

  /**
   * run claims and runs jobs until stop(), a signal (SIGTERM, SIGINT, SIGHUP) or
   * options.signal aborting, then drains, and resolves once every job it
   * claimed has been reported. It rejects, also after draining, when the
   * server refuses the claims for good (a bad token, a kind the token may
   * not run). Calling it again returns the same promise.
   */
  run(options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    this.done ??= this.runOnce();
    const { signal } = options;
    if (signal?.aborted) {
      void this.stop();
    } else {
      signal?.addEventListener("abort", () => void this.stop(), { once: true });
    }
    return this.done;
  }

  /**
   * stop stops claiming and drains as run() does; it resolves when run()
   * has (at once if run() was never called).
   */
  stop(): Promise<void> {
    if (!this.stopping.signal.aborted) {
      this.stopping.abort();
      // A claim in flight may be answering with jobs: cut, the answer
      // would be lost and its jobs stay RUNNING under a lease nobody
      // holds. So the server is asked to answer it at once
      // (StopClaiming), and it is cut only stoppedClaimGraceMs later (it
      // is parked on a replica that has not heard of the stop);
      // claimGraceMs later when the server cannot be asked.
      const claim = this.claimAbort;
      this.client.workerService
        .stopClaiming({ workerId: this.id }, { timeoutMs: stoppedClaimGraceMs })
        .then(
          () => stoppedClaimGraceMs,
          () => claimGraceMs,
        )
        .then((grace) => setTimeout(() => claim?.abort(), grace).unref());
      this.slotFreed.wake();
    }
    return (this.done ?? Promise.resolve()).catch(() => {});
  }

  private async runOnce(): Promise<void> {
    const onSignal = (signal: NodeJS.Signals) => {
      // At the first signal: the second one then ends the process the
      // default way, for someone who does not want to wait.
      for (const sig of stopSignals) {
        process.off(sig, onSignal);
      }
      this.log.info(`${signal}: stopping; running jobs have ${describeMs(this.drainTimeoutMs)} to finish`);
      void this.stop();
    };
    if (this.handleSignals) {
      for (const sig of stopSignals) {
        process.on(sig, onSignal);
      }
    }
    try {
      const claimError = await this.claimLoop();
      await this.drain();
      if (claimError !== undefined) {
        throw claimError;
      }
    } finally {
      for (const sig of stopSignals) {
        process.off(sig, onSignal);
      }
    }
  }

  /** claimLoop claims for free slots until stop(); it returns the error of a claim refused for good. */
  private async claimLoop(): Promise<unknown> {
    const stopping = this.stopping.signal;
    const r = this.client.retrier();
    let claimFailures = 0; // claims failed since the last that worked
    while (!stopping.aborted) {
      while (this.handling >= this.concurrency && !stopping.aborted) {
        await this.slotFreed.wait();
      }
      if (stopping.aborted) {
        break;
      }
      const n = Math.min(this.concurrency - this.handling, maxClaimJobs);
      this.handling += n;
      const asked = performance.now();
      let claims: Claim[] = [];
      let failure: unknown;
      this.claimAbort = new AbortController();
      try {
        const resp = await this.client.longWorkerService.claimJob(
          { workerId: this.id, kinds: this.kinds, queues: this.queues, maxJobs: n },
          { signal: this.claimAbort.signal },
        );
        claims = resp.claims.filter((c) => c.job !== undefined);
        if (claims.length === 0 && resp.job !== undefined) {
          claims = [create(ClaimSchema, { job: resp.job, leaseId: resp.leaseId, leaseExpiresAt: resp.leaseExpiresAt })];
        }
      } catch (err) {
        failure = err;
      }
      this.claimAbort = undefined;
      // Each job claimed keeps its slot until its handler is done; the
      // rest go back now.
      this.handling -= n - claims.length;
      for (const c of claims) {
        // A claim answered after the stop began (within claimGraceMs):
        // its jobs go back to the queue rather than start while draining.
        this.start(c, stopping.aborted ? (c) => this.giveBack(c) : (c) => this.runJob(c));
      }
      if (failure !== undefined) {
        if (stopping.aborted) {
          break;
        }
        if (!transient(failure)) {
          return toJobwatchError(failure);
        }
        // As the Go Worker says it: the first failure at warn, the rest
        // (a server away for minutes fails many) at debug until one works.
        if (++claimFailures === 1) {
          this.log.warn(`claim failed; retrying with backoff (until one works, further failures are logged at debug): ${String(failure)}`);
        } else {
          this.log.debug(`claim failed; retrying (${claimFailures} failures): ${String(failure)}`);
        }
        if (!(await waitOrStop(r.wait(failure, stopping)))) {
          break;
        }
        continue;
      }
      if (claimFailures > 0) {
        this.log.info(`claim works again, after ${claimFailures} failure(s)`);
        claimFailures = 0;
      }
      if (claims.length === 0 && performance.now() - asked < minParkMs && !stopping.aborted) {
        // Nothing, at once: the server is shutting down.
        if (!(await waitOrStop(r.wait(new Error("server answered without waiting"), stopping)))) {
          break;
        }
        continue;
      }
      r.reset();
    }
    return undefined;
  }

  /** drain waits for the running jobs, up to drainTimeoutMs, then stops their handlers. */
  private async drain(): Promise<void> {
    const all = () => Promise.all([...this.running]);
    if (this.running.size === 0) {
      return;
    }
    this.log.info(`waiting for ${this.running.size} running job(s)`);
    if (Number.isFinite(this.drainTimeoutMs)) {
      const timedOut = Symbol("timeout");
      const timeout = new AbortController();
      const outcome = await Promise.race([
        all(),
        sleep(this.drainTimeoutMs, timeout.signal).then(
          () => timedOut,
          () => undefined,
        ),
      ]);
      timeout.abort();
      if (outcome === timedOut) {
        this.log.warn("drain timeout passed; stopping running jobs (they fail with WorkerStopped)");
        for (const lease of this.leases) {
          lease.stopByWorker();
        }
      }
    }
    // Jobs started after the first look (none: claims have stopped) and
    // the reports of those stopped are waited for here.
    while (this.running.size > 0) {
      await all();
    }
  }

  private start(claim: Claim, run: (claim: Claim) => Promise<void>): void {
    const p: Promise<void> = run(claim)
      .catch((err) => this.log.error(`job ${claim.job?.id}: ${String(err)}`))
      .finally(() => {
        this.running.delete(p);
      });
    this.running.add(p);
  }

  /**
   * giveBack gives back a job claimed after the worker began to stop
   * (ReleaseJob): QUEUED again at once, its attempt not counted, for
   * another worker to run, rather than started while the worker drains
   * and failed as WorkerStopped at the drain timeout. A release that
   * fails but for a lease no longer held runs the job after all.
   */
  private async giveBack(claim: Claim): Promise<void> {
    const id = claim.job?.id ?? "";
    try {
      await this.client.workerService.releaseJob({ jobId: id, leaseId: claim.leaseId }, { timeoutMs: releaseTimeoutMs });
      this.log.info(`job ${id}: claimed as the worker stopped: given back to the queue, its attempt not counted`);
    } catch (err) {
      if (!(err instanceof ConnectError && err.code === Code.FailedPrecondition)) {
        this.log.warn(`job ${id}: claimed as the worker stopped, and could not be given back: running it: ${String(err)}`);
        return this.runJob(claim);
      }
      this.log.info(`job ${id}: claimed as the worker stopped, and no longer this worker's (cancelled meanwhile)`);
    }
    this.handling--;
    this.slotFreed.wake();
  }

  /** runJob runs one claimed job to its end and reports the outcome. */
  private async runJob(claim: Claim): Promise<void> {
    const job = claim.job as Job;
    const lease = new Lease(job, claim.leaseId, leaseMs(claim));
    const ac = lease.ac;
    let place: "handling" | "reporting" = "handling";
    this.leases.add(lease);
    try {
      const handler = this.handlers.get(job.kind);
      let outcome: Outcome;
      if (handler === undefined) {
        outcome = { error: new Error(`no handler for kind ${JSON.stringify(job.kind)}`) };
      } else {
        outcome = await this.runHandler(handler, lease);
      }
      const reason: unknown = ac.signal.aborted ? ac.signal.reason : undefined;
      if (reason instanceof JobCancelledError) {
        this.log.info(`job ${job.id} was cancelled while it ran`);
        return;
      }
      if (reason instanceof LeaseLostError) {
        this.log.warn(`job ${job.id}: ${reason.message}; its outcome is dropped`);
        return;
      }
      if (lease.stoppedByWorker) {
        outcome = { error: new WorkerStoppedError() };
      }
      // The job gives up its slot to the next one and takes a place among
      // the reports, so a slow commit does not hold up the next claim.
      while (this.reporting >= this.concurrency) {
        await this.slotFreed.wait();
      }
      this.reporting++;
      this.handling--;
      place = "reporting";
      this.slotFreed.wake();
      await this.report(lease, outcome);
    } finally {
      this.leases.delete(lease);
      if (place === "handling") {
        this.handling--;
      } else {
        this.reporting--;
      }
      this.slotFreed.wake();
    }
  }

  /**
   * runHandler runs the handler with heartbeats. It returns when the
   * handler has, or at once when the worker stops it (drain timeout): a
   * handler that ignores its signal is not waited for then.
   */
  private async runHandler(handler: Handler, lease: Lease): Promise<Outcome> {
    const logs = new LogBatcher(this.client, lease, this.log);
    const progress: Progress = Object.assign((percent: number, step?: string) => lease.setProgress(percent, step), {
      log: (...texts: string[]) => logs.add(texts),
    });
    const beats = this.heartbeat(lease, lease.ac);
    const traced = startHandleSpan(this.tracer, lease.job, this.id);
    const call = async () => handler(lease.job, progress, lease.ac.signal);
    const handled: Promise<Outcome> = (traced === undefined ? call() : otelContext.with(traced.context, call)).then(
      (result) => ({ result }),
      (error: unknown) => ({ error }),
    );
    this.log.debug(`job ${lease.job.id} (${lease.job.kind}) started, attempt ${lease.job.attempt}`);
    const outcome = await Promise.race([handled, lease.stopped]);
    if (traced !== undefined) {
      endHandleSpan(traced.span, outcome, errorType);
    }
    await logs.close(lease.ms);
    lease.handlerDone();
    await beats;
    return outcome;
  }

  /**
   * heartbeat extends the lease until the handler is done, sending
   * progress as it changes. It aborts ac when the job is cancelled or the
   * lease is lost (refused, or not renewed within the lease).
   */
  private async heartbeat(lease: Lease, ac: AbortController): Promise<void> {
    const interval = Math.min(this.heartbeatIntervalMs, lease.ms / 3);
    const minGap = Math.min(this.progressIntervalMs, interval);
    const r = this.client.retrier({ initialMs: minGap, maxMs: interval });
    let expires = performance.now() + lease.ms;
    let lastSent = -Infinity;
    let due = performance.now() + interval;
    let failures = 0; // heartbeats failed since the last that went through
    let lastFailure: unknown; // the last heartbeat that failed
    for (;;) {
      // Wait for the handler to end, the next heartbeat, or a change of
      // progress at least minGap after the last heartbeat.
      for (;;) {
        if (lease.done) {
          // The handler may have reported progress and returned at once:
          // send what the server has not seen yet before the outcome, so
          // the job ends with the step it reached.
          if (!ac.signal.aborted && lease.progressUnsent()) {
            await this.beat(lease, ac, expires).catch((err) => this.log.debug(`last progress not sent: ${String(err)}`));
          }
          return;
        }
        const now = performance.now();
        const until = lease.progressPending ? Math.min(due, lastSent + minGap) : due;
        if (now >= until) {
          break;
        }
        await lease.wake.wait(until - now);
      }
      const sentAt = performance.now();
      let next = interval;
      try {
        const cancelled = await this.beat(lease, ac, expires);
        failures = 0;
        if (ac.signal.aborted) {
          return; // the worker stopped the handler: nothing left to extend
        }
        if (cancelled) {
          ac.abort(new JobCancelledError());
          return;
        }
        r.reset();
        expires = sentAt + lease.ms;
      } catch (err) {
        if (ac.signal.aborted) {
          return;
        }
        if (err instanceof ConnectError && err.code === Code.FailedPrecondition) {
          ac.abort(new LeaseLostError(err.rawMessage));
          return;
        }
        if (performance.now() > expires) {
          // The last beat ran into the lease's end, its own deadline: the
          // failure before it says why (connection refused, say).
          const why = lastFailure !== undefined && timedOut(err) ? lastFailure : err;
          this.log.warn(`job ${lease.job.id}: heartbeats failed for the whole lease: ${String(why)}`);
          ac.abort(new LeaseLostError("no heartbeat got through before the lease expired"));
          return;
        }
        // A beat that ran out of time says less than one refused.
        if (lastFailure === undefined || !timedOut(err)) {
          lastFailure = err;
        }
        // As the Go Worker says it: the first failure at warn, the rest
        // (a server restarting fails several) at debug until one works.
        if (++failures === 1) {
          this.log.warn(`job ${lease.job.id}: heartbeat failed; retrying with backoff (until one works, further failures are logged at debug): ${String(err)}`);
        } else {
          this.log.debug(`job ${lease.job.id}: heartbeat failed; retrying (${failures} failures): ${String(err)}`);
        }
        next = Math.min(r.delay(), interval);
      }
      lastSent = sentAt;
      due = performance.now() + next;
    }
  }

  /**
   * beat sends one heartbeat with the latest progress, and says whether the
   * job was cancelled. A call still unanswered when the lease expires is
   * abandoned: the server may have handed the job to another worker by then.
   */
  private async beat(lease: Lease, ac: AbortController, expires: number): Promise<boolean> {
    const { percent, step } = lease.takeProgress();
    const resp = await this.client.workerService.heartbeat(
      { jobId: lease.job.id, leaseId: lease.id, percent, step },
      { signal: ac.signal, timeoutMs: Math.max(1, Math.floor(expires - performance.now())) },
    );
    lease.sent(percent, step);
    return resp.cancelled;
  }

  /**
   * report completes or fails the job, retrying transient failures for as
   * long as the lease can still be held.
   */
  private async report(lease: Lease, outcome: Outcome): Promise<void> {
    const job = lease.job;
    const deadline = performance.now() + lease.ms;
    const r = this.client.retrier();
    let herr: unknown = "error" in outcome ? outcome.error : undefined;
    let failing = "error" in outcome;
    let result: Value | undefined;
    if (!failing) {
      try {
        result = jsonResult((outcome as { result: unknown }).result);
      } catch (err) {
        herr = new ReportRejectedError("ResultRejected", `the result is not JSON: ${errorText(err)}`, false);
        failing = true;
      }
    }
    for (;;) {
      const timeoutMs = Math.max(1, Math.floor(deadline - performance.now()));
      try {
        if (!failing) {
          await this.client.workerService.completeJob({ jobId: job.id, leaseId: lease.id, result }, { timeoutMs });
          this.log.debug(`job ${job.id} succeeded`);
        } else {
          const error = {
            type: truncateUTF8(errorType(herr), maxErrorTypeBytes),
            message: truncateUTF8(publicMessage(herr), maxErrorMessageBytes),
          };
          await this.client.workerService.failJob(
            { jobId: job.id, leaseId: lease.id, error, retryable: isRetryable(herr) },
            { timeoutMs },
          );
          this.log.info(`job ${job.id} failed: ${error.type}${isRetryable(herr) ? " (retryable)" : ""}: ${errorText(herr)}`);
        }
        return;
      } catch (err) {
        const code = err instanceof ConnectError ? err.code : undefined;
        const refused = code === Code.InvalidArgument || code === Code.ResourceExhausted;
        if (code === Code.FailedPrecondition) {
          this.log.warn(`job ${job.id}: lease lost before the outcome was reported: ${String(err)}`);
          return;
        }
        if (!failing && refused) {
          // The result itself was refused (too large): the job must still
          // end, and say why, rather than be LOST.
          this.log.warn(`job ${job.id}: result refused; failing the job: ${String(err)}`);
          herr = new ReportRejectedError("ResultRejected", (err as ConnectError).rawMessage, false);
          failing = true;
          continue;
        }
        if (refused && !(herr instanceof ReportRejectedError && herr.errorType === "ErrorRejected")) {
          // The error report was refused (a field the server will not
          // take): end the job with the refusal instead, once.
          this.log.warn(`job ${job.id}: error report refused; failing the job with the refusal: ${String(err)}`);
          herr = new ReportRejectedError("ErrorRejected", (err as ConnectError).rawMessage, isRetryable(herr));
          continue;
        }
        if (refused || !transient(err)) {
          this.log.error(`job ${job.id}: outcome refused: ${String(err)}`);
          return;
        }
        const delay = r.delay();
        if (performance.now() + delay > deadline) {
          this.log.error(`job ${job.id}: outcome not reported before the lease ran out: ${String(err)}`);
          return;
        }
        this.log.warn(`job ${job.id}: reporting the outcome failed; retrying: ${String(err)}`);
        await sleep(delay);
      }
    }
  }
}

type Outcome = { result: unknown } | { error: unknown };

// How the worker sends what its handlers log, as the Go Worker does
// (client/logs.go): a batch at least every logFlushMs, at once when
// logFlushBytes or maxLogLinesPerCall lines wait; at most logBufferBytes
// held while the server cannot take them.
const logFlushMs = 200;
const logFlushBytes = 64 << 10;
const maxLogLinesPerCall = 1000;
const logBufferBytes = 1 << 20;
const logLineOverhead = 16;

/** LogLine is a line as the handler logged it, with when. */
type LogLine = { text: string; time: Timestamp };

/**
 * LogBatcher holds one job's log lines and sends them with AppendJobLogs,
 * one call at a time. A lease the server no longer holds (the job was
 * cancelled or taken back) stops it; lines of a call that got no answer
 * (the server could not be reached, or its answer was lost) are sent
 * again after a backoff as they were, alone, so that a server that took
 * them already keeps them once (every line carries its time); at most
 * logBufferBytes of lines wait meanwhile, past which the oldest are
 * dropped and counted; lines it refused are dropped.
 */
class LogBatcher {
  private pending: LogLine[] = [];
  // The lines of the call that got no answer, to send again as they were.
  private unanswered: LogLine[] | undefined;
  private bytes = 0;
  private dropped = 0;
  private stopped = false;
  // After a transient failure the lines go back and wait this long; close
  // cuts the wait to its own deadline (closingBy).
  private readonly retrier = new Retrier(backoffWithDefaults());
  // failures counts the transient failures since a call last worked: the
  // first is logged at warn, the rest (a server restarting fails several)
  // at debug, as heartbeats are.
  private failures = 0;
  private closingBy: number | undefined;
  private sending: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly client: JobwatchClient,
    private readonly lease: Lease,
    private readonly log: WorkerLogger,
  ) {}

  add(texts: string[]): void {
    if (this.stopped) {
      return;
    }
    for (const text of texts) {
      const body = String(text).replace(/\r?\n$/, "");
      const time = timestampNow();
      for (const line of body.split("\n")) {
        this.pending.push({ text: line.replace(/\r$/, ""), time });
        this.bytes += Buffer.byteLength(line) + logLineOverhead;
      }
    }
    this.bound();
    if (this.bytes >= logFlushBytes || this.pending.length >= maxLogLinesPerCall) {
      this.flush();
    } else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.flush(), logFlushMs);
    }
  }

  /** flush starts sending what waits, unless a call is on its way (it sends the rest after). */
  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.sending !== undefined || this.stopped || (this.pending.length === 0 && this.dropped === 0 && this.unanswered === undefined)) {
      return;
    }
    this.sending = this.send().finally(() => {
      this.sending = undefined;
      if ((this.pending.length > 0 || this.unanswered !== undefined) && !this.stopped) {
        this.flush();
      }
    });
  }

  /** next takes the lines of the next call: those that got no answer, or the oldest waiting. */
  private next(): LogLine[] {
    if (this.unanswered !== undefined) {
      return this.unanswered;
    }
    const lines: LogLine[] = [];
    if (this.dropped > 0) {
      const text = this.dropped === 1 ? "1 line dropped by the worker" : `${this.dropped} lines dropped by the worker`;
      lines.push({ text, time: this.pending[0]?.time ?? timestampNow() });
      this.dropped = 0;
    }
    let size = 0;
    while (this.pending.length > 0 && lines.length < maxLogLinesPerCall && (size < logFlushBytes || lines.length === 0)) {
      const line = this.pending.shift()!;
      const n = Buffer.byteLength(line.text) + logLineOverhead;
      size += n;
      this.bytes -= n;
      lines.push(line);
    }
    return lines;
  }

  private async send(): Promise<void> {
    const lines = this.next();
    this.unanswered = undefined;
    try {
      const resp = await this.client.workerService.appendJobLogs(
        { jobId: this.lease.job.id, leaseId: this.lease.id, lines: lines.map(({ text, time }) => ({ text, time })) },
        { signal: this.lease.ac.signal },
      );
      this.retrier.reset();
      this.failures = 0;
      if (resp.cancelled) {
        this.stop();
      }
    } catch (err) {
      const code = err instanceof ConnectError ? err.code : undefined;
      if (code === Code.FailedPrecondition || code === Code.NotFound || this.lease.ac.signal.aborted) {
        this.stop(); // the lease is gone: no line of this job can be added any more
        return;
      }
      if (!transient(err, this.lease.ac.signal)) {
        this.log.warn(`job ${this.lease.job.id}: ${lines.length} log lines refused; dropped: ${String(err)}`);
        return;
      }
      // No answer: the same lines go again, alone, after a wait (the
      // server may have taken them; it keeps them once).
      this.unanswered = lines;
      const wait = Math.min(this.retrier.delay(), this.closingBy === undefined ? Infinity : Math.max(0, this.closingBy - performance.now()));
      if (++this.failures === 1) {
        this.log.warn(
          `job ${this.lease.job.id}: log lines not sent; retrying with backoff (until they go, further failures are logged at debug): ${String(err)}`,
        );
      } else {
        this.log.debug(`job ${this.lease.job.id}: log lines not sent; retrying in ${wait} ms (${this.failures} failures): ${String(err)}`);
      }
      await sleep(wait, this.lease.ac.signal).catch(() => {});
    }
  }

  /** bound drops the oldest lines held past logBufferBytes, counting them. */
  private bound(): void {
    while (this.bytes > logBufferBytes && this.pending.length > 1) {
      this.bytes -= Buffer.byteLength(this.pending.shift()!.text) + logLineOverhead;
      this.dropped++;
    }
  }

  private stop(): void {
    this.stopped = true;
    this.pending = [];
    this.unanswered = undefined;
    this.bytes = 0;
    clearTimeout(this.timer);
  }

  /**
   * close sends every line still held before the job's outcome is
   * reported, for at most ms; what is left then is dropped.
   */
  async close(ms: number): Promise<void> {
    const deadline = performance.now() + ms;
    this.closingBy = deadline;
    while (!this.stopped && (this.pending.length > 0 || this.dropped > 0 || this.unanswered !== undefined || this.sending !== undefined)) {
      if (performance.now() > deadline) {
        const left = this.pending.length + (this.unanswered?.length ?? 0);
        this.log.warn(`job ${this.lease.job.id}: ${left} log lines not sent before the outcome; dropped`);
        break;
      }
      this.flush();
      await this.sending;
    }
    this.stop();
  }
}

/** Lease is a claimed job, its lease, and the progress its handler reported. */
class Lease {
  readonly wake = new Wake();
  /** Aborted when the handler must stop; the reason says why. */
  readonly ac = new AbortController();
  /** Settles when the worker stops the handler at its drain timeout. */
  readonly stopped: Promise<Outcome>;
  stoppedByWorker = false;
  private stop: () => void = () => {};
  done = false;
  progressPending = false;
  private percent = 0;
  private step = "";
  private sentPercent = 0;
  private sentStep = "";

  constructor(
    readonly job: Job,
    readonly id: string,
    /** How long the lease lasts without a heartbeat. */
    readonly ms: number,
  ) {
    this.stopped = new Promise((resolve) => {
      this.stop = () => resolve({ error: new WorkerStoppedError() });
    });
  }

  /**
   * stopByWorker stops the handler for the worker's drain timeout: its
   * signal is aborted, and the job is reported as WorkerStopped without
   * waiting for the handler any longer (a job already cancelled, or whose
   * lease was lost, is not reported at all).
   */
  stopByWorker(): void {
    if (!this.ac.signal.aborted) {
      this.stoppedByWorker = true;
      this.ac.abort(new WorkerStoppedError());
    }
    this.stop();
  }

  setProgress(percent: number, step?: string): void {
    const p = Number.isFinite(percent) ? Math.round(percent) : 0;
    this.percent = Math.min(Math.max(p, 0), 100);
    if (typeof step === "string" && step !== "") {
      this.step = truncateUTF8(step, maxStepBytes);
    }
    this.progressPending = true;
    this.wake.wake();
  }

  takeProgress(): { percent: number; step: string } {
    this.progressPending = false;
    return { percent: this.percent, step: this.step };
  }

  sent(percent: number, step: string): void {
    this.sentPercent = percent;
    this.sentStep = step;
  }

  progressUnsent(): boolean {
    return this.percent !== this.sentPercent || this.step !== this.sentStep;
  }

  handlerDone(): void {
    this.done = true;
    this.wake.wake();
  }
}

/**
 * Wake lets waiters sleep until woken or a timeout: whoever changes what
 * they look at wakes them, and they look again. A wake with no waiter is
 * not kept, so a waiter must look before it waits.
 */
class Wake {
  private readonly waiters = new Set<() => void>();

  wake(): void {
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) {
      w();
    }
  }

  wait(ms = Infinity): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = Number.isFinite(ms) ? setTimeout(done, ms) : undefined;
      this.waiters.add(done);
    });
  }
}

/** ReportRejectedError fails a job whose result or error report the server would not store; the server's reason is the message. */
class ReportRejectedError extends Error {
  readonly public = true;
  constructor(
    readonly errorType: "ResultRejected" | "ErrorRejected",
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
    this.name = errorType;
  }
}

/** errorType is the error.type a job fails with for err (see Handler). */
function errorType(err: unknown): string {
  if (typeof err !== "object" || err === null) {
    return "Error";
  }
  const typed = (err as { errorType?: unknown }).errorType;
  if (typeof typed === "string") {
    return typed === "" ? "Error" : typed;
  }
  const ctor = (err as { constructor?: { name?: unknown } }).constructor?.name;
  if (typeof ctor === "string" && ctor !== "" && ctor !== "Error" && ctor !== "Object") {
    return ctor;
  }
  const name = (err as { name?: unknown }).name;
  return typeof name === "string" && name !== "" ? name : "Error";
}

/** publicMessage is the error.message a job fails with: only what err says callers may see. */
function publicMessage(err: unknown): string {
  if (typeof err !== "object" || err === null) {
    return "";
  }
  const e = err as { public?: unknown; publicMessage?: unknown; message?: unknown };
  if (typeof e.publicMessage === "string") {
    return e.publicMessage;
  }
  return e.public === true && typeof e.message === "string" ? e.message : "";
}

function isRetryable(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { retryable?: unknown }).retryable === true;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * jsonResult is the handler's result as the wire's Value: what
 * JSON.stringify makes of it (so a Date is its ISO string and a class its
 * fields), or undefined for no result. What JSON.stringify or the wire
 * would change (NaN, a lone surrogate: see jsonText) throws, naming where.
 */
function jsonResult(result: unknown): Value | undefined {
  if (result === undefined) {
    return undefined;
  }
  const text = jsonText(result, "result");
  if (text === undefined) {
    return undefined; // a function or a symbol: nothing JSON can carry
  }
  return fromJson(ValueSchema, JSON.parse(text) as JsonValue, { recursionLimit });
}

/**
 * truncateUTF8 cuts s to at most n bytes of UTF-8 without splitting a
 * character, so a report fits the server's bounds instead of being
 * refused.
 */
export function truncateUTF8(s: string, n: number): string {
  let bytes = 0;
  let i = 0;
  for (const ch of s) {
    const cp = ch.codePointAt(0) as number;
    const size = cp <= 0x7f ? 1 : cp <= 0x7ff ? 2 : cp <= 0xffff ? 3 : 4;
    if (bytes + size > n) {
      return s.slice(0, i);
    }
    bytes += size;
    i += ch.length;
  }
  return s;
}

/** leaseMs is the lease's length, as the server counts it: both times are its own, so clock skew cannot shorten it. */
function leaseMs(claim: Claim): number {
  const at = claim.job?.updatedAt;
  if (claim.leaseExpiresAt === undefined || at === undefined) {
    return defaultLeaseMs;
  }
  const ms = timestampMs(claim.leaseExpiresAt) - timestampMs(at);
  return ms > 0 ? ms : defaultLeaseMs;
}

function positive(v: number | undefined, dflt: number): number {
  return v !== undefined && v > 0 ? v : dflt;
}

function describeMs(ms: number): string {
  return Number.isFinite(ms) ? `up to ${ms / 1000} s` : "as long as they take";
}

/** waitOrStop is false when p rejected (the worker is stopping). */
async function waitOrStop(p: Promise<void>): Promise<boolean> {
  try {
    await p;
    return true;
  } catch {
    return false;
  }
}

