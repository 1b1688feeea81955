package server

// Stalled sends: answers a client does not take.
//
// A call whose answer is being written holds its handler's goroutine,
// its HTTP/2 stream and the buffers of its answer, about 35 to 40 KiB
// however small the answer, until the client takes it or SendTimeout
// cuts it. The send budget (sends.go) bounds the bytes of large answers;
// these are bounded by count. A write is stalled when it is still
// blocked after stallAfter and no other write on its connection has gone
// through for as long: a client that reads, however slow its link, takes
// some of its answers every so often, and only one that does not (a flow-control
// window of 0, a socket left unread) takes none. Each connection may hold
// StalledSendsPerConn stalled writes, and the server a send budget's
// worth (stallCost each); a write that stalls past either is cut at once
// (its HTTP/2 stream reset; an
// HTTP/1.1 connection, which has one answer in flight, closed), counted
// in jobwatch_sends_cut_total{reason="stalled"} and as deadline_exceeded,
// like a write cut at SendTimeout. Writes that stalled within the bounds
// are cut at SendTimeout as before, and so are the writes of a client
// that lets an answer through now and then and holds the rest. An
// outside probe held 32,000 small answers on 8 connections with a window
// of 0 and no token, 965 MB, before these bounds.

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// stallAfter is how long a write stays blocked before it counts as
	// stalled.
	stallAfter = 2 * time.Second
	// stallCost is what one stalled write is taken to hold, against the
	// send budget's bytes, for the server-wide bound.
	stallCost = 40 << 10
	// stallProgress is how many bytes of answers (HTTP/2 DATA) a
	// connection must send in stallAfter for its blocked writes to count
	// as read: any. A client that takes one small answer now and then is
	// read; so is one that lets a trickle through on purpose, which holds
	// its answers until SendTimeout, as before these bounds.
	stallProgress = 1
	// DefaultStalledSendsPerConn is Config.StalledSendsPerConn's
	// default: far more answers than a client that reads ever leaves
	// unread for two seconds, far fewer than a connection's streams.
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
	held  bool  // counted in stalls.n and its connection's stalled
	mark  int64 // the connection's answer bytes sent when last looked at
}

// sending brackets one write of ex's answer: it is counted in
// jobwatch_sends_in_progress, and cut if it stalls past the bounds. A
// write of admittedAnswerBytes or more since the last flush is of an
// answer the send budget already bounds, by its bytes, and is not
// watched: on a slow link such answers wait their turn for long, and
// are read.
func (ex *exchange) sending() *stallWatch {
	ex.limits.metrics.sendsInProgress.Inc()
	w := &stallWatch{ex: ex}
	if ex.conn != nil {
		w.mark = ex.conn.out.sent.Load()
	}
	if ex.pending < admittedAnswerBytes {
		w.timer = time.AfterFunc(stallAfter, w.stalled)
	}
	return w
}

// stalled runs once the write has been blocked for stallAfter: it takes
// a place among the stalled writes, or cuts the write. A write waits
// its turn while its connection is read, however slowly: while the
// connection sent stallProgress bytes of answers since the last look, it
// is looked at again stallAfter later. (A client on a slow link reading
// answers queued behind each other is not one that does not read: an
// outside probe's 1,500 answers of 40 KB at 5 MB/s had hundreds cut
// before; HTTP/2 sends the answers of a connection's streams in turns,
// so none of them may end for seconds while all of them are read.)
func (w *stallWatch) stalled() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	st, conn := w.ex.limits.stalls, w.ex.conn
	if conn != nil {
		if sent := conn.out.sent.Load(); sent-w.mark >= stallProgress {
			w.mark = sent
			w.timer.Reset(stallAfter)
			return
		}
	}
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
	if w.timer == nil || w.timer.Stop() {
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

// sentData follows what a server writes on a connection and counts the
// bytes of answers in it: on HTTP/2, the payloads of DATA frames (not
// HEADERS, RST_STREAM, PING or SETTINGS, which a client that grants no
// window still gets); on HTTP/1.1, every byte. Only the connection's
// writer calls count; sent may be read by anyone.
type sentData struct {
	sent atomic.Int64

	kind   byte // 0 until the first byte; 'H' HTTP/1.1 ("HTTP/..."); 2 HTTP/2
	header [9]byte
	have   int    // bytes of header read
	left   uint32 // bytes of the current frame's payload still to come
	data   bool   // the current frame is DATA
}

func (d *sentData) count(p []byte) {
	if len(p) == 0 {
		return
	}
	if d.kind == 0 {
		d.kind = 2
		if p[0] == 'H' {
			d.kind = 'H'
		}
	}
	if d.kind == 'H' {
		d.sent.Add(int64(len(p)))
		return
	}
	var data int64
	for len(p) > 0 {
		if d.left > 0 {
			k := uint32(min(len(p), int(min(d.left, 1<<30))))
			if d.data {
				data += int64(k)
			}
			d.left -= k
			p = p[k:]
			continue
		}
		k := copy(d.header[d.have:], p)
		d.have += k
		p = p[k:]
		if d.have == len(d.header) {
			d.left = uint32(d.header[0])<<16 | uint32(d.header[1])<<8 | uint32(d.header[2])
			d.data = d.header[3] == 0 // DATA
			d.have = 0
		}
	}
	if data > 0 {
		d.sent.Add(data)
	}
}
