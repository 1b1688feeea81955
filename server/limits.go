package server

// The network limits: how long a request body may take to arrive, how
// long a response write may stay blocked on a client that stopped
// reading and how many bytes such writes may hold together, and how many
// calls may park at once, in all, of one tenant and of one connection.
// (How many connections the server holds, and how many bodies may be on
// their way, are in conns.go; health and reflection streams in
// streams.go.) Each is refused or ended with a clear answer and counted
// on /metrics. Another caller pays for it only as the longest-idle
// connection (no call in flight) or the write blocked the longest (a
// client that does not read).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/internal/shallow"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Defaults of the limits in Config.
const (
	// DefaultSendTimeout is how long one response write may stay blocked
	// on a client that does not read before its stream or call is ended.
	DefaultSendTimeout = 30 * time.Second
	// DefaultBodyTimeout is how long a request body may take to arrive
	// in full, counted from the end of its headers (which have their own
	// 10 s): at 1 MiB, the largest request, that is 100 KiB/s.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultMaxParkedCalls bounds the WaitJob, WatchJob, WatchJobs and
	// ClaimJob calls parked at once, across all clients. A parked
	// WaitJob costs about 19 KiB of server memory, 8 KiB of it its one
	// goroutine's stack, whatever the size of its job (a parked wait
	// keeps no payload, see jobs.Engine.Wait; docs/BENCHMARKS.md "What a
	// parked call costs"), so the default holds the server to a few hundred MiB.
	DefaultMaxParkedCalls = 10_000
	// reservedFiles are the file descriptors DefaultMaxConnections leaves
	// for everything that is not a client: the listener, the SQLite
	// database with its -wal and -shm files for each pooled connection,
	// logs, and the connection accepted only to be refused. It is a
	// floor; an eighth of the limit is kept when that is more.
	reservedFiles = 128
	// streamEndGrace is how long past its lifetime a stream's write may
	// still take: the engine ends a healthy stream OK at the lifetime,
	// and a keepalive sent just before must not be cut in flight.
	streamEndGrace = time.Second
)

// DefaultMaxConnections is the connection limit Config.MaxConnections
// defaults to: the process's open-file limit (RLIMIT_NOFILE, which Go
// raises to the hard limit at start) less an eighth of it, and at least
// 128, kept for the database, logs and the listener. Without it a flood
// of connections would take the last descriptor, and then the SQLite
// store and every new client would fail together until they closed.
func DefaultMaxConnections() int {
	files, ok := openFileLimit()
	if !ok {
		return 1024 // no such limit to read on this system
	}
	return max(16, files-max(reservedFiles, files/8))
}

// parkedCalls counts the calls parked now against the limit of their
// connection, the total limit and, when perTenant is set, the limit of
// their tenant. A call that finds any full is answered at once; nobody
// else's call is ended for it.
type parkedCalls struct {
	limit     int64
	perTenant int64 // 0: no per-tenant limit
	perConn   int64
	n         atomic.Int64
	metrics   *Metrics
	conns     *connMetrics

	mu      sync.Mutex
	tenants map[string]int64 // parked calls of each tenant with any
}

func newParkedCalls(limit, perTenant, perConn int, metrics *Metrics, conns *connMetrics) *parkedCalls {
	return &parkedCalls{
		limit:     int64(limit),
		perTenant: int64(max(0, perTenant)),
		perConn:   int64(perConn),
		metrics:   metrics,
		conns:     conns,
		tenants:   map[string]int64{},
	}
}

// Kinds of parked calls, as /metrics labels them.
const (
	parkWaitKind       = "wait"
	parkWatchKind      = "watch"
	parkClaimKind      = "claim"
	parkHealthKind     = "health_watch" // grpc.health.v1.Health/Watch
	parkReflectionKind = "reflection"   // a gRPC reflection stream
)

// kindNoun names a kind of parked call in a refusal.
func kindNoun(kind string) string {
	switch kind {
	case parkHealthKind:
		return "health Watch"
	case parkReflectionKind:
		return "reflection stream"
	}
	return kind
}

// park takes a place for a call of kind of tenant, made on the
// connection in ctx, or answers why there is none: the
// resource_exhausted error a watch or claim returns. A call whose tenant
// is not known (counted false, or no per-tenant limit) counts against its
// connection and the total alone.
func (p *parkedCalls) park(ctx context.Context, kind, tenant string, counted bool) (release func(), refused error) {
	conn := connOf(ctx)
	if conn != nil && conn.parked.Add(1) > p.perConn {
		conn.parked.Add(-1)
		p.conns.parkConnRefused.WithLabelValues(kind).Inc()
		return nil, p.connLimitError(kind)
	}
	releaseCounted, refused := p.parkCounted(kind, tenant, counted)
	if conn == nil {
		return releaseCounted, refused
	}
	if refused != nil {
		conn.parked.Add(-1)
		return nil, refused
	}
	return func() {
		conn.parked.Add(-1)
		releaseCounted()
	}, nil
}

// parkCounted takes a place of the total and of tenant.
func (p *parkedCalls) parkCounted(kind, tenant string, counted bool) (release func(), refused error) {
	if p.n.Add(1) > p.limit {
		p.n.Add(-1)
		p.metrics.parkRefused.WithLabelValues(kind).Inc()
		return nil, p.limitError(kind)
	}
	if p.perTenant == 0 || !counted {
		p.metrics.parkedCalls.Inc()
		return p.releaseTotal, nil
	}
	label := tenantLabel(tenant)
	p.mu.Lock()
	if p.tenants[tenant] >= p.perTenant {
		p.mu.Unlock()
		p.n.Add(-1)
		p.metrics.tenantParkRefused.WithLabelValues(kind, label).Inc()
		return nil, p.tenantLimitError(kind, tenant)
	}
	p.tenants[tenant]++
	p.metrics.parkedByTenant.WithLabelValues(label).Inc()
	p.mu.Unlock()
	p.metrics.parkedCalls.Inc()
	return func() {
		p.mu.Lock()
		if p.tenants[tenant]--; p.tenants[tenant] == 0 {
			// Only tenants with parked calls keep a series, so the
			// tenants a caller may name cannot grow /metrics for ever.
			delete(p.tenants, tenant)
			p.metrics.parkedByTenant.DeleteLabelValues(label)
		} else {
			p.metrics.parkedByTenant.WithLabelValues(label).Dec()
		}
		p.mu.Unlock()
		p.releaseTotal()
	}, nil
}

func (p *parkedCalls) releaseTotal() {
	p.n.Add(-1)
	p.metrics.parkedCalls.Dec()
}

// tenantLabel is a tenant as /metrics shows it: claims of workers bound
// to no tenant count as "(none)", which no tenant name can be.
func tenantLabel(tenant string) string {
	if tenant == "" {
		return "(none)"
	}
	return tenant
}

// limitError is what a watch or claim gets when every place is taken.
func (p *parkedCalls) limitError(kind string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"the server already holds its limit of %d parked calls (waits, watches and claims; --max-parked-calls); "+
			"retry the %s later with backoff, or ask the operator to raise the limit", p.limit, kindNoun(kind)))
}

// connLimitError is what a watch or claim gets when its connection's
// places are taken.
func (p *parkedCalls) connLimitError(kind string) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"this connection already holds its limit of %d parked calls (waits, watches, claims and other long-lived streams); "+
			"open another connection for more, or retry the %s later with backoff", p.perConn, kindNoun(kind)))
}

// tenantLimitError is what a watch or claim gets when its tenant's
// places are taken.
func (p *parkedCalls) tenantLimitError(kind, tenant string) error {
	who := fmt.Sprintf("tenant %q", tenant)
	if tenant == "" {
		who = "workers bound to no tenant"
	}
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"%s already hold their limit of %d parked calls (waits, watches and claims; --max-parked-calls-per-tenant); "+
			"retry the %s later with backoff, close calls you no longer need, or ask the operator to raise the limit",
		who, p.perTenant, kindNoun(kind)))
}

// parkWait takes a place for a WaitJob (or SubmitJob with wait) on job
// id. Its tenant is the caller's token's, else the job's, read here,
// before the call parks, and only while there is a per-tenant limit: one
// read by primary key, against a call that may park for a minute. A job
// that cannot be read counts against the total alone; the wait itself
// then answers the same error.
func (s *Server) parkWait(ctx context.Context, id string) (release func(), refused error) {
	tenant, counted := s.callTenant(ctx, s.jobTenant(id))
	return s.parked.park(ctx, parkWaitKind, tenant, counted)
}

// parkClaim takes a place for a ClaimJob. Its tenant is its worker
// token's first tenant; workers bound to no tenant (any token without
// tenants, and every worker without tokens) share the tenant "".
func (s *Server) parkClaim(ctx context.Context) (release func(), refused error) {
	tenant, counted := "", s.parked.perTenant > 0
	if p, ok := auth.FromContext(ctx); ok && len(p.Tenants) > 0 {
		tenant = p.Tenants[0]
	}
	return s.parked.park(ctx, parkClaimKind, tenant, counted)
}

// tenantOf finds the tenant a parked call counts against; ok false when
// it cannot be known (the call then counts against the total alone).
type tenantOf func(ctx context.Context) (tenant string, ok bool)

// callTenant is the tenant a parked call counts against: its token's
// when the token names one (a client's), else what of finds. With no
// per-tenant limit it is not looked for.
func (s *Server) callTenant(ctx context.Context, of tenantOf) (string, bool) {
	if s.parked.perTenant == 0 {
		return "", false
	}
	if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
		return p.Tenant, true
	}
	return of(ctx)
}

// jobTenant finds the tenant of job id in the store.
func (s *Server) jobTenant(id string) tenantOf {
	return func(ctx context.Context) (string, bool) {
		// On a goroutine of its own: the read is deep, and the call's
		// goroutine is about to park (see package shallow). Without the
		// call's cancellation: the SQLite driver would register a
		// context.AfterFunc with it, and the map that holds it stays
		// with the call's context for as long as the call is parked.
		// The read is the tenant of one row by primary key, none of
		// its payload or result.
		tenant, err := shallow.Call(func() (string, error) {
			return s.engine.TenantOf(context.WithoutCancel(ctx), id)
		})
		if err != nil {
			return "", false
		}
		return tenant, true
	}
}

// namedTenant is the tenant a request names; "" is jobtype.DefaultTenant, as
// for the engine.
func namedTenant(tenant string) tenantOf {
	return func(context.Context) (string, bool) {
		if tenant == "" {
			return jobtype.DefaultTenant, true
		}
		return tenant, true
	}
}

// ParkedCallsHeader is set to "full" on a WaitJob (or SubmitJob with
// wait) answer that did not park because MaxParkedCalls were parked: the
// state in it is current but the call did not wait, so a client that
// loops on WaitJob should back off before asking again, not spin.
const ParkedCallsHeader = "Jobwatch-Parked-Calls"

func markParkedCallsFull(ctx context.Context) {
	if call, ok := connect.CallInfoForHandlerContext(ctx); ok {
		call.ResponseHeader().Set(ParkedCallsHeader, "full")
	}
}

// exchange limits one HTTP request and its response: the body must arrive
// within BodyTimeout, and each write of the response may stay blocked for
// at most SendTimeout (and, for a stream, not past its lifetime).
//
// Deadlines are set through http.ResponseController, which for HTTP/1.1
// sets them on the connection and for HTTP/2 on the stream alone (a
// passed write deadline resets just that stream). net/http's own
// Server.ReadTimeout and WriteTimeout cannot do this: they bound the
// whole request, so they would cut every parked call and stream, and
// ReadTimeout would also close the body of a bidi stream such as gRPC
// reflection.
//
// A Write arms the write deadline and a Flush lifts it, so an idle stream
// is never cut; a handler must flush what it writes before it idles.
// connect does: it flushes each stream message as it writes it, and
// writes a unary answer as the handler returns.
type exchange struct {
	http.ResponseWriter
	rc     *http.ResponseController
	limits *limits
	http2  bool

	// Only the handler's goroutine writes and sets streamEnd.
	deadline  time.Time // the write deadline in force; zero: none
	streamEnd time.Time // set by a stream's handler: its lifetime's end
	// cutReason says why a write of the answer was cut ("send_timeout",
	// "stream_lifetime"), once one was (sends.go).
	cutReason string
}

// limits holds what the middleware needs of the server.
type limits struct {
	sendTimeout time.Duration
	bodyTimeout time.Duration
	metrics     *Metrics
	// unbounded lists path prefixes whose request bodies are streams
	// that stay open as long as the call: no body deadline applies.
	unbounded []string
}

type exchangeKey struct{}

// handler wraps next with the body and write limits.
func (l *limits) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := &exchange{
			ResponseWriter: w,
			rc:             http.NewResponseController(w),
			limits:         l,
			http2:          r.ProtoMajor >= 2,
		}
		conn := connOf(r.Context())
		if conn != nil {
			conn.limit.spoke(conn)
		}
		if !unaryProcedures[r.URL.Path] {
			// Only a stream looks its exchange up (endStreamBy). A unary
			// call, a parked WaitJob among them, is spared the copy of
			// its request that a context value takes, for as long as it
			// is parked.
			r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
		}
		if r.Body != nil && r.Body != http.NoBody && !l.bodyIsStream(r.URL.Path) {
			b := &limitedBody{ReadCloser: r.Body, ex: ex, ctx: r.Context(), conn: conn}
			b.start()
			defer b.done()
			r.Body = b
		}
		next.ServeHTTP(ex, r)
		ex.finish()
	})
}

func (l *limits) bodyIsStream(path string) bool {
	for _, p := range l.unbounded {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// endStreamBy makes every later write of the call's response end by t at
// the latest (a stream's lifetime), blocked or not; the returned func
// lifts it again, so the stream's own closing message is not cut.
func endStreamBy(ctx context.Context, t time.Time) (lift func()) {
	ex, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return func() {}
	}
	ex.streamEnd = t
	return func() { ex.streamEnd = time.Time{} }
}

// arm sets the write deadline for the write about to happen.
func (ex *exchange) arm() {
	deadline := time.Now().Add(ex.limits.sendTimeout)
	if !ex.streamEnd.IsZero() && ex.streamEnd.Before(deadline) {
		deadline = ex.streamEnd
	}
	ex.deadline = deadline
	_ = ex.rc.SetWriteDeadline(deadline)
}

// disarm lifts the write deadline once nothing waits to be written, so
// an idle stream (a parked call, a watch between changes) is not reset.
func (ex *exchange) disarm() {
	if ex.deadline.IsZero() {
		return
	}
	ex.deadline = time.Time{}
	_ = ex.rc.SetWriteDeadline(time.Time{})
}

// FlushError sends what was written; it stays blocked for SendTimeout at
// most. The deadline is the one the last Write set (writes and their
// flush come together); it is lifted once everything is sent.
func (ex *exchange) FlushError() error {
	if ex.deadline.IsZero() {
		ex.arm()
	}
	ex.limits.metrics.sendsInProgress.Inc()
	err := ex.rc.Flush()
	ex.limits.metrics.sendsInProgress.Dec()
	ex.wrote(err)
	ex.disarm()
	return err
}

// Flush is for http.Flusher, which connect uses for streams.
func (ex *exchange) Flush() { _ = ex.FlushError() }

// Unwrap lets http.ResponseController reach the connection's writer for
// everything else (read deadlines, full duplex).
func (ex *exchange) Unwrap() http.ResponseWriter { return ex.ResponseWriter }

// finish bounds what net/http writes after the handler returns. HTTP/1.1
// flushes its buffer under the connection's write deadline, and lifts it
// afterwards. An HTTP/2 stream flushes what is pending under the deadline
// its last Write set, which is still armed (a response with nothing
// pending ends with frames that need no flow-control window), and stops
// the timer when the stream closes.
func (ex *exchange) finish() {
	if !ex.http2 {
		_ = ex.rc.SetWriteDeadline(time.Now().Add(ex.limits.sendTimeout))
	}
}

// limitedBody is a request body that must arrive within BodyTimeout. At
// its end it also checks that the client is still there: a request whose
// client hung up before it was handled must change nothing.
type limitedBody struct {
	io.ReadCloser
	ex       *exchange
	ctx      context.Context
	conn     *limitedConn // nil: not served by Serve
	pending  *pendingBody // its place among the bodies on their way
	doneOnce sync.Once
}

func (b *limitedBody) start() {
	b.ex.limits.metrics.bodiesReading.Inc()
	_ = b.ex.rc.SetReadDeadline(time.Now().Add(b.ex.limits.bodyTimeout))
	if b.conn != nil {
		b.pending = b.conn.limit.bodies.start(b.conn)
	}
}

// done ends the body's count.
func (b *limitedBody) done() {
	b.doneOnce.Do(func() {
		b.ex.limits.metrics.bodiesReading.Dec()
		if b.pending != nil {
			b.conn.limit.bodies.done(b.pending)
		}
	})
}

// arrived lifts the deadline of a body that has arrived in full. An
// HTTP/2 stream's read deadline is a timer of its own (and a closure the
// HTTP/2 server keeps for it) until the stream closes, which for a parked
// call is a minute later: lifting it frees both. An HTTP/1.1 connection's
// needs no lifting: net/http lifts it itself when it starts the background
// read that notices a client that hangs up.
func (b *limitedBody) arrived() {
	b.done()
	if b.ex.http2 {
		_ = b.ex.rc.SetReadDeadline(time.Time{})
	}
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		b.arrived()
		if clientGone(b.ctx) {
			b.ex.limits.metrics.abandoned.Inc()
			return n, connect.NewError(connect.CodeCanceled,
				errors.New("the client hung up before its request was handled; nothing was done"))
		}
		return n, err
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.arrived()
		b.ex.limits.metrics.bodyTimeouts.Inc()
		if !b.ex.http2 {
			// The rest of the body will not be read: the connection
			// cannot carry another request.
			b.ex.Header().Set("Connection", "close")
		}
		return n, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf(
			"the request body did not arrive within %v (--body-timeout); send the whole request at once", b.ex.limits.bodyTimeout))
	default:
		b.arrived()
		return n, err
	}
}

// clientGone reports whether the client of a request has hung up. The
// request's context says so only a moment after net/http notices, too
// late for a request that arrives whole and is followed at once by the
// hang-up; for HTTP/1.1 the socket is asked directly.
func clientGone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	c, ok := ctx.Value(connKey{}).(net.Conn)
	if !ok {
		return false
	}
	return peerClosed(c)
}

// parkWatch admits a WatchJob or WatchJobs stream: it takes a parked
// place (or answers resource_exhausted) and returns the stream's end on
// the engine's clock. Until done, every write of the stream is also cut
// at that end, so a stream blocked on a client that does not read still
// ends at its lifetime.
//
// of finds the stream's tenant when its caller's token does not name one
// (see callTenant).
func (s *Server) parkWatch(ctx context.Context, of tenantOf) (deadline time.Time, done func(), err error) {
	tenant, counted := s.callTenant(ctx, of)
	release, refused := s.parked.park(ctx, parkWatchKind, tenant, counted)
	if refused != nil {
		return time.Time{}, nil, refused
	}
	s.metrics.openWatches.Inc()
	deadline = s.capDeadline(ctx, s.cfg.StreamLifetime)
	lift := endStreamBy(ctx, deadline.Add(streamEndGrace))
	return deadline, func() {
		lift()
		s.metrics.openWatches.Dec()
		release()
	}, nil
}
