package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// A connection that opens calls and cancels each at once (HTTP/2's rapid
// reset: HEADERS, then RST_STREAM, over and over) is closed once it has
// cancelled more than any client of jobwatch does, rather than keep the
// server answering for nothing (an outside probe's 300,000 resets on one
// connection kept both cores three quarters busy, and it was never
// closed). The server counts it, and serves others on.
func TestAConnectionThatFloodsResetsIsClosed(t *testing.T) {
	ts := startServer(t, serverOptions{})
	addr := addrOf(ts.url)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	bw := bufio.NewWriterSize(conn, 64<<10)
	fr := http2.NewFramer(bw, conn)
	if _, err := io.WriteString(bw, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	block := postHeaderBlock(addr, "/jobwatch.v1.JobService/GetServerInfo")
	closed := make(chan error, 1)
	go func() {
		// Read until the server ends the connection.
		for {
			if _, err := fr.ReadFrame(); err != nil {
				closed <- err
				return
			}
		}
	}()
	const resets = 100_000 // far more than the bound; the connection should end long before
	sent := 0
	for id := uint32(1); sent < resets; id += 2 {
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true, EndStream: true}) != nil ||
			fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break
		}
		sent++
		if sent%100 == 0 && bw.Flush() != nil {
			break
		}
	}
	_ = bw.Flush()
	select {
	case err := <-closed:
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			t.Fatalf("the connection was still open after %d resets", sent)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the connection was still open after %d resets", sent)
	}
	t.Logf("closed after %d resets were sent", sent)
	if got := ts.metric("jobwatch_connections_closed_resets_total"); got != 1 {
		t.Errorf("jobwatch_connections_closed_resets_total = %v, want 1", got)
	}
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "after.the.flood"})
}
