// Errors callers branch on. Every refusal of the server reaches a caller of
// this package as a JobwatchError carrying the Connect code; the refusals a
// caller usually handles by name have their own class.
import { Code, ConnectError } from "@connectrpc/connect";
import { JobAlreadyActiveSchema, QuotaExceededSchema } from "./gen/jobwatch/v1/jobwatch_pb.js";

export { Code };

/**
 * JobwatchError is a call the server refused, or one that failed on the
 * way: `code` is its Connect code (`Code.NotFound`...), `codeName` the
 * name curl users see ("not_found"), `rawMessage` the server's message
 * without the code, and `cause` the ConnectError it came from.
 */
export class JobwatchError extends Error {
  readonly code: Code;
  readonly rawMessage: string;

  constructor(code: Code, rawMessage: string, options?: { cause?: unknown }) {
    super(`[${codeName(code)}] ${rawMessage}`, options);
    this.name = "JobwatchError";
    this.code = code;
    this.rawMessage = rawMessage;
  }

  /** The code as the wire spells it, such as "already_exists". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** not_found: no such job (or another tenant's), or it ended longer ago than the server's retention. */
export class NotFoundError extends JobwatchError {
  constructor(rawMessage: string, options?: { cause?: unknown }) {
    super(Code.NotFound, rawMessage, options);
    this.name = "NotFoundError";
  }
}

/**
 * already_exists from SubmitJob or RetryJob: another active job of the
 * tenant holds the unique key. `activeJobId` is that job's id, from the
 * JobAlreadyActive detail of the answer ("" if the answer had none, such
 * as one rewritten by a proxy).
 */
export class AlreadyActiveError extends JobwatchError {
  readonly activeJobId: string;
  readonly uniqueKey: string;

  constructor(rawMessage: string, activeJobId: string, uniqueKey: string, options?: { cause?: unknown }) {
    super(Code.AlreadyExists, rawMessage, options);
    this.name = "AlreadyActiveError";
    this.activeJobId = activeJobId;
    this.uniqueKey = uniqueKey;
  }
}

/**
 * resource_exhausted from SubmitJob, SubmitJobs, RetryJob or RetryJobs
 * that would take the tenant's jobs not yet running past its max_queued:
 * nothing of the call was made. The numbers come from the QuotaExceeded
 * detail of the answer. The other resource_exhausted answers (a request
 * too large, a limit of parked calls) are plain JobwatchErrors.
 */
export class QuotaExceededError extends JobwatchError {
  readonly tenant: string;
  readonly maxQueued: bigint;
  /** The tenant's jobs not yet running, counted up to maxQueued + 1. */
  readonly queued: bigint;
  /** How many jobs not yet running the call would have added. */
  readonly adding: bigint;

  constructor(
    rawMessage: string,
    quota: { tenant: string; maxQueued: bigint; queued: bigint; adding: bigint },
    options?: { cause?: unknown },
  ) {
    super(Code.ResourceExhausted, rawMessage, options);
    this.name = "QuotaExceededError";
    this.tenant = quota.tenant;
    this.maxQueued = quota.maxQueued;
    this.queued = quota.queued;
    this.adding = quota.adding;
  }
}

/**
 * failed_precondition from WaitJob (waitForJob): the job is PENDING
 * (submitted with hold) and will not end until someone starts it, so
 * there is nothing to wait for.
 */
export class JobNotStartedError extends JobwatchError {
  constructor(rawMessage: string, options?: { cause?: unknown }) {
    super(Code.FailedPrecondition, rawMessage, options);
    this.name = "JobNotStartedError";
  }
}

/** unauthenticated: no bearer token, or one the server does not know. */
export class UnauthenticatedError extends JobwatchError {
  constructor(rawMessage: string, options?: { cause?: unknown }) {
    super(Code.Unauthenticated, rawMessage, options);
    this.name = "UnauthenticatedError";
  }
}

/** permission_denied: the token's role or tenant may not do this. */
export class PermissionDeniedError extends JobwatchError {
  constructor(rawMessage: string, options?: { cause?: unknown }) {
    super(Code.PermissionDenied, rawMessage, options);
    this.name = "PermissionDeniedError";
  }
}

/** "already_exists" for Code.AlreadyExists: the name curl users see. */
export function codeName(code: Code): string {
  const name = Code[code] ?? "unknown";
  return name.replace(/[A-Z]/g, (c, i: number) => (i > 0 ? "_" : "") + c.toLowerCase());
}

/**
 * toJobwatchError turns what a generated client threw into a
 * JobwatchError (or one of its classes). An abort the caller asked for
 * is returned as the signal's reason, so `await` rethrows what the
 * caller aborted with; anything that is not a ConnectError (a bug in
 * the caller's code) is returned as it is.
 */
export function toJobwatchError(err: unknown, signal?: AbortSignal): unknown {
  if (signal?.aborted) {
    return signal.reason;
  }
  if (err instanceof JobwatchError || !(err instanceof ConnectError)) {
    return err;
  }
  const options = { cause: err };
  const wrongServer = wrongProtocol(err);
  if (wrongServer !== "") {
    return new JobwatchError(err.code, wrongServer, options);
  }
  switch (err.code) {
    case Code.NotFound:
      return new NotFoundError(err.rawMessage, options);
    case Code.AlreadyExists: {
      const [detail] = err.findDetails(JobAlreadyActiveSchema);
      return new AlreadyActiveError(err.rawMessage, detail?.jobId ?? "", detail?.uniqueKey ?? "", options);
    }
    case Code.ResourceExhausted: {
      const [quota] = err.findDetails(QuotaExceededSchema);
      if (quota !== undefined) {
        return new QuotaExceededError(err.rawMessage, quota, options);
      }
      break;
    }
    case Code.Unauthenticated:
      return new UnauthenticatedError(err.rawMessage, options);
    case Code.PermissionDenied:
      return new PermissionDeniedError(err.rawMessage, options);
  }
  return new JobwatchError(err.code, err.rawMessage, options);
}

/**
 * transient reports whether a failed call is worth repeating unchanged:
 * the server could not be reached or went away, or asked to come back
 * later. A call the caller aborted is never transient. unknown and
 * internal count only when this side raised them (a broken connection:
 * the error has a cause from the network stack); sent by the server they
 * are real answers, and repeating them would loop for ever.
 */
export function transient(err: unknown, signal?: AbortSignal): boolean {
  if (signal?.aborted) {
    return false;
  }
  const ce = err instanceof JobwatchError ? err.cause : err;
  if (!(ce instanceof ConnectError)) {
    return false;
  }
  switch (ce.code) {
    case Code.Unavailable: // refused, reset, GOAWAY, store down
      return !misconfigured(ce);
    case Code.Aborted: // the server gave up on the call, or the connection broke
    case Code.ResourceExhausted: // too many parked calls: try later
    case Code.Canceled: // the server or a proxy reset the stream, not us
    case Code.DeadlineExceeded: // a proxy's timeout, not ours
      return true;
    case Code.Unknown:
    case Code.Internal:
      return ce.cause !== undefined && !misconfigured(ce);
  }
  return false;
}

/**
 * refusedStream is err as unavailable when it is an HTTP/2 stream the
 * server refused (RST_STREAM REFUSED_STREAM: it is shutting down, or holds
 * as many streams as it allows), or undefined for any other error. Node
 * reports that as a stream error, which connect-node calls internal; but
 * the server did not take the call, so it is safe to send again.
 */
export function refusedStream(err: unknown): ConnectError | undefined {
  if (!(err instanceof ConnectError) || err.code === Code.Unavailable || !/REFUSED_STREAM/.test(causeText(err))) {
    return undefined;
  }
  return new ConnectError(
    "the server closed the stream without taking the call (HTTP/2 REFUSED_STREAM: shutting down, or at its stream limit); it is safe to send again",
    Code.Unavailable,
    undefined,
    undefined,
    err,
  );
}

/**
 * misconfigured reports whether a failure this side raised is an address
 * that can never answer as given, as the Go client's does: https:// to a
 * server that speaks plain HTTP (OpenSSL's "wrong version number"), or a
 * certificate this machine does not trust or that names another host.
 * Retrying it would loop for ever.
 */
function misconfigured(ce: ConnectError): boolean {
  const text = causeText(ce);
  return /ERR_SSL_|CERT_|certificate|self[- ]signed|ERR_TLS_CERT/i.test(text) || wrongProtocol(ce) !== "";
}

function causeText(ce: ConnectError): string {
  const cause = ce.cause as { code?: unknown; message?: unknown } | undefined;
  return `${ce.message} ${String(cause?.code ?? "")} ${String(cause?.message ?? "")}`;
}

/**
 * wrongProtocol says, for a failure this side raised, that the address
 * speaks another protocol than the client does, or "": an http:// server
 * that answers HTTP/2 with HTTP/1 (another kind of server, or a proxy
 * that does not pass HTTP/2 on; Node's HTTP/2 client sees a protocol
 * error), or an https:// address of a server that speaks plain HTTP.
 * As the Go client's SpeaksHTTP1.
 */
function wrongProtocol(ce: ConnectError): string {
  const text = causeText(ce);
  if (/ERR_HTTP2_ERROR/.test(text) && /Protocol error/i.test(text)) {
    return (
      "the server did not answer in HTTP/2 (a protocol error): is the URL a jobwatch server's? " +
      'A proxy in front of it that speaks only HTTP/1.1 needs httpVersion: "1.1"'
    );
  }
  if (/wrong version number/i.test(text)) {
    return "the server does not speak TLS at this https:// URL: a jobwatch server without a TLS proxy in front is http://";
  }
  return "";
}
