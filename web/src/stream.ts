// What the page's resuming streams (feed.ts, logs.ts) share: one server
// stream followed until it ends, fails or goes silent, with a watchdog
// for silence and a judgement of when it is live.
import { ConnectError, type CallOptions } from "@connectrpc/connect";

export interface StreamWatch {
  // The follower's own stop: aborting it ends the stream.
  stopped: AbortSignal;
  // A stream that delivers nothing, not even the server's keepalive, for
  // this long is presumed dead and ended as "silent".
  silenceMs: number;
  // A stream counts as live once a message arrives, or once it has stayed
  // open this long after its headers: Connect sends a stream's error
  // after a 200 and its headers, so headers alone prove nothing.
  settleMs: number;
  // Told once, when the stream first counts as live.
  onLive?(): void;
}

// How one stream ended, and whether it was live before it did.
export type StreamEnd = ({ kind: "ended" } | { kind: "silent" } | { kind: "failed"; error: ConnectError }) & {
  live: boolean;
};

// followStream opens a stream with open, passing it the call's options,
// and hands each message to each, until the stream ends, fails, stays
// silent for w.silenceMs, w.stopped aborts, or each returns true (which
// ends it as "ended").
export async function followStream<T>(
  w: StreamWatch,
  open: (opts: CallOptions) => AsyncIterable<T>,
  each: (msg: T) => boolean | void,
): Promise<StreamEnd> {
  const call = new AbortController();
  const onStop = () => call.abort();
  w.stopped.addEventListener("abort", onStop);
  let silent = false;
  let watchdog: ReturnType<typeof setTimeout> | undefined;
  const heard = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => {
      silent = true;
      call.abort();
    }, w.silenceMs);
  };
  let live = false;
  let settle: ReturnType<typeof setTimeout> | undefined;
  const goLive = () => {
    clearTimeout(settle);
    if (!live) {
      live = true;
      w.onLive?.();
    }
  };
  heard(); // also bounds a dial that never gets an answer
  try {
    const stream = open({
      signal: call.signal,
      timeoutMs: 0,
      onHeader: () => {
        heard();
        settle = setTimeout(goLive, w.settleMs);
      },
    });
    for await (const msg of stream) {
      heard();
      goLive();
      if (each(msg) === true) {
        break;
      }
    }
    return { kind: "ended", live };
  } catch (err) {
    return silent ? { kind: "silent", live } : { kind: "failed", error: ConnectError.from(err), live };
  } finally {
    clearTimeout(watchdog);
    clearTimeout(settle);
    w.stopped.removeEventListener("abort", onStop);
  }
}
