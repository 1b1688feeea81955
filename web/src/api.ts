// The page's one connection to the server: Connect over fetch (HTTP/1.1 is
// enough), to the origin that served the page, with the bearer token the
// user typed, if any.
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { JobService, QueueService } from "./gen/jobwatch/v1/jobwatch_pb";

const tokenKey = "jobwatch.token";

// The token lives in localStorage so a reload keeps it; it is sent only to
// the origin that served the page.
export function savedToken(): string {
  return localStorage.getItem(tokenKey) ?? "";
}

export function saveToken(token: string): void {
  if (token === "") {
    localStorage.removeItem(tokenKey);
  } else {
    localStorage.setItem(tokenKey, token);
  }
}

const bearer: Interceptor = (next) => (req) => {
  const token = savedToken();
  if (token !== "") {
    req.header.set("Authorization", `Bearer ${token}`);
  }
  return next(req);
};

const transport = createConnectTransport({
  baseUrl: location.origin,
  interceptors: [bearer],
});

export type JobClient = Client<typeof JobService>;
export type QueueClient = Client<typeof QueueService>;

export const jobClient: JobClient = createClient(JobService, transport);
export const queueClient: QueueClient = createClient(QueueService, transport);
