// The page's one connection to the server: the jobwatch TypeScript client
// library (@jobwatch/client, ts/client, bundled from its source) over
// Connect on fetch (HTTP/1.1 is enough), to the origin that served the
// page, with the bearer token the user typed, if any. Its typed calls
// (submit, get, retry, cancel, delete) and errors serve the page's
// buttons; its generated clients the rest, the page's own resuming
// streams included (feed.ts, logs.ts, batch.ts).
import type { Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { createClient, recursionLimit, type JobwatchClient } from "@jobwatch/client";

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

// bearer sends the token saved now, call by call: the user may change it
// at any time, and the library's own token option is fixed at creation.
const bearer: Interceptor = (next) => (req) => {
  const token = savedToken();
  if (token !== "") {
    req.header.set("Authorization", `Bearer ${token}`);
  }
  return next(req);
};

// The library's recursionLimit lets the page decode every job the server
// stores (payloads and results nested up to 128 levels deep).
const transport = createConnectTransport({
  baseUrl: location.origin,
  interceptors: [bearer],
  jsonOptions: { recursionLimit },
  binaryOptions: { recursionLimit },
});

// client is the library's: the browser pools connections, so short and
// long calls share the one transport.
export const client: JobwatchClient = createClient({ transport });

export type JobClient = JobwatchClient["jobService"];
export type QueueClient = JobwatchClient["queueService"];

export const jobClient: JobClient = client.jobService;
export const queueClient: QueueClient = client.queueService;
