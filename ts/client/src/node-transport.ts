// Transports for Node (connect-node): the Connect protocol, binary, over
// HTTP/2 (cleartext for http://, as jobwatch serves it) with pings, so a
// silently dead server is noticed in seconds rather than when the
// kernel gives up on the socket.
import type * as http2 from "node:http2";
import { Http2SessionManager, createConnectTransport } from "@connectrpc/connect-node";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { checkURL, recursionLimit, type ClientOptions, type Transports } from "./client.js";
import { refusedStream } from "./errors.js";

/** What Node's createClient takes besides ClientOptions. */
export interface NodeClientOptions extends ClientOptions {
  /**
   * "2" (the default) multiplexes each transport's calls over one
   * connection and pings it while calls are open; "1.1" uses a
   * connection per call in flight.
   */
  httpVersion?: "1.1" | "2" | undefined;
}

/**
 * refusedAsUnavailable makes a stream the server refused unavailable,
 * for every caller of the transport, the generated clients' included
 * (see refusedStream). A stream is refused before any answer, so the
 * call itself rejects, never a message of a stream.
 */
const refusedAsUnavailable: Interceptor = (next) => async (req) => {
  try {
    return await next(req);
  } catch (err) {
    throw refusedStream(err) ?? err;
  }
};

/**
 * GuardedSessionManager is connect-node's HTTP/2 session manager with an
 * 'error' listener of its own on every session a call goes out on. When
 * the pings find a connection dead, connect-node destroys the session
 * with "PING timed out", and Node emits that as the session's 'error'
 * event once its socket has closed; by then the manager may have moved
 * on and taken its listeners off, and an 'error' event without a
 * listener ends the process. An outside probe's Node worker died so, its
 * jobs left to end LOST, when the network went silent under it. The
 * calls on the session fail on their own (unavailable), and are retried
 * as any; the listener only keeps the process alive.
 */
class GuardedSessionManager extends Http2SessionManager {
  private readonly guarded = new WeakSet<http2.Http2Session>();

  override async request(...args: Parameters<Http2SessionManager["request"]>): Promise<http2.ClientHttp2Stream> {
    const stream = await super.request(...args);
    const session = stream.session;
    if (session !== undefined && !this.guarded.has(session)) {
      this.guarded.add(session);
      session.on("error", () => {});
    }
    return stream;
  }
}

/** nodeTransport is one Connect transport to url: one connection pool. */
export function nodeTransport(url: string, httpVersion: "1.1" | "2" = "2"): Transport {
  const common = {
    baseUrl: checkURL(url),
    useBinaryFormat: true,
    jsonOptions: { recursionLimit },
    binaryOptions: { recursionLimit },
    interceptors: [refusedAsUnavailable],
  };
  if (httpVersion === "1.1") {
    return createConnectTransport({ ...common, httpVersion });
  }
  const sessionManager = new GuardedSessionManager(common.baseUrl, { pingIntervalMs: 10_000, pingTimeoutMs: 5_000 });
  return createConnectTransport({ ...common, httpVersion, sessionManager });
}

/**
 * nodeTransports are the client's two transports: the caller's, or two
 * of their own for url, so that parked long calls never share a
 * connection with short ones.
 */
export function nodeTransports(options: NodeClientOptions): Transports {
  if (options.transport !== undefined) {
    return { short: options.transport, long: options.longTransport ?? options.transport };
  }
  const url = checkURL(options.url);
  return {
    short: nodeTransport(url, options.httpVersion),
    long: options.longTransport ?? nodeTransport(url, options.httpVersion),
  };
}
