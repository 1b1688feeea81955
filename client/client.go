package client

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/tracing"
)

// Protocol is the wire protocol the client speaks. The server speaks all
// three on one port.
type Protocol int

const (
	// ProtocolConnect is the default: plain HTTP POSTs, readable with curl.
	ProtocolConnect Protocol = iota
	// ProtocolGRPC needs HTTP/2 (h2c for http:// URLs, which the client
	// sets up itself).
	ProtocolGRPC
	// ProtocolGRPCWeb is what browsers speak.
	ProtocolGRPCWeb
)

// Defaults of the options; each option's comment says what it changes.
const (
	DefaultLongCallConns  = 4
	DefaultDialTimeout    = 5 * time.Second
	DefaultPingInterval   = 10 * time.Second
	DefaultPingTimeout    = 5 * time.Second
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
)

// shortCallConns is 0, no limit: a short call must never queue for a
// connection.
const shortCallConns = 0

type config struct {
	shortHTTP    connect.HTTPClient
	longHTTP     connect.HTTPClient
	token        string
	protocol     Protocol
	json         bool
	longConns    int
	dialTimeout  time.Duration
	pingInterval time.Duration
	pingTimeout  time.Duration
	backoff      Backoff
	onRetry      func(err error, delay time.Duration)
	onMove       func(from, to string, cause error)
	connectOpts  []connect.ClientOption
	tracing      trace.TracerProvider
}

// Option configures a Client.
type Option func(*config)

// WithHTTPClient makes short calls (everything but the long calls) go
// through hc instead of the client's own transport. Long calls keep their
// own transport unless WithLongCallHTTPClient replaces it too.
func WithHTTPClient(hc connect.HTTPClient) Option { return func(c *config) { c.shortHTTP = hc } }

// WithLongCallHTTPClient makes the long calls (WaitJob, WaitJobs,
// WatchJob, WatchJobs, WatchJobLogs, ClaimJob) go through hc. It must
// set no overall timeout (http.Client.Timeout) shorter than the server's
// caps.
func WithLongCallHTTPClient(hc connect.HTTPClient) Option {
	return func(c *config) { c.longHTTP = hc }
}

// WithToken sends "Authorization: Bearer token" on every call, without
// the whitespace around token.
func WithToken(token string) Option {
	// A token read from a file, or from a shell's $(cat …) of one written
	// with a newline, keeps the newline: net/http refuses such a header,
	// and connect-go calls that unavailable, which a wait would retry
	// until its deadline. A token never holds whitespace.
	return func(c *config) { c.token = strings.TrimSpace(token) }
}

// WithProtocol chooses Connect (default), gRPC or gRPC-Web.
func WithProtocol(p Protocol) Option { return func(c *config) { c.protocol = p } }

// WithJSON makes the client send and read JSON instead of binary
// protobuf: slower, but readable in a proxy's log. Like the default, it
// reports a job it cannot decode as an *UndecodableJobError.
func WithJSON() Option { return func(c *config) { c.json = true } }

// WithLongCallConns sets the connections of the long-call pool (default
// DefaultLongCallConns); each long call goes on the one with the fewest
// in flight. Over HTTP/2, which the client uses for http:// URLs and
// negotiates for https://, many parked calls share one connection, up to
// the server's --max-parked-calls-per-conn (3,600 by default: four
// connections park more than a server's --max-parked-calls); over
// HTTP/1.1 it is also the number of long calls that can be in flight at
// once.
func WithLongCallConns(n int) Option { return func(c *config) { c.longConns = n } }

// WithDialTimeout bounds how long connecting to the server may take
// (default DefaultDialTimeout). It is the only timeout the client sets on
// its own; calls themselves are bounded by their contexts.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithPings sets the HTTP/2 health check of both transports: after
// interval without any frame from the server the client sends a PING, and
// closes the connection when no answer comes within timeout. A silently
// dead server is noticed in interval + timeout (defaults 10s + 5s), and
// parked calls on that connection fail and are retried.
func WithPings(interval, timeout time.Duration) Option {
	return func(c *config) { c.pingInterval, c.pingTimeout = interval, timeout }
}

// WithBackoff bounds the delay between retries of WaitForJob, Watch and a
// Worker's claims: the first retry waits a random time up to initial,
// each next one up to twice as long, at most max (full jitter); any
// successful answer starts over from initial.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *config) { c.backoff = Backoff{Initial: initial, Max: max} }
}

// WithRetryNotify calls f before each retry of a transient error, with
// the delay about to be slept; a command line uses it to say why it is
// still waiting.
func WithRetryNotify(f func(err error, delay time.Duration)) Option {
	return func(c *config) { c.onRetry = f }
}

// WithServerMoveNotify calls f each time a Client of several servers
// moves its calls from one to the next, with the two addresses (any
// password in them replaced by "xxxxx") and what the call that found the
// first one gone saw; a command line uses it to say which server it
// talks to now.
func WithServerMoveNotify(f func(from, to string, cause error)) Option {
	return func(c *config) { c.onMove = f }
}

// WithTracing traces every call (connectrpc.com/otelconnect: a client
// span per call with the standard attributes, and the W3C trace context
// sent to the server), with tp, or otel.GetTracerProvider() when tp is
// nil. A job submitted inside a span is then run by its worker in that
// trace (WorkerConfig.TracerProvider). Without it the client adds no
// interceptor.
func WithTracing(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		c.tracing = tp
	}
}

// WithConnectOptions passes extra options to the generated clients.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(c *config) { c.connectOpts = append(c.connectOpts, opts...) }
}

// Client talks to one jobwatch deployment: one server, or replicas of one
// (see New and the package comment). It is safe for concurrent use.
type Client struct {
	jobs    jobwatchv1connect.JobServiceClient
	workers jobwatchv1connect.WorkerServiceClient
	queues  jobwatchv1connect.QueueServiceClient

	// The long-call halves; jobs and workers route to them.
	longJobs    jobwatchv1connect.JobServiceClient
	longWorkers jobwatchv1connect.WorkerServiceClient

	transports []*http.Transport // ours, to close idle connections
	backoff    Backoff
	onRetry    func(err error, delay time.Duration)
	several    bool // calls fail over among several servers (failoverHTTP)
}

// New returns a client for the server at baseURL, such as
// "http://127.0.0.1:8080". It does not connect until the first call.
//
// baseURL may also list several servers of one deployment (replicas on
// one PostgreSQL database), separated by commas:
// "http://a:8080,http://b:8080,http://c:8080". Calls then go to the first
// until one finds it gone (refused, reset, cut off before its answer, a
// 503), and from then on to the next, round the list. The call that
// failed is not sent again; the retry loops (WaitForJob, Watch and the
// others the package comment names, a Worker's calls) retry on the next
// server, and any other call is the caller's to retry. An address that
// is not an http:// or https:// URL ("127.0.0.1:8080"), alone or in a
// list, or a list whose addresses do not all have one scheme, makes
// every call fail with invalid_argument saying why, which the retry
// loops return at once; ValidBaseURL reports the same before any call.
func New(baseURL string, opts ...Option) *Client {
	cfg := config{
		longConns:    DefaultLongCallConns,
		dialTimeout:  DefaultDialTimeout,
		pingInterval: DefaultPingInterval,
		pingTimeout:  DefaultPingTimeout,
		backoff:      Backoff{Initial: DefaultBackoffInitial, Max: DefaultBackoffMax},
	}
	for _, o := range opts {
		o(&cfg)
	}
	c := &Client{backoff: cfg.backoff, onRetry: cfg.onRetry}
	var list *servers
	// One address that is not a URL goes the list's way too: every call
	// fails with invalid_argument, which no retry loop retries, where
	// connect-go would answer unavailable, which they retry for ever.
	if addrs := splitServers(baseURL); len(addrs) == 1 && validURL(addrs[0]) == nil {
		baseURL = addrs[0]
	} else {
		list, baseURL = newServers(addrs)
		list.onMove = cfg.onMove
	}
	cleartext := !strings.HasPrefix(strings.ToLower(baseURL), "https:")
	if cfg.shortHTTP == nil {
		t := newTransport(cleartext, shortCallConns, cfg)
		c.transports = append(c.transports, t)
		cfg.shortHTTP = &http.Client{Transport: t}
	}
	if cfg.longHTTP == nil {
		p := newLongPool(cleartext, cfg.longConns, cfg)
		c.transports = append(c.transports, p.transports()...)
		cfg.longHTTP = &http.Client{Transport: p}
	}
	if list != nil {
		c.several = list.err == nil && len(list.urls) > 1
		base, _ := url.Parse(baseURL) // newServers' own String of a parsed URL
		cfg.shortHTTP = &failoverHTTP{next: cfg.shortHTTP, s: list, base: base}
		cfg.longHTTP = &failoverHTTP{next: cfg.longHTTP, s: list, base: base}
	}

	// Before the caller's options: a codec of theirs (WithProtoJSON)
	// replaces ours, and with it the *UndecodableJobError.
	copts := []connect.ClientOption{connect.WithCodec(codec{json: cfg.json})}
	switch cfg.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	if cfg.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer(cfg.token)))
	}
	if cfg.tracing != nil {
		// NewInterceptor fails only on options it cannot take; these
		// are fixed.
		if i, err := otelconnect.NewInterceptor(otelconnect.WithTracerProvider(cfg.tracing),
			otelconnect.WithPropagator(tracing.Propagator), otelconnect.WithoutMetrics()); err == nil {
			copts = append(copts, connect.WithInterceptors(i))
		}
	}
	copts = append(copts, cfg.connectOpts...)

	short := jobwatchv1connect.NewJobServiceClient(cfg.shortHTTP, baseURL, copts...)
	c.longJobs = jobwatchv1connect.NewJobServiceClient(cfg.longHTTP, baseURL, copts...)
	c.jobs = routedJobs{JobServiceClient: short, long: c.longJobs}
	shortWorkers := jobwatchv1connect.NewWorkerServiceClient(cfg.shortHTTP, baseURL, copts...)
	c.longWorkers = jobwatchv1connect.NewWorkerServiceClient(cfg.longHTTP, baseURL, copts...)
	c.workers = routedWorkers{WorkerServiceClient: shortWorkers, long: c.longWorkers}
	c.queues = jobwatchv1connect.NewQueueServiceClient(cfg.shortHTTP, baseURL, copts...)
	return c
}

// newTransport builds one connection pool. For http:// URLs it speaks
// HTTP/2 with prior knowledge (h2c) through the standard library's
// Protocols, so gRPC works and parked calls multiplex over a few
// connections. Keepalive pings use the standard library's
// HTTP2Config.SendPingTimeout/PingTimeout, which do what golang.org/x/net's
// ReadIdleTimeout/PingTimeout did, so that package is not needed.
func newTransport(cleartext bool, maxConns int, cfg config) *http.Transport {
	dialer := &net.Dialer{Timeout: cfg.dialTimeout, KeepAlive: 15 * time.Second}
	var protocols http.Protocols
	if cleartext {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
	}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: cfg.dialTimeout,
		MaxConnsPerHost:     maxConns,
		MaxIdleConnsPerHost: max(maxConns, 2),
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		Protocols:           &protocols,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: cfg.pingInterval,
			PingTimeout:     cfg.pingTimeout,
			// The server then sends a large answer (a WaitJobs of 1,000
			// summaries is 136 KB) in a few frames, not one per 16 KiB:
			// it reached the caller 0.2 ms sooner on this project's
			// 2-core machine. A connection's read buffer grows to the
			// largest frame it has read.
			MaxReadFrameSize: maxReadFrameSize,
		},
	}
}

// maxReadFrameSize is the largest HTTP/2 frame the client takes.
const maxReadFrameSize = 1 << 20

// JobService returns the generated JobService client. Its WaitJob,
// WatchJob and WatchJobs go over the long-call transport, the rest over
// the short-call one.
func (c *Client) JobService() jobwatchv1connect.JobServiceClient { return c.jobs }

// WorkerService returns the generated WorkerService client; ClaimJob goes
// over the long-call transport.
func (c *Client) WorkerService() jobwatchv1connect.WorkerServiceClient { return c.workers }

// QueueService returns the generated QueueService client.
func (c *Client) QueueService() jobwatchv1connect.QueueServiceClient { return c.queues }

// Close closes the idle connections of the client's own transports.
// Calls still in flight are not interrupted; cancel their contexts.
//
// A call whose context was cancelled has returned before its HTTP/2
// stream is torn down (a Worker's last claim, when Run returns), and its
// connection is not idle until then: so Close looks again a few times
// over the next two seconds, from a goroutine of its own, and closes
// what has become idle by then. It does not wait for that.
func (c *Client) Close() {
	closeIdle := func() {
		for _, t := range c.transports {
			t.CloseIdleConnections()
		}
	}
	closeIdle()
	if len(c.transports) == 0 {
		return
	}
	go func() {
		for _, d := range []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond} {
			time.Sleep(d)
			closeIdle()
		}
	}()
}

// Submit is JobService.SubmitJob returning the job. A unique_key an
// active job of the tenant holds is ErrJobAlreadyActive; ActiveJob names
// that job, for a caller that submits again after a lost answer. A job
// past the tenant's max_queued is ErrQuotaExceeded; Quota gives the
// numbers.
func (c *Client) Submit(ctx context.Context, req *jobwatchv1.SubmitJobRequest) (*jobwatchv1.Job, error) {
	resp, err := c.jobs.SubmitJob(ctx, req)
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJob(), nil
}

// Get is JobService.GetJob returning the job; ErrJobNotFound for an
// unknown job.
func (c *Client) Get(ctx context.Context, id string) (*jobwatchv1.Job, error) {
	resp, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJob(), nil
}

// Cancel is JobService.CancelJob returning the job.
func (c *Client) Cancel(ctx context.Context, id string) (*jobwatchv1.Job, error) {
	resp, err := c.jobs.CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: id})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJob(), nil
}

// Start is JobService.StartJob returning the job.
func (c *Client) Start(ctx context.Context, id string) (*jobwatchv1.Job, error) {
	resp, err := c.jobs.StartJob(ctx, &jobwatchv1.StartJobRequest{JobId: id})
	if err != nil {
		return nil, mapJobError(err)
	}
	return resp.GetJob(), nil
}

type routedJobs struct {
	jobwatchv1connect.JobServiceClient
	long jobwatchv1connect.JobServiceClient
}

// SubmitJob with wait parks as a WaitJob does, so it goes as one; without,
// it is a short call.
func (r routedJobs) SubmitJob(ctx context.Context, req *jobwatchv1.SubmitJobRequest) (*jobwatchv1.SubmitJobResponse, error) {
	if req.GetWait() {
		return r.long.SubmitJob(ctx, req)
	}
	return r.JobServiceClient.SubmitJob(ctx, req)
}

func (r routedJobs) WaitJob(ctx context.Context, req *jobwatchv1.WaitJobRequest) (*jobwatchv1.WaitJobResponse, error) {
	return r.long.WaitJob(ctx, req)
}

func (r routedJobs) WaitJobs(ctx context.Context, req *jobwatchv1.WaitJobsRequest) (*jobwatchv1.WaitJobsResponse, error) {
	return r.long.WaitJobs(ctx, req)
}

func (r routedJobs) WatchJobLogs(ctx context.Context, req *jobwatchv1.WatchJobLogsRequest) (*connect.ServerStreamForClient[jobwatchv1.WatchJobLogsResponse], error) {
	return r.long.WatchJobLogs(ctx, req)
}

func (r routedJobs) WatchJob(ctx context.Context, req *jobwatchv1.WatchJobRequest) (*connect.ServerStreamForClient[jobwatchv1.WatchJobResponse], error) {
	return r.long.WatchJob(ctx, req)
}

func (r routedJobs) WatchJobs(ctx context.Context, req *jobwatchv1.WatchJobsRequest) (*connect.ServerStreamForClient[jobwatchv1.WatchJobsResponse], error) {
	return r.long.WatchJobs(ctx, req)
}

type routedWorkers struct {
	jobwatchv1connect.WorkerServiceClient
	long jobwatchv1connect.WorkerServiceClient
}

func (r routedWorkers) ClaimJob(ctx context.Context, req *jobwatchv1.ClaimJobRequest) (*jobwatchv1.ClaimJobResponse, error) {
	return r.long.ClaimJob(ctx, req)
}

// bearer adds the Authorization header to unary and streaming calls alike
// (connect's UnaryInterceptorFunc would miss WatchJob).
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// ValidBaseURL reports a clear error for a server address a user typed,
// or for a comma-separated list of several as New takes it: each address
// checked, and all with one scheme.
func ValidBaseURL(s string) error {
	addrs := splitServers(s)
	if len(addrs) != 1 {
		_, err := parseServers(addrs)
		return err
	}
	return validURL(addrs[0])
}

// validURL checks one server address.
func validURL(s string) error {
	u, err := url.Parse(s)
	if err != nil && strings.Contains(s, "://") {
		return err
	}
	if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return &url.Error{Op: "parse", URL: s, Err: errBadScheme}
	}
	return nil
}
