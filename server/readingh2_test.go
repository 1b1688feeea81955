package server_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// readingH2 is an HTTP/2 client that reads everything and keeps up, but
// grants a small window per stream: it opens each stream with window
// bytes and gives back, after each DATA frame, what the frame used. A
// large answer then takes many round trips, so many answers are under
// way at once, as they are for waiters on a real network; none of them
// is ever blocked on the client for long.
type readingH2 struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer

	mu     sync.Mutex // guards writes to fr, enc, buf and nextID
	enc    *hpack.Encoder
	buf    bytes.Buffer
	nextID uint32

	results chan streamResult
}

// streamResult is how a stream ended: with its last frame (ok), or reset.
type streamResult struct {
	id    uint32
	bytes int
	reset http2.ErrCode
	ok    bool
}

func dialReadingH2(t *testing.T, addr string, window uint32) *readingH2 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &readingH2{t: t, conn: conn, nextID: 1, results: make(chan streamResult, 1<<16)}
	c.enc = hpack.NewEncoder(&c.buf)
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("preface: %v", err)
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		t.Fatalf("settings: %v", err)
	}
	if err := c.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatalf("window update: %v", err)
	}
	go c.readLoop()
	t.Cleanup(func() { conn.Close() })
	return c
}

func (c *readingH2) readLoop() {
	received := map[uint32]int{}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if answerControl(f, &c.mu, c.fr) {
			continue
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			n := len(f.Data())
			received[f.StreamID] += n
			if f.StreamEnded() {
				c.results <- streamResult{id: f.StreamID, bytes: received[f.StreamID], ok: true}
			} else if n > 0 {
				c.mu.Lock()
				_ = c.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				_ = c.fr.WriteWindowUpdate(0, uint32(n))
				c.mu.Unlock()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				c.results <- streamResult{id: f.StreamID, bytes: received[f.StreamID], ok: true}
			}
		case *http2.RSTStreamFrame:
			c.results <- streamResult{id: f.StreamID, bytes: received[f.StreamID], reset: f.ErrCode}
		}
	}
}

// open opens a stream whose whole request body is body, with more
// headers (name, value pairs) if given.
func (c *readingH2) open(procedure, contentType string, body []byte, header ...string) uint32 {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID += 2
	c.buf.Reset()
	fields := [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", c.conn.RemoteAddr().String()},
		{":path", procedure}, {"content-type", contentType}, {"connect-protocol-version", "1"},
	}
	for i := 0; i+1 < len(header); i += 2 {
		fields = append(fields, [2]string{header[i], header[i+1]})
	}
	for _, hf := range fields {
		_ = c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatalf("headers: %v", err)
	}
	if err := c.fr.WriteData(id, true, body); err != nil {
		c.t.Fatalf("data: %v", err)
	}
	return id
}

// wait returns how each of n streams ended, or fails after within.
func (c *readingH2) wait(n int, within time.Duration) []streamResult {
	c.t.Helper()
	timeout := time.After(within)
	var out []streamResult
	for len(out) < n {
		select {
		case r := <-c.results:
			out = append(out, r)
		case <-timeout:
			c.t.Fatalf("%d of %d streams ended within %v", len(out), n, within)
		}
	}
	return out
}
