// The client: typed calls over the generated Connect clients, and the
// loops every caller of a job service ends up writing — waitForJob, and
// watchJob / watchJobs that resume across disconnects — written once, as
// the Go client has them (client/wait.go). It knows no transport: the
// entry points (node.ts, browser.ts) make one, or the caller passes one.
import { ConnectError, createClient as createConnectClient, type CallOptions, type Client, type Transport } from "@connectrpc/connect";
import { fromJson, toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  JobSchema,
  JobService,
  JobState,
  QueueService,
  WaitMode,
  WorkerService,
  type Job,
  type ListJobsRequestSchema,
  type ListJobsResponse,
  type SubmitJobRequestSchema,
  type WaitJobsRequestSchema,
  type WaitJobsResponse,
  type WatchJobsRequestSchema,
  type WatchJobsResponse,
} from "./gen/jobwatch/v1/jobwatch_pb.js";
import { backoffWithDefaults, Retrier, type Backoff, type RetryNotify } from "./backoff.js";
import { Code, JobNotStartedError, toJobwatchError, transient } from "./errors.js";

/** What createClient takes, in Node and in browsers alike. */
export interface ClientOptions {
  /**
   * The server, such as "http://127.0.0.1:8080" (http:// or https://).
   * Needed unless transport is given; in a browser it defaults to the
   * page's own origin.
   */
  url?: string | undefined;
  /** A bearer token from the server's tokens file, sent on every call. */
  token?: string | undefined;
  /**
   * The transport of short calls (submit, get, cancel, heartbeats...);
   * by default the entry point makes one for url. A Connect, gRPC or
   * gRPC-Web transport of @connectrpc/connect-node or -web all work.
   */
  transport?: Transport | undefined;
  /**
   * The transport of long calls (WaitJob, WatchJob, WatchJobs, ClaimJob
   * and SubmitJob with wait). Default: in Node a second transport of its
   * own (its own connections), so parked waits never hold up a short
   * call; transport itself when that is given; in browsers the one
   * transport (the browser pools connections).
   */
  longTransport?: Transport | undefined;
  /** How waits, watches and workers space out their retries. */
  backoff?: Partial<Backoff> | undefined;
  /** Told of every retry a wait, watch or worker is about to sleep for. */
  onRetry?: RetryNotify | undefined;
  /**
   * How long a watch stream may go without a message before it counts as
   * dead and is opened again. Default 45 s: three of the server's
   * keepalives (one every 15 s by default), as the page counts. It finds
   * a connection that died without a word (a laptop waking from sleep, a
   * proxy that dropped it), which a browser cannot ping.
   */
  streamIdleTimeoutMs?: number | undefined;
}

/** The two transports of a client: short calls, long calls. */
export interface Transports {
  short: Transport;
  long: Transport;
}

/**
 * The deepest payload or result the server stores (jobtype.MaxJSONDepth,
 * 128 levels) needs this much recursion from protobuf-es, which stops at
 * 100 nested messages otherwise: two messages a level (a Value and its
 * Struct or ListValue), plus the response and the job around them.
 */
export const recursionLimit = 2 * 128 + 8;

/**
 * The least time a long call that answered "nothing yet" must have been
 * parked to be re-issued at once; quicker answers come from a server
 * shutting down and are retried with backoff instead.
 */
const minParkMs = 20;

/** A submission: SubmitJobRequest, with the payload as plain JSON and run_at as a Date if you like. */
export type SubmitJobInput = Omit<MessageInitShape<typeof SubmitJobRequestSchema>, "$typeName" | "payload" | "runAt"> & {
  payload?: JsonValue | undefined;
  runAt?: Date | Timestamp | undefined;
};

export type ListJobsInput = MessageInitShape<typeof ListJobsRequestSchema>;

/** What watchJobs takes: WatchJobsRequest and an AbortSignal. */
export type WatchJobsInput = MessageInitShape<typeof WatchJobsRequestSchema> & { signal?: AbortSignal | undefined };

const terminalStates: ReadonlySet<JobState> = new Set([
  JobState.SUCCEEDED,
  JobState.FAILED,
  JobState.CANCELLED,
  JobState.LOST,
]);

/** isTerminal reports whether a job in state s will never change again. */
export function isTerminal(s: JobState): boolean {
  return terminalStates.has(s);
}

/** payloadOf is the job's payload as plain JSON, or undefined in a summary. */
export function payloadOf(job: Job): JsonValue | undefined {
  return job.payload === undefined ? undefined : toJson(ValueSchema, job.payload);
}

/**
 * jobJson is the job as the API's JSON, as curl shows it (64-bit numbers
 * as strings, times in RFC 3339, enums by name): what to hand to
 * JSON.stringify or a log, which throws on the job's bigint fields.
 */
export function jobJson(job: Job): JsonValue {
  return toJson(JobSchema, job);
}

/** resultOf is what the worker returned, as plain JSON, or undefined (none yet, or a summary). */
export function resultOf(job: Job): JsonValue | undefined {
  return job.result === undefined ? undefined : toJson(ValueSchema, job.result);
}

/** bearer is t sending `Authorization: Bearer token` on every call. */
export function withBearer(t: Transport, token: string): Transport {
  const header = (init: HeadersInit | undefined): Headers => {
    const h = new Headers(init);
    h.set("Authorization", `Bearer ${token}`);
    return h;
  };
  return {
    unary: (method, signal, timeoutMs, init, input, contextValues) =>
      t.unary(method, signal, timeoutMs, header(init), input, contextValues),
    stream: (method, signal, timeoutMs, init, input, contextValues) =>
      t.stream(method, signal, timeoutMs, header(init), input, contextValues),
  };
}

/** checkURL refuses what is not an http:// or https:// URL, saying why. */
export function checkURL(url: string | undefined): string {
  if (url === undefined || url === "") {
    throw new TypeError("jobwatch: no server: pass url (such as http://127.0.0.1:8080) or transport");
  }
  if (!/^https?:\/\/[^/]/.test(url)) {
    throw new TypeError(`jobwatch: server address ${JSON.stringify(url)} must start with http:// or https://`);
  }
  if (url.includes(",")) {
    // JOBWATCH_SERVER may list replicas for the Go client and the
    // command line; this client speaks to one address.
    throw new TypeError(
      `jobwatch: server address ${JSON.stringify(url)} is a list: this client takes one address (such as a load balancer in front of the replicas)`,
    );
  }
  try {
    new URL(url);
  } catch {
    throw new TypeError(`jobwatch: server address ${JSON.stringify(url)} is not a URL`);
  }
  return url.replace(/\/+$/, "");
}

/**
 * JobwatchClient is a client of one jobwatch server. Make one with the
 * createClient of the entry point ("@jobwatch/client" picks Node's or the
 * browser's). Every method that fails throws a JobwatchError (or one of
 * its classes: NotFoundError, AlreadyActiveError...), or the signal's
 * reason when the caller aborted it.
 */
export class JobwatchClient {
  /** JobService over the short-call transport: every RPC the methods here do not wrap. */
  readonly jobService: Client<typeof JobService>;
  /** JobService over the long-call transport, for waits and watches. */
  readonly longJobService: Client<typeof JobService>;
  /** WorkerService over the short-call transport (heartbeats, outcomes). */
  readonly workerService: Client<typeof WorkerService>;
  /** WorkerService over the long-call transport (ClaimJob). */
  readonly longWorkerService: Client<typeof WorkerService>;
  readonly queueService: Client<typeof QueueService>;
  /** The backoff of its retries, defaults filled in. */
  readonly backoff: Backoff;
  private readonly onRetry: RetryNotify | undefined;
  private readonly streamIdleTimeoutMs: number;

  constructor(
    transports: Transports,
    options: Pick<ClientOptions, "token" | "backoff" | "onRetry" | "streamIdleTimeoutMs"> = {},
  ) {
    let { short, long } = transports;
    // A token read from a file keeps its newline; a token never holds
    // whitespace.
    const token = options.token?.trim() ?? "";
    if (token !== "") {
      short = withBearer(short, token);
      long = withBearer(long, token);
    }
    this.jobService = createConnectClient(JobService, short);
    this.longJobService = createConnectClient(JobService, long);
    this.workerService = createConnectClient(WorkerService, short);
    this.longWorkerService = createConnectClient(WorkerService, long);
    this.queueService = createConnectClient(QueueService, short);
    this.backoff = backoffWithDefaults(options.backoff);
    this.onRetry = options.onRetry;
    this.streamIdleTimeoutMs =
      options.streamIdleTimeoutMs !== undefined && options.streamIdleTimeoutMs > 0 ? options.streamIdleTimeoutMs : 45_000;
  }

  /** retrier is a fresh retry loop with the client's backoff. */
  retrier(backoff: Backoff = this.backoff): Retrier {
    return new Retrier(backoff, this.onRetry);
  }

  /**
   * submitJob creates a job and returns it: QUEUED, PENDING with hold,
   * WAITING with after, or — with wait — as it ended, if it ended within
   * the server's cap. A unique_key another active job holds is an
   * AlreadyActiveError naming that job.
   */
  async submitJob(req: SubmitJobInput, options?: CallOptions): Promise<Job> {
    const service = req.wait === true ? this.longJobService : this.jobService;
    const { job } = await call(() => service.submitJob(submitRequest(req), options), options);
    return mustHave(job, "SubmitJob");
  }

  /** submitJobs creates up to 1,000 jobs of one tenant in one commit, all or none, in order. */
  async submitJobs(reqs: SubmitJobInput[], options?: CallOptions): Promise<Job[]> {
    const { jobs } = await call(() => this.jobService.submitJobs({ jobs: reqs.map(submitRequest) }, options), options);
    return jobs;
  }

  /** startJob moves a PENDING job to QUEUED. */
  async startJob(jobId: string, options?: CallOptions): Promise<Job> {
    const { job } = await call(() => this.jobService.startJob({ jobId }, options), options);
    return mustHave(job, "StartJob");
  }

  /** getJob returns the job in full (payload, result, history). */
  async getJob(jobId: string, options?: CallOptions): Promise<Job> {
    const { job } = await call(() => this.jobService.getJob({ jobId }, options), options);
    return mustHave(job, "GetJob");
  }

  /** cancelJob makes an active job CANCELLED at once; its worker learns it at its next heartbeat. */
  async cancelJob(jobId: string, options?: CallOptions): Promise<Job> {
    const { job } = await call(() => this.jobService.cancelJob({ jobId }, options), options);
    return mustHave(job, "CancelJob");
  }

  /** retryJob makes a FAILED, CANCELLED or LOST job QUEUED again, same id. */
  async retryJob(jobId: string, options?: CallOptions): Promise<Job> {
    const { job } = await call(() => this.jobService.retryJob({ jobId }, options), options);
    return mustHave(job, "RetryJob");
  }

  /** deleteJob removes a terminal job. */
  async deleteJob(jobId: string, options?: CallOptions): Promise<void> {
    await call(() => this.jobService.deleteJob({ jobId }, options), options);
  }

  /** listJobs returns one page, newest first: follow nextPageToken until it is empty. */
  async listJobs(req: ListJobsInput = {}, options?: CallOptions): Promise<ListJobsResponse> {
    return call(() => this.jobService.listJobs(req, options), options);
  }

  /**
   * waitForJob resolves with the job once it has ended, however long that
   * takes: it has no deadline of its own, so bound it with signal. It
   * re-issues WaitJob at once when the server's cap answers with a job
   * still running, and retries a server it cannot reach (restarting,
   * unavailable, a dropped connection) with backoff. A PENDING job is a
   * JobNotStartedError and an unknown one a NotFoundError; any other
   * refusal is thrown as a JobwatchError.
   */
  async waitForJob(jobId: string, options: { signal?: AbortSignal | undefined } = {}): Promise<Job> {
    const { job } = await this.parkUntil(
      (options) => this.longJobService.waitJob({ jobId }, options),
      ({ job }) => job !== undefined && isTerminal(job.state),
      options.signal,
    );
    return mustHave(job, "WaitJob");
  }

  /**
   * waitForJobs is waitForJob for up to 1,000 jobs at once, named by id
   * (jobIds) or as the jobs of a batch (batch), as the Go client's
   * WaitForJobs: it resolves with the WaitJobs answer once every job has
   * ended (mode ALL, the default: unfinishedJobIds is empty) or the first
   * has (mode ANY: jobs holds those that ended). It re-issues WaitJobs at
   * each of the server's caps and retries transient failures with
   * backoff; bound it with a signal. An unknown job is NotFoundError, a
   * held one JobNotStartedError; any other refusal is thrown as it is.
   */
  async waitForJobs(
    req: MessageInitShape<typeof WaitJobsRequestSchema>,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<WaitJobsResponse> {
    return this.parkUntil(
      (options) => this.longJobService.waitJobs(req, options),
      (resp) => (req.mode === WaitMode.ANY ? resp.jobs.length > 0 : resp.unfinishedJobIds.length === 0),
      options.signal,
    );
  }

  /**
   * parkUntil asks a long call (WaitJob, WaitJobs) until its answer is
   * done: again at once after an answer at the server's cap, with backoff
   * after a transient failure, or after an answer "not yet" that came at
   * once (a server shutting down: asking again at once would spin until
   * it has). A refusal is thrown as waitError makes it.
   */
  private async parkUntil<T>(ask: (options: CallOptions) => Promise<T>, done: (answer: T) => boolean, signal?: AbortSignal): Promise<T> {
    const r = this.retrier();
    for (;;) {
      const asked = performance.now();
      let failure: unknown;
      try {
        const answer = await ask(signal === undefined ? {} : { signal });
        if (done(answer)) {
          return answer;
        }
        if (performance.now() - asked >= minParkMs) {
          r.reset();
          continue;
        }
        failure = new Error("server answered without waiting (shutting down?)");
      } catch (err) {
        failure = waitError(err, signal);
        r.failedAfter(asked);
      }
      await r.wait(failure, signal);
    }
  }

  /**
   * watchJob yields each new snapshot of the job, in version order and
   * never the same version twice, and ends after the terminal one. It
   * opens a WatchJob stream and, whenever one ends before the job did
   * (the server's stream lifetime, a restart, a dropped connection),
   * opens another with after_version the last version it yielded,
   * backing off only when the server could not be reached. afterVersion
   * starts after a version the caller has already seen (0: from the
   * current snapshot). A refusal is thrown (NotFoundError for an unknown
   * job), as is the signal's reason; breaking out of the loop closes the
   * stream.
   *
   * One exception to version order: if the server's versions went
   * backwards (its database was restored from a backup) and the job there
   * is already terminal, that snapshot is yielded, because it is the
   * outcome and no higher version will ever come.
   */
  async *watchJob(
    jobId: string,
    options: { afterVersion?: bigint | number | undefined; signal?: AbortSignal | undefined } = {},
  ): AsyncGenerator<Job, void, undefined> {
    const { signal } = options;
    let last = BigInt(options.afterVersion ?? 0);
    const r = this.retrier();
    for (;;) {
      const asked = performance.now();
      let received = false;
      let failure: unknown;
      try {
        const req = { jobId, afterVersion: last };
        for await (const msg of readStream((s) => this.longJobService.watchJob(req, { signal: s }), signal, this.streamIdleTimeoutMs)) {
          received = true;
          const job = msg.job;
          if (job === undefined) {
            continue; // keepalive
          }
          const terminal = isTerminal(job.state);
          if (job.version <= last && !terminal) {
            continue;
          }
          if (job.version > last) {
            last = job.version;
          }
          yield job;
          if (terminal) {
            return;
          }
        }
      } catch (err) {
        failure = waitError(err, signal);
        r.failedAfter(asked);
      }
      if (received) {
        r.reset();
        if (failure === undefined) {
          continue; // a clean end of a live stream: resume at once
        }
      }
      await r.wait(failure ?? new Error("watch stream ended without a snapshot"), signal);
    }
  }

  /**
   * watchJobs yields what a tenant's jobs (or a batch's, with batch) do:
   * each response of WatchJobs streams that carries jobs that changed or
   * ids deleted; keepalives are not yielded. The first responses hold the
   * most recent jobs (up to pageSize), unless resumeToken starts after a
   * token the caller kept. When a stream ends (the server's stream
   * lifetime, a restart, a dropped connection) it opens another with the
   * last resume token received, backing off only when the server could
   * not be reached. A job may come again at a version already yielded
   * across a resume: keep the higher version. A refusal is thrown, as is
   * the signal's reason; breaking out of the loop closes the stream.
   */
  async *watchJobs(input: WatchJobsInput = {}): AsyncGenerator<WatchJobsResponse, void, undefined> {
    const { signal, ...req } = input;
    let resumeToken = req.resumeToken ?? "";
    const r = this.retrier();
    for (;;) {
      const asked = performance.now();
      let received = false;
      let failure: unknown;
      try {
        const ask = { ...req, resumeToken };
        for await (const msg of readStream((s) => this.longJobService.watchJobs(ask, { signal: s }), signal, this.streamIdleTimeoutMs)) {
          received = true;
          if (msg.resumeToken !== "") {
            resumeToken = msg.resumeToken;
          }
          if (msg.jobs.length > 0 || msg.deletedJobIds.length > 0) {
            yield msg;
          }
        }
      } catch (err) {
        if (signal?.aborted) {
          throw signal.reason;
        }
        if (!transient(err, signal)) {
          throw toJobwatchError(err, signal);
        }
        failure = err;
        r.failedAfter(asked);
      }
      if (received) {
        r.reset();
        if (failure === undefined) {
          continue;
        }
      }
      await r.wait(failure ?? new Error("watch stream ended without a response"), signal);
    }
  }
}

/**
 * waitError is what a wait or watch does with err: it throws the error
 * the caller gets, or returns err when it is transient and the call
 * should be retried.
 */
function waitError(err: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted) {
    throw signal.reason;
  }
  if (transient(err, signal)) {
    return err;
  }
  if (err instanceof ConnectError && err.code === Code.FailedPrecondition) {
    throw new JobNotStartedError(err.rawMessage, { cause: err });
  }
  throw toJobwatchError(err, signal);
}

/** call runs a unary call, throwing what toJobwatchError makes of its failure. */
async function call<T>(f: () => Promise<T>, options: CallOptions | undefined): Promise<T> {
  try {
    return await f();
  } catch (err) {
    throw toJobwatchError(err, options?.signal);
  }
}

function mustHave(job: Job | undefined, rpc: string): Job {
  if (job === undefined) {
    throw new Error(`jobwatch: ${rpc} answered without a job`);
  }
  return job;
}

function submitRequest(req: SubmitJobInput): MessageInitShape<typeof SubmitJobRequestSchema> {
  const { payload, runAt, ...rest } = req;
  return {
    ...rest,
    payload: payload === undefined ? undefined : fromJson(ValueSchema, payload, { recursionLimit }),
    runAt: runAt instanceof Date ? timestampFromDate(runAt) : runAt,
  };
}

/**
 * readStream reads the server stream that open starts, and ends it however
 * its reader stops (the stream's end, an error, a break, the caller's
 * signal). connect-node lets go of an HTTP/2 stream only once it has been
 * read to its end, or read again after its signal was aborted: a stream
 * left half read keeps its connection, and Node, from ending until the
 * server closes the idle connection minutes later.
 */
async function* readStream<T>(
  open: (signal: AbortSignal) => AsyncIterable<T>,
  signal: AbortSignal | undefined,
  idleTimeoutMs: number,
): AsyncGenerator<T, void, undefined> {
  const c = new AbortController();
  const onAbort = () => c.abort(signal?.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) {
    c.abort(signal.reason);
  }
  // A stream silent past idleTimeoutMs is cut, which its reader takes as
  // a transient failure (canceled, not by the caller) and opens another.
  const onIdle = () => c.abort(new Error(`no message for ${idleTimeoutMs} ms: the connection is presumed dead`));
  let idle = setTimeout(onIdle, idleTimeoutMs);
  const it = open(c.signal)[Symbol.asyncIterator]();
  let ended = false;
  try {
    for (;;) {
      const next = await it.next().catch((err: unknown) => {
        ended = true;
        throw err;
      });
      clearTimeout(idle);
      if (next.done === true) {
        ended = true;
        return;
      }
      yield next.value;
      idle = setTimeout(onIdle, idleTimeoutMs);
    }
  } finally {
    clearTimeout(idle);
    signal?.removeEventListener("abort", onAbort);
    if (!ended) {
      c.abort();
      try {
        while ((await it.next()).done !== true) {
          // what was on its way when the stream was aborted
        }
      } catch {
        // the abort itself
      }
    }
  }
}
