package server

// Request bodies: each must arrive within BodyTimeout (limitedBody),
// and a request whose client hung up before it was handled changes
// nothing (clientGone). How many bodies may be on their way at once is
// in conns.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
)

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
