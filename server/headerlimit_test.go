package server_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// TestHeadersOverTheLimitAreRefused: a request whose headers pass
// server.MaxHeaderBytes is answered 431 Request Header Fields Too Large,
// on HTTP/1.1 whether or not the headers ever end (and its connection
// closes: a caller without a token can no longer make each silent
// connection hold a megabyte of headers); on HTTP/2, whose server
// announces the bound in its SETTINGS, on its stream, or, for a header
// block far past it, by ending the connection. The server keeps serving.
func TestHeadersOverTheLimitAreRefused(t *testing.T) {
	ts := startServer(t, serverOptions{})
	addr := addrOf(ts.url)
	big := strings.Repeat("a", server.MaxHeaderBytes+8<<10) // HTTP/1.1 allows 4 KiB more for the request line

	for _, ended := range []bool{true, false} {
		t.Run(fmt.Sprintf("HTTP/1.1, headers ended %v", ended), func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := "POST /jobwatch.v1.JobService/GetJob HTTP/1.1\r\nHost: " + addr + "\r\nX-Big: " + big
			if ended {
				req += "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
			}
			go func() { _, _ = io.WriteString(conn, req) }() // the server may close before it has it all
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			r := bufio.NewReader(conn)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("no answer to headers over the limit: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("answer %d, want 431", resp.StatusCode)
			}
			if again, err := http.ReadResponse(r, nil); err == nil {
				t.Errorf("the connection answered again after the refusal: %s", again.Status)
			}
		})
	}

	t.Run("HTTP/2", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		fr := http2.NewFramer(conn, conn)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		block := postHeaderBlock(addr, "/jobwatch.v1.JobService/GetJob", [2]string{"x-big", big})
		go func() {
			// One HEADERS and as many CONTINUATIONs as frames of 16 KiB
			// take; the server may give up on them before the last.
			b := block
			const frame = 16 << 10
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:frame], EndStream: true})
			for b = b[frame:]; len(b) > 0; {
				n := min(frame, len(b))
				if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
		}()
		announced := false
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("no answer on the stream whose headers are over the limit: %v (the server announced its bound: %v)", err, announced)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if v, ok := f.Value(http2.SettingMaxHeaderListSize); ok {
					announced = true
					if v > 2*server.MaxHeaderBytes {
						t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want about %d", v, server.MaxHeaderBytes)
					}
				}
			case *http2.MetaHeadersFrame:
				if status := f.PseudoValue("status"); status != "431" {
					t.Errorf("the stream was answered %s, want 431", status)
				}
				if !announced {
					t.Error("the server's SETTINGS announced no header list bound")
				}
				return
			case *http2.GoAwayFrame:
				// A header block far past the bound ends the connection
				// before it has all arrived (Go's guard against floods of
				// CONTINUATION frames): nothing more of it is held.
				if !announced {
					t.Error("the server's SETTINGS announced no header list bound")
				}
				return
			case *http2.RSTStreamFrame:
				t.Fatalf("the stream was answered %v, want a 431", f)
			}
		}
	})

	submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "after.headers.over.the.limit"})
}

// postHeaderBlock is the HTTP/2 header block (HPACK) of a POST of JSON
// to path at addr, with the extra headers.
func postHeaderBlock(addr, path string, extra ...[2]string) []byte {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range append([][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", path}, {"content-type", "application/json"},
	}, extra...) {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	return block.Bytes()
}
