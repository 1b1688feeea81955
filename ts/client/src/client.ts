// The client: typed calls over the generated Connect clients, and the
// loops every caller of a job service ends up writing — waitForJob, and
// watchJob / watchJobs / watchJobLogs that resume across disconnects —
// written once, as the Go client has them (client/wait.go, client/logs.go). It knows no transport: the
// entry points (node.ts, browser.ts) make one, or the caller passes one.
import { ConnectError, createClient as createConnectClient, type CallOptions, type Client, type Transport } from "@connectrpc/connect";
import { create, fromJson, toJson, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  JobSchema,
  JobService,
  JobState,
  QueueService,
  WaitMode,
  WorkerService,
  type GetJobLogsResponse,
  type Job,
  type ListJobsRequestSchema,
  type ListJobsResponse,
  type SubmitJobRequestSchema,
  WaitJobsRequestSchema,
  type WaitJobsResponse,
  WaitJobsResponseSchema,
  type WatchJobsRequestSchema,
  type WatchJobsResponse,
  type WatchJobLogsResponse,
  WatchJobLogsResponseSchema,
} from "./gen/jobwatch/v1/jobwatch_pb.js";
import { backoffWithDefaults, Retrier, type Backoff, type RetryNotify } from "./backoff.js";
import { Code, JobNotStartedError, JobwatchError, toJobwatchError, transient } from "./errors.js";
import { jsonText } from "./json.js";

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
   * The transport of long calls (WaitJob, WatchJob, WatchJobs,
   * WatchJobLogs, ClaimJob and SubmitJob with wait). Default: in Node a second transport of its
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

/** The most jobs one WaitJobs waits for (the server's limit), as many as a page of ListJobs may hold. */
const maxBatchJobs = 1000;

/**
 * What a retry notification says about a wait the server answered at
 * once because it held as many parked calls as it may (in all, of the
 * caller's tenant, or of its connection): the answer says so (the header
 * Jobwatch-Parked-Calls: full), however long it took to arrive, and the
 * wait backs off before it asks again.
 */
const parkedFullMessage = "server answered without waiting: its parked calls are full";

/** parkedFull reports whether an answer's headers mark it as given at once for that reason. */
function parkedFull(h: Headers): boolean {
  return h.get("Jobwatch-Parked-Calls") === "full";
}

/** A submission: SubmitJobRequest, with the payload as plain JSON and run_at as a Date if you like. */
export type SubmitJobInput = Omit<MessageInitShape<typeof SubmitJobRequestSchema>, "$typeName" | "payload" | "runAt"> & {
  payload?: JsonValue | undefined;
  runAt?: Date | Timestamp | undefined;
};

export type ListJobsInput = MessageInitShape<typeof ListJobsRequestSchema>;

/** What watchJobs takes: WatchJobsRequest and an AbortSignal. */
export type WatchJobsInput = MessageInitShape<typeof WatchJobsRequestSchema> & { signal?: AbortSignal | undefined };

/** Which page of a job's log getJobLogs reads. */
export interface GetJobLogsInput {
  /** The last seq the caller has; 0 (the default) starts with the oldest line kept. */
  afterSeq?: bigint | number | undefined;
  /** The most lines of the page; 0 (the default) or more than 1,000 is the server's 1,000. */
  limit?: number | undefined;
}

/** What watchJobLogs takes. */
export interface WatchJobLogsInput {
  /** The last seq the caller has seen; 0 (the default) starts with the oldest line kept. */
  afterSeq?: bigint | number | undefined;
  signal?: AbortSignal | undefined;
}

const terminalStates: ReadonlySet<JobState> = new Set([
  JobState.SUCCEEDED,
  JobState.FAILED,
  JobState.CANCELLED,
  JobState.LOST,
]);

/** isTerminal reports whether a job in state s has ended: it changes again only if a retry (RetryJob) makes it QUEUED for another run. */
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
    const submit = () => this.jobService.submitJobs({ jobs: reqs.map((req, i) => submitRequest(req, `jobs[${i}].payload`)) }, options);
    const { jobs } = await call(submit, options);
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
   * WaitForJobs: it resolves with one WaitJobs answer, as if the server
   * had waited that long, once every job has ended (mode ALL, the
   * default) or the first has (mode ANY). After an answer at the
   * server's cap that does not meet the mode yet it asks again at once,
   * for the unfinished jobs only, and it retries transient failures with
   * backoff; bound it with a signal.
   *
   * With ALL the answer holds every job, ended, in the order asked
   * (jobIds, a repeated id once) or submitted (batch), and no
   * unfinishedJobIds. With ANY it holds the jobs that had ended when the
   * server answered, and the ids of the others, in the same order. A
   * batch's jobs are those its first answer names: jobs submitted to the
   * batch later are not waited for. A job deleted before an answer showed
   * it ended (only an ended job can be deleted) counts as ended, as the
   * server counts it, and is in neither list. An unknown job is
   * NotFoundError, a held one JobNotStartedError; any other refusal is
   * thrown as it is.
   */
  async waitForJobs(
    req: MessageInitShape<typeof WaitJobsRequestSchema>,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<WaitJobsResponse> {
    const { signal } = options;
    const r = this.retrier();
    const { jobIds, batch, tenant, mode, view } = create(WaitJobsRequestSchema, req);
    const anyEnded = mode === WaitMode.ANY;
    let ask = req;
    // order is the jobs waited for, in the order of the answer: known at
    // once for ids, from the first answer for a batch.
    let order = jobIds.length > 0 ? distinct(jobIds) : undefined;
    let asked = order?.length ?? 0; // jobs in ask; 0 for a batch
    const ended = new Map<string, Job>();
    const allEnded = (): WaitJobsResponse =>
      create(WaitJobsResponseSchema, { jobs: (order ?? []).flatMap((id) => ended.get(id) ?? []) });
    for (;;) {
      const first = ask === req;
      const start = performance.now();
      let full = false;
      let resp: WaitJobsResponse;
      try {
        resp = await this.longJobService.waitJobs(ask, callOptions(signal, (h) => (full = parkedFull(h))));
      } catch (err) {
        const deleted = first ? undefined : deletedJob(err, ask.jobIds ?? []);
        if (deleted !== undefined) {
          // A job the last answer had unfinished ended and was deleted
          // since: it counts as ended, as the server counts it within
          // one call, and is in neither list.
          const rest = (ask.jobIds ?? []).filter((id) => id !== deleted);
          if (anyEnded) {
            return create(WaitJobsResponseSchema, { unfinishedJobIds: rest });
          }
          if (rest.length === 0) {
            return allEnded();
          }
          ask = { ...ask, jobIds: rest };
          asked = rest.length;
          continue;
        }
        const failure = waitError(err, signal);
        r.failedAfter(start);
        await r.wait(failure, signal);
        continue;
      }
      const unfinished = resp.unfinishedJobIds;
      // A job deleted meanwhile is in neither list: it ended.
      if (anyEnded && (resp.jobs.length > 0 || resp.jobs.length + unfinished.length < asked)) {
        return resp;
      }
      if (!anyEnded && unfinished.length === 0 && first) {
        return resp;
      }
      for (const j of resp.jobs) {
        ended.set(j.id, j);
      }
      if (!anyEnded && unfinished.length === 0) {
        return allEnded();
      }
      while (order === undefined) {
        try {
          order = await this.batchOrder(tenant, batch, resp, signal);
        } catch (err) {
          if (signal?.aborted) {
            throw signal.reason;
          }
          if (!transient(err, signal)) {
            throw toJobwatchError(err, signal);
          }
          await r.wait(err, signal);
        }
      }
      ask = { jobIds: unfinished, tenant, mode, view };
      asked = unfinished.length;
      await this.nextAsk(r, start, full, signal);
    }
  }

  /**
   * batchOrder is the jobs of a batch's first WaitJobs answer in the
   * order they were submitted. The answer lists the ended jobs and the
   * others each in that order, but not how the two lists interleave;
   * ListJobs of the batch (newest first) does. Jobs submitted to the
   * batch since are left out, and so is a job deleted since (it counts as
   * ended).
   */
  private async batchOrder(tenant: string, batch: string, first: WaitJobsResponse, signal: AbortSignal | undefined): Promise<string[]> {
    if (first.jobs.length === 0) {
      return first.unfinishedJobIds;
    }
    const want = new Set([...first.jobs.map((j) => j.id), ...first.unfinishedJobIds]);
    const newestFirst: string[] = [];
    let pageToken = "";
    while (newestFirst.length < want.size) {
      const resp = await this.jobService.listJobs({ tenant, batch, pageSize: maxBatchJobs, pageToken }, callOptions(signal));
      newestFirst.push(...resp.jobs.filter((j) => want.has(j.id)).map((j) => j.id));
      if (resp.nextPageToken === "") {
        break;
      }
      pageToken = resp.nextPageToken;
    }
    return newestFirst.reverse();
  }

  /**
   * nextAsk waits before a long call that answered "not yet" is asked
   * again: not at all after an answer at the server's cap; with backoff
   * after one the server marked as given at once because its parked
   * calls are full (however long it took to arrive: a distant server),
   * or after one that came at once (a server shutting down: asking again
   * at once would spin until it has). start is when the call was asked,
   * full whether its answer carried Jobwatch-Parked-Calls: full.
   */
  private async nextAsk(r: Retrier, start: number, full: boolean, signal: AbortSignal | undefined): Promise<void> {
    if (full) {
      await r.wait(new Error(parkedFullMessage), signal);
      return;
    }
    if (performance.now() - start >= minParkMs) {
      r.reset();
      return;
    }
    await r.wait(new Error("server answered without waiting (shutting down?)"), signal);
  }

  /**
   * parkUntil asks a long call (WaitJob) until its answer is done, as
   * nextAsk spaces its asks, and with backoff after a transient failure.
   * A refusal is thrown as waitError makes it.
   */
  private async parkUntil<T>(ask: (options: CallOptions) => Promise<T>, done: (answer: T) => boolean, signal?: AbortSignal): Promise<T> {
    const r = this.retrier();
    for (;;) {
      const asked = performance.now();
      let full = false;
      let answer: T;
      try {
        answer = await ask(callOptions(signal, (h) => (full = parkedFull(h))));
      } catch (err) {
        const failure = waitError(err, signal);
        r.failedAfter(asked);
        await r.wait(failure, signal);
        continue;
      }
      if (done(answer)) {
        return answer;
      }
      await this.nextAsk(r, asked, full, signal);
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
   * current snapshot); if the job had already ended at that version, the
   * iteration ends at once without yielding anything (the server ends
   * such a stream at once with nothing to send, and GetJob confirms the
   * job is terminal at that version). A refusal is thrown (NotFoundError
   * for an unknown job), as is the signal's reason; breaking out of the
   * loop closes the stream.
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
    let yielded = false;
    yield* this.resumable({
      open: (s) => this.longJobService.watchJob({ jobId, afterVersion: last }, { signal: s }),
      take: (msg) => {
        const job = msg.job;
        if (job === undefined) {
          return undefined; // keepalive
        }
        const terminal = isTerminal(job.state);
        if (job.version <= last && !terminal) {
          return undefined;
        }
        if (job.version > last) {
          last = job.version;
        }
        yielded = true;
        return { value: job, end: terminal };
      },
      ended: async (received) => {
        if (received) {
          return undefined; // a clean end of a live stream: resume at once
        }
        // A clean end with nothing sent: a server shutting down, or the
        // job ended at a version we hold already (afterVersion its
        // terminal one), which the server answers so, at once, every
        // time. Only GetJob tells the two apart.
        const ended = await this.endedAt(jobId, last, signal);
        if (ended === undefined) {
          return new Error("watch stream ended without a snapshot");
        }
        // If what we yielded at that version was not terminal, the
        // server's versions went backwards, and this is the outcome.
        return { value: yielded ? ended : undefined, end: true };
      },
      failed: waitError,
      signal,
    });
  }

  /**
   * endedAt is the job if it is terminal at version last or below (a
   * watch after last would never hear of it again), or undefined if it
   * is not, or if GetJob failed: the watch's next stream says why.
   */
  private async endedAt(jobId: string, last: bigint, signal: AbortSignal | undefined): Promise<Job | undefined> {
    let job: Job | undefined;
    try {
      ({ job } = await this.jobService.getJob({ jobId }, callOptions(signal)));
    } catch {
      if (signal?.aborted) {
        throw signal.reason;
      }
      return undefined;
    }
    return job !== undefined && isTerminal(job.state) && job.version <= last ? job : undefined;
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
   * across a resume: keep the higher version, except after a response
   * with startedOver (yielded even without jobs): the server could not
   * resume from the token (its database restored from an older copy,
   * say) and started over with the most recent jobs, so take its
   * snapshots from there whatever their versions, and ask getJob about
   * the jobs held from before that it does not bring. A refusal is
   * thrown, as is the signal's reason; breaking out of the loop closes
   * the stream.
   */
  async *watchJobs(input: WatchJobsInput = {}): AsyncGenerator<WatchJobsResponse, void, undefined> {
    const { signal, ...req } = input;
    let resumeToken = req.resumeToken ?? "";
    yield* this.resumable({
      open: (s) => this.longJobService.watchJobs({ ...req, resumeToken }, { signal: s }),
      take: (msg) => {
        if (msg.resumeToken !== "") {
          resumeToken = msg.resumeToken;
        }
        if (msg.jobs.length > 0 || msg.deletedJobIds.length > 0 || msg.startedOver) {
          return { value: msg };
        }
        return undefined; // keepalive
      },
      ended: async (received) => (received ? undefined : new Error("watch stream ended without a response")),
      failed: watchError,
      signal,
    });
  }

  /**
   * getJobLogs is one page of the job's log (GetJobLogs), as the Go
   * client's Logs: at most limit lines (0: the server's 1,000) after
   * afterSeq (0: from the oldest kept), oldest first. more says to ask
   * again with afterSeq the last line's seq, gap that lines after
   * afterSeq are no longer kept (the queue's max_log_bytes), jobEnded
   * that no line will follow the last one kept. An unknown job (or
   * another tenant's) is NotFoundError. It is a page, as listJobs is,
   * not an iterator: a reader of the whole log follows more, and one
   * that wants lines as they come uses watchJobLogs.
   */
  async getJobLogs(jobId: string, page: GetJobLogsInput = {}, options?: CallOptions): Promise<GetJobLogsResponse> {
    const req = { jobId, afterSeq: BigInt(page.afterSeq ?? 0), limit: page.limit ?? 0 };
    return call(() => this.jobService.getJobLogs(req, options), options);
  }

  /**
   * watchJobLogs yields the job's log after afterSeq (0: every line
   * kept) as the server sends it, a batch of lines at a time, each batch
   * with the gap before it if lines were dropped (the queue's
   * max_log_bytes) before the reader got them; it never yields a line
   * twice or out of order, nor a keepalive, but for one case: when it
   * resumes after a seq past the end of the server's log (a database
   * restored from an older copy), the server sends the log from its
   * oldest line kept, and it yields those lines, though their seqs go
   * back, rather than skip them as seen. It ends after the job has ended
   * and its last line was yielded. A batch is a WatchJobLogsResponse
   * with lines and gap; jobEnded is never set on one.
   *
   * It follows WatchJobLogs streams as watchJob follows WatchJob: when a
   * stream ends before the job did (the server's stream lifetime, a
   * restart, a dropped connection, streamIdleTimeoutMs without a
   * message) it opens another with after_seq the last seq yielded,
   * backing off only when the server could not be reached. A stream that
   * ended cleanly without job_ended (so also one from a server older
   * than that field) is followed by a GetJobLogs that tells whether the
   * job has ended. A refusal is thrown (NotFoundError for an unknown
   * job), as is the signal's reason; breaking out of the loop closes the
   * stream. The Go client's WatchLogs does the same.
   */
  async *watchJobLogs(jobId: string, options: WatchJobLogsInput = {}): AsyncGenerator<WatchJobLogsResponse, void, undefined> {
    const { signal } = options;
    // last is the seq of the last line yielded, or the one before the
    // first line after the last gap yielded; gotLines, whether the
    // current stream has sent any lines.
    let last = BigInt(options.afterSeq ?? 0);
    let gotLines = false;
    yield* this.resumable({
      open: (s) => {
        gotLines = false;
        return this.longJobService.watchJobLogs({ jobId, afterSeq: last }, { signal: s });
      },
      take: (msg) => {
        if (msg.jobEnded) {
          return { end: true };
        }
        let lines = msg.lines;
        const newest = lines.at(-1);
        if (!gotLines && newest !== undefined && newest.seq < last) {
          // A stream's first lines all before the after_seq it was
          // opened with: the server's log ends before that seq (a
          // database restored from an older copy), so it sends its
          // log from the oldest line kept, which this reader has not
          // seen (a line of that seq it had was another), and the
          // gap before it, if any.
          last = 0n;
        }
        gotLines ||= lines.length > 0;
        const fresh = lines.findIndex((l) => l.seq > last);
        lines = fresh < 0 ? [] : lines.slice(fresh); // the rest were yielded (a server that resent them)
        const gap = msg.gap !== undefined && msg.gap.resumeFrom > last + 1n ? msg.gap : undefined;
        if (lines.length === 0 && gap === undefined) {
          return undefined; // a keepalive
        }
        if (gap !== undefined) {
          last = gap.resumeFrom - 1n;
        }
        last = lines.at(-1)?.seq ?? last;
        return { value: create(WatchJobLogsResponseSchema, gap === undefined ? { lines } : { lines, gap }) };
      },
      ended: async (received, asked) => {
        // A clean end without job_ended: the stream's lifetime passed,
        // the server shut down, or a server older than job_ended saw the
        // job end. Ask which.
        const page = await this.jobService.getJobLogs({ jobId, afterSeq: last, limit: 1 }, callOptions(signal));
        if (page.jobEnded && page.lines.length === 0 && page.gap === undefined) {
          return { end: true };
        }
        if (received || performance.now() - asked >= minParkMs) {
          return undefined; // more to come, after a stream that lived: resume at once
        }
        return new Error("log stream ended without a message (shutting down?)");
      },
      failed: watchError,
      signal,
    });
  }

  /**
   * resumable is the resume loop of watchJob, watchJobs and watchJobLogs;
   * watch holds what each does its own way. It reads the stream open
   * starts (readStream: one silent for streamIdleTimeoutMs counts as
   * failed), yields what take makes of each message, and opens another
   * when that one ends. After a transient failure it backs off, from the
   * first step if the stream sent a message or was held long enough to
   * have reached a live server (Retrier.failedAfter); after a clean end
   * it does what ended says: open the next at once, or back off first
   * when nothing says the server is live.
   */
  private async *resumable<M, T>(watch: Resumable<M, T>): AsyncGenerator<T, void, undefined> {
    const { open, take, ended, failed, signal } = watch;
    const r = this.retrier();
    for (;;) {
      const asked = performance.now();
      let received = false;
      let next: Step<T> | Error | undefined;
      try {
        for await (const msg of readStream(open, signal, this.streamIdleTimeoutMs)) {
          received = true;
          const step = take(msg);
          if (step?.value !== undefined) {
            yield step.value;
          }
          if (step?.end === true) {
            return;
          }
        }
        next = await ended(received, asked);
      } catch (err) {
        const failure = failed(err, signal);
        r.failedAfter(asked);
        if (received) {
          r.reset();
        }
        await r.wait(failure, signal);
        continue;
      }
      if (next instanceof Error) {
        await r.wait(next, signal);
        continue;
      }
      if (next?.value !== undefined) {
        yield next.value;
      }
      if (next?.end === true) {
        return;
      }
      r.reset();
    }
  }
}

/**
 * Step is what a resumable watch makes of a message or of a stream's
 * clean end: value to yield, if any, and end when the watch is over
 * after it.
 */
interface Step<T> {
  value?: T | undefined;
  end?: boolean | undefined;
}

/** Resumable is what one watch does its own way, for resumable. */
interface Resumable<M, T> {
  /**
   * open starts one stream with signal, from the state the watch keeps
   * of where it got to (the last version, resume token or seq).
   */
  open: (signal: AbortSignal) => AsyncIterable<M>;
  /**
   * take is what to do with a message: it moves that state on and says
   * what to yield (undefined: nothing, as for a keepalive or what was
   * yielded already).
   */
  take: (msg: M) => Step<T> | undefined;
  /**
   * ended is what follows a stream that ended without an error, having
   * sent messages (received) or not, asked at asked (performance.now()):
   * undefined to open the next at once, an Error to back off for it
   * first, or a Step (the next opens at once unless it ends the watch).
   * What it throws counts as the stream's failure.
   */
  ended: (received: boolean, asked: number) => Promise<Step<T> | Error | undefined>;
  /**
   * failed throws the error the caller gets for err, or returns err when
   * it is transient and the watch goes on (waitError, watchError).
   */
  failed: (err: unknown, signal: AbortSignal | undefined) => unknown;
  /** signal is the caller's: its abort ends the watch with its reason. */
  signal: AbortSignal | undefined;
}

/**
 * watchError is what watchJobs and watchJobLogs do with err (a stream's,
 * or that of the GetJobLogs after a log stream's clean end): it throws
 * the error the caller gets (NotFoundError for an unknown job), or
 * returns err when it is transient and the watch should go on.
 */
function watchError(err: unknown, signal: AbortSignal | undefined): unknown {
  if (signal?.aborted) {
    throw signal.reason;
  }
  if (transient(err, signal)) {
    return err;
  }
  throw toJobwatchError(err, signal);
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

/**
 * deletedJob is the job of ids that err (a WaitJobs refusal) says is not
 * found ("<id>: job not found"), or undefined when it says anything else.
 * Asked again for jobs a previous answer had unfinished, that is a job
 * that has ended and been deleted since.
 */
function deletedJob(err: unknown, ids: readonly string[]): string | undefined {
  if (!(err instanceof ConnectError) || err.code !== Code.NotFound) {
    return undefined;
  }
  const id = err.rawMessage.match(/^(.*): job not found$/)?.[1];
  return id !== undefined && ids.includes(id) ? id : undefined;
}

/** distinct is ids without repeats, in order. */
function distinct(ids: readonly string[]): string[] {
  return [...new Set(ids)];
}

/** callOptions is the options of a call with signal (if any) and onHeader. */
function callOptions(signal: AbortSignal | undefined, onHeader?: (h: Headers) => void): CallOptions {
  return { ...(signal === undefined ? {} : { signal }), ...(onHeader === undefined ? {} : { onHeader }) };
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

/**
 * submitRequest is req as the wire takes it. A payload the wire would
 * change (see jsonText) is invalid_argument, as the server says of one
 * it will not store; field names it ("payload", "jobs[2].payload").
 */
function submitRequest(req: SubmitJobInput, field = "payload"): MessageInitShape<typeof SubmitJobRequestSchema> {
  const { payload, runAt, ...rest } = req;
  if (payload !== undefined) {
    try {
      jsonText(payload, field);
    } catch (err) {
      throw new JobwatchError(Code.InvalidArgument, err instanceof Error ? err.message : String(err), { cause: err });
    }
  }
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
