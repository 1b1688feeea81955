package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/client"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// TestBenchPrintsEveryObserverAndTheParkedCost runs a tiny bench: the
// numbers are the machine's, but every row must be there, measured.
func TestBenchPrintsEveryObserverAndTheParkedCost(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--jobs", "3", "--parked", "20"}, &out, io.Discard); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, &out)
	}
	for _, row := range []string{
		`CompleteJob reply\s+3\s`,
		`WaitJob\s+3\s`,
		`WatchJob\s+3\s`,
		`GetJob every 10ms\s+3\s`,
		`20 waits parked at once`,
		`\d+(\.\d+)? KiB`,
	} {
		if !regexp.MustCompile(row).Match(out.Bytes()) {
			t.Errorf("bench output lacks %q:\n%s", row, &out)
		}
	}
}

// TestBenchReportsAWatchThatFailsFirst: a server that refuses WatchJob
// (a proxy in the way, a token without the right) makes bench say so and
// stop, instead of waiting for ever for the watch to be ready, and it
// leaves no call of its own behind.
func TestBenchReportsAWatchThatFailsFirst(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "bench.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	engine := jobs.New(st, jobs.Config{Logger: log})
	srv := server.New(engine, server.Config{Logger: log})
	var waits atomic.Int32 // WaitJob calls in flight
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/WatchJob"):
			http.Error(w, "watching is not allowed here", http.StatusForbidden)
			return
		case strings.HasSuffix(r.URL.Path, "/WaitJob"):
			waits.Add(1)
			defer waits.Add(-1)
		}
		srv.Handler().ServeHTTP(w, r)
	})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: handler, Protocols: &protocols}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()
	c := client.New("http://" + ln.Addr().String())
	defer c.Close()

	type outcome struct {
		res map[string]time.Duration
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := benchOne(context.Background(), c, 10*time.Millisecond)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err == nil || !strings.Contains(o.err.Error(), "WatchJob") || !strings.Contains(o.err.Error(), "permission_denied") {
			t.Fatalf("benchOne = %v, %v; want the WatchJob refusal", o.res, o.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("benchOne still waits for a watch that failed")
	}
	for deadline := time.Now().Add(10 * time.Second); waits.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d WaitJob calls still parked after bench gave up", waits.Load())
		}
	}
}
