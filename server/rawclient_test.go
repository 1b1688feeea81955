package server_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawH2 is an HTTP/2 client that never grants flow-control window: it
// opens with SETTINGS_INITIAL_WINDOW_SIZE 0 and sends no WINDOW_UPDATE,
// so the server can send headers but not one byte of a response body.
// It answers SETTINGS and PINGs like a live client, so only its reading
// is stuck. The standard library cannot be made to behave like this.
type rawH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer

	mu     sync.Mutex // guards writes to fr, enc, buf and nextID
	enc    *hpack.Encoder
	buf    bytes.Buffer
	nextID uint32

	header [][2]string // sent with every stream open opens, as name and value

	resets chan uint32 // stream ids the server reset
	// answered counts the streams on which the server sent any DATA.
	answered atomic.Int64
	closed   chan struct{}
	paused   chan struct{} // closed: the client no longer reads its socket
}

// dialRawH2 connects a client that grants no window.
func dialRawH2(t *testing.T, addr string) *rawH2 { return dialRawH2Window(t, addr, 0) }

// dialRawH2Window connects a client that grants window bytes per stream
// and, when window is not 0, as much for the whole connection.
func dialRawH2Window(t *testing.T, addr string, window uint32) *rawH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &rawH2{t: t, conn: conn, nextID: 1, resets: make(chan uint32, 1<<16), closed: make(chan struct{}), paused: make(chan struct{})}
	c.enc = hpack.NewEncoder(&c.buf)
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("preface: %v", err)
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatalf("settings: %v", err)
	}
	if window > 65535 {
		if err := c.fr.WriteWindowUpdate(0, window-65535); err != nil {
			t.Fatalf("window update: %v", err)
		}
	}
	go c.readLoop()
	t.Cleanup(func() { conn.Close() })
	return c
}

// answerControl acks the server's SETTINGS and PINGs on fr (writes under
// mu), as a client must, and reports whether f was one of them.
func answerControl(f http2.Frame, mu *sync.Mutex, fr *http2.Framer) bool {
	mu.Lock()
	defer mu.Unlock()
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = fr.WriteSettingsAck()
		}
		return true
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = fr.WritePing(true, f.Data)
		}
		return true
	}
	return false
}

func (c *rawH2) readLoop() {
	defer close(c.closed)
	answered := map[uint32]bool{}
	for {
		select {
		case <-c.paused:
			return
		default:
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if answerControl(f, &c.mu, c.fr) {
			continue
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			c.resets <- f.StreamID
		case *http2.DataFrame:
			if !answered[f.StreamID] {
				answered[f.StreamID] = true
				c.answered.Add(1)
			}
		}
	}
}

// stopReading makes the client leave its socket unread from the next
// frame on, as a client stuck in its own work would: the server's writes
// then fill the TCP window.
func (c *rawH2) stopReading() { close(c.paused) }

// post opens a stream with a Connect request for procedure whose body is
// msg as one enveloped JSON message (a server-streaming call), and
// returns the stream's id.
func (c *rawH2) post(procedure string, msg any) uint32 {
	c.t.Helper()
	body, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.open(procedure, "application/connect+json", envelop(body))
}

// envelop frames body as one message of a Connect stream.
func envelop(body []byte) []byte {
	envelope := make([]byte, 5+len(body))
	binary.BigEndian.PutUint32(envelope[1:], uint32(len(body)))
	copy(envelope[5:], body)
	return envelope
}

// open opens a stream with a Connect request for procedure of
// contentType whose whole body is body, and returns the stream's id.
func (c *rawH2) open(procedure, contentType string, body []byte) uint32 {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID += 2
	c.buf.Reset()
	for _, hf := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", c.conn.RemoteAddr().String()},
		{":path", procedure}, {"content-type", contentType}, {"connect-protocol-version", "1"},
	} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	for _, hf := range c.header {
		_ = c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{
		StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true,
	}); err != nil {
		c.t.Fatalf("headers: %v", err)
	}
	if err := c.fr.WriteData(id, true, body); err != nil {
		c.t.Fatalf("data: %v", err)
	}
	return id
}

// grant gives stream id n bytes of flow-control window, as a client
// reading it would.
func (c *rawH2) grant(id, n uint32) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fr.WriteWindowUpdate(id, n); err != nil {
		c.t.Fatalf("window update: %v", err)
	}
}

// waitReset waits until the server has reset n streams, or fails.
func (c *rawH2) waitReset(n int, within time.Duration) {
	c.t.Helper()
	timeout := time.After(within)
	for i := 0; i < n; i++ {
		select {
		case <-c.resets:
		case <-c.closed:
			return // the server closed the whole connection: every stream is gone
		case <-timeout:
			c.t.Fatalf("the server reset %d of %d blocked streams within %v", i, n, within)
		}
	}
}

// metric reads the value of a counter or gauge, or the sample count of a
// histogram, whose labels include labels (name=value pairs), summed over
// the series that match.
func (ts *testServer) metric(name string, labels ...string) float64 {
	ts.t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		ts.t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// waitForMetric waits until cond holds for the metric's value.
func (ts *testServer) waitForMetric(what string, within time.Duration, cond func(float64) bool, name string, labels ...string) {
	ts.t.Helper()
	deadline := time.Now().Add(within)
	for !cond(ts.metric(name, labels...)) {
		if time.Now().After(deadline) {
			ts.t.Fatalf("%s: %s%v = %v after %v", what, name, labels, ts.metric(name, labels...), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func addrOf(url string) string { return strings.TrimPrefix(url, "http://") }
