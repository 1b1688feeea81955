// What the queue panel computes from ListQueues and ListSchedules,
// without the DOM: the depth sparkline's shape, the texts that say since
// when, and each queue's busiest tenants. web/test/queues.test.ts tests
// it in Node.
import { timestampDate, type Duration } from "@bufbuild/protobuf/wkt";
import { JobState, QueueMode, type Queue, type QueueDepth, type QueueRate, type Schedule } from "./gen/jobwatch/v1/jobwatch_pb";
import { durationText, periodText } from "./format";
import { isTerminal, millis, stateName } from "./model";

// depthWindowMs is how far back ListQueues' depth_history reaches.
export const depthWindowMs = 15 * 60 * 1000;

export interface Spark {
  // points for an SVG polyline in a width × height box: one per sample,
  // x by the sample's time in the 15 minutes before the last sample
  // (a server that started a minute ago draws only the right edge), y by
  // its depth (queued + running), 0 at the bottom.
  points: [number, number][];
  max: bigint; // the deepest sample
  now: bigint; // the last sample: the depth as of the answer
}

export function spark(history: readonly QueueDepth[], width: number, height: number): Spark {
  const depths = history.map((d) => d.queued + d.running);
  const max = depths.reduce((a, b) => (b > a ? b : a), 0n);
  const end = history.length > 0 ? millis(history[history.length - 1]!.at) : 0;
  const top = 1; // room for the line's width
  const points = history.map((d, i): [number, number] => {
    const x = width * (1 - Math.min(1, Math.max(0, (end - millis(d.at)) / depthWindowMs)));
    const y = max === 0n ? height - top : height - top - ((height - 2 * top) * Number(depths[i]!)) / Number(max);
    return [round(x), round(y)];
  });
  return { points, max, now: depths.at(-1) ?? 0n };
}

function round(v: number): number {
  return Math.round(v * 10) / 10;
}

// hourMinute is a time of day as people say it: "14:03".
export function hourMinute(d: Date): string {
  return d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}

// lasted says how long, in minutes once past the first: "12 min",
// "2 h 5 min".
export function lasted(fromMs: number, nowMs: number): string {
  const s = Math.max(0, nowMs - fromMs) / 1000;
  if (s < 60) {
    return "under a minute";
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} min`;
  }
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

// alertingText is what an alerting queue's row says: "alerting since
// 14:03, 12 min".
export function alertingText(sinceMs: number, nowMs: number): string {
  return `alerting since ${hourMinute(new Date(sinceMs))}, ${lasted(sinceMs, nowMs)}`;
}

// pausedText is what a paused queue's row says: "paused since 14:03 by
// token ops (admin), 12 min" (PauseQueue keeps who, as paused_by).
export function pausedText(sinceMs: number, by: string, nowMs: number): string {
  if (sinceMs === 0) {
    return by === "" ? "paused" : `paused by ${by}`;
  }
  return `paused since ${hourMinute(new Date(sinceMs))}${by === "" ? "" : ` by ${by}`}, ${lasted(sinceMs, nowMs)}`;
}

// drainedText is what a watched queue's row says of its last drain:
// "drained" when it is empty, else since when it has not been.
export function drainedText(drainedMs: number, empty: boolean, nowMs: number): string {
  if (empty) {
    return "drained";
  }
  if (drainedMs === 0) {
    return "not seen drained";
  }
  return `last drained ${hourMinute(new Date(drainedMs))}, ${lasted(drainedMs, nowMs)} ago`;
}

// NextRun is a schedule's next run as the panel shows it: a time, or the
// run that is not over yet (its end decides the next).
export type NextRun = { kind: "at"; atMs: number } | { kind: "run"; jobId: string; state: string } | { kind: "none" };

export function nextRun(s: Schedule): NextRun {
  if (s.nextRunAt !== undefined) {
    return { kind: "at", atMs: timestampDate(s.nextRunAt).getTime() };
  }
  if (s.lastJobId !== "" && !isTerminal(s.lastJobState)) {
    return { kind: "run", jobId: s.lastJobId, state: stateName(s.lastJobState) };
  }
  return { kind: "none" };
}

// lastState is the schedule's latest run's state, "" before the first.
export function lastState(s: Schedule): string {
  return s.lastJobState === JobState.UNSPECIFIED ? "" : stateName(s.lastJobState);
}

// TenantLine is one of a queue's busiest tenants as the panel lists it.
export interface TenantLine {
  tenant: string;
  queued: string;
  running: string;
  oldest: string; // how long its oldest ready job has waited; "—" when none waits
}

// tenantLines are the queue's tenants in the server's order (busiest
// first: see Queue.tenants in the API).
export function tenantLines(q: Queue): TenantLine[] {
  return q.tenants.map((d) => ({
    tenant: d.tenant,
    queued: d.queued.toLocaleString("en-US"),
    running: d.running.toLocaleString("en-US"),
    oldest: durationText(d.oldestQueuedAge),
  }));
}

// tenantsLabel is what the queue's row says of its tenants: how many have
// work in it, listed or not ("3 tenants"), "" when none has.
export function tenantsLabel(listed: number, leftOut: number): string {
  const n = listed + leftOut;
  return n === 0 ? "" : n === 1 ? "1 tenant" : `${n} tenants`;
}

// leftOutText says how many tenants the list under a queue leaves out:
// "and 3 more tenants", "" for none.
export function leftOutText(n: number): string {
  return n === 0 ? "" : n === 1 ? "and 1 more tenant" : `and ${n} more tenants`;
}

// queuesLeftOutText is what the queue panel's note says when ListQueues
// left queues out (its max_queues, 500 by default): clients name queues,
// so there may be many more than a panel can show. "" for none.
export function queuesLeftOutText(shown: number, leftOut: number): string {
  if (leftOut === 0) {
    return "";
  }
  const more = leftOut === 1 ? "1 more queue is" : `${leftOut.toLocaleString("en-US")} more queues are`;
  return `${more} not shown: these are the ${shown.toLocaleString("en-US")} most pressing (paused, alerting, held by their rate or configured, then the busiest); jobwatch queues --max-queues lists more.`;
}

// rateText is what a rate-limited queue's row says of its rate (the
// configuration's rate: {limit, per}): "rate 100/1m · 42 in window", or,
// while the window is full, "held by its rate until 14:03:07 (100/1m)".
export function rateText(rate: QueueRate | undefined): string {
  if (rate === undefined) {
    return "";
  }
  const perMs = rate.per === undefined ? 0 : durationMs(rate.per);
  const per = `${rate.limit}/${perMs < 1000 ? `${Math.round(perMs)}ms` : periodText(rate.per)}${rate.perTenant ? " per tenant" : ""}`;
  if (rate.heldUntil !== undefined) {
    // Per tenant, a held tenant's jobs wait while the others' are claimed.
    const who = rate.perTenant ? "a tenant held" : "held";
    return `${who} by its rate until ${timestampDate(rate.heldUntil).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" })} (${per})`;
  }
  return `rate ${per} · ${rate.started} in window`;
}

// modeText is what a queue's row says of how it runs its jobs, its bounds
// as `jobwatch queues` puts them: "parallel · max 4, 2/tenant",
// "serial · max 1", "parallel · 2/tenant", "parallel". A serial queue
// runs one job of each tenant at a time anyway.
export function modeText(q: Queue): string {
  const bounds: string[] = [];
  if (q.maxRunning > 0) {
    bounds.push(`max ${q.maxRunning}`);
  }
  if (q.maxRunningPerTenant > 0) {
    bounds.push(`${q.maxRunningPerTenant}/tenant`);
  }
  const mode = q.mode === QueueMode.SERIAL ? "serial" : "parallel";
  return bounds.length === 0 ? mode : `${mode} · ${bounds.join(", ")}`;
}

// clockMarginMs is how much longer than a job's own wait its tenant's
// oldest ready job must have waited to count as ahead of it: the two
// waits are read on different clocks (the server's for the tenant's, the
// reader's for the job's), and the job may be that oldest one.
const clockMarginMs = 1000;

// waitingReason is why a QUEUED job of tenant in queue q, ready since
// runAtMs (its run_at; 0: not known), is not running, where the queue
// panel's answer says: its queue is paused, held by its rate, running its
// max_running, its pools all in use, running the tenant's
// max_running_per_tenant (or, serial, a job of the tenant, or an older
// job of the tenant queued ahead of it, which a job no worker takes never
// leaves), or (for a rate per tenant) some tenant is held, perhaps this
// job's. The per-tenant reasons need the tenant among the queue's
// busiest, which the panel lists. The panel's answer is a refresh old, so
// each says what holds the queue now, not that nothing else does. "" for
// a job in any other state, or when the page does not know the queue (a
// token that may not read queues) or it holds nothing back. jobwatch get
// says the same (holdText, cmd/jobwatch/jobcmd.go).
export function waitingReason(state: JobState, q: Queue | undefined, nowMs: number, tenant = "", runAtMs = 0): string {
  if (state !== JobState.QUEUED || q === undefined) {
    return "";
  }
  if (q.paused) {
    return `Not running: queue ${q.name} is ${pausedText(millis(q.pausedAt), q.pausedBy, nowMs)}.`;
  }
  if (q.rate?.heldUntil !== undefined && !q.rate.perTenant) {
    return `Not running: queue ${q.name} is ${rateText(q.rate)}.`;
  }
  if (q.maxRunning > 0 && q.running >= q.maxRunning) {
    return `Not running: queue ${q.name} runs at most ${q.maxRunning} ${plural(q.maxRunning, "job")} at once, and ${q.running} ${q.running === 1n ? "is" : "are"} running.`;
  }
  const full = q.pools.find((p) => p.units > 0 && p.inUse >= p.units);
  if (full !== undefined) {
    return `Not running: each job of queue ${q.name} takes a unit of pool ${full.name}, and all ${full.units} are in use.`;
  }
  const mine = q.tenants.find((d) => d.tenant === tenant);
  if (mine !== undefined && q.maxRunningPerTenant > 0 && mine.running >= q.maxRunningPerTenant) {
    return `Not running: queue ${q.name} runs at most ${q.maxRunningPerTenant} ${plural(q.maxRunningPerTenant, "job")} of a tenant at once, and ${mine.running} of tenant ${tenant}'s ${mine.running === 1n ? "is" : "are"} running.`;
  }
  if (mine !== undefined && q.mode === QueueMode.SERIAL && mine.running > 0n) {
    return `Waits its turn: queue ${q.name} is serial, and a job of tenant ${tenant} is running.`;
  }
  const oldest = mine?.oldestQueuedAge;
  if (q.mode === QueueMode.SERIAL && oldest !== undefined && runAtMs > 0 && durationMs(oldest) > nowMs - runAtMs + clockMarginMs) {
    return (
      `Waits its turn: queue ${q.name} is serial, and an older job of tenant ${tenant} is queued ahead of it (waiting ${durationText(oldest)}): it runs first; ` +
      "a job no worker takes holds the tenant's later ones (cancel it, or run a worker of its kind)."
    );
  }
  if (q.rate?.heldUntil !== undefined) {
    return `It may wait on the rate of queue ${q.name}: ${rateText(q.rate)}.`;
  }
  return "";
}

// durationMs is d in milliseconds.
function durationMs(d: Duration): number {
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

function plural(n: number, word: string): string {
  return n === 1 ? word : `${word}s`;
}

// tenantBacklogText says how many jobs tenant has queued and running in
// all, from ListQueues' answer (queues, and leftOut: queues_left_out):
// "the tenant has 100,950 queued and 8 running". Each queue lists its
// busiest tenants only, so the sums are the tenant's only where every
// queue lists it or lists every tenant with work; "" where they are not,
// or the tenant has none. With only, a queue's name, it counts the
// tenant's jobs in that queue alone, for a list narrowed to it: "the
// tenant has 12 queued and 1 running in queue “render”".
export function tenantBacklogText(queues: Iterable<Queue>, leftOut: number, tenant: string, only = ""): string {
  if (only !== "") {
    return queueBacklogText(queues, tenant, only);
  }
  if (leftOut > 0) {
    return "";
  }
  let queued = 0n;
  let running = 0n;
  for (const q of queues) {
    const d = q.tenants.find((d) => d.tenant === tenant);
    if (d === undefined) {
      if (q.tenantsLeftOut > 0) {
        return "";
      }
      continue;
    }
    queued += d.queued;
    running += d.running;
  }
  if (queued === 0n && running === 0n) {
    return "";
  }
  return `the tenant has ${queued.toLocaleString("en-US")} queued and ${running.toLocaleString("en-US")} running`;
}

// queueBacklogText is tenantBacklogText for one queue: "" where the
// answer does not list the queue (left out, or nothing in it), or does
// not list the tenant among its busiest.
function queueBacklogText(queues: Iterable<Queue>, tenant: string, name: string): string {
  for (const q of queues) {
    if (q.name !== name) {
      continue;
    }
    const d = q.tenants.find((d) => d.tenant === tenant);
    if (d === undefined || (d.queued === 0n && d.running === 0n)) {
      return "";
    }
    return `the tenant has ${d.queued.toLocaleString("en-US")} queued and ${d.running.toLocaleString("en-US")} running in queue “${name}”`;
  }
  return "";
}

// otherTenantsText points an admin looking at a tenant with no jobs to
// the tenants the queue panel shows with work: "Tenants with jobs in the
// queues: acme, globex. Type one in the Tenant field." The queues list
// each queue's busiest tenants only, so it names those, busiest first, at
// most max, and says "and more" where a queue left some out; "" when
// none but shown has any.
export function otherTenantsText(queues: Iterable<Queue>, shown: string, max = 5): string {
  const load = new Map<string, bigint>();
  let leftOut = false;
  for (const q of queues) {
    leftOut ||= q.tenantsLeftOut > 0;
    for (const d of q.tenants) {
      if (d.tenant !== shown) {
        load.set(d.tenant, (load.get(d.tenant) ?? 0n) + d.queued + d.running);
      }
    }
  }
  const names = [...load.entries()]
    .sort((a, b) => (a[1] === b[1] ? a[0].localeCompare(b[0]) : a[1] > b[1] ? -1 : 1))
    .map(([name]) => name);
  if (names.length === 0) {
    return "";
  }
  let listed = names.slice(0, max).join(", ");
  if (leftOut) {
    listed += ", and more";
  } else if (names.length > max) {
    listed += `, and ${names.length - max} more`;
  }
  return `Tenants with jobs in the queues: ${listed}. Type one in the Tenant field to see its jobs.`;
}
