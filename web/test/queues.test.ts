// Tests of what the queue panel computes: the sparkline's points and the
// texts that say since when. web/page_logic_test.go runs them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs, type Duration } from "@bufbuild/protobuf/wkt";
import { periodText } from "../src/format";
import { JobState, QueueDepthSchema, QueueMode, QueueRateSchema, QueueSchema, ScheduleSchema } from "../src/gen/jobwatch/v1/jobwatch_pb";
import { alertingText, depthWindowMs, drainedText, hourMinute, lasted, leftOutText, modeText, nextRun, otherTenantsText, rateText, spark, tenantBacklogText, tenantLines, tenantsLabel, queuesLeftOutText, waitingReason } from "../src/queues";

const t0 = Date.UTC(2030, 0, 2, 3, 0, 0);

function sample(ms: number, queued: number, running = 0) {
  return create(QueueDepthSchema, { at: timestampFromMs(ms), queued: BigInt(queued), running: BigInt(running) });
}

test("the sparkline puts each sample at its time in the last 15 minutes and its depth", () => {
  const s = spark([sample(t0 - depthWindowMs, 0), sample(t0 - depthWindowMs / 2, 2, 2), sample(t0, 1, 1)], 100, 22);
  assert.deepEqual(s.points, [
    [0, 21], // 15 minutes ago, empty: left, bottom
    [50, 1], // the deepest: the top
    [100, 11], // now, half as deep
  ]);
  assert.equal(s.max, 4n);
  assert.equal(s.now, 2n);
});

test("a server that started lately draws only the right edge, and an idle queue a flat line", () => {
  const s = spark([sample(t0 - 30_000, 0), sample(t0 - 15_000, 0), sample(t0, 0)], 72, 22);
  assert.deepEqual(
    s.points.map(([x]) => x),
    [69.6, 70.8, 72],
  );
  assert.ok(s.points.every(([, y]) => y === 21), "an idle queue's line is not at the bottom");
  assert.deepEqual(spark([], 72, 22).points, []);
});

test("an alert says since when and for how long", () => {
  const since = t0 - 12 * 60_000 - 5_000;
  assert.equal(alertingText(since, t0), `alerting since ${hourMinute(new Date(since))}, 12 min`);
  assert.equal(lasted(t0 - 20_000, t0), "under a minute");
  assert.equal(lasted(t0 - 125 * 60_000, t0), "2 h 5 min");
});

test("a watched queue says when it last drained", () => {
  assert.equal(drainedText(t0, true, t0), "drained");
  assert.equal(drainedText(0, false, t0), "not seen drained");
  assert.equal(drainedText(t0 - 3 * 60_000, false, t0), `last drained ${hourMinute(new Date(t0 - 3 * 60_000))}, 3 min ago`);
});

test("a schedule's next run is a time, or the run not over yet", () => {
  assert.deepEqual(nextRun(create(ScheduleSchema, { name: "a", nextRunAt: timestampFromMs(t0) })), { kind: "at", atMs: t0 });
  assert.deepEqual(nextRun(create(ScheduleSchema, { name: "b", lastJobId: "j_1", lastJobState: JobState.RUNNING })), {
    kind: "run",
    jobId: "j_1",
    state: "running",
  });
  assert.deepEqual(nextRun(create(ScheduleSchema, { name: "c", lastJobId: "j_2", lastJobState: JobState.SUCCEEDED })), { kind: "none" });
});

test("a schedule's period reads as the configuration file writes it", () => {
  const d = (seconds: number) => ({ seconds: BigInt(seconds), nanos: 0 }) as Duration;
  assert.equal(periodText(d(20)), "20s");
  assert.equal(periodText(d(600)), "10m");
  assert.equal(periodText(d(3600)), "1h");
  assert.equal(periodText(d(5400)), "1h 30m");
  assert.equal(periodText(d(3661)), "1h 1m 1s");
  assert.equal(periodText(undefined), "—");
});

test("a queue's tenants are listed in the server's order, each with its counts and oldest wait", () => {
  const q = create(QueueSchema, {
    name: "reports",
    tenants: [
      { tenant: "acme", queued: 100000n, running: 2n, oldestQueuedAge: durationFromMs(2 * 3600_000 + 5 * 60_000) },
      { tenant: "globex", queued: 1n, running: 0n, oldestQueuedAge: durationFromMs(42_000) },
      { tenant: "hooli", queued: 1n, running: 0n }, // its job is due later: nothing waits
    ],
    tenantsLeftOut: 2,
  });
  assert.deepEqual(tenantLines(q), [
    { tenant: "acme", queued: "100,000", running: "2", oldest: "2h 5m" },
    { tenant: "globex", queued: "1", running: "0", oldest: "42s" },
    { tenant: "hooli", queued: "1", running: "0", oldest: "—" },
  ]);
  assert.equal(tenantsLabel(3, 2), "5 tenants", "the button counts the tenants left out too");
  assert.equal(tenantsLabel(1, 0), "1 tenant");
  assert.equal(tenantsLabel(0, 0), "", "a queue without work has no button");
  assert.equal(leftOutText(2), "and 2 more tenants");
  assert.equal(leftOutText(1), "and 1 more tenant");
  assert.equal(leftOutText(0), "");
});

test("a rate-limited queue says its rate and its window, and until when it is held", () => {
  const rate = create(QueueRateSchema, { limit: 100, per: durationFromMs(60_000), started: 42 });
  assert.equal(rateText(rate), "rate 100/1m · 42 in window");
  const held = create(QueueRateSchema, { limit: 3, per: durationFromMs(1000), started: 3, heldUntil: timestampFromMs(t0 + 7000) });
  assert.match(rateText(held), /^held by its rate until \d\d:\d\d:\d\d.* \(3\/1s\)$/);
  assert.equal(rateText(undefined), "");
});

test("a rate per less than a second says its milliseconds", () => {
  assert.equal(rateText(create(QueueRateSchema, { limit: 5, per: durationFromMs(250), started: 0 })), "rate 5/250ms · 0 in window");
});

test("a queue's row says how it runs and its bounds, per tenant too, as `jobwatch queues` does", () => {
  const cases: { name: string; mode: QueueMode; maxRunning: number; maxRunningPerTenant: number; want: string }[] = [
    { name: "a parallel queue with both bounds", mode: QueueMode.PARALLEL, maxRunning: 4, maxRunningPerTenant: 2, want: "parallel · max 4, 2/tenant" },
    { name: "a parallel queue bounded per tenant only", mode: QueueMode.PARALLEL, maxRunning: 0, maxRunningPerTenant: 2, want: "parallel · 2/tenant" },
    { name: "a parallel queue bounded in all only", mode: QueueMode.PARALLEL, maxRunning: 8, maxRunningPerTenant: 0, want: "parallel · max 8" },
    { name: "an unbounded parallel queue", mode: QueueMode.PARALLEL, maxRunning: 0, maxRunningPerTenant: 0, want: "parallel" },
    { name: "a serial queue of one job at a time", mode: QueueMode.SERIAL, maxRunning: 1, maxRunningPerTenant: 0, want: "serial · max 1" },
  ];
  for (const c of cases) {
    const q = create(QueueSchema, { name: "q", mode: c.mode, maxRunning: c.maxRunning, maxRunningPerTenant: c.maxRunningPerTenant });
    assert.equal(modeText(q), c.want, c.name);
  }
});

test("a queued job says why it waits: its queue paused, or held by its rate; any other job says nothing", () => {
  const paused = create(QueueSchema, { name: "mail", paused: true, pausedAt: timestampFromMs(t0 - 12 * 60_000), pausedBy: "token ops (admin)" });
  assert.equal(waitingReason(JobState.QUEUED, paused, t0), `Not running: queue mail is paused since ${hourMinute(new Date(t0 - 12 * 60_000))} by token ops (admin), 12 min.`);
  assert.equal(waitingReason(JobState.RUNNING, paused, t0), "");
  assert.equal(waitingReason(JobState.QUEUED, undefined, t0), "", "a page that may not read the queues knows nothing");
  const rate = { limit: 3, per: durationFromMs(1000), started: 3, heldUntil: timestampFromMs(t0 + 500) };
  const held = create(QueueSchema, { name: "calls", rate: create(QueueRateSchema, rate) });
  assert.match(waitingReason(JobState.QUEUED, held, t0), /^Not running: queue calls is held by its rate until \d\d:\d\d:\d\d.* \(3\/1s\)\.$/);
  const perTenant = create(QueueSchema, { name: "calls", rate: create(QueueRateSchema, { ...rate, perTenant: true }) });
  assert.match(waitingReason(JobState.QUEUED, perTenant, t0), /^It may wait on the rate of queue calls: a tenant held by its rate until .* \(3\/1s per tenant\)\.$/);
  assert.equal(waitingReason(JobState.QUEUED, create(QueueSchema, { name: "idle" }), t0), "");
});

test("a queued job says which bound of its queue holds it: max_running, a pool, the tenant's share, a serial queue's turn", () => {
  const full = create(QueueSchema, { name: "render", maxRunning: 4, running: 4n, queued: 9n });
  assert.equal(waitingReason(JobState.QUEUED, full, t0, "acme"), "Not running: queue render runs at most 4 jobs at once, and 4 are running.");
  assert.equal(waitingReason(JobState.QUEUED, create(QueueSchema, { name: "one", maxRunning: 1, running: 1n }), t0), "Not running: queue one runs at most 1 job at once, and 1 is running.");
  assert.equal(waitingReason(JobState.QUEUED, create(QueueSchema, { name: "render", maxRunning: 4, running: 3n }), t0), "", "a free slot holds nothing back");
  const pooled = create(QueueSchema, { name: "sync", pools: [{ name: "db", units: 2, inUse: 1n }, { name: "api", units: 3, inUse: 3n }] });
  assert.equal(waitingReason(JobState.QUEUED, pooled, t0), "Not running: each job of queue sync takes a unit of pool api, and all 3 are in use.");
  const shared = create(QueueSchema, { name: "bulk", maxRunningPerTenant: 2, running: 3n, tenants: [{ tenant: "acme", queued: 50n, running: 2n }, { tenant: "globex", running: 1n }] });
  assert.equal(waitingReason(JobState.QUEUED, shared, t0, "acme"), "Not running: queue bulk runs at most 2 jobs of a tenant at once, and 2 of tenant acme's are running.");
  assert.equal(waitingReason(JobState.QUEUED, shared, t0, "globex"), "", "another tenant's share is its own");
  assert.equal(waitingReason(JobState.QUEUED, shared, t0, "initech"), "", "a tenant the panel does not list: the page does not know");
  const serial = create(QueueSchema, { name: "deploy", mode: QueueMode.SERIAL, running: 1n, tenants: [{ tenant: "acme", queued: 3n, running: 1n }, { tenant: "globex", queued: 1n }] });
  assert.equal(waitingReason(JobState.QUEUED, serial, t0, "acme"), "Waits its turn: queue deploy is serial, and a job of tenant acme is running.");
  assert.equal(waitingReason(JobState.QUEUED, serial, t0, "globex"), "");
  assert.equal(waitingReason(JobState.RUNNING, full, t0, "acme"), "", "a running job is not held");
  const pausedAndFull = create(QueueSchema, { ...full, paused: true });
  assert.match(waitingReason(JobState.QUEUED, pausedAndFull, t0), /^Not running: queue render is paused/, "a pause says first");
});

test("a queued job of a serial queue behind an older queued job of its tenant says so, and what to do", () => {
  const q = create(QueueSchema, {
    name: "ser",
    mode: QueueMode.SERIAL,
    tenants: [{ tenant: "acme", queued: 2n, oldestQueuedAge: durationFromMs(5 * 60_000) }, { tenant: "globex", queued: 1n, oldestQueuedAge: durationFromMs(2_000) }],
  });
  assert.equal(
    waitingReason(JobState.QUEUED, q, t0, "acme", t0 - 2_000),
    "Waits its turn: queue ser is serial, and an older job of tenant acme is queued ahead of it (waiting 5m 0s): it runs first; " +
      "a job no worker takes holds the tenant's later ones (cancel it, or run a worker of its kind).",
  );
  assert.equal(waitingReason(JobState.QUEUED, q, t0, "acme", t0 - 5 * 60_000 + 500), "", "the oldest job itself, its wait read half a second apart, has none ahead");
  assert.equal(waitingReason(JobState.QUEUED, q, t0, "globex", t0 - 2_000), "", "another tenant's older job is not ahead of it");
  assert.equal(waitingReason(JobState.QUEUED, q, t0, "acme"), "", "without the job's run_at the page does not know");
  const parallel = create(QueueSchema, { ...q, mode: QueueMode.PARALLEL });
  assert.equal(waitingReason(JobState.QUEUED, parallel, t0, "acme", t0 - 2_000), "", "a parallel queue runs a later job beside an older one");
});

test("the queue panel says how many queues ListQueues left out, and counts read with separators", () => {
  assert.equal(queuesLeftOutText(3, 0), "");
  assert.equal(queuesLeftOutText(500, 1), "1 more queue is not shown: these are the 500 most pressing (paused, alerting, held by their rate or configured, then the busiest); jobwatch queues --max-queues lists more.");
  assert.match(queuesLeftOutText(500, 49_503), /^49,503 more queues are not shown: these are the 500 most pressing/);
  const q = create(QueueSchema, { name: "bulk", tenants: [{ tenant: "acme", queued: 1_000_300n, running: 12n }] });
  assert.deepEqual(tenantLines(q).map((l) => [l.queued, l.running]), [["1,000,300", "12"]]);
});

test("an admin on a tenant with no jobs is pointed to the busiest tenants the queues show", () => {
  const queues = [
    create(QueueSchema, { name: "bulk", tenants: [{ tenant: "acme", queued: 100_000n }, { tenant: "globex", queued: 10n, running: 2n }] }),
    create(QueueSchema, { name: "mail", tenants: [{ tenant: "globex", queued: 200_000n }, { tenant: "default", queued: 0n, running: 1n }] }),
  ];
  assert.equal(otherTenantsText(queues, "default"), "Tenants with jobs in the queues: globex, acme. Type one in the Tenant field to see its jobs.");
  assert.equal(otherTenantsText(queues, "globex", 1), "Tenants with jobs in the queues: acme, and 1 more. Type one in the Tenant field to see its jobs.");
  assert.equal(otherTenantsText([create(QueueSchema, { name: "idle" })], "default"), "");
  const crowded = create(QueueSchema, { name: "crowded", tenants: [{ tenant: "acme", queued: 5n }], tenantsLeftOut: 40 });
  assert.equal(otherTenantsText([crowded], "default"), "Tenants with jobs in the queues: acme, and more. Type one in the Tenant field to see its jobs.");
});

test("a tenant's backlog is summed over the queues only where every queue tells it", () => {
  const q = (name: string, tenants: [string, number, number][], tenantsLeftOut = 0) =>
    create(QueueSchema, {
      name,
      tenants: tenants.map(([tenant, queued, running]) => ({ tenant, queued: BigInt(queued), running: BigInt(running) })),
      tenantsLeftOut,
    });
  const queues = [q("default", [["acme", 100_000, 8], ["globex", 5, 0]]), q("reports", [["acme", 950, 2]]), q("idle", [])];
  assert.equal(tenantBacklogText(queues, 0, "acme"), "the tenant has 100,950 queued and 10 running");
  assert.equal(tenantBacklogText(queues, 0, "initech"), "", "a tenant with no work got a backlog");
  assert.equal(tenantBacklogText([...queues, q("busy", [["globex", 1, 1]], 3)], 0, "acme"), "", "a queue that left tenants out may hold acme's jobs");
  assert.equal(tenantBacklogText([...queues, q("busy", [["acme", 1, 1]], 3)], 0, "acme"), "the tenant has 100,951 queued and 11 running");
  assert.equal(tenantBacklogText(queues, 2, "acme"), "", "queues left out may hold acme's jobs");

  // A list narrowed to a queue counts the tenant's jobs there alone.
  assert.equal(tenantBacklogText(queues, 0, "acme", "reports"), "the tenant has 950 queued and 2 running in queue “reports”");
  assert.equal(tenantBacklogText(queues, 2, "acme", "reports"), "the tenant has 950 queued and 2 running in queue “reports”", "other queues left out do not matter");
  assert.equal(tenantBacklogText(queues, 0, "globex", "reports"), "", "a tenant with no work in the queue got a backlog");
  assert.equal(tenantBacklogText(queues, 0, "acme", "idle"), "");
  assert.equal(tenantBacklogText(queues, 0, "acme", "nonesuch"), "", "a queue the answer does not list got the tenant's backlog");
});
