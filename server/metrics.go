package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Metrics is jobwatch's Prometheus collector set. It implements
// jobs.Metrics, so one value serves both the engine (wake-up latency) and
// the server (parked calls, requests). Create it with NewMetrics.
type Metrics struct {
	parkedWaits  prometheus.Gauge
	openWatches  prometheus.Gauge
	parkedClaims prometheus.Gauge
	wakeLatency  *prometheus.HistogramVec
	requests     *prometheus.CounterVec
	// tokenRequests: the calls of callers with a token, by its role,
	// tenant and id (a prefix of its SHA-256), never the token.
	tokenRequests *prometheus.CounterVec

	// The network limits (limits.go and the files it names): use now and refusals of each.
	connections        prometheus.Gauge
	connectionsRefused prometheus.Counter
	// connectionsIdleClosed: idle connections closed to make room.
	connectionsIdleClosed prometheus.Counter
	parkedCalls           prometheus.Gauge
	parkRefused           *prometheus.CounterVec
	parkedByTenant        *prometheus.GaugeVec
	tenantParkRefused     *prometheus.CounterVec
	hostRefused           prometheus.Counter
	bodiesReading         prometheus.Gauge
	bodyTimeouts          prometheus.Counter
	abandoned             prometheus.Counter
	sendsInProgress       prometheus.Gauge
	sendsCut              *prometheus.CounterVec

	// reloadOK and reloadedAt: whether the last reload of each file
	// (config, tokens) took, and when one last did (Reloaded).
	reloadOK   *prometheus.GaugeVec
	reloadedAt *prometheus.GaugeVec
	// configInfo is 1 for the fingerprint of the config in effect.
	configInfo *prometheus.GaugeVec

	// elsewhere: /metrics is served on a listener of its own
	// (Server.MoveMetrics), not on the API's port.
	elsewhere atomic.Bool

	opts MetricsOptions
}

// MetricsOptions choose the optional series of NewMetricsWith. The zero
// value is NewMetrics': none of them.
type MetricsOptions struct {
	// PerTenant adds jobwatch_queue_tenant_jobs, each queue's QUEUED and
	// RUNNING jobs by tenant (serve --metrics-per-tenant). Off by
	// default: it has two series for every (queue, tenant) with
	// unfinished work, as many as the tenants a queue ever holds at
	// once, and reads every unfinished job to count them (see "What a
	// scrape costs").
	PerTenant bool
}

var _ jobs.Metrics = (*Metrics)(nil)

// NewMetrics returns unregistered collectors; server.New registers them.
func NewMetrics() *Metrics { return NewMetricsWith(MetricsOptions{}) }

// NewMetricsWith is NewMetrics with the optional series o asks for.
func NewMetricsWith(o MetricsOptions) *Metrics {
	return &Metrics{
		opts: o,
		parkedWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_parked_waits",
			Help: "WaitJob, WaitJobs and SubmitJob-with-wait calls parked now, one per call whatever the jobs it waits for (the places they hold, a WaitJobs one per 16 jobs, are in jobwatch_parked_calls).",
		}),
		openWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_open_watches",
			Help: "WatchJob, WatchJobs and WatchJobLogs streams open now.",
		}),
		parkedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_parked_claims",
			Help: "ClaimJob calls parked now.",
		}),
		wakeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jobwatch_wake_latency_seconds",
			Help: "Time from a change (its updated_at, stamped just before the commit, so the commit's fsync is included) to the wake-up of a parked wait, watch or claim.",
			// From 50µs to about 1.6s: wake-ups are in-process and should
			// sit at the bottom; the top catches a starved machine.
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"kind"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_requests_total",
			Help: "RPCs answered, by procedure and Connect code, those refused before their handler included (no token, wrong method or Content-Type, too large); procedure=\"(unknown)\" counts calls to a path that names no procedure.",
		}, []string{"procedure", "code"}),
		tokenRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_token_requests_total",
			Help: "RPCs of callers with a known token (serve --tokens), by the token's role, tenant (empty for workers and admins) and token_id (the first 12 hex digits of its SHA-256), and Connect code.",
		}, []string{"role", "tenant", "token_id", "code"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_connections",
			Help: "Client connections open now (limit: --max-connections).",
		}),
		connectionsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_refused_total",
			Help: "Connections closed as soon as accepted because --max-connections were open.",
		}),
		connectionsIdleClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_idle_closed_total",
			Help: "Idle keep-alive connections (no call in flight) closed to make room for a new one at --max-connections.",
		}),
		parkedCalls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_parked_calls",
			Help: "Places held by parked calls now (limit: --max-parked-calls): one per WaitJob (and SubmitJob with wait), WatchJob, WatchJobs, WatchJobLogs, ClaimJob, gRPC health Watch and reflection stream; a WaitJobs one per 16 jobs it waits for.",
		}),
		parkRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_parked_calls_refused_total",
			Help: "Calls that found --max-parked-calls taken, by kind: a wait answered at once with the current state, a watch or claim refused with resource_exhausted.",
		}, []string{"kind"}),
		parkedByTenant: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobwatch_parked_calls_by_tenant",
			Help: "Places held by parked calls (as jobwatch_parked_calls counts them) by tenant, for the tenants with any parked now, while --max-parked-calls-per-tenant is on; tenant=\"(none)\" counts claims of workers bound to no tenant.",
		}, []string{"tenant"}),
		tenantParkRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_parked_calls_tenant_refused_total",
			Help: "Calls that found their tenant's --max-parked-calls-per-tenant taken, by kind and tenant: a wait answered at once with the current state, a watch or claim refused with resource_exhausted. tenant is the tenant of the caller's token, else the first 100 other tenants refused since the server started; past those, \"(other)\".",
		}, []string{"kind", "tenant"}),
		hostRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_requests_refused_host_total",
			Help: "Requests refused (403, permission_denied) because their Host was neither loopback nor in --allowed-hosts: DNS rebinding, or a name to allow.",
		}),
		bodiesReading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_request_bodies_reading",
			Help: "Request bodies being received now (each within --body-timeout).",
		}),
		bodyTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_request_body_timeouts_total",
			Help: "Requests whose body did not arrive within --body-timeout, answered deadline_exceeded.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_requests_abandoned_total",
			Help: "Requests not handled because their client hung up before the server got to them.",
		}),
		sendsInProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_sends_in_progress",
			Help: "Response writes under way now; one that stays is a client that does not read (cut after --send-timeout).",
		}),
		reloadOK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobwatch_reload_successful",
			Help: "1 if the last reading of the file (file=\"config\": --config; file=\"tokens\": --tokens), at start or on SIGHUP, took; 0 while the last reload was refused and the file read before stays in effect. Only for the files serve was given.",
		}, []string{"file"}),
		reloadedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobwatch_reload_success_timestamp_seconds",
			Help: "When the file in effect (file=\"config\" or \"tokens\") was read, at start or by the last reload that took, in seconds since the Unix epoch.",
		}, []string{"file"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobwatch_config_info",
			Help: "1, with the fingerprint of the rules in effect, the --config's or the defaults' (config.Fingerprint: the same rules have the same fingerprint, however the file says them). Replicas that show different fingerprints enforce different rules on their own claims.",
		}, []string{"fingerprint"}),
		sendsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_sends_cut_total",
			Help: "Responses and streams ended because a write stayed blocked on a client that does not read: for --send-timeout (send_timeout), until the stream's --stream-lifetime (stream_lifetime), or at once once it had been blocked for two seconds, its connection sending no answer meanwhile, while its connection or the server held as many blocked writes as it may (stalled). Each is also counted as a failed call in jobwatch_requests_total.",
		}, []string{"reason"}),
	}
}

// Reloaded records a reading of file ("config" or "tokens"), at start or
// on SIGHUP: whether it took, and if it did, when (at).
func (m *Metrics) Reloaded(file string, took bool, at time.Time) {
	if !took {
		m.reloadOK.WithLabelValues(file).Set(0)
		return
	}
	m.reloadOK.WithLabelValues(file).Set(1)
	m.reloadedAt.WithLabelValues(file).Set(float64(at.UnixNano()) / 1e9)
}

// ConfigInEffect records the fingerprint of the config whose rules the
// server now enforces (at start, and after each reload that took).
func (m *Metrics) ConfigInEffect(fingerprint string) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(fingerprint).Set(1)
}

// Woke implements jobs.Metrics.
func (m *Metrics) Woke(kind string, latency time.Duration) {
	m.wakeLatency.WithLabelValues(kind).Observe(latency.Seconds())
}

func (m *Metrics) register(reg *prometheus.Registry, engine *jobs.Engine, log *slog.Logger) {
	collectors := []prometheus.Collector{
		m.parkedWaits, m.openWatches, m.parkedClaims, m.wakeLatency, m.requests, m.tokenRequests,
		m.connections, m.connectionsRefused, m.connectionsIdleClosed, m.parkedCalls, m.parkRefused,
		m.parkedByTenant, m.tenantParkRefused, m.hostRefused,
		m.bodiesReading, m.bodyTimeouts, m.abandoned, m.sendsInProgress, m.sendsCut,
		m.reloadOK, m.reloadedAt, m.configInfo,
		&jobsCollector{counts: &sharedRead[map[jobtype.State]int64]{
			engine: engine, log: log, what: "count jobs for metrics", read: engine.CountByState,
			maxAge: jobCountsMaxAge, minGap: jobCountsMinGap}},
		&alertsCollector{engine: engine},
		&pausesCollector{engine: engine, pauses: &lastRead[[]jobs.QueuePause]{what: "read paused queues for metrics", read: engine.Paused, log: log}},
		&ratesCollector{rates: &lastRead[map[string]jobs.QueueRate]{what: "read rate windows for metrics", read: engine.QueueRates, log: log}},
		&schedulesCollector{schedules: &lastRead[[]jobs.ScheduleInfo]{what: "read schedules for metrics", read: engine.Schedules, log: log}},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "jobwatch_store_reachable",
			Help: "1 while the store takes writes (and, on PostgreSQL, hears the other replicas' changes), 0 while it cannot: gRPC health and /healthz say NOT_SERVING meanwhile.",
		}, func() float64 {
			if engine.StoreReachable() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "jobwatch_watch_shared_bytes",
			Help: "Bytes of changed jobs read for WatchJobs streams and kept for 2 s after the read, so that the other streams of the tenant woken by the same changes share the read (at most 32 MiB).",
		}, func() float64 { return float64(engine.SharedChangeBytes()) }),
	}
	if m.opts.PerTenant {
		collectors = append(collectors, &tenantJobsCollector{depths: &sharedRead[[]jobs.TenantDepth]{
			engine: engine, log: log, what: "read each queue's jobs by tenant for metrics", read: engine.TenantDepths,
			maxAge: jobCountsMaxAge, minGap: jobCountsMinGap}})
	}
	for _, c := range collectors {
		// A Metrics shared by two servers on one registry is registered
		// once; that is not an error.
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			log.Warn("register metric", "err", err)
		}
	}
}

// What a scrape costs: the same whatever the number of jobs, unless
// --metrics-per-tenant is on (below). Scrapes read the engine's memory,
// never every job:
//
//   - jobwatch_jobs{state} comes from a count over every job
//     (Engine.CountByState) that a sharedRead keeps and shares between
//     scrapes. It counts again only when a scrape finds it stale: a job
//     changed since (Engine.Changes: this engine's changes and the
//     changes of other replicas it hears), or it is older than
//     jobCountsMaxAge (for what the engine does not hear: retention's
//     deletes, a notification a replica lost). Two counts are at least
//     jobCountsMinGap apart (a scrape in between waits for the next, so
//     what it shows is never older than its own start) and never run at
//     once (concurrent scrapes share one). So while jobs change,
//     /metrics costs at most four counts a second however many scrapers
//     there are; while they do not, one per jobCountsMaxAge.
//     Across replicas sharing a database each serves the same totals,
//     of the whole database, each at most jobCountsMaxAge behind;
//     jobwatch_jobs_counted_timestamp_seconds says when they were
//     counted.
//   - jobwatch_queue_alerting comes from the sweep's memory
//     (Engine.AlertingQueues): what the last sweep decided.
//   - jobwatch_queue_paused reads the paused queues (Engine.Paused): a
//     table of one row per paused queue, never the jobs.
//   - jobwatch_queue_tenant_jobs{queue,tenant,state}, only with
//     MetricsOptions.PerTenant, comes from Engine.TenantDepths, shared
//     between scrapes by a sharedRead of its own on the same terms as
//     the count by state. That read passes over the index entry of every
//     QUEUED and RUNNING job (as ListQueues does; 0.2 to 0.4 s at a
//     million queued jobs, see store/sqlite and store/postgres,
//     tenantstats.go), so while jobs change each scrape costs one.
const (
	jobCountsMinGap = 250 * time.Millisecond
	jobCountsMaxAge = 30 * time.Second
	// jobCountTimeout bounds one count, which goes on for the scrapes
	// after one that stopped waiting for it.
	jobCountTimeout = 10 * time.Second
	// scrapeWait is how long a scrape waits for any read of the
	// database (a count, the paused queues, the rate windows, the
	// schedules' state) before it answers with what the last good read
	// found (the counts with their timestamp), or without those series
	// before the first: so that /metrics answers within a scraper's
	// timeout (Prometheus' default is 10 s) while the database hangs,
	// jobwatch_store_reachable among its series, rather than failing
	// whole.
	scrapeWait = 2 * time.Second
)

// jobsCollector reports jobs by state from a shared count.
type jobsCollector struct {
	counts *sharedRead[map[jobtype.State]int64]
}

var (
	jobsDesc          = prometheus.NewDesc("jobwatch_jobs", "Jobs stored, by state, in the whole database (every replica's), as counted at jobwatch_jobs_counted_timestamp_seconds: again at a scrape after any change this server makes or hears of (at most four times a second), and at least every 30 s.", []string{"state"}, nil)
	jobsCountedAtDesc = prometheus.NewDesc("jobwatch_jobs_counted_timestamp_seconds", "When the jobwatch_jobs values were counted, in seconds since the Unix epoch.", nil, nil)
)

var allStates = []jobtype.State{
	jobtype.Pending, jobtype.Waiting, jobtype.Queued, jobtype.Running,
	jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost,
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsCountedAtDesc
}

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeWait)
	defer cancel()
	counts, at, ok, _ := c.counts.get(ctx)
	if !ok {
		ch <- prometheus.NewInvalidMetric(jobsDesc, errors.New("jobs could not be counted yet"))
		return
	}
	for _, s := range allStates {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(jobsCountedAtDesc, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
}

// tenantJobsCollector reports each queue's QUEUED and RUNNING jobs by
// tenant, from a shared read of Engine.TenantDepths, for the pairs with
// either: a tenant whose work in a queue is done has no series there
// until it has work again.
type tenantJobsCollector struct {
	depths *sharedRead[[]jobs.TenantDepth]
}

var (
	tenantJobsDesc = prometheus.NewDesc("jobwatch_queue_tenant_jobs",
		"QUEUED (also those due later) and RUNNING jobs of each queue by tenant, for the tenants with either in the queue, in the whole database, as read at jobwatch_queue_tenant_jobs_read_timestamp_seconds (again at a scrape after any change this server makes or hears of, and at least every 30 s). Only with serve --metrics-per-tenant.",
		[]string{"queue", "tenant", "state"}, nil)
	tenantJobsReadAtDesc = prometheus.NewDesc("jobwatch_queue_tenant_jobs_read_timestamp_seconds",
		"When the jobwatch_queue_tenant_jobs values were read, in seconds since the Unix epoch.", nil, nil)
)

func (c *tenantJobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tenantJobsDesc
	ch <- tenantJobsReadAtDesc
}

func (c *tenantJobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeWait)
	defer cancel()
	depths, at, ok, _ := c.depths.get(ctx)
	if !ok {
		ch <- prometheus.NewInvalidMetric(tenantJobsDesc, errors.New("jobs by tenant could not be read yet"))
		return
	}
	for _, d := range depths {
		ch <- prometheus.MustNewConstMetric(tenantJobsDesc, prometheus.GaugeValue, float64(d.Queued), d.Queue, d.Tenant, string(jobtype.Queued))
		ch <- prometheus.MustNewConstMetric(tenantJobsDesc, prometheus.GaugeValue, float64(d.Running), d.Queue, d.Tenant, string(jobtype.Running))
	}
	ch <- prometheus.MustNewConstMetric(tenantJobsReadAtDesc, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
}

// alertsCollector reports, for each queue with an alert_after, whether
// the last sweep found it alerting. Queues without alert_after have no
// series: their names come from callers, and a gauge that is always 0
// says nothing.
type alertsCollector struct{ engine *jobs.Engine }

var queueAlertingDesc = prometheus.NewDesc("jobwatch_queue_alerting",
	"1 while the queue's unfinished work has not drained for longer than its alert_after, as of the last sweep (every second), else 0; only queues with an alert_after.",
	[]string{"queue"}, nil)

func (c *alertsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueAlertingDesc }

func (c *alertsCollector) Collect(ch chan<- prometheus.Metric) {
	for name, alerting := range c.engine.AlertingQueues() {
		v := 0.0
		if alerting {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(queueAlertingDesc, prometheus.GaugeValue, v, name)
	}
}

// pausesCollector reports, for each queue the rules declare, the default
// queue and each paused queue, whether it is paused. Like
// jobwatch_queue_alerting it has no series for other queues: their
// names come from callers.
type pausesCollector struct {
	pauses *lastRead[[]jobs.QueuePause]
	engine *jobs.Engine
}

var queuePausedDesc = prometheus.NewDesc("jobwatch_queue_paused",
	"1 while the queue is paused (PauseQueue: it hands out no claims on any replica), else 0; for the queues the configuration names (its queues and its schedules' queues), the default queue, and every paused queue.",
	[]string{"queue"}, nil)

func (c *pausesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queuePausedDesc }

func (c *pausesCollector) Collect(ch chan<- prometheus.Metric) {
	pauses, err := c.pauses.get()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(queuePausedDesc, err)
		return
	}
	values := map[string]float64{}
	for _, name := range c.engine.NamedQueues() {
		values[name] = 0
	}
	for _, p := range pauses {
		values[p.Queue] = 1
	}
	for name, v := range values {
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, v, name)
	}
}

// schedulesCollector reports, for each schedule of the rules in effect,
// when its next run is due, whether its latest run is unfinished, and
// how it ended: what an operator alerts on when a schedule stops running
// (jobwatch schedules shows the same). It reads the schedules' state, a
// row a schedule, never the jobs.
type schedulesCollector struct {
	schedules *lastRead[[]jobs.ScheduleInfo]
}

var (
	scheduleNextRunDesc = prometheus.NewDesc("jobwatch_schedule_next_run_timestamp_seconds",
		"When the schedule's next run is due, in seconds since the Unix epoch; in the past while the sweep has yet to queue it (overdue when well past: time() - this > 60). No sample while a run is unfinished: its end decides the next.",
		[]string{"schedule"}, nil)
	scheduleRunningDesc = prometheus.NewDesc("jobwatch_schedule_running",
		"1 while the schedule's latest run is unfinished (queued, waiting or running), else 0.",
		[]string{"schedule"}, nil)
	scheduleLastEndedDesc = prometheus.NewDesc("jobwatch_schedule_last_run_end_timestamp_seconds",
		"When the schedule's latest run ended, in seconds since the Unix epoch; no sample before its first run ends, nor while a later run is unfinished (jobwatch keeps a schedule's latest run only).",
		[]string{"schedule"}, nil)
	scheduleLastSucceededDesc = prometheus.NewDesc("jobwatch_schedule_last_run_succeeded",
		"1 if the schedule's latest run SUCCEEDED, 0 if it ended otherwise (FAILED, CANCELLED, LOST); no sample before its first run ends, nor while a later run is unfinished.",
		[]string{"schedule"}, nil)
)

func (c *schedulesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- scheduleNextRunDesc
	ch <- scheduleRunningDesc
	ch <- scheduleLastEndedDesc
	ch <- scheduleLastSucceededDesc
}

func (c *schedulesCollector) Collect(ch chan<- prometheus.Metric) {
	schedules, err := c.schedules.get()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(scheduleNextRunDesc, err)
		return
	}
	for _, s := range schedules {
		running := s.LastEndedAt.IsZero() && s.LastJobState != "" && !s.LastJobState.Terminal()
		if !s.NextRunAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(scheduleNextRunDesc, prometheus.GaugeValue, float64(s.NextRunAt.UnixNano())/1e9, s.Name)
		}
		ch <- prometheus.MustNewConstMetric(scheduleRunningDesc, prometheus.GaugeValue, boolValue(running), s.Name)
		if !s.LastEndedAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(scheduleLastEndedDesc, prometheus.GaugeValue, float64(s.LastEndedAt.UnixNano())/1e9, s.Name)
			ch <- prometheus.MustNewConstMetric(scheduleLastSucceededDesc, prometheus.GaugeValue, boolValue(s.LastJobState == jobtype.Succeeded), s.Name)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Who may read /metrics. It shows every tenant's name and counts (never
// a token, a payload or a job), so:
//
//   - without tokens it is open, like the rest of the port (loopback
//     only, unless --insecure);
//   - with tokens, on the API's port, it takes an
//     "Authorization: Bearer <token>" header (the rule of bearer) of a
//     metrics token (jobwatch token new --role metrics, for scrapers) or
//     an admin one: 401 without a token or with one not known, 403 for a
//     client or worker token;
//   - moved to a listener of its own (MoveMetrics, serve
//     --metrics-addr), it asks for no token there, and the API's port
//     answers /metrics 404: whoever reaches that address reads it, so
//     bind it where only the scraper does.

// metricsOnAPIPort is /metrics (metrics, the registry's handler) as
// server.New mounts it on the API's port.
func (s *Server) metricsOnAPIPort(metrics http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.metrics.elsewhere.Load() {
			http.Error(w, "404 page not found: /metrics is served on its own address (serve --metrics-addr)", http.StatusNotFound)
			return
		}
		if s.authRequired && !s.mayReadMetrics(w, r) {
			return
		}
		metrics.ServeHTTP(w, r)
	})
}

// MoveMetrics takes /metrics off Handler (the API's port then answers it
// 404) and returns it, asking no token, for a listener of its own (serve
// --metrics-addr); the handler answers /metrics only. It refuses Hosts
// other than loopback names and AllowedHosts, as the API's port does
// without AnyHost, so that a page cannot read it through DNS rebinding;
// and so it does on a loopback listener whatever AnyHost says, as no
// token guards it there (with --tokens the API's port needs no Host
// check, its tokens do). Call it before Serve. A Metrics shared by
// several servers moves for all of them.
func (s *Server) MoveMetrics(loopback bool) http.Handler {
	s.metrics.elsewhere.Store(true)
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.metricsHandler())
	switch {
	case s.hosts != nil:
		return s.hosts.handler(mux)
	case loopback:
		return newHostCheck(s.cfg.AllowedHosts, s.metrics, s.log, nil).handler(mux)
	}
	return mux
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	})
}

// mayReadMetrics checks the bearer token of a scrape on the API's port
// and answers the refusal itself: 401 with WWW-Authenticate when there
// is no usable token, 403 when its role may not read /metrics.
func (s *Server) mayReadMetrics(w http.ResponseWriter, r *http.Request) bool {
	refuse := func(status int, err error) bool {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jobwatch /metrics"`)
		}
		http.Error(w, err.Error(), status)
		return false
	}
	token, err := bearer(r.Header)
	if err != nil {
		return refuse(http.StatusUnauthorized, fmt.Errorf("%w (a metrics or admin token)", err))
	}
	p, ok := s.tokens.Load().Lookup(token)
	if !ok {
		return refuse(http.StatusUnauthorized, errTokenUnknown)
	}
	if p.Role != auth.RoleMetrics && p.Role != auth.RoleAdmin {
		return refuse(http.StatusForbidden, fmt.Errorf("a %s token may not read /metrics; it takes a metrics token (jobwatch token new --role metrics) or an admin one", p.Role))
	}
	return true
}

// callInterceptor counts every RPC and logs it at debug level.
type callInterceptor struct {
	metrics *Metrics
	log     *slog.Logger
}

func (i *callInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		ctx = withCallerNote(ctx)
		resp, err := next(ctx, req)
		i.done(ctx, req.Spec().Procedure, req.Peer(), start, err)
		return resp, err
	}
}

func (i *callInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *callInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		ctx = withCallerNote(ctx)
		err := next(ctx, conn)
		i.done(ctx, conn.Spec().Procedure, conn.Peer(), start, err)
		return err
	}
}

func (i *callInterceptor) done(ctx context.Context, procedure string, peer connect.Peer, start time.Time, err error) {
	code := "ok"
	switch {
	case err == nil && ctx.Err() != nil:
		// The caller hung up (or its deadline passed) before the answer
		// was written: a wait answers its current state when its caller
		// goes, to no one. It counts as a watch cut the same way does.
		code = connect.CodeCanceled.String()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded.String()
		}
	case err == nil:
	case errors.As(err, new(*connect.Error)):
		code = connect.CodeOf(err).String()
	// Connect hands interceptors a bare context error when the caller's
	// time is up before the handler runs, and codes it only on the wire.
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded.String()
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled.String()
	default:
		code = connect.CodeOf(err).String()
	}
	// A write of a stream's answer that was cut fails the stream; a
	// unary answer is written after this returns, and counted then
	// (countWhenSent, sends.go).
	code = streamOutcome(ctx, code)
	count := func(code string) {
		i.metrics.requests.WithLabelValues(procedure, code).Inc()
		if p, ok := callerOf(ctx); ok {
			i.metrics.tokenRequests.WithLabelValues(string(p.Role), p.Tenant, p.TokenID, code).Inc()
		}
	}
	if !countWhenSent(ctx, code, count) {
		count(code)
	}
	markCounted(ctx)
	attrs := []any{
		"procedure", procedure,
		"protocol", peer.Protocol,
		"peer", peer.Addr,
		"code", code,
		"duration", time.Since(start),
	}
	if p, ok := callerOf(ctx); ok {
		attrs = append(attrs, "role", p.Role, "tenant", p.Tenant, "token_id", p.TokenID)
	}
	i.log.DebugContext(ctx, "call", attrs...)
}

// unaryProcedures are the unary RPCs of jobwatch's services: the calls
// countEarlyAnswers counts, and the only values it gives the procedure
// label, so no request path can add a series.
var unaryProcedures = func() map[string]bool {
	procedures := map[string]bool{}
	services := jobwatchv1.File_jobwatch_v1_jobwatch_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			if !m.IsStreamingClient() && !m.IsStreamingServer() {
				procedures["/"+string(services.Get(i).FullName())+"/"+string(m.Name())] = true
			}
		}
	}
	return procedures
}()

// unknownProcedureLabel is the procedure label of the calls to a path that
// names no procedure here (answered unimplemented): one series for them
// all, whatever the paths, and a value no procedure's path can be.
const unknownProcedureLabel = "(unknown)"

// countEarlyAnswers counts in requests_total, and logs at debug level,
// the calls answered before callInterceptor ran: refused by the checks
// in front of connect (no token or one not known, another method than
// POST, a Content-Type not spoken, a malformed deadline header, a Host
// not allowed, a path that names no procedure), or by connect as it read
// a unary call's body (which it does before any interceptor runs: a body
// that cannot be decoded, is too large, arrives too slowly, or whose
// client hung up). Without it jobwatch_requests_total and the debug log
// would show none of the mistakes callers make most: an operator chasing
// a 401 would have nothing to read. The code is read from the answer:
// the grpc-status header of a gRPC or gRPC-Web answer, or the code of a
// Connect error body. The procedure label is a procedure served here, or
// unknownProcedureLabel for any POST to another path, so no request path
// can add a series; other requests (the page, /metrics, /healthz) are
// left alone.
//
// others are the procedures served here besides jobwatch's services
// (health, reflection).
func (s *Server) countEarlyAnswers(others []string, next http.Handler) http.Handler {
	known := map[string]bool{}
	for p := range unaryProcedures {
		known[p] = true
	}
	for _, p := range streamProcedures {
		known[p] = true
	}
	for _, p := range others {
		known[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		label := r.URL.Path
		if !known[label] {
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			label = unknownProcedureLabel
		}
		start := time.Now()
		call := &countedCall{unary: unaryProcedures[r.URL.Path]}
		r = r.WithContext(context.WithValue(r.Context(), countedCallKey{}, call))
		var a *answer
		if call.unary {
			// Only a unary call's answer is read for its code: connect
			// refuses a unary body before any interceptor runs. A
			// stream refused in front of connect has its code noted
			// (noteRefusal), and its writes go straight through: a
			// parked watch's stack has no room for more frames, which
			// is also why what follows the call is in countEarly.
			a = &answer{ResponseWriter: w}
			next.ServeHTTP(a, r)
		} else {
			next.ServeHTTP(w, r)
		}
		if call.counted.Load() {
			call.sent(w) // a cut answer counts as a failure (sends.go)
			return
		}
		s.countEarly(label, call, a, r, start)
	})
}

// countEarly counts and logs a call answered before callInterceptor ran:
// with the code the check that refused it noted, else the code its
// answer a (nil for a stream) carries.
//
//go:noinline
func (s *Server) countEarly(label string, call *countedCall, a *answer, r *http.Request, start time.Time) {
	code, status := call.refusedCode, 0
	if a != nil {
		status = a.status
		if code == "" {
			code, _ = a.code()
		}
	}
	if code == "" {
		return
	}
	s.metrics.requests.WithLabelValues(label, code).Inc()
	reason := call.reason
	if reason == "" {
		reason = earlyReason(code)
	}
	path := r.URL.Path
	if len(path) > 200 {
		path = path[:200] + "…"
	}
	// Never the Authorization header nor the body: the reason is the
	// server's own words.
	s.log.DebugContext(r.Context(), "call refused before its handler",
		"procedure", path,
		"method", r.Method,
		"peer", r.RemoteAddr,
		"status", status,
		"code", code,
		"reason", reason,
		"duration", time.Since(start))
}

// streamProcedures are the streaming RPCs of jobwatch's services.
var streamProcedures = func() []string {
	var procedures []string
	services := jobwatchv1.File_jobwatch_v1_jobwatch_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			if m.IsStreamingClient() || m.IsStreamingServer() {
				procedures = append(procedures, "/"+string(services.Get(i).FullName())+"/"+string(m.Name()))
			}
		}
	}
	return procedures
}()

// earlyReason says why a call was answered code before callInterceptor
// ran when the check that answered it noted no reason (noteRefusal):
// connect-go's own answers as it read the request. It quotes nothing of
// the request: a body that cannot be decoded is told to its caller with
// pieces of it, which are not the log's.
func earlyReason(code string) string {
	switch code {
	case connect.CodeResourceExhausted.String():
		return "the request message is over --max-request-bytes (as sent, or once inflated)"
	case connect.CodeInvalidArgument.String():
		return "the request could not be read (its framing, compression or encoding); the caller was told what is wrong"
	case connect.CodeDeadlineExceeded.String():
		return "the request body did not arrive within --body-timeout, or the call's deadline had passed"
	case connect.CodeCanceled.String():
		return "the client hung up before its request was read"
	case connect.CodeUnimplemented.String():
		return "the request names a compression or an encoding the server does not speak"
	}
	return "refused by connect-go before any handler ran"
}

// noteRefusal tells countEarlyAnswers that a check in front of connect
// answers r with code, and why, for the call's count and debug line.
// reason is the server's own words: never a token, never the body.
func noteRefusal(r *http.Request, code connect.Code, reason string) {
	if c, ok := r.Context().Value(countedCallKey{}).(*countedCall); ok {
		c.refusedCode, c.reason = code.String(), reason
	}
}

// countedCallKey marks a request's context with the *countedCall that
// callInterceptor sets once it has counted the call.
type countedCallKey struct{}

type countedCall struct {
	counted atomic.Bool
	// unary: a unary call of jobwatch's services, which callInterceptor
	// leaves to countEarlyAnswers to count once its answer is written
	// (countWhenSent).
	unary bool
	// count and code: the count callInterceptor left until the answer
	// is sent (countWhenSent, sends.go). Only the call's goroutine
	// touches them.
	count func(code string)
	code  string
	// refusedCode and reason: the code a check in front of connect
	// answered the call with, and why (noteRefusal).
	refusedCode, reason string
}

// markCounted tells countEarlyAnswers that the call in ctx was counted.
func markCounted(ctx context.Context) {
	if c, ok := ctx.Value(countedCallKey{}).(*countedCall); ok {
		c.counted.Store(true)
	}
}

// answerHeadBytes is how much of an error answer's body answer keeps: a
// Connect error starts with its code.
const answerHeadBytes = 64

// answer notes the status and the start of an error body of the response
// it passes through.
type answer struct {
	http.ResponseWriter
	status int
	head   []byte
}

func (a *answer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
	a.ResponseWriter.WriteHeader(status)
}

func (a *answer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	if a.status != http.StatusOK && len(a.head) < answerHeadBytes {
		a.head = append(a.head, p[:min(len(p), answerHeadBytes-len(a.head))]...)
	}
	return a.ResponseWriter.Write(p)
}

// FlushError and Unwrap keep what the writer below offers (the send
// limits of exchange among it) within reach of http.ResponseController.
func (a *answer) FlushError() error { return http.NewResponseController(a.ResponseWriter).Flush() }

func (a *answer) Flush() { _ = a.FlushError() }

func (a *answer) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// code is the Connect code the answer carries, if it says one.
func (a *answer) code() (string, bool) {
	h := a.Header()
	status := h.Get("Grpc-Status")
	if status == "" {
		status = h.Get(http.TrailerPrefix + "Grpc-Status")
	}
	if status != "" {
		n, err := strconv.ParseUint(status, 10, 32)
		switch {
		case err != nil || n > uint64(connect.CodeUnauthenticated):
			return "", false
		case n == 0:
			return "ok", true
		}
		return connect.Code(n).String(), true
	}
	_, rest, found := bytes.Cut(a.head, []byte(`"code":"`))
	if !found {
		return "", false
	}
	name, _, found := bytes.Cut(rest, []byte(`"`))
	var c connect.Code
	if !found || c.UnmarshalText(name) != nil {
		return "", false
	}
	return c.String(), true
}
