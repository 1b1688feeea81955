package server

// Stalled sends: answers a client does not take.
//
// A call whose answer is being written holds its handler's goroutine,
// its HTTP/2 stream and the buffers of its answer, about 35 to 40 KiB
// however small the answer, until the client takes it or SendTimeout
// cuts it. The send budget (sends.go) bounds the bytes of large answers;
// these are bounded by count. A write still blocked after stallAfter is
// stalled: a client that reads takes a small answer in microseconds, so
// only one that does not (a flow-control window of 0, a socket left
// unread) keeps it. Each connection may hold StalledSendsPerConn stalled
// writes, and the server a send budget's worth (stallCost each); a write
// that stalls past either is cut at once (its HTTP/2 stream reset; an
// HTTP/1.1 connection, which has one answer in flight, closed), counted
// in jobwatch_sends_cut_total{reason="stalled"} and as deadline_exceeded,
// like a write cut at SendTimeout. Writes that stalled within the bounds
// are cut at SendTimeout as before. An outside probe held 32,000 small
// answers on 8 connections with a window of 0 and no token, 965 MB,
// before these bounds.

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// stallAfter is how long a write stays blocked before it counts as
	// stalled.
	stallAfter = 500 * time.Millisecond
	// stallCost is what one stalled write is taken to hold, against the
	// send budget's bytes, for the server-wide bound.
	stallCost = 40 << 10
	// DefaultStalledSendsPerConn is Config.StalledSendsPerConn's
	// default: far more answers than a client that reads ever leaves
	// unread for half a second, far fewer than a connection's streams.
	DefaultStalledSendsPerConn = 256
)

// stalls counts the stalled writes of the whole server.
type stalls struct {
	max     int64 // server-wide
	perConn int64
	n       atomic.Int64
}

// stallWatch watches one write: started by exchange.sending, ended by
// end.
type stallWatch struct {
	ex    *exchange
	timer *time.Timer

	mu    sync.Mutex
	ended bool
	held  bool // counted in stalls.n and its connection's stalled
}

// sending brackets one write of ex's answer: it is counted in
// jobwatch_sends_in_progress, and cut if it stalls past the bounds.
func (ex *exchange) sending() *stallWatch {
	ex.limits.metrics.sendsInProgress.Inc()
	w := &stallWatch{ex: ex}
	w.timer = time.AfterFunc(stallAfter, w.stalled)
	return w
}

// stalled runs once the write has been blocked for stallAfter: it takes
// a place among the stalled writes, or cuts the write.
func (w *stallWatch) stalled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	st, conn := w.ex.limits.stalls, w.ex.conn
	switch {
	case st.n.Add(1) > st.max:
		st.n.Add(-1)
	case conn != nil && conn.stalled.Add(1) > st.perConn:
		conn.stalled.Add(-1)
		st.n.Add(-1)
	default:
		w.held = true
		return
	}
	w.ex.stallCut.Store(true)
	// A deadline in the past resets an HTTP/2 stream at once, and ends
	// the blocked write with os.ErrDeadlineExceeded (wrote).
	_ = w.ex.rc.SetWriteDeadline(time.Now().Add(-time.Second))
}

// end ends the watch once the write has returned.
func (w *stallWatch) end() {
	w.ex.limits.metrics.sendsInProgress.Dec()
	if w.timer.Stop() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if w.held {
		w.ex.limits.stalls.n.Add(-1)
		if w.ex.conn != nil {
			w.ex.conn.stalled.Add(-1)
		}
	}
}
