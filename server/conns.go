package server

// Connections: how many the server holds, how long and how many of them
// may stay silent before their first request, and how many request
// bodies may be on their way at once. Serve enforces them; a server
// used through Handler() alone is bounded by whoever serves it.
//
// The invariant: a connection that has said nothing (no complete request
// yet) can only ever push out another that has said nothing. Clients
// that have spoken, busy or idle between requests, keep their places
// against any number of silent newcomers; an idle one makes room only for
// a newcomer once that newcomer has sent a request.

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the connection limits in Config.
const (
	// DefaultFirstRequestTimeout is how long a new connection may take to
	// send its first request's headers (HTTP/1.1) or open its first
	// stream (HTTP/2). Every client sends its request right after it
	// connects; only a connection opened ahead of time (a browser's
	// preconnect) waits, and it is closed and opened again when needed.
	DefaultFirstRequestTimeout = 5 * time.Second
	// DefaultMaxStreamsPerConn is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
	// the server announces: the streams one connection may have open at
	// once (it was 1<<20). Each open stream costs a goroutine and 10 to 20
	// KiB whether or not its request has arrived; what those streams can
	// hold is bounded across the server as well (MaxParkedCalls,
	// MaxPendingBodies), so the cap need not be small: it is sized for
	// clients that multiplex many parked calls over one connection. Go's
	// HTTP client puts every call on one connection until that connection
	// has this many streams, so jobwatch's Go client, holding 1,000 (or
	// 3,000) WaitJob calls on its long-call connection, finds room for
	// all of them. It is chosen with DefaultMaxParkedCallsPerConn: see
	// there.
	DefaultMaxStreamsPerConn = 4000
	// DefaultMaxParkedCallsPerConn bounds the parked calls (waits,
	// watches, claims, health Watch and reflection streams) of one
	// connection to nine tenths of its streams, so a client's own parked
	// calls always leave it 400 streams for its short calls: a client
	// that multiplexes everything over one connection (grpc-go, grpcurl)
	// is never blocked behind its own long-polls. A client that needs
	// more parked calls opens more connections.
	DefaultMaxParkedCallsPerConn = DefaultMaxStreamsPerConn - DefaultMaxStreamsPerConn/10
	// DefaultMaxPendingBodies bounds the requests, across all clients,
	// whose headers have arrived but whose body has not (all of it) yet.
	// Such a request holds a goroutine and about 21 KiB of heap until its
	// body arrives or BodyTimeout passes (4,000 of them: heap 4 → 87 MB,
	// RSS 28 → 200 MB); healthy clients send the body with the headers,
	// so even a busy server has a few dozen at a time. At the bound the
	// connection whose body has been awaited the longest is closed.
	DefaultMaxPendingBodies = 2048
	// DefaultPendingBodyGrace is how long a body may have been awaited
	// and still be taken for one on its way (pendingBodies).
	DefaultPendingBodyGrace = time.Second
)

// DefaultMaxNewConnections is what Config.MaxNewConnections defaults to:
// an eighth of the connection limit, at least 1. A client that connects
// sends its request within milliseconds, so even a flood of silent
// connections redialled at 2,000 a second leaves each newcomer (2,187
// places of the 17,500 of a 20,000-file limit) a second to speak before
// it is the oldest silent one; the other seven eighths are for clients
// that have spoken.
func DefaultMaxNewConnections(maxConnections int) int { return max(1, maxConnections/8) }

// connLimit is a listener that holds at most max connections open, of
// which at most maxNew have not yet sent a request ("new", or silent).
//
// A new connection that sends nothing within firstRequest is closed. A
// newcomer that finds maxNew silent connections, or the whole limit
// taken, closes the connection silent the longest (passing over those
// whose request has arrived but not yet been read: silentLongest); with
// none silent it is accepted and closed at once (every place is held by
// a client that spoke), rather than left in the kernel's backlog, where
// it would look to its client like a server that hangs.
//
// Connections that have spoken may hold max - maxNew places; when one
// more speaks, the one idle the longest (no call in flight) is closed to
// make room, so clients that made a call and keep their connection open
// cannot lock newcomers out for the idle timeout (2 minutes). With none
// idle it keeps its place, taken from those of the silent ones. A
// connection with a call in flight, parked calls included, is never
// closed for a newcomer.
type connLimit struct {
	net.Listener
	max          int
	maxNew       int
	firstRequest time.Duration
	metrics      *Metrics
	conns        *connMetrics
	log          *slog.Logger
	bodies       pendingBodies

	mu          sync.Mutex
	open        int       // connections held
	spoken      int       // of them, those that have sent a request
	fresh       list.List // of *limitedConn not yet spoken, silent the longest first
	idle        list.List // of *limitedConn spoken and idle, idle the longest first
	refused     int64     // since the last warning
	lastWarning time.Time // zero: none yet
}

// connLimitWarnEvery spaces the warnings of a refusing listener, so a
// flood makes one line a minute, with a count, not one per connection.
const connLimitWarnEvery = time.Minute

func newConnLimit(ln net.Listener, cfg Config, metrics *Metrics, conns *connMetrics, log *slog.Logger) *connLimit {
	return &connLimit{
		Listener:     ln,
		max:          cfg.MaxConnections,
		maxNew:       cfg.MaxNewConnections, // below max (Config.withDefaults)
		firstRequest: cfg.FirstRequestTimeout,
		metrics:      metrics,
		conns:        conns,
		log:          log,
		bodies:       pendingBodies{limit: cfg.MaxPendingBodies, grace: cfg.PendingBodyGrace, conns: conns},
	}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, limit: l}
		if !l.admit(lc) {
			// Counted and warned about before it is closed, so that
			// whoever sees it closed sees it counted.
			l.metrics.connectionsRefused.Inc()
			l.refusedOne()
			c.Close()
			continue
		}
		l.metrics.connections.Inc()
		return lc, nil
	}
}

// admit takes a place for the new connection c, closing silent ones to
// make room, or reports false when every place is held by a connection
// that has spoken.
func (l *connLimit) admit(c *limitedConn) bool {
	var evicted []*limitedConn
	defer func() {
		for _, old := range evicted {
			old.Close()
			l.conns.freshClosed.Inc()
		}
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.open >= l.max || l.fresh.Len() >= l.maxNew {
		old, speaking := l.silentLongest()
		switch {
		case old == nil:
			return false
		case speaking && l.open < l.max:
			// The oldest silent ones all have their request waiting: the
			// server is behind, not they. Let the newcomer past
			// maxNew rather than close a client about to be served.
		default:
			l.forget(old)
			evicted = append(evicted, old)
			continue
		}
		break
	}
	l.open++
	c.fresh = l.fresh.PushBack(c)
	l.conns.fresh.Inc()
	c.firstRequest = time.AfterFunc(l.firstRequest, func() { l.silentTooLong(c) })
	return true
}

// freshScan is how many of the silent connections, oldest first,
// silentLongest asks whether their request has arrived.
const freshScan = 16

// silentLongest is the connection that has been silent the longest and
// has no request waiting to be read: one whose request has arrived is
// about to speak (the server, busy, has not read it yet), so it is passed
// over, among the first freshScan. When all of those have a request
// waiting it is the oldest, and speaking is true. Nil when there is no
// silent connection. Called with l.mu held.
func (l *connLimit) silentLongest() (c *limitedConn, speaking bool) {
	front := l.fresh.Front()
	if front == nil {
		return nil, false
	}
	for e, i := front, 0; e != nil && i < freshScan; e, i = e.Next(), i+1 {
		if c := e.Value.(*limitedConn); !requestWaiting(c.Conn) {
			return c, false
		}
	}
	return front.Value.(*limitedConn), true
}

// silentTooLong closes c if it has not spoken yet.
func (l *connLimit) silentTooLong(c *limitedConn) {
	l.mu.Lock()
	if c.fresh == nil {
		l.mu.Unlock()
		return // spoke, or is gone
	}
	l.forget(c)
	l.mu.Unlock()
	l.conns.firstRequestTimeouts.Inc()
	c.Close()
}

// spoke notes that c has sent a request: it leaves the silent ones, and
// when those that spoke hold their share, the one idle the longest makes
// room for it.
func (l *connLimit) spoke(c *limitedConn) {
	if c.spoken.Load() {
		return
	}
	l.mu.Lock()
	if c.gone || c.spoken.Load() {
		l.mu.Unlock()
		return
	}
	c.spoken.Store(true)
	c.firstRequest.Stop()
	l.fresh.Remove(c.fresh)
	c.fresh = nil
	l.conns.fresh.Dec()
	l.spoken++
	var idle *limitedConn
	if l.spoken > max(1, l.max-l.maxNew) {
		if front := l.idle.Front(); front != nil {
			idle = front.Value.(*limitedConn)
			l.forget(idle)
		}
	}
	l.mu.Unlock()
	if idle != nil {
		idle.Close()
		l.metrics.connectionsIdleClosed.Inc()
	}
}

// forget gives c's place back and takes it off every list; its caller
// closes it. Called with l.mu held.
func (l *connLimit) forget(c *limitedConn) {
	if c.gone {
		return
	}
	c.gone = true
	l.open--
	if c.fresh != nil {
		l.fresh.Remove(c.fresh)
		c.fresh = nil
		c.firstRequest.Stop()
		l.conns.fresh.Dec()
	}
	if c.spoken.Load() {
		l.spoken--
	}
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
}

// track is the http.Server's ConnState hook: it keeps the idle list.
// net/http calls a connection idle between HTTP/1.1 requests and when an
// HTTP/2 connection has no stream open, which includes an HTTP/2
// connection that has sent its preface and nothing else: only one that
// has spoken counts as idle.
func (l *connLimit) track(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	if state == http.StateIdle && c.spoken.Load() && !c.gone {
		c.idle = l.idle.PushBack(c)
	}
}

func (l *connLimit) refusedOne() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
	if !l.lastWarning.IsZero() && time.Since(l.lastWarning) < connLimitWarnEvery {
		return
	}
	l.log.Warn("connection limit reached: new connections are closed at once (--max-connections)",
		"limit", l.max, "refused", l.refused)
	l.lastWarning, l.refused = time.Now(), 0
}

// limitedConn gives its place back when closed, once, and counts what
// its requests hold.
type limitedConn struct {
	net.Conn
	limit *connLimit
	once  sync.Once

	spoken  atomic.Bool  // it has sent a request
	parked  atomic.Int64 // its parked calls
	stalled atomic.Int64 // its writes blocked past stallAfter (stalls.go)
	out     sentData     // the bytes of answers written to it (stalls.go)
	resets  resetCount   // its calls the client cancelled (resets.go)

	// Guarded by limit.mu.
	gone         bool          // its place was given back
	fresh        *list.Element // in limit.fresh until it speaks
	idle         *list.Element // in limit.idle while idle
	firstRequest *time.Timer   // closes it if it stays silent
}

func (c *limitedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.count(p[:n])
	return n, err
}

func (c *limitedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// release gives c's place back, once, and reports whether this call did.
func (c *limitedConn) release() bool {
	released := false
	c.once.Do(func() {
		released = true
		c.limit.mu.Lock()
		c.limit.forget(c)
		c.limit.mu.Unlock()
		c.limit.metrics.connections.Dec()
	})
	return released
}

// connKey holds, in a request's context, the client connection it came
// on (unwrapped), so the body check can ask the socket whether the client
// has already hung up; limitedConnKey holds the *limitedConn, whose
// counts the limits keep.
type (
	connKey        struct{}
	limitedConnKey struct{}
)

func withConn(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		ctx = context.WithValue(ctx, limitedConnKey{}, lc)
		c = lc.Conn
	}
	return context.WithValue(ctx, connKey{}, c)
}

// connOf is the connection a request came on, nil when it did not come
// through Serve.
func connOf(ctx context.Context) *limitedConn {
	c, _ := ctx.Value(limitedConnKey{}).(*limitedConn)
	return c
}

// pendingBodies are the request bodies on their way, oldest first, across
// all connections of a listener. Past limit the connection whose body has
// been awaited the longest is closed, which frees every stream it held:
// a client that sends headers and holds the body back (to hold a
// goroutine and the stream's memory each time) loses its connection
// before anyone whose request is arriving normally, which takes
// milliseconds. One connection alone cannot pass the limit by much: it
// has at most MaxStreamsPerConn streams.
//
// A body is counted from the moment its handler starts, and a burst of
// healthy calls (10,000 waits at once over 40 connections) started more
// handlers than two busy cores could run to their bodies' ends: past the
// limit, the oldest, a healthy connection's, was closed with its parked
// calls. So a body awaited less than pendingBodyGrace is never blamed:
// past the limit the oldest is closed only once it has been awaited that
// long (grace, Config.PendingBodyGrace), or once the count passes four
// times the limit, whatever its age.
type pendingBodies struct {
	limit int
	grace time.Duration
	conns *connMetrics

	mu     sync.Mutex
	bodies list.List // of *pendingBody, awaited the longest first
}

type pendingBody struct {
	conn  *limitedConn
	since time.Time
	el    *list.Element // nil once off the list; guarded by pendingBodies.mu
}

// start counts a body of c that is on its way; done must follow.
func (p *pendingBodies) start(c *limitedConn) *pendingBody {
	now := time.Now()
	b := &pendingBody{conn: c, since: now}
	var closing []*limitedConn
	p.mu.Lock()
	b.el = p.bodies.PushBack(b)
	for p.bodies.Len() > p.limit {
		front := p.bodies.Front().Value.(*pendingBody)
		if now.Sub(front.since) < p.grace && p.bodies.Len() <= 4*p.limit {
			break // still on its way, as far as anyone can tell
		}
		p.bodies.Remove(front.el)
		front.el = nil
		closing = append(closing, front.conn) // perhaps c itself
	}
	p.mu.Unlock()
	for _, old := range closing {
		if old.closeForBodies() {
			p.conns.bodiesClosed.Inc()
		}
	}
	return b
}

// done ends the count of a body that start began.
func (p *pendingBodies) done(b *pendingBody) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.el != nil {
		p.bodies.Remove(b.el)
		b.el = nil
	}
}

// closeForBodies closes c for holding the body awaited the longest, and
// reports whether this closed it (its other bodies, still on the list,
// come off it as they fail).
func (c *limitedConn) closeForBodies() bool {
	released := c.release()
	_ = c.Conn.Close()
	return released
}

// connMetrics are the counts of the connection and stream limits.
type connMetrics struct {
	fresh                prometheus.Gauge
	firstRequestTimeouts prometheus.Counter
	freshClosed          prometheus.Counter
	bodiesClosed         prometheus.Counter
	resetsClosed         prometheus.Counter
	parkConnRefused      *prometheus.CounterVec
	streamsRefused       *prometheus.CounterVec
}

func newConnMetrics() *connMetrics {
	return &connMetrics{
		fresh: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "jobwatch_connections_new",
			Help: "Connections that have not sent a request yet (--max-new-connections).",
		}),
		firstRequestTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_first_request_timeouts_total",
			Help: "Connections closed for sending no request within --first-request-timeout.",
		}),
		freshClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_new_closed_total",
			Help: "Connections closed, before they sent a request, to make room for a newer one (--max-new-connections, --max-connections).",
		}),
		bodiesClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_closed_pending_bodies_total",
			Help: "Connections closed because their request body was awaited the longest when --max-pending-bodies were on their way.",
		}),
		resetsClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jobwatch_connections_closed_resets_total",
			Help: "HTTP/2 connections closed because their client cancelled more than 1,000 calls within 10s (a rapid-reset flood).",
		}),
		parkConnRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_parked_calls_conn_refused_total",
			Help: "Calls that could not park because their connection held --max-parked-calls-per-conn, by kind.",
		}, []string{"kind"}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobwatch_streams_refused_total",
			Help: "gRPC health Watch and reflection streams refused, by reason (token, parked).",
		}, []string{"reason"}),
	}
}

// register registers m on reg, or takes the collectors already there (a
// registry shared by two servers).
func (m *connMetrics) register(reg *prometheus.Registry, log *slog.Logger) {
	for _, c := range []any{&m.fresh, &m.firstRequestTimeouts, &m.freshClosed, &m.bodiesClosed, &m.resetsClosed, &m.parkConnRefused, &m.streamsRefused} {
		switch c := c.(type) {
		case *prometheus.Gauge:
			*c = registered(reg, *c, log)
		case *prometheus.Counter:
			*c = registered(reg, *c, log)
		case **prometheus.CounterVec:
			*c = registered(reg, *c, log)
		}
	}
}

func registered[C prometheus.Collector](reg *prometheus.Registry, c C, log *slog.Logger) C {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
	case errors.As(err, &already):
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	default:
		log.Warn("register metric", "err", err)
	}
	return c
}
