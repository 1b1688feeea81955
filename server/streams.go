package server

// The long-lived streams that are not jobwatch's own: gRPC health's
// Watch and gRPC reflection (v1 and v1alpha). Like WatchJob they are
// parked calls: each holds a goroutine and its stream's memory for as
// long as it is open, so each is counted against the parked-call limits
// (of its connection, of the server and, for a client token, of its
// tenant), ends (OK) at its StreamLifetime and when the server shuts
// down, and past a limit is refused with resource_exhausted.
//
// What they need: with Config.Tokens, a token, of any role (they say
// nothing about jobs, but each holds memory until it ends, so nobody
// without a token may hold one); without tokens, nothing, like every
// call. Health's unary Check needs nothing ever: load balancers and
// orchestrators probe it without credentials, and it holds nothing past
// its answer.

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Causes that end a health Watch or reflection stream OK.
var (
	errStreamLifetime = errors.New("the stream reached its lifetime")
	errShuttingDown   = errors.New("the server is shutting down")
)

// streamGuard is the interceptor of the health and reflection handlers.
type streamGuard struct{ s *Server }

// WrapUnary lets health's Check through: it needs no token and holds
// nothing once answered.
func (g *streamGuard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (g *streamGuard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *streamGuard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		s := g.s
		kind := parkReflectionKind
		if conn.Spec().Procedure == healthWatchProcedure {
			kind = parkHealthKind
		}
		ctx, end, err := s.admitAnyToken(ctx, conn.RequestHeader())
		if err != nil {
			s.conns.streamsRefused.WithLabelValues("token").Inc()
			return err
		}
		defer end()
		tenant, counted := s.callTenant(ctx, noTenant)
		release, refused := s.parked.park(ctx, kind, tenant, counted)
		if refused != nil {
			s.conns.streamsRefused.WithLabelValues("parked").Inc()
			return refused
		}
		defer release()

		deadline := s.capDeadline(ctx, s.cfg.StreamLifetime)
		ctx, cancel := context.WithDeadlineCause(ctx, deadline, errStreamLifetime)
		defer cancel()
		ctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		defer context.AfterFunc(s.stopping, func() { stop(errShuttingDown) })()
		lift := endStreamBy(ctx, deadline.Add(streamEndGrace))
		defer lift()
		if kind == parkReflectionKind {
			// A reflection stream's handler waits in a read of its
			// request stream and does not look at its context: end that
			// read when the context ends. (Health's Watch returns when
			// its context ends.)
			defer unblockReadsAtEnd(ctx)()
		}

		err = next(ctx, conn)
		if rerr := revoked(ctx); rerr != nil {
			return rerr
		}
		if cause := context.Cause(ctx); errors.Is(cause, errStreamLifetime) || errors.Is(cause, errShuttingDown) {
			return nil // the client opens another, as after WatchJob's lifetime
		}
		return err
	}
}

// noTenant finds no tenant: a stream that is not about jobs counts
// against its caller's token's tenant when it names one (callTenant),
// else against its connection and the total alone.
func noTenant(context.Context) (string, bool) { return "", false }

// unblockReadsAtEnd makes the request stream's pending and later reads
// fail once ctx ends; the returned func must be called before the handler
// returns (the stream's ResponseWriter may not be used after).
func unblockReadsAtEnd(ctx context.Context) (release func()) {
	ex, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok {
		return func() {}
	}
	var (
		mu       sync.Mutex
		returned bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !returned {
			_ = ex.rc.SetReadDeadline(time.Now())
		}
	})
	return func() {
		stop()
		mu.Lock()
		returned = true
		mu.Unlock()
	}
}

// admitAnyToken admits a health Watch or reflection stream: with tokens,
// its caller must have one, of any role. Like admit, it returns the
// context the stream runs in, cancelled if a reload revokes the token,
// and end, to call when the stream is over.
func (s *Server) admitAnyToken(ctx context.Context, header http.Header) (context.Context, func(), error) {
	nothing := func() {}
	if !s.authRequired {
		return ctx, nothing, nil
	}
	return s.admitToken(ctx, header, nil)
}
