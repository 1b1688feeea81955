// jobwatch's one retry policy, as the Go client has it (client/backoff.go):
// the first retry waits up to initialMs, each next one up to twice as
// long, at most maxMs, each a random delay between 0 and that step ("full
// jitter"), so many clients cut off together do not come back together.

/** Backoff spaces out retries. */
export interface Backoff {
  /** The first retry's step. Default 100 ms. */
  initialMs: number;
  /** The longest step. Default 10 s; below initialMs means initialMs. */
  maxMs: number;
}

export const defaultBackoff: Readonly<Backoff> = { initialMs: 100, maxMs: 10_000 };

/** withDefaults fills in what b leaves out. */
export function backoffWithDefaults(b?: Partial<Backoff>): Backoff {
  const initialMs = b?.initialMs !== undefined && b.initialMs > 0 ? b.initialMs : defaultBackoff.initialMs;
  const maxMs = b?.maxMs !== undefined && b.maxMs > 0 ? b.maxMs : defaultBackoff.maxMs;
  return { initialMs, maxMs: Math.max(maxMs, initialMs) };
}

/** Called before each retry's sleep: what failed and how long the sleep is. */
export type RetryNotify = (err: unknown, delayMs: number) => void;

/** heldCallMs: see Retrier.failedAfter; the Go client's heldCall. */
const heldCallMs = 1000;

/**
 * Retrier counts the consecutive failures of one loop; reset it after any
 * success so the next outage starts from initialMs again.
 */
export class Retrier {
  private failures = 0;

  constructor(
    private readonly backoff: Backoff,
    private readonly notify?: RetryNotify,
  ) {}

  reset(): void {
    this.failures = 0;
  }

  /**
   * failedAfter counts a call asked at askedMs (performance.now()) that
   * failed: one held at least heldCallMs had reached a live server (a
   * long call parked on a server that then died), so the next delay starts
   * again from initialMs, as after an answer. Without it a server
   * restarted now and then had a parked wait's retries wait longer each
   * time, though each had been heard.
   */
  failedAfter(askedMs: number): void {
    if (performance.now() - askedMs >= heldCallMs) {
      this.failures = 0;
    }
  }

  /** delay is the next sleep, counting one more failure. */
  delay(): number {
    this.failures++;
    let step = this.backoff.initialMs;
    for (let i = 1; i < this.failures && step < this.backoff.maxMs; i++) {
      step *= 2;
    }
    return Math.floor(Math.random() * (Math.min(step, this.backoff.maxMs) + 1));
  }

  /** wait sleeps the next delay after err; it rejects with the signal's reason if it is aborted first. */
  async wait(err: unknown, signal?: AbortSignal): Promise<void> {
    const ms = this.delay();
    this.notify?.(err, ms);
    await sleep(ms, signal);
  }
}

/** sleep resolves after ms, or rejects with the signal's reason once it is aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
