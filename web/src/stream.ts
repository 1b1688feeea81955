// What the page's resuming streams (feed.ts, logs.ts) share: one server
// stream followed until it ends, fails or goes silent, with a watchdog
// for silence and a judgement of when it is live.
import { ConnectError, type CallOptions } from "@connectrpc/connect";

// Visibility says whether the tab is out of sight. A tab out of sight
// lets go of its streams (after StreamWatch.hiddenMs) and dials them
// again, resuming where they stopped, once it is shown: a browser opens
// at most six HTTP/1.1 connections to one server and shares them among
// all of its tabs, and each jobwatch tab holds one or two (the feed, and
// a running job's log), so a few tabs in the background would leave a new
// one, and every call of the one in front, waiting for a connection.
export interface Visibility {
  // hidden is true while the tab is out of sight, and while the page is
  // left (left()).
  hidden(): boolean;
  // left is true from the moment the page is left (pagehide) until it is
  // shown again (pageshow). A browser may keep a page it left, frozen,
  // in its back/forward cache, streams and all: no timer runs there, so
  // hiddenMs would never pass, and each page left behind would hold its
  // connections until evicted. A left page lets go of its streams at once.
  left?(): boolean;
  // onChange calls f whenever hidden() or left() may have changed, until
  // the function it returns is called.
  onChange(f: () => void): () => void;
}

// pageVisibility is the document's, or undefined outside a browser.
export const pageVisibility: Visibility | undefined = typeof document === "undefined" ? undefined : documentVisibility();

// documentVisibility follows the document's visibilityState, and the
// window's pagehide and pageshow (never unload: a page with an unload
// handler is not kept in the back/forward cache, and leaving such a page
// is exactly what the streams must survive).
function documentVisibility(): Visibility {
  let left = false;
  const listeners = new Set<() => void>();
  // The streams are told synchronously, within pagehide itself: what
  // runs after it may not run until the page is shown again.
  const tell = () => {
    for (const f of [...listeners]) {
      f();
    }
  };
  document.addEventListener("visibilitychange", tell);
  window.addEventListener("pagehide", () => {
    left = true;
    tell();
  });
  window.addEventListener("pageshow", () => {
    left = false;
    tell();
  });
  return {
    hidden: () => left || document.visibilityState === "hidden",
    left: () => left,
    onChange: (f) => {
      listeners.add(f);
      return () => listeners.delete(f);
    },
  };
}

// hiddenMs is how long a tab stays out of sight before it lets go of its
// streams: a glance at another tab keeps them.
export const hiddenMs = 5000;

// whenShown resolves once v says the tab is in sight (true), or stopped
// aborts (false).
export function whenShown(v: Visibility, stopped: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const check = () => {
      if (!v.hidden() || stopped.aborted) {
        off();
        stopped.removeEventListener("abort", check);
        resolve(!stopped.aborted);
      }
    };
    const off = v.onChange(check);
    stopped.addEventListener("abort", check);
    check();
  });
}

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
  // With it, a stream whose tab stays out of sight for hiddenMs (default:
  // the constant), or whose page is left, is ended as "hidden" (see
  // Visibility).
  visibility?: Visibility;
  hiddenMs?: number;
}

// How one stream ended, and whether it was live before it did.
export type StreamEnd = (
  | { kind: "ended" }
  | { kind: "silent" }
  | { kind: "hidden" }
  | { kind: "failed"; error: ConnectError }
) & {
  live: boolean;
};

// followStream opens a stream with open, passing it the call's options,
// and hands each message to each, until the stream ends, fails, stays
// silent for w.silenceMs, its tab stays out of sight for w.hiddenMs,
// its page is left, w.stopped aborts, or each returns true (which ends it
// as "ended").
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
  let hidden = false;
  let hiding: ReturnType<typeof setTimeout> | undefined;
  const judge = () => {
    clearTimeout(hiding);
    if (w.visibility?.left?.()) {
      hidden = true;
      call.abort();
      return;
    }
    if (w.visibility?.hidden()) {
      hiding = setTimeout(() => {
        hidden = true;
        call.abort();
      }, w.hiddenMs ?? hiddenMs);
    }
  };
  const unwatch = w.visibility?.onChange(judge);
  judge();
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
    if (hidden) {
      return { kind: "hidden", live };
    }
    return silent ? { kind: "silent", live } : { kind: "failed", error: ConnectError.from(err), live };
  } finally {
    clearTimeout(watchdog);
    clearTimeout(settle);
    clearTimeout(hiding);
    unwatch?.();
    w.stopped.removeEventListener("abort", onStop);
  }
}
