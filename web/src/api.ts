// The page's one connection to the server: Connect over fetch (HTTP/1.1 is
// enough), to the origin that served the page, with the bearer token the
// user typed, if any.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { JobService, QueueService } from "./gen/jobwatch/v1/jobwatch_pb";

const tokenKey = "jobwatch.token";

// The token lives in sessionStorage: a reload of the tab keeps it, but it
// is gone when the tab closes and is never shared with other tabs or
// written to disk for later, as localStorage would. It is sent only to the
// origin that served the page.
export function savedToken(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function saveToken(token: string): void {
  if (token === "") {
    sessionStorage.removeItem(tokenKey);
  } else {
    sessionStorage.setItem(tokenKey, token);
  }
}

const bearer: Interceptor = (next) => (req) => {
  const token = savedToken();
  if (token !== "") {
    req.header.set("Authorization", `Bearer ${token}`);
  }
  return next(req);
};

// recursionLimit lets the page decode every job the server stores. The
// engine takes payloads and results nested up to 128 levels deep
// (jobtype.MaxJSONDepth); protobuf-es gives up at 100 nested messages unless
// told otherwise, and counts one per level in JSON, two in binary (a Value
// and its ListValue or Struct), plus the response and the job around them.
export const recursionLimit = 2 * 128 + 8;

const transport = createConnectTransport({
  baseUrl: location.origin,
  interceptors: [bearer],
  jsonOptions: { recursionLimit },
  binaryOptions: { recursionLimit },
});

export type JobClient = Client<typeof JobService>;
export type QueueClient = Client<typeof QueueService>;

export const jobClient: JobClient = createClient(JobService, transport);
export const queueClient: QueueClient = createClient(QueueService, transport);
