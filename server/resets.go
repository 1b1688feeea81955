package server

import (
	"net/http"
	"sync"
	"time"
)

// A client may cancel an HTTP/2 stream at any moment (RST_STREAM), and
// the server has then already begun to answer it: a flood of requests
// each cancelled at once ("rapid reset") costs the server every answer
// begun and the client almost nothing. Go's HTTP/2 server bounds the
// handlers running at once, not the rate; an outside probe's one
// connection kept both cores three quarters busy. So a connection whose
// calls the client cancelled more than maxResetsPerWindow times within
// resetWindow is closed: no client of jobwatch cancels calls that
// often (a page or a worker cancels a handful in a minute), and the
// client may connect again. Only calls cancelled within quickReset of
// their start count: a client that lets go of many parked waits at once
// (a benchmark's 10,000, at its end) cancels calls it had held for a
// while, which cost the server nothing more.
const (
	resetWindow        = 10 * time.Second
	maxResetsPerWindow = 1000
	quickReset         = time.Second
)

// resetCount counts a connection's cancelled calls in the current
// window.
type resetCount struct {
	mu    sync.Mutex
	start time.Time
	n     int
}

// add counts one at now and reports whether the connection is past the
// bound.
func (r *resetCount) add(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.start) > resetWindow {
		r.start, r.n = now, 0
	}
	r.n++
	return r.n > maxResetsPerWindow
}

// closeResetFloods is limits.cancelled: a call its client cancelled
// within quickReset of its start counts one reset of its connection,
// and a connection past the bound is closed, once, with a warning and a
// count (jobwatch_connections_closed_resets_total).
func (s *Server) closeResetFloods(r *http.Request, started time.Time) {
	now := time.Now()
	if now.Sub(started) > quickReset {
		return
	}
	c := connOf(r.Context())
	if c == nil || !c.resets.add(now) {
		return
	}
	if c.release() {
		s.conns.resetsClosed.Inc()
		s.log.Warn("closed a connection whose client cancelled its calls faster than any client of jobwatch does (an HTTP/2 rapid-reset flood)",
			"remote", c.RemoteAddr().String(), "cancelled", maxResetsPerWindow, "within", resetWindow)
	}
	_ = c.Conn.Close()
}
