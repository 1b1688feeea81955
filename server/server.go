// Package server is jobwatch's network face: thin Connect handlers for
// JobService, WorkerService and QueueService, request limits, error
// mapping, Prometheus metrics, gRPC health and reflection, the page at /,
// and the HTTP/1.1 + cleartext HTTP/2 listener that serves them on one
// port. It decodes, checks shapes and hands every decision to jobs.Engine;
// it must never touch SQL or decide a job's life cycle itself.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/cors"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobs"
)

// Defaults of Config that jobwatch serve's flags show too (their
// --help and the flag table of docs/OPERATING.md "Serving" name these
// values).
const (
	// DefaultWaitCap is Config.WaitCap's default.
	DefaultWaitCap = 60 * time.Second
	// DefaultStreamLifetime is Config.StreamLifetime's default.
	DefaultStreamLifetime = 10 * time.Minute
	// DefaultKeepalive is Config.Keepalive's default.
	DefaultKeepalive = 15 * time.Second
	// DefaultMaxRequestBytes is Config.MaxRequestBytes's default: 1 MiB.
	DefaultMaxRequestBytes = 1 << 20
)

// Config tunes a Server. Zero fields take the documented defaults, so
// Config{} is a working configuration, and the safe one: Serve listens
// on loopback only unless Tokens or Insecure says otherwise, and every
// request's Host is checked unless AnyHost says otherwise.
type Config struct {
	// WaitCap is the longest a WaitJob (or SubmitJob with wait) parks
	// before answering OK with the current state. Default
	// DefaultWaitCap (60s).
	WaitCap time.Duration
	// ClaimCap is the longest a ClaimJob parks before answering with no
	// job. Default jobs.DefaultClaimCap (30s), which in-process workers
	// (jobs/inproc) take too.
	ClaimCap time.Duration
	// StreamLifetime ends a WatchJob or WatchJobs stream (OK) after this
	// long, so load balancers can rotate connections; clients resume.
	// gRPC health Watch and reflection streams end (OK) after it too.
	// Default DefaultStreamLifetime (10m).
	StreamLifetime time.Duration
	// Keepalive is how often an idle stream sends a message with no job,
	// so idle proxies keep it open. Default DefaultKeepalive (15s);
	// negative disables it.
	Keepalive time.Duration
	// DeadlineMargin is how long before the caller's own deadline
	// (Connect-Timeout-Ms, grpc-timeout) a parked call answers, so the
	// answer arrives before the caller gives up. It is capped at a tenth
	// of the time the caller allowed (but 10 ms, or half, of one under
	// 100 ms), so short timeouts still get most of their time. Default
	// 200ms.
	DeadlineMargin time.Duration
	// MaxRequestBytes bounds one request message; larger ones are refused
	// with resource_exhausted. Default DefaultMaxRequestBytes (1 MiB).
	MaxRequestBytes int
	// ShutdownGrace is how long Serve waits for calls in flight after its
	// context ends (parked calls return at once). Default 10s.
	ShutdownGrace time.Duration
	// PingInterval and PingTimeout find dead HTTP/2 clients: a connection
	// silent for PingInterval gets a PING, and one that leaves it
	// unanswered for PingTimeout is closed, freeing every call parked on
	// it. Defaults 10s and 5s.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// SendTimeout ends a response or stream whose write has stayed
	// blocked this long on a client that does not read (TCP or HTTP/2
	// window full), freeing what it held. A stream's write is also cut at
	// its StreamLifetime, blocked or not. Default DefaultSendTimeout (30s).
	SendTimeout time.Duration
	// MaxPendingSendBytes is the send budget: the bytes of answers (of
	// 32 KiB or more) being built or held unsent, across all clients. An
	// answer takes its bytes before it is built or encoded and gives them
	// back once written; a call that finds no room waits its turn while
	// answers ahead of it are sent, and gets resource_exhausted when none
	// has been sent for 5s (or SendTimeout, if shorter). Nothing admitted
	// is cut for another (sends.go). Default DefaultSendBudget(): a
	// sixty-fourth of the memory the process may use, at least 64 MiB.
	MaxPendingSendBytes int
	// StalledSendsPerConn bounds the writes one connection may hold
	// blocked for over two seconds while it sent no answer (a client that does not read); the
	// server holds at most MaxPendingSendBytes / 40 KiB of them in all.
	// A write that stalls past either is cut at once (stalls.go).
	// Default DefaultStalledSendsPerConn (256).
	StalledSendsPerConn int
	// BodyTimeout is how long a request body may take to arrive in full;
	// a slower one is answered deadline_exceeded and its connection (or
	// HTTP/2 stream) closed. Bidi streams (gRPC reflection) are exempt:
	// they are bounded as parked calls, by StreamLifetime.
	// Default DefaultBodyTimeout (10s).
	BodyTimeout time.Duration
	// MaxPendingBodies bounds the requests, across all clients, whose
	// headers have arrived and whose body has not yet arrived in full.
	// Past it Serve closes the connection whose body has been awaited the
	// longest, once that body has been awaited PendingBodyGrace, or at
	// once past four times the bound. Default DefaultMaxPendingBodies
	// (2,048).
	MaxPendingBodies int
	// PendingBodyGrace is how long a body may have been awaited and still
	// be taken for one on its way (see MaxPendingBodies). Default
	// DefaultPendingBodyGrace (1s).
	PendingBodyGrace time.Duration
	// MaxConnections bounds the client connections Serve holds. A new
	// connection that finds it reached closes the one that has been
	// silent (no request yet) the longest; with none silent it is
	// accepted and closed at once. Connections that have sent a request
	// hold at most MaxConnections - MaxNewConnections places: when one
	// more sends its first request, the one idle the longest (no call in
	// flight) is closed for it; with none idle it takes a place of the
	// silent ones. Default DefaultMaxConnections(), from the open-file
	// limit.
	MaxConnections int
	// MaxNewConnections bounds the connections that have not sent a
	// request yet: past it a new one closes the one silent the longest,
	// so silent connections can only crowd out each other, never a
	// client that has spoken. Default DefaultMaxNewConnections (an
	// eighth of MaxConnections).
	MaxNewConnections int
	// FirstRequestTimeout closes a connection that has not sent its first
	// request's headers (HTTP/1.1) or opened its first stream (HTTP/2)
	// this long after it was accepted. Later requests' headers have
	// 10s each from their first byte. Default
	// DefaultFirstRequestTimeout (5s).
	FirstRequestTimeout time.Duration
	// MaxStreamsPerConn is the HTTP/2 streams one connection may have
	// open at once (SETTINGS_MAX_CONCURRENT_STREAMS); past it the client
	// waits for one to end or opens another connection (Go's HTTP
	// client does; grpc-go waits). Default DefaultMaxStreamsPerConn
	// (4,000).
	MaxStreamsPerConn int
	// MaxParkedCallsPerConn bounds the parked calls of one connection,
	// below MaxStreamsPerConn so a client's parked calls always leave it
	// streams for its short calls; past it a wait answers OK at once with
	// the current state (marked with ParkedCallsHeader), and a watch, a
	// claim, a health Watch or a reflection stream gets
	// resource_exhausted. Default MaxStreamsPerConn less a tenth (3,600).
	MaxParkedCallsPerConn int
	// MaxParkedCalls bounds the WaitJob (and SubmitJob with wait),
	// WatchJob, WatchJobs and ClaimJob calls parked at once, and the
	// gRPC health Watch and reflection streams open. Beyond it a
	// wait answers OK at once with the current state, and a watch, a
	// claim or another stream gets resource_exhausted. Default
	// DefaultMaxParkedCalls.
	MaxParkedCalls int
	// MaxParkedCallsPerTenant bounds the parked calls of one tenant, so
	// one tenant cannot take every place of MaxParkedCalls: past it a
	// wait of that tenant answers OK at once with the current state, and
	// its new watches and claims get resource_exhausted. A call's tenant
	// is its token's tenant (a client token), else the tenant it names
	// (WatchJobs, SubmitJob with wait), else its job's (WaitJob,
	// WatchJob: read before the call parks); a claim's is its worker
	// token's first tenant, else "" (workers not bound to a tenant share
	// one count). Default 0: no per-tenant limit (serve sets a quarter of
	// --max-parked-calls).
	MaxParkedCallsPerTenant int
	// AnyHost turns the Host check off. By default (false) the server
	// refuses every request (RPCs of every protocol, the page, /metrics)
	// whose Host header, or HTTP/2 :authority, is neither a loopback name
	// or address (localhost, *.localhost, 127.0.0.0/8, ::1, with any
	// port) nor one of AllowedHosts, with permission_denied (HTTP 403):
	// a server on loopback without tokens cannot then be reached through
	// DNS rebinding. Set it where the names clients use cannot be listed
	// and something else keeps pages out: Tokens (a page without a token
	// gets nothing but GetServerInfo), or a server exposed on purpose
	// (Insecure). serve sets it with --tokens or --insecure, unless
	// --allowed-hosts is given.
	AnyHost bool
	// AllowedHosts are the hosts the Host check lets through besides
	// loopback, each a name or address, with a port (only that port) or
	// without (any port). See CheckAllowedHost.
	AllowedHosts []string
	// Insecure lets Serve listen beyond loopback without Tokens. By
	// default (false) Serve refuses such a listener with an error that
	// wraps ErrNoAuthBeyondLoopback and says what to do. With it the
	// server is exposed on purpose (serve --insecure): Serve logs a
	// warning saying what is exposed and how to fix it as it starts and
	// every InsecureWarnEvery (default DefaultInsecureWarnEvery, 1h)
	// while it serves.
	Insecure          bool
	InsecureWarnEvery time.Duration
	// Logger receives the server's logs; per-call logs are at debug
	// level. Default slog.Default().
	Logger *slog.Logger
	// Registry is where the metrics are registered and what /metrics
	// serves. Default: a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Metrics is the collector set; pass the same value to
	// jobs.Config.Metrics so wake-up latency is observed. Default: a new
	// one (then wake-up latency stays empty).
	Metrics *Metrics
	// Page serves the browser page at / and below. Default: a small
	// placeholder page.
	Page http.Handler
	// CORSOrigins are the browser origins allowed to call the API from
	// other sites ("*" for any). Empty (the default) sends no CORS headers.
	CORSOrigins []string
	// DemoKinds are the job kinds demo workers run in this process;
	// GetServerInfo reports demo mode when there are any.
	DemoKinds []string
	// Version is reported by GetServerInfo. Default "dev".
	Version string
	// Tokens, when not nil, makes every call but GetServerInfo and the
	// health checks (gRPC health's Check and List, GET /healthz) need a
	// bearer token it knows, and confines each to what the token's role
	// and tenant allow (docs/SECURITY.md); SetTokens swaps them later.
	// Nil (the default): no token is asked for and everyone may do
	// everything, which is why Serve then listens on loopback only
	// (see Insecure).
	Tokens *auth.Tokens
	// TracerProvider, when set, traces every RPC (connectrpc.com/otelconnect:
	// a span per call with the standard attributes, children of the
	// caller's W3C trace context), keeps a submitting call's trace
	// context with its job (Job.traceparent) and links a WaitJob's span
	// to the trace of the job it waited for. nil traces nothing and adds
	// no interceptor (internal/tracing: off unless OTEL_* asks).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	setDefault(&c.WaitCap, DefaultWaitCap)
	setDefault(&c.ClaimCap, jobs.DefaultClaimCap)
	setDefault(&c.StreamLifetime, DefaultStreamLifetime)
	setDefault(&c.Keepalive, DefaultKeepalive)
	if c.Keepalive < 0 {
		c.Keepalive = 0 // the engine's "never"
	}
	setDefault(&c.DeadlineMargin, 200*time.Millisecond)
	setDefault(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&c.ShutdownGrace, 10*time.Second)
	setDefault(&c.PingInterval, 10*time.Second)
	setDefault(&c.PingTimeout, 5*time.Second)
	setDefault(&c.SendTimeout, DefaultSendTimeout)
	setDefault(&c.BodyTimeout, DefaultBodyTimeout)
	setDefault(&c.StalledSendsPerConn, DefaultStalledSendsPerConn)
	if c.MaxPendingSendBytes <= 0 {
		c.MaxPendingSendBytes = DefaultSendBudget()
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections()
	}
	if c.MaxNewConnections <= 0 {
		c.MaxNewConnections = DefaultMaxNewConnections(c.MaxConnections)
	}
	// Clients that spoke keep at least one place.
	c.MaxNewConnections = max(1, min(c.MaxNewConnections, c.MaxConnections-1))
	setDefault(&c.FirstRequestTimeout, DefaultFirstRequestTimeout)
	setDefault(&c.MaxPendingBodies, DefaultMaxPendingBodies)
	setDefault(&c.PendingBodyGrace, DefaultPendingBodyGrace)
	setDefault(&c.MaxStreamsPerConn, DefaultMaxStreamsPerConn)
	if c.MaxParkedCallsPerConn <= 0 {
		c.MaxParkedCallsPerConn = c.MaxStreamsPerConn - c.MaxStreamsPerConn/10
	}
	// At least one stream stays free of parked calls.
	c.MaxParkedCallsPerConn = max(1, min(c.MaxParkedCallsPerConn, c.MaxStreamsPerConn-1))
	setDefault(&c.MaxParkedCalls, DefaultMaxParkedCalls)
	setDefault(&c.InsecureWarnEvery, DefaultInsecureWarnEvery)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Page == nil {
		c.Page = placeholderPage()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Server serves the jobwatch API for one engine. Create it with New.
type Server struct {
	engine  *jobs.Engine
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	health  *grpchealth.StaticChecker
	handler http.Handler
	parked  *parkedCalls
	// unparkedLook lets one claim over the parked-call limit at a time
	// look for a ready job (workerservice.go).
	unparkedLook chan struct{}
	conns        *connMetrics
	// stopping ends when Serve starts to shut down; health Watch and
	// reflection streams end with it.
	stopping    context.Context
	stopStreams context.CancelFunc

	authRequired bool // Config.Tokens was given
	// tokenIgnored logs, once, that a server without tokens was sent one.
	tokenIgnored sync.Once
	tokens       atomic.Pointer[auth.Tokens]
	openCalls    openCalls
	// ListQueues' reads over every unfinished job, shared (sharedread.go).
	queueStats   *sharedRead[[]jobs.QueueStats]
	tenantDepths *sharedRead[[]jobs.TenantDepth]
	shared       sharedResponses // responses encoded once for many calls (shared.go)
	hosts        *hostCheck      // without AnyHost: the Host check of every listener
}

// serviceNames are the services health and reflection report.
var serviceNames = []string{
	jobwatchv1connect.JobServiceName,
	jobwatchv1connect.WorkerServiceName,
	jobwatchv1connect.QueueServiceName,
}

// New returns a server over engine. It registers its metrics on
// cfg.Registry.
func New(engine *jobs.Engine, cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		engine:  engine,
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: cfg.Metrics,
		health:  grpchealth.NewStaticChecker(serviceNames...),
	}
	s.stopping, s.stopStreams = context.WithCancel(context.Background())
	s.conns = newConnMetrics()
	s.conns.register(cfg.Registry, cfg.Logger)
	s.unparkedLook = make(chan struct{}, 1)
	s.parked = newParkedCalls(cfg.MaxParkedCalls, cfg.MaxParkedCallsPerTenant, cfg.MaxParkedCallsPerConn, s.metrics, s.conns)
	if cfg.Tokens != nil {
		s.authRequired = true
		s.tokens.Store(cfg.Tokens)
	}
	s.metrics.register(cfg.Registry, engine, cfg.Logger)
	s.queueStats = &sharedRead[[]jobs.QueueStats]{engine: engine, log: cfg.Logger, what: "list queues", read: engine.QueueStats, reuse: listQueuesReuse}
	s.tenantDepths = &sharedRead[[]jobs.TenantDepth]{engine: engine, log: cfg.Logger, what: "list queues' tenants", read: engine.TenantDepths, reuse: listQueuesReuse}

	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		// Below 1 KiB gzip costs more than it saves: resetting a pooled
		// writer alone takes longer than sending the bytes, and a publish
		// that wakes 10,000 waiters paid it 10,000 times (connect-go
		// compresses every response by default when the client accepts it).
		connect.WithCompressMinBytes(1 << 10),
		// The gate runs inside callInterceptor, so the call's log line
		// and metrics count its refusals and name the caller it admitted.
		connect.WithInterceptors(s.interceptors(&callInterceptor{metrics: s.metrics, log: s.log}, &gate{s})...),
		// Without it net/http would swallow a handler's panic into a
		// debug-level log line and drop the connection, which clients
		// retry as a transport error, forever.
		connect.WithRecover(s.recovered),
	}
	opts = append(opts, jsonCodecs(&s.shared)...)
	mux := http.NewServeMux()
	mux.Handle(jobwatchv1connect.NewJobServiceHandler(&jobService{s}, opts...))
	mux.Handle(jobwatchv1connect.JobServiceWaitJobsProcedure, waitJobsHandler(&jobService{s}, opts))
	mux.Handle(jobwatchv1connect.NewWorkerServiceHandler(&workerService{s}, opts...))
	mux.Handle(jobwatchv1connect.NewQueueServiceHandler(&queueService{s}, opts...))
	// Health and reflection: counted and logged like every call, their
	// streams bounded like parked calls (streams.go).
	streamOpts := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		gzipCompression(&s.shared), // a gzip bomb is refused here too (codec.go)
		connect.WithInterceptors(&callInterceptor{metrics: s.metrics, log: s.log}, &streamGuard{s}),
		connect.WithRecover(s.recovered),
	}
	mux.Handle(newHealthHandler(s.health, serviceNames, streamOpts...))
	mux.HandleFunc("GET "+healthzPath, (&healthHandler{checker: s.health}).healthz)
	// Reflection lists health and itself too, for the tools that browse
	// its list.
	reflector := grpcreflect.NewStaticReflector(append(slices.Clip(serviceNames),
		grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)...)
	reflectV1, reflectV1Handler := grpcreflect.NewHandlerV1(reflector, streamOpts...)
	reflectV1Alpha, reflectV1AlphaHandler := grpcreflect.NewHandlerV1Alpha(reflector, streamOpts...)
	mux.Handle(reflectV1, reflectV1Handler)
	mux.Handle(reflectV1Alpha, reflectV1AlphaHandler)
	mux.Handle("/metrics", s.metricsOnAPIPort(s.metricsHandler()))
	mux.Handle("/", cfg.Page)

	s.setUpSends()
	errs := connect.NewErrorWriter(opts...)
	others := []string{healthCheckProcedure, healthWatchProcedure, healthListProcedure,
		reflectV1 + "ServerReflectionInfo", reflectV1Alpha + "ServerReflectionInfo"}
	var h http.Handler = s.refuseTokensEarly(errs, s.checkEnvelopes(explainMediaType(checkTimeoutHeaders(errs, unknownProcedure(errs, others, mux)))))
	if !cfg.AnyHost {
		s.hosts = newHostCheck(cfg.AllowedHosts, s.metrics, s.log, opts)
		h = s.hosts.handler(h)
	}
	h = s.countEarlyAnswers(others, h)
	if len(cfg.CORSOrigins) > 0 {
		h = cors.New(cors.Options{
			AllowedOrigins: cfg.CORSOrigins,
			AllowedMethods: connectcors.AllowedMethods(),
			// Authorization carries the bearer tokens of --tokens
			// (docs/SECURITY.md); a page's tracing sends the trace
			// context; and a client may compress a stream's messages.
			AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization", "Traceparent", "Tracestate",
				"Connect-Content-Encoding", "Connect-Accept-Encoding", "Grpc-Encoding", "Grpc-Accept-Encoding"),
			ExposedHeaders: append(connectcors.ExposedHeaders(), ParkedCallsHeader),
			MaxAge:         2 * 60 * 60,
		}).Handler(h)
	}
	lim := &limits{
		sendTimeout: cfg.SendTimeout,
		bodyTimeout: cfg.BodyTimeout,
		metrics:     s.metrics,
		// Reflection is a bidi stream: its request body is open as long
		// as the call, so it has no deadline to arrive by; the stream
		// itself ends at its lifetime (streams.go).
		unbounded: []string{reflectV1, reflectV1Alpha},
		stalls: &stalls{
			max:     max(1, int64(cfg.MaxPendingSendBytes)/stallCost),
			perConn: int64(cfg.StalledSendsPerConn),
		},
	}
	lim.cancelled = s.closeResetFloods
	s.handler = lim.handler(h)
	return s
}

// listQueuesReuse is how long ListQueues reuses a read that took took
// (see queueService.ListQueues): ten times as long once it took more
// than 20 ms, at most 5 s.
func listQueuesReuse(took time.Duration) time.Duration {
	if took <= 20*time.Millisecond {
		return 0
	}
	return min(10*took, 5*time.Second)
}

// recovered turns a handler's panic into internal, like any internal
// failure: the panic and its stack go to the log, not to the caller.
func (s *Server) recovered(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
	s.log.ErrorContext(ctx, "panic in handler", "procedure", spec.Procedure, "panic", p, "stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// Handler returns the whole HTTP surface: every service (Connect, gRPC,
// gRPC-Web), gRPC health and reflection (v1 and v1alpha), /metrics and
// the page at /.
func (s *Server) Handler() http.Handler { return s.handler }

// MaxHeaderBytes bounds a request's headers (HTTP/1.1's, which net/http
// allows 4 KiB more for the request line; HTTP/2's header list, which the
// server announces in its SETTINGS): a bearer token, a trace context and
// a browser's cookies fit in it many times over. Past it, HTTP/1.1 gets
// 431 Request Header Fields Too Large and its connection closes; HTTP/2
// the same status on the stream, or, for a header block far past it,
// GOAWAY before the block has all arrived. Go's default, 1 MiB, let each
// of the silent connections --max-new-connections allows hold a megabyte
// of headers it never ended: gigabytes, for a caller with no token.
const MaxHeaderBytes = 64 << 10

// Serve answers on ln with HTTP/1.1 and cleartext HTTP/2 (h2c with prior
// knowledge) side by side, until ctx ends. Then it shuts down in order:
// the engine first, so every parked WaitJob, WatchJob and ClaimJob answers
// OK at once, then the HTTP server, which waits up to ShutdownGrace for
// calls in flight, then closes what is left (and logs it). It returns nil
// once shut down, or the listener's error. It closes ln before it
// returns. Serve does not run the engine's periodic duties (lease
// expiry, schedules, retention): Run does both, in order.
//
// Without Tokens, Serve refuses a listener beyond loopback (see
// Insecure) and returns at once an error wrapping
// ErrNoAuthBeyondLoopback.
//
// It holds at most MaxConnections at once, at most MaxNewConnections of
// them silent (conns.go), and at most MaxStreamsPerConn streams on each.
// There are no whole-request read or write timeouts, which would cut
// long-polls and streams: a silent new connection is bounded by
// FirstRequestTimeout, later requests' headers by ReadHeaderTimeout,
// slow bodies by BodyTimeout and MaxPendingBodies, writes blocked on a
// client that does not read by SendTimeout, dead clients by HTTP/2
// pings, idle connections by IdleTimeout, headers by MaxHeaderBytes.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.checkListener(ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	limit := newConnLimit(ln, s.cfg, s.metrics, s.conns, s.log)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{
		Handler:   s.handler,
		Protocols: &protocols,
		HTTP2: &http.HTTP2Config{
			// Parked calls take at most MaxParkedCallsPerConn of these,
			// so a client's short calls are never blocked behind its own
			// long-polls (DefaultMaxParkedCallsPerConn).
			MaxConcurrentStreams: s.cfg.MaxStreamsPerConn,
			SendPingTimeout:      s.cfg.PingInterval,
			PingTimeout:          s.cfg.PingTimeout,
			// A client that stops reading its TCP socket blocks every
			// write of the connection, the RST_STREAM of a stream past
			// its SendTimeout included: close the connection then.
			WriteByteTimeout: s.cfg.SendTimeout,
		},
		ConnContext:       withConn,
		ConnState:         limit.track,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(limit) }()
	healthCtx, stopHealth := context.WithCancel(ctx)
	var following sync.WaitGroup
	following.Go(func() { s.followStoreHealth(healthCtx) })
	// A first read of what /metrics reads from the database (the counts,
	// the paused queues, the rate windows, the schedules), so that a
	// database that hangs before the first scrape leaves those series as
	// they were at start rather than absent (scrapeWait).
	following.Go(func() { s.cfg.Registry.Gather() })
	defer func() { stopHealth(); following.Wait() }()
	if s.cfg.Insecure {
		warnCtx, stopWarnings := context.WithCancel(ctx)
		var warnings sync.WaitGroup
		warnings.Go(func() { s.warnInsecure(warnCtx, ln.Addr(), s.cfg.InsecureWarnEvery) })
		defer warnings.Wait()
		defer stopWarnings()
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", "grace", s.cfg.ShutdownGrace)
	stopHealth()
	following.Wait()
	for _, name := range append([]string{""}, serviceNames...) {
		s.health.SetStatus(name, grpchealth.StatusNotServing)
	}
	s.engine.Shutdown()
	s.stopStreams()
	graceCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	if err := hs.Shutdown(graceCtx); err != nil {
		s.log.Warn("calls still in flight after the grace period; closing them", "err", err)
		hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
