package server

// Write deadlines: the middleware (limits.handler) that wraps each
// request in an exchange, whose writes may stay blocked on a client
// that does not read for SendTimeout at most, and a stream's for no
// longer than its lifetime (endStreamBy). The send budget that bounds
// the bytes such writes hold together is in sends.go.

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

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
	// started is when the call came in, for cancelled (resets.go); kept
	// here, not in the handler's frame, which a parked call holds.
	started time.Time
	// conn is the connection the call came on, nil outside a server's
	// listener (tests).
	conn *limitedConn
	// pending is the bytes written since the last flush (finish flushes
	// them).
	pending int
	// stallCut is set by the write's stallWatch when it cut the write
	// (stalls.go).
	stallCut atomic.Bool
}

// limits holds what the middleware needs of the server.
type limits struct {
	sendTimeout time.Duration
	bodyTimeout time.Duration
	metrics     *Metrics
	// unbounded lists path prefixes whose request bodies are streams
	// that stay open as long as the call: no body deadline applies.
	unbounded []string
	// cancelled is told of each HTTP/2 call its client cancelled while
	// it was answered, with when it came in (resets.go); nil: nothing.
	cancelled func(r *http.Request, started time.Time)
	// stalls bounds the writes blocked on clients that do not read
	// (stalls.go).
	stalls *stalls
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
			started:        time.Now(),
		}
		conn := connOf(r.Context())
		if conn != nil {
			conn.limit.spoke(conn)
		}
		ex.conn = conn
		if !unaryProcedures[r.URL.Path] {
			// Only a stream looks its exchange up (endStreamBy). A unary
			// call, a parked WaitJob among them, is spared the context
			// value, for as long as it is parked.
			r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
		}
		if r.Body != nil && r.Body != http.NoBody && !l.bodyIsStream(r.URL.Path) {
			b := &limitedBody{ReadCloser: r.Body, ex: ex, ctx: r.Context(), conn: conn}
			b.start()
			defer b.done()
			// On a copy of the request: net/http must go on seeing its own
			// body in its own. It tells from that body whether the
			// handler left some of it unread (one refused for its size),
			// and then closes an HTTP/1.1 connection after the answer,
			// gently enough for the client to read it. Given limitedBody,
			// it kept the connection and read the rest of the body as
			// the next request (answered 431; a proxy in front sending
			// several clients' requests on one connection would have been
			// desynced).
			if r.ProtoMajor < 2 {
				r = r.WithContext(r.Context())
			}
			r.Body = b
		}
		next.ServeHTTP(ex, r)
		ex.finish()
		if l.cancelled != nil && ex.http2 && r.Context().Err() != nil {
			l.cancelled(r, ex.started)
		}
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
	w := ex.sending()
	err := ex.rc.Flush()
	w.end()
	ex.pending = 0
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
// afterwards. On HTTP/2 what is pending (a small unary answer, which
// connect writes without a flush) is flushed here, under the deadline its
// Write set and watched for a stall, rather than by net/http after the
// handler, where nothing would see it blocked; a response with nothing
// pending ends with frames that need no flow-control window.
func (ex *exchange) finish() {
	if !ex.http2 {
		_ = ex.rc.SetWriteDeadline(time.Now().Add(ex.limits.sendTimeout))
		return
	}
	if ex.pending > 0 {
		_ = ex.FlushError()
	}
}
