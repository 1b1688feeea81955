// What both entry points export: the client, its errors and the
// generated API types, so a caller needs no second import for them.
export {
  JobwatchClient,
  checkURL,
  isTerminal,
  jobJson,
  payloadOf,
  recursionLimit,
  resultOf,
  withBearer,
  type ClientOptions,
  type GetJobLogsInput,
  type ListJobsInput,
  type SubmitJobInput,
  type Transports,
  type WatchJobLogsInput,
  type WatchJobsInput,
} from "./client.js";
export {
  AlreadyActiveError,
  Code,
  JobNotStartedError,
  JobwatchError,
  NotFoundError,
  PermissionDeniedError,
  QuotaExceededError,
  UnauthenticatedError,
  codeName,
  toJobwatchError,
  transient,
} from "./errors.js";
export { Retrier, defaultBackoff, sleep, type Backoff, type RetryNotify } from "./backoff.js";
// A job's times are Timestamps: timestampDate(job.createdAt) is a Date,
// from the same @bufbuild/protobuf the client's types come from.
export { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
export * from "./gen/jobwatch/v1/jobwatch_pb.js";
