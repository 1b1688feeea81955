package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

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

	// The network limits of limits.go: use now and refusals of each.
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
}

var _ jobs.Metrics = (*Metrics)(nil)

// NewMetrics returns unregistered collectors; server.New registers them.
func NewMetrics() *Metrics {
	return &Metrics{
		parkedWaits: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_parked_waits",
			Help: "WaitJob calls (and SubmitJob calls with wait) parked now.",
		}),
		openWatches: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_open_watches",
			Help: "WatchJob and WatchJobs streams open now.",
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
			Help: "RPCs handled, by procedure and Connect code.",
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
			Help: "WaitJob, WatchJob, WatchJobs and ClaimJob calls parked now (limit: --max-parked-calls).",
		}),
		parkRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_parked_calls_refused_total",
			Help: "Calls that found --max-parked-calls taken, by kind: a wait answered at once with the current state, a watch or claim refused with resource_exhausted.",
		}, []string{"kind"}),
		parkedByTenant: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jobwatch_parked_calls_by_tenant",
			Help: "Parked calls by tenant, for the tenants with any parked now, while --max-parked-calls-per-tenant is on; tenant=\"(none)\" counts claims of workers bound to no tenant.",
		}, []string{"tenant"}),
		tenantParkRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_parked_calls_tenant_refused_total",
			Help: "Calls that found their tenant's --max-parked-calls-per-tenant taken, by kind and tenant: a wait answered at once with the current state, a watch or claim refused with resource_exhausted.",
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
		sendsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_sends_cut_total",
			Help: "Responses and streams ended because a write stayed blocked on a client that does not read: for --send-timeout, until the stream's --stream-lifetime, or (send_budget) while newer writes needed the room of the pending-send budget.",
		}, []string{"reason"}),
	}
}

// Woke implements jobs.Metrics.
func (m *Metrics) Woke(kind string, latency time.Duration) {
	m.wakeLatency.WithLabelValues(kind).Observe(latency.Seconds())
}

func (m *Metrics) register(reg *prometheus.Registry, engine *jobs.Engine, log *slog.Logger) {
	for _, c := range []prometheus.Collector{
		m.parkedWaits, m.openWatches, m.parkedClaims, m.wakeLatency, m.requests, m.tokenRequests,
		m.connections, m.connectionsRefused, m.connectionsIdleClosed, m.parkedCalls, m.parkRefused,
		m.parkedByTenant, m.tenantParkRefused, m.hostRefused,
		m.bodiesReading, m.bodyTimeouts, m.abandoned, m.sendsInProgress, m.sendsCut,
		&jobsCollector{engine: engine, log: log},
		&alertsCollector{engine: engine, log: log},
	} {
		// A Metrics shared by two servers on one registry is registered
		// once; that is not an error.
		if err := reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			log.Warn("register metric", "err", err)
		}
	}
}

// jobsCollector reports jobs by state, read from the store at scrape time
// so the numbers are right across restarts and replicas.
type jobsCollector struct {
	engine *jobs.Engine
	log    *slog.Logger
}

var jobsDesc = prometheus.NewDesc("jobwatch_jobs", "Jobs stored, by state.", []string{"state"}, nil)

var allStates = []jobtype.State{
	jobtype.Pending, jobtype.Queued, jobtype.Running,
	jobtype.Succeeded, jobtype.Failed, jobtype.Cancelled, jobtype.Lost,
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.engine.CountByState(ctx)
	if err != nil {
		c.log.Warn("count jobs for metrics", "err", err)
		ch <- prometheus.NewInvalidMetric(jobsDesc, err)
		return
	}
	for _, s := range allStates {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// alertsCollector reports, for each queue with an alert_after, whether it
// is alerting, decided at scrape time from the store as ListQueues
// decides it. Queues without alert_after have no series: their names
// come from callers, and a gauge that is always 0 says nothing.
type alertsCollector struct {
	engine *jobs.Engine
	log    *slog.Logger
}

var queueAlertingDesc = prometheus.NewDesc("jobwatch_queue_alerting",
	"1 while the queue's unfinished work has not drained for longer than its alert_after, else 0; only queues with an alert_after.",
	[]string{"queue"}, nil)

func (c *alertsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueAlertingDesc }

func (c *alertsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.engine.QueueStats(ctx)
	if err != nil {
		c.log.Warn("read queues for metrics", "err", err)
		ch <- prometheus.NewInvalidMetric(queueAlertingDesc, err)
		return
	}
	for _, q := range stats {
		if q.AlertAfter <= 0 {
			continue
		}
		v := 0.0
		if q.Alerting {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(queueAlertingDesc, prometheus.GaugeValue, v, q.Name)
	}
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
	i.metrics.requests.WithLabelValues(procedure, code).Inc()
	markCounted(ctx)
	attrs := []any{
		"procedure", procedure,
		"protocol", peer.Protocol,
		"peer", peer.Addr,
		"code", code,
		"duration", time.Since(start),
	}
	if p, ok := callerOf(ctx); ok {
		i.metrics.tokenRequests.WithLabelValues(string(p.Role), p.Tenant, p.TokenID, code).Inc()
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

// countEarlyAnswers counts in requests_total the unary calls connect
// answers before any interceptor runs: a body that cannot be decoded, is
// too large, arrives too slowly or whose client hung up. Without it
// jobwatch_requests_total would show none of the mistakes callers make
// most. The code is read from the answer: the grpc-status header of a
// gRPC or gRPC-Web answer, or the code of a Connect error body.
func (s *Server) countEarlyAnswers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !unaryProcedures[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		call := &countedCall{}
		r = r.WithContext(context.WithValue(r.Context(), countedCallKey{}, call))
		a := &answer{ResponseWriter: w}
		next.ServeHTTP(a, r)
		if call.counted.Load() {
			return
		}
		if code, ok := a.code(); ok {
			s.metrics.requests.WithLabelValues(r.URL.Path, code).Inc()
		}
	})
}

// countedCallKey marks a request's context with the *countedCall that
// callInterceptor sets once it has counted the call.
type countedCallKey struct{}

type countedCall struct{ counted atomic.Bool }

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
