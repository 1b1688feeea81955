package client

import (
	"io"
	"net/http"
	"sync/atomic"
)

// longPool is the long-call transport: one http.Transport per connection
// (WithLongCallConns), each call sent on the one with the fewest long
// calls in flight. One http.Transport would do it on its own over
// HTTP/2, but it fills a connection up to the server's stream limit
// (4,000) before it opens the next, and the server parks at most 3,600
// calls on one connection (its short calls keep the rest): the 400
// beyond were answered at once as full, and asked again, for as long as
// they waited. Spread evenly, the default four connections park 14,400
// calls before any is refused, more than a server parks at all
// (--max-parked-calls, 10,000).
type longPool struct {
	conns []longConn
}

type longConn struct {
	t        *http.Transport
	inFlight atomic.Int64
}

func newLongPool(cleartext bool, conns int, cfg config) *longPool {
	p := &longPool{conns: make([]longConn, max(conns, 1))}
	for i := range p.conns {
		p.conns[i].t = newTransport(cleartext, 1, cfg)
	}
	return p
}

// RoundTrip sends req on the connection with the fewest calls in flight;
// the call counts until its answer's body is closed (or the call fails).
func (p *longPool) RoundTrip(req *http.Request) (*http.Response, error) {
	c := &p.conns[0]
	for i := 1; i < len(p.conns); i++ {
		if p.conns[i].inFlight.Load() < c.inFlight.Load() {
			c = &p.conns[i]
		}
	}
	c.inFlight.Add(1)
	resp, err := c.t.RoundTrip(req)
	if err != nil {
		c.inFlight.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, c: c}
	return resp, nil
}

// transports are the pool's, for Client.Close.
func (p *longPool) transports() []*http.Transport {
	out := make([]*http.Transport, len(p.conns))
	for i := range p.conns {
		out[i] = p.conns[i].t
	}
	return out
}

// countedBody ends its call's count when it is closed, once.
type countedBody struct {
	io.ReadCloser
	c    *longConn
	done atomic.Bool
}

func (b *countedBody) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.c.inFlight.Add(-1)
	}
	return b.ReadCloser.Close()
}
