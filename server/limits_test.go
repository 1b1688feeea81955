package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

const watchJobPath = "/jobwatch.v1.JobService/WatchJob"

// A client that stops reading must not hold a stream, and what the stream
// holds, for ever: neither at the end of its lifetime nor after its job
// ended.
func TestAStreamBlockedOnAClientThatGrantsNoHTTP2WindowIsEnded(t *testing.T) {
	for _, tt := range []struct {
		name   string
		config server.Config
		reason string
	}{
		{"after the send timeout", server.Config{SendTimeout: 300 * time.Millisecond, StreamLifetime: time.Hour}, "send_timeout"},
		{"at the stream lifetime, although the send timeout is far", server.Config{SendTimeout: time.Hour, StreamLifetime: 300 * time.Millisecond}, "stream_lifetime"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.config.Keepalive = -1
			ts := startServer(t, serverOptions{config: tt.config})
			c := ts.h2c()
			job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "blocked", Payload: mustValue(t, strings.Repeat("x", 1000))})

			raw := dialRawH2(t, addrOf(ts.url))
			const streams = 3
			for range streams {
				raw.post(watchJobPath, map[string]any{"jobId": job.GetId()})
			}
			// Every first snapshot is stuck behind the zero window (or,
			// on a machine slow enough that the send timeout passed
			// before the last stream began, already cut for it)...
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				blocked, cut := ts.metric("jobwatch_sends_in_progress"), ts.metric("jobwatch_sends_cut_total", "reason", tt.reason)
				if blocked+cut == streams {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sends blocked or cut: %v blocked and %v cut after 30s, want %d in all", blocked, cut, streams)
				}
			}
			// ...and stays stuck when the job ends.
			complete(t, c, claim(t, c, "blocked"), nil)
			raw.waitReset(streams, 30*time.Second)
			ts.waitForGauge("jobwatch_open_watches", 0)
			ts.waitForGauge("jobwatch_parked_calls", 0)
			ts.waitForGauge("jobwatch_sends_in_progress", 0)
			if got := ts.metric("jobwatch_sends_cut_total", "reason", tt.reason); got != streams {
				t.Errorf("jobwatch_sends_cut_total{reason=%q} = %v, want %d", tt.reason, got, streams)
			}

			// The connection and the server still serve others.
			if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
				t.Fatalf("GetJob after the blocked streams: %v", err)
			}
		})
	}
}

// The same over HTTP/1.1, where a client that stops reading fills the TCP
// window: the server's socket buffer, then the client's. Each heartbeat
// makes the watch send the job again, payload and all, until a send
// blocks.
func TestAStreamBlockedOnAnHTTP1ClientThatStopsReadingIsEnded(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{SendTimeout: 300 * time.Millisecond, Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, strings.Repeat("x", 200<<10))})
	lease := claim(t, c, "big")

	conn, err := net.Dial("tcp", addrOf(ts.url))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := fmt.Sprintf(`{"jobId":%q}`, job.GetId())
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n\x00%s%s",
		watchJobPath, 5+len(body), string([]byte{0, 0, byte(len(body) >> 8), byte(len(body))}), body)
	ts.waitForGauge("jobwatch_open_watches", 1)

	// The client reads nothing from here on.
	pushUntilTheWatchEnds(t, ts, c, job, lease)
	if got := ts.metric("jobwatch_sends_cut_total", "reason", "send_timeout"); got != 1 {
		t.Errorf("jobwatch_sends_cut_total{reason=send_timeout} = %v, want 1", got)
	}
	// The server closed the connection it could not write to.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); isTimeout(err) {
		t.Errorf("the blocked connection is still open: %v", err)
	}
}

// pushUntilTheWatchEnds makes the job change while no send is under way
// (each change makes the watch send the job again, payload and all), until
// a send blocks for good and the server ends the watch, or fails.
func pushUntilTheWatchEnds(t *testing.T, ts *testServer, c clients, job *jobwatchv1.Job, lease *jobwatchv1.ClaimJobResponse) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i := 1; ts.gauge("jobwatch_open_watches") != 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the stream of a client that stopped reading is still open after %d changes", i)
		}
		if ts.gauge("jobwatch_sends_in_progress") != 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		_, err := c.workers.Heartbeat(ctxTimeout(t, 5*time.Second), &jobwatchv1.HeartbeatRequest{
			JobId: job.GetId(), LeaseId: lease.GetLeaseId(), Step: fmt.Sprintf("step %d", i),
		})
		switch {
		case connect.CodeOf(err) == connect.CodeUnavailable:
			// The tests' send timeouts are a few hundred ms: on a loaded
			// machine the server may end this client's own connection
			// for a write it could not make in that time (its
			// WriteByteTimeout), as it would a client that does not
			// read. A worker sends its heartbeat again, as here.
			t.Logf("heartbeat %d: %v; again", i, err)
		case err != nil:
			t.Fatalf("heartbeat: %v", err)
		}
	}
}

// An HTTP/2 client that grants window but stops reading its socket fills
// the TCP window: its blocked stream is ended all the same. (The
// connection, which then carries nothing, is closed by the pings it
// leaves unanswered, set far off here, or by HTTP2Config.WriteByteTimeout
// when a frame cannot be written at all.)
func TestAnHTTP2ClientThatStopsReadingItsSocketLosesItsStream(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{
		SendTimeout: 300 * time.Millisecond, Keepalive: -1, PingInterval: time.Hour, PingTimeout: time.Hour,
	}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, strings.Repeat("x", 200<<10))})
	lease := claim(t, c, "big")
	raw := dialRawH2Window(t, addrOf(ts.url), 1<<30)
	raw.post(watchJobPath, map[string]any{"jobId": job.GetId()})
	ts.waitForGauge("jobwatch_open_watches", 1)
	raw.stopReading()
	pushUntilTheWatchEnds(t, ts, c, job, lease) // fails if it does not end
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A healthy stream is not cut by the send timeout while it idles: the
// deadline holds only while a write is under way.
func TestAnIdleStreamOutlivesTheSendTimeout(t *testing.T) {
	// A send timeout short enough to pass six times while the stream
	// idles, long enough that a loaded machine's scheduling does not cut
	// the test's own calls.
	const sendTimeout = 300 * time.Millisecond
	ts := startServer(t, serverOptions{config: server.Config{SendTimeout: sendTimeout, Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "idle"})
	s := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), 0)
	nextJob(t, s)
	idle := time.Now()
	for time.Since(idle) < 6*sendTimeout {
		time.Sleep(10 * time.Millisecond)
	}
	lease := claim(t, c, "idle")
	if got := nextJob(t, s); got.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("after idling the stream sent %v, want the RUNNING snapshot", got.GetState())
	}
	complete(t, c, lease, nil)
	if got := nextJob(t, s); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("got %v, want SUCCEEDED", got.GetState())
	}
	wantEndOK(t, s)
	if got := ts.metric("jobwatch_sends_cut_total"); got != 0 {
		t.Errorf("jobwatch_sends_cut_total = %v, want 0", got)
	}
}

// rawHTTP1 sends head and the start of body over a fresh connection, the
// way a slow or vanishing client would, and returns the connection.
func rawHTTP1(t *testing.T, ts *testServer, path string, header string, body string, sendBytes int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addrOf(ts.url))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
		path, len(body), header, body[:sendBytes])
	return conn
}

// A body that trickles in is answered with a clear error once
// --body-timeout passes, the connection closes, and nothing is created.
func TestASlowRequestBodyIsAnsweredAndClosedAtTheBodyTimeout(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{BodyTimeout: 300 * time.Millisecond}})
	body := `{"kind":"slow"}`

	t.Run("HTTP/1.1", func(t *testing.T) {
		start := time.Now()
		conn := rawHTTP1(t, ts, "/jobwatch.v1.JobService/SubmitJob", "", body, 5)
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer to a slow body: %v", err)
		}
		got, _ := io.ReadAll(resp.Body)
		held := time.Since(start)
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(got), "--body-timeout") {
			t.Errorf("answer %d %s, want 504 deadline_exceeded naming --body-timeout", resp.StatusCode, got)
		}
		if !resp.Close {
			t.Errorf("the answer does not close the connection")
		}
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("after the answer the connection reads %v, want EOF", err)
		}
		t.Logf("a body sent too slowly was held %v", held.Round(time.Millisecond))
	})

	t.Run("HTTP/2", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte(body[:5])) }() // and nothing more
		req, err := http.NewRequestWithContext(ctxTimeout(t, 30*time.Second), http.MethodPost, ts.url+"/jobwatch.v1.JobService/SubmitJob", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.h2cClient().Do(req)
		if err != nil {
			t.Fatalf("no answer to a slow body: %v", err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(got), "--body-timeout") {
			t.Errorf("answer %d %s, want 504 deadline_exceeded naming --body-timeout", resp.StatusCode, got)
		}
	})

	if got := ts.metric("jobwatch_request_body_timeouts_total"); got != 2 {
		t.Errorf("jobwatch_request_body_timeouts_total = %v, want 2", got)
	}
	ts.waitForGauge("jobwatch_request_bodies_reading", 0)
	list, err := ts.h2c().jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Kind: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 0 {
		t.Errorf("slow bodies created %d jobs, want none", n)
	}
}

// The body timeout bounds the body only: a WaitJob parked over HTTP/1.1
// after its body arrived, and gRPC reflection (a bidi stream whose body
// stays open), both outlive it many times over.
func TestTheBodyTimeoutCutsNeitherParkedCallsNorBidiStreams(t *testing.T) {
	const bodyTimeout = 50 * time.Millisecond
	ts := startServer(t, serverOptions{config: server.Config{BodyTimeout: bodyTimeout, WaitCap: time.Minute}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "parked"})

	browser := ts.clients(ts.http1Client())
	waited := make(chan *jobwatchv1.Job, 1)
	go func() {
		resp, err := browser.jobs.WaitJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
		if err != nil {
			t.Errorf("WaitJob over HTTP/1.1: %v", err)
		}
		waited <- resp.GetJob()
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)

	reflection := grpcreflect.NewClient(ts.h2cClient(), ts.url, connect.WithGRPC()).NewStream(ctxTimeout(t, 30*time.Second))
	defer reflection.Close()
	if _, err := reflection.ListServices(); err != nil {
		t.Fatalf("reflection: %v", err)
	}

	parked := time.Now()
	for time.Since(parked) < 6*bodyTimeout {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := reflection.ListServices(); err != nil { // the same bidi stream
		t.Errorf("reflection after the body timeout: %v", err)
	}
	complete(t, c, claim(t, c, "parked"), nil)
	if got := <-waited; got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Errorf("the parked HTTP/1.1 wait answered %v, want SUCCEEDED: it was cut before the job ended", got.GetState())
	}
	if got := ts.metric("jobwatch_request_body_timeouts_total"); got != 0 {
		t.Errorf("jobwatch_request_body_timeouts_total = %v, want 0", got)
	}
}

// Past --max-parked-calls a wait answers at once with the current state,
// a watch is refused with resource_exhausted, a claim takes a ready job
// but may not park; and every call already parked stays parked.
func TestParkedCallsPastTheLimitAreAnsweredAtOnceAndNobodyElsesCallIsDropped(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxParkedCalls: 2, WaitCap: time.Minute, ClaimCap: time.Minute}})
	c := ts.h2c()
	first := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "a", Hold: false})
	second := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "b"})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan *jobwatchv1.Job, 2)
	for _, id := range []string{first.GetId(), second.GetId()} {
		go func() {
			resp, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: id})
			if err != nil {
				t.Errorf("a parked wait: %v", err)
			}
			results <- resp.GetJob()
		}()
	}
	ts.waitForGauge("jobwatch_parked_calls", 2)

	start := time.Now()
	callCtx, call := connect.NewClientContext(ctxTimeout(t, 30*time.Second))
	resp, err := c.jobs.WaitJob(callCtx, &jobwatchv1.WaitJobRequest{JobId: first.GetId()})
	if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("a wait past the limit: %v, %v; want OK with the QUEUED job", resp, err)
	}
	if got := call.ResponseHeader().Get(server.ParkedCallsHeader); got != "full" {
		t.Errorf("the answer's %s header = %q, want full (so clients back off)", server.ParkedCallsHeader, got)
	}
	t.Logf("a wait past the limit answered in %v", time.Since(start).Round(time.Millisecond))

	s, err := c.jobs.WatchJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WatchJobRequest{JobId: first.GetId()})
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "--max-parked-calls") || !strings.Contains(err.Error(), "retry") {
		t.Errorf("the refusal %q does not say what to do", err)
	}

	// A claim past the limit takes a ready job...
	lease := claim(t, c, "a")
	// ...but with none ready it may not park.
	_, err = c.workers.ClaimJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"none"}})
	wantCode(t, err, connect.CodeResourceExhausted)

	if got := ts.gauge("jobwatch_parked_calls"); got != 2 {
		t.Fatalf("jobwatch_parked_calls = %v, want the 2 first calls still parked", got)
	}
	complete(t, c, lease, nil)
	// The first wait has ended and freed its place before the next
	// claim asks, or that claim too would be past the limit.
	ts.waitForGauge("jobwatch_parked_calls", 1)
	complete(t, c, claim(t, c, "b"), nil)
	for range 2 {
		if got := <-results; got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Errorf("a parked wait answered %v, want SUCCEEDED", got.GetState())
		}
	}
	for kind, want := range map[string]float64{"wait": 1, "watch": 1, "claim": 2} {
		if got := ts.metric("jobwatch_parked_calls_refused_total", "kind", kind); got != want {
			t.Errorf("jobwatch_parked_calls_refused_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
}

// measureEnv names the number of blocked streams the memory measurement
// opens; unset, it does not run (it takes a minute and most of a core).
const measureEnv = "JOBWATCH_MEASURE_BLOCKED_STREAMS"

// TestMeasureMemoryOfBlockedStreams measures what WatchJob streams whose
// client grants no window hold, before and after --send-timeout frees
// them, and prints the figures docs/OPERATING.md "Limits" quotes:
//
//	JOBWATCH_MEASURE_BLOCKED_STREAMS=2000 go test ./server -run TestMeasureMemoryOfBlockedStreams -v
//
// Server and clients share the process; the raw clients hold one
// goroutine and a few KiB per connection, of 500 streams each.
func TestMeasureMemoryOfBlockedStreams(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(measureEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of streams to measure", measureEnv)
	}
	const sendTimeout = 20 * time.Second
	ts := startServer(t, serverOptions{config: server.Config{SendTimeout: sendTimeout, StreamLifetime: time.Hour, Keepalive: -1}})
	c := ts.h2c()
	for _, payloadBytes := range []int{100, 250 << 10} {
		job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "measure", Payload: mustValue(t, strings.Repeat("x", payloadBytes))})
		before := heapAndGoroutines()
		var conns []*rawH2
		for i := range n {
			if i%500 == 0 {
				conns = append(conns, dialRawH2(t, addrOf(ts.url)))
			}
			conns[len(conns)-1].post(watchJobPath, map[string]any{"jobId": job.GetId()})
		}
		ts.waitForMetric("all sends blocked", time.Minute, func(v float64) bool { return v == float64(n) }, "jobwatch_sends_in_progress")
		blocked := heapAndGoroutines()
		start := time.Now()
		ts.waitForMetric("all streams ended", 2*sendTimeout+time.Minute, func(v float64) bool { return v == 0 }, "jobwatch_open_watches")
		ended := time.Since(start)
		for _, rc := range conns {
			rc.conn.Close()
		}
		ts.waitForGauge("jobwatch_connections", 1) // c's own
		after := heapAndGoroutines()
		perStream := (blocked.heap - before.heap) / int64(n)
		t.Logf("payload %d B, %d blocked streams: heap in use %d -> %d KiB (%d KiB a stream), goroutines %d -> %d (%.1f a stream); "+
			"all ended %v after being blocked (bound %v); after: heap %d KiB, goroutines %d",
			payloadBytes, n, before.heap>>10, blocked.heap>>10, perStream>>10, before.goroutines, blocked.goroutines,
			float64(blocked.goroutines-before.goroutines)/float64(n), ended.Round(100*time.Millisecond), sendTimeout,
			after.heap>>10, after.goroutines)
		if after.goroutines > before.goroutines+10 {
			t.Errorf("goroutines after the bound: %d, before the streams: %d", after.goroutines, before.goroutines)
		}
		if leftover := after.heap - before.heap; leftover > (blocked.heap-before.heap)/5 {
			t.Errorf("heap after the bound is %d KiB above the start, more than a fifth of what the blocked streams held", leftover>>10)
		}
	}
}

type memory struct {
	heap       int64 // bytes of heap in use
	goroutines int
}

func heapAndGoroutines() memory {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{heap: int64(ms.HeapInuse), goroutines: runtime.NumGoroutine()}
}

// A parked WaitJob costs about the same whatever the size of its job's
// payload: --max-parked-calls waits on jobs of 256 KiB must not hold a
// copy of each payload (10,000 of them would hold 2.5 GB). The waits
// still answer with the whole job.
//
// What is measured is the cost of each of two more batches of waits,
// once a first has parked, and the smaller of the two is the cost of a
// wait: reading the job to answer the first ones grows buffers that are
// paid once, not per call (PostgreSQL's pool keeps a read buffer the size
// of the largest row on each of its 16 connections, and a pool of
// connect's buffers can grow in either batch), while what each wait holds
// shows in both.
func TestParkedWaitsDoNotHoldTheirJobsPayloads(t *testing.T) {
	const (
		warm    = 50
		waits   = 100 // in each of two batches
		payload = 200 << 10
	)
	// Cap and deadline are generous bounds: 250 waits of a 200 KiB job,
	// measured with forced collections, took over 30 s on a loaded
	// machine, and a wait answered at its cap would leave the gauge short
	// of the waits parked.
	ts := startServer(t, serverOptions{config: server.Config{WaitCap: 5 * time.Minute}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, strings.Repeat("x", payload))})

	answers := make(chan *jobwatchv1.WaitJobResponse, warm+2*waits)
	parked := 0
	park := func(n int) int64 {
		before := heapAndGoroutines().heap
		for range n {
			go func() {
				resp, err := c.jobs.WaitJob(ctxTimeout(t, 6*time.Minute), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				if err != nil {
					t.Errorf("WaitJob: %v", err)
				}
				answers <- resp
			}()
		}
		parked += n
		ts.waitForGauge("jobwatch_parked_calls", float64(parked))
		return (heapAndGoroutines().heap - before) / int64(n)
	}
	park(warm)
	perWait := min(park(waits), park(waits))
	t.Logf("a parked wait on a job of %d KiB holds %d KiB", payload>>10, perWait>>10)
	if perWait > payload/4 {
		t.Errorf("a parked wait holds %d KiB for a job of %d KiB, want far less than its payload", perWait>>10, payload>>10)
	}

	lease := claim(t, c, "big")
	complete(t, c, lease, nil)
	for range parked {
		if resp := <-answers; len(resp.GetJob().GetPayload().GetStringValue()) != payload {
			t.Fatalf("a wait answered without the job's payload")
		}
	}
}

// watchErr opens a WatchJob and returns how it ended, or nil if it sent a
// snapshot (it is then closed).
func watchErr(t *testing.T, c clients, id string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.jobs.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id})
	if err != nil {
		return err
	}
	defer s.Close()
	for s.Receive() {
		if s.Msg().GetJob() != nil {
			return nil
		}
	}
	return s.Err()
}

func wantTenantLimit(t *testing.T, err error, who string) {
	t.Helper()
	wantCode(t, err, connect.CodeResourceExhausted)
	if msg := err.Error(); !strings.Contains(msg, "--max-parked-calls-per-tenant") || !strings.Contains(msg, who) || !strings.Contains(msg, "retry") {
		t.Errorf("the refusal %q does not name %s, the per-tenant limit and what to do", msg, who)
	}
}

// Past --max-parked-calls-per-tenant a tenant's wait answers at once with
// the current state, its new watches and claims get resource_exhausted,
// and its calls already parked stay; other tenants still park, and every
// short call of any tenant is answered. A wait's tenant is its job's; a
// claim without a token counts as a worker bound to no tenant.
func TestATenantPastItsParkedCallLimitIsAnsweredAtOnceWhileOthersPark(t *testing.T) {
	const perTenant = 3
	ts := startServer(t, serverOptions{config: server.Config{
		MaxParkedCalls: 100, MaxParkedCallsPerTenant: perTenant, WaitCap: time.Minute, ClaimCap: time.Minute,
	}})
	c := ts.h2c()
	flood := submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "flood", Kind: "f"})
	calm := submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "calm", Kind: "c"})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan *jobwatchv1.Job, perTenant)
	for range perTenant {
		go func() {
			resp, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: flood.GetId()})
			if err != nil {
				t.Errorf("a parked wait of tenant flood: %v", err)
			}
			results <- resp.GetJob()
		}()
	}
	ts.waitForMetric("flood's waits parked", 10*time.Second, func(v float64) bool { return v == perTenant },
		"jobwatch_parked_calls_by_tenant", "tenant", "flood")

	// The tenant's next wait answers at once, marked, with the job as it is.
	callCtx, call := connect.NewClientContext(ctxTimeout(t, 30*time.Second))
	resp, err := c.jobs.WaitJob(callCtx, &jobwatchv1.WaitJobRequest{JobId: flood.GetId()})
	if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("a wait past the tenant's limit: %v, %v; want OK with the QUEUED job", resp, err)
	}
	if got := call.ResponseHeader().Get(server.ParkedCallsHeader); got != "full" {
		t.Errorf("the answer's %s header = %q, want full", server.ParkedCallsHeader, got)
	}
	// Its new watches are refused, of one job and of the tenant's feed.
	wantTenantLimit(t, watchErr(t, c, flood.GetId()), `tenant "flood"`)
	feed, err := c.jobs.WatchJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.WatchJobsRequest{Tenant: "flood"})
	if err == nil {
		for feed.Receive() {
		}
		err = feed.Err()
	}
	wantTenantLimit(t, err, `tenant "flood"`)

	// Another tenant parks a wait and opens a watch...
	calmWait := make(chan *jobwatchv1.Job, 1)
	go func() {
		resp, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: calm.GetId()})
		if err != nil {
			t.Errorf("tenant calm's wait: %v", err)
		}
		calmWait <- resp.GetJob()
	}()
	ts.waitForMetric("calm's wait parked", 10*time.Second, func(v float64) bool { return v == 1 },
		"jobwatch_parked_calls_by_tenant", "tenant", "calm")
	if err := watchErr(t, c, calm.GetId()); err != nil {
		t.Errorf("tenant calm's watch while flood is at its limit: %v", err)
	}
	// ...and short calls of both tenants are answered.
	if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: flood.GetId()}); err != nil {
		t.Errorf("GetJob of tenant flood at its limit: %v", err)
	}
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "flood", Kind: "more"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "calm", Kind: "more"})

	// Workers without a token count together: past the limit a claim
	// still takes a ready job but may not park.
	claims := make(chan error, perTenant)
	for range perTenant {
		go func() {
			_, err := c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "idle", Kinds: []string{"none"}})
			claims <- err
		}()
	}
	ts.waitForMetric("claims parked", 10*time.Second, func(v float64) bool { return v == perTenant },
		"jobwatch_parked_calls_by_tenant", "tenant", "(none)")
	_, err = c.workers.ClaimJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"none"}})
	wantTenantLimit(t, err, "workers bound to no tenant")
	lease := claim(t, c, "f")

	for kind, want := range map[string]float64{"wait": 1, "watch": 2} {
		if got := ts.metric("jobwatch_parked_calls_tenant_refused_total", "kind", kind, "tenant", "flood"); got != want {
			t.Errorf("jobwatch_parked_calls_tenant_refused_total{kind=%q,tenant=flood} = %v, want %v", kind, got, want)
		}
	}
	// Both claims past the limit count: the one refused and the one
	// that took a ready job without parking.
	if got := ts.metric("jobwatch_parked_calls_tenant_refused_total", "kind", "claim", "tenant", "(none)"); got != 2 {
		t.Errorf("jobwatch_parked_calls_tenant_refused_total{kind=claim,tenant=(none)} = %v, want 2", got)
	}
	if got := ts.metric("jobwatch_parked_calls_refused_total"); got != 0 {
		t.Errorf("jobwatch_parked_calls_refused_total = %v, want 0: the total limit was never reached", got)
	}

	// The parked waits were kept, and answer when the job ends; then
	// the tenant's places are free again.
	complete(t, c, lease, nil)
	for range perTenant {
		if got := <-results; got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Errorf("a parked wait of tenant flood answered %v, want SUCCEEDED", got.GetState())
		}
	}
	ts.waitForMetric("flood's places freed", 10*time.Second, func(v float64) bool { return v == 0 },
		"jobwatch_parked_calls_by_tenant", "tenant", "flood")
	if err := watchErr(t, c, flood.GetId()); err != nil {
		t.Errorf("a watch of tenant flood once its calls ended: %v", err)
	}
	complete(t, c, claim(t, c, "c"), nil)
	if got := <-calmWait; got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Errorf("tenant calm's wait answered %v, want SUCCEEDED", got.GetState())
	}
	cancel()
	for range perTenant {
		<-claims
	}
}

// floodCallsEnv sets the number of short calls each phase of
// TestShortCallsOfATenantKeepTheirLatencyWhileAnotherFloodsParkedCalls
// measures; unset, 200.
const floodCallsEnv = "JOBWATCH_MEASURE_FLOOD_CALLS"

// One tenant floods parked waits, twice as many as its limit, each
// refused one asking again 10 ms later (a client that ignores the
// header), and watches that are refused; another tenant's short calls
// (GetJob, SubmitJob) keep being answered, and the flooding tenant never
// holds more than its limit. The test logs the p50 and p99 of the short
// calls without and with the flood, in one run (timings are logged, not
// asserted):
//
//	JOBWATCH_MEASURE_FLOOD_CALLS=2000 go test ./server -run TestShortCallsOfATenantKeepTheirLatency -v
func TestShortCallsOfATenantKeepTheirLatencyWhileAnotherFloodsParkedCalls(t *testing.T) {
	const perTenant = 100
	n := 200
	if v, err := strconv.Atoi(os.Getenv(floodCallsEnv)); err == nil && v > 0 {
		n = v
	}
	ts := startServer(t, serverOptions{config: server.Config{
		MaxParkedCalls: 4 * perTenant, MaxParkedCallsPerTenant: perTenant, WaitCap: time.Minute, Keepalive: -1,
	}})
	calm, flooding := ts.h2c(), ts.h2c() // each its own connection, as separate clients
	floodJob := submit(t, flooding, &jobwatchv1.SubmitJobRequest{Tenant: "flood", Kind: "f"})
	calmJob := submit(t, calm, &jobwatchv1.SubmitJobRequest{Tenant: "calm", Kind: "c"})

	shortCalls := func() []time.Duration {
		took := make([]time.Duration, 0, n)
		for i := range n {
			start := time.Now()
			var err error
			if i%2 == 0 {
				_, err = calm.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: calmJob.GetId()})
			} else {
				_, err = calm.jobs.SubmitJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.SubmitJobRequest{Tenant: "calm", Kind: "short"})
			}
			took = append(took, time.Since(start))
			if err != nil {
				t.Fatalf("short call %d of tenant calm: %v", i, err)
			}
			if i%20 == 0 {
				if held := ts.metric("jobwatch_parked_calls_by_tenant", "tenant", "flood"); held > perTenant {
					t.Fatalf("tenant flood holds %v parked calls, over its limit of %d", held, perTenant)
				}
			}
		}
		return took
	}
	quiet := shortCalls()

	floodCtx, stopFlood := context.WithCancel(context.Background())
	var flood sync.WaitGroup
	defer func() { stopFlood(); flood.Wait() }()
	pause := func() {
		select {
		case <-floodCtx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	var (
		refusedMu   sync.Mutex
		refusedTook []time.Duration // of the waits answered at once, marked full
	)
	for range 2 * perTenant {
		flood.Go(func() {
			for floodCtx.Err() == nil {
				callCtx, call := connect.NewClientContext(floodCtx)
				start := time.Now()
				_, err := flooding.jobs.WaitJob(callCtx, &jobwatchv1.WaitJobRequest{JobId: floodJob.GetId()})
				if err != nil || call.ResponseHeader().Get(server.ParkedCallsHeader) == "full" {
					if err == nil {
						refusedMu.Lock()
						refusedTook = append(refusedTook, time.Since(start))
						refusedMu.Unlock()
					}
					pause()
				}
			}
		})
	}
	for range 10 {
		flood.Go(func() {
			for floodCtx.Err() == nil {
				if s, err := flooding.jobs.WatchJob(floodCtx, &jobwatchv1.WatchJobRequest{JobId: floodJob.GetId()}); err == nil {
					for s.Receive() {
					}
					s.Close()
				}
				pause()
			}
		})
	}
	ts.waitForMetric("tenant flood at its limit", 30*time.Second, func(v float64) bool { return v == perTenant },
		"jobwatch_parked_calls_by_tenant", "tenant", "flood")
	ts.waitForMetric("tenant flood refused past its limit", 30*time.Second, func(v float64) bool { return v > 0 },
		"jobwatch_parked_calls_tenant_refused_total", "tenant", "flood")
	refusedBefore := ts.metric("jobwatch_parked_calls_tenant_refused_total", "tenant", "flood")
	phaseStart := time.Now()
	flooded := shortCalls()
	phase := time.Since(phaseStart)
	refused := ts.metric("jobwatch_parked_calls_tenant_refused_total", "tenant", "flood") - refusedBefore
	if held := ts.metric("jobwatch_parked_calls_by_tenant", "tenant", "flood"); held != perTenant {
		t.Errorf("tenant flood holds %v parked calls at the end, want its limit %d", held, perTenant)
	}
	if got := ts.metric("jobwatch_parked_calls_refused_total"); got != 0 {
		t.Errorf("jobwatch_parked_calls_refused_total = %v: the total limit was reached, want only the tenant's", got)
	}

	q50, q99 := percentile(quiet, 50), percentile(quiet, 99)
	f50, f99 := percentile(flooded, 50), percentile(flooded, 99)
	t.Logf("tenant calm, %d short calls (GetJob, SubmitJob alternately) a phase; tenant flood: %d parked waits (its limit), "+
		"%d more asking again every 10 ms and 10 watches refused: %.0f refusals in the %v of the phase (%.0f/s)",
		n, perTenant, perTenant, refused, phase.Round(time.Millisecond), refused/phase.Seconds())
	t.Logf("without the flood: p50 %v, p99 %v", q50, q99)
	t.Logf("with the flood:    p50 %v, p99 %v", f50, f99)
	t.Logf("p99 with / without: %.2f", float64(f99)/float64(q99))
	refusedMu.Lock()
	defer refusedMu.Unlock()
	if len(refusedTook) > 0 {
		t.Logf("tenant flood's waits past its limit, answered at once: %d in all, p50 %v, p99 %v",
			len(refusedTook), percentile(refusedTook, 50), percentile(refusedTook, 99))
	}
}

// percentile is the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, i-1)].Round(time.Microsecond)
}

// A WaitJobs holds about the memory of one WaitJob for every 16 jobs it
// waits for, and counts as that many places of the parked-call limits:
// one of 100 jobs takes 7, one that would pass the limit answers at once
// with the current states, marked full, and one whose jobs have all
// ended answers as always, taking none.
func TestAWaitJobsCountsOnePlaceForEvery16Jobs(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxParkedCalls: 10, WaitCap: time.Minute}})
	c := ts.h2c()
	var reqs []*jobwatchv1.SubmitJobRequest
	for range 100 {
		reqs = append(reqs, &jobwatchv1.SubmitJobRequest{Kind: "places"})
	}
	resp, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobsRequest{Jobs: reqs})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range resp.GetJobs() {
		ids = append(ids, j.GetId())
	}
	ended := ids[99:]
	if _, err := c.jobs.CancelJob(ctxTimeout(t, callBound), &jobwatchv1.CancelJobRequest{JobId: ended[0]}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(ctxTimeout(t, 30*time.Second))
	defer cancel()
	parked := make(chan error, 2)
	park := func(ids []string) {
		go func() {
			_, err := c.jobs.WaitJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: ids})
			parked <- err
		}()
	}
	park(ids[:99])
	ts.waitForGauge("jobwatch_parked_calls", 7)

	callCtx, call := connect.NewClientContext(ctxTimeout(t, 30*time.Second))
	second, err := c.jobs.WaitJobs(callCtx, &jobwatchv1.WaitJobsRequest{JobIds: ids[:64]})
	if got := call.ResponseHeader().Get(server.ParkedCallsHeader); err != nil || len(second.GetUnfinishedJobIds()) != 64 || got != "full" {
		t.Fatalf("a WaitJobs of 64 (4 places) beside 7 of 10: %v, %v, header %q; want the 64 unfinished at once, marked full", second, err, got)
	}
	park(ids[:48]) // 3 places: they fit
	ts.waitForGauge("jobwatch_parked_calls", 10)

	callCtx, call = connect.NewClientContext(ctxTimeout(t, 30*time.Second))
	done, err := c.jobs.WaitJobs(callCtx, &jobwatchv1.WaitJobsRequest{JobIds: ended})
	if got := call.ResponseHeader().Get(server.ParkedCallsHeader); err != nil || len(done.GetJobs()) != 1 || got != "" {
		t.Errorf("a WaitJobs of an ended job with every place taken: %v, %v, header %q; want the job, not marked", done, err, got)
	}
	cancel()
	for range 2 {
		if err := <-parked; err == nil {
			t.Error("a parked WaitJobs answered before it was cancelled")
		}
	}
	ts.waitForGauge("jobwatch_parked_calls", 0)
}

// A tenant's waits and watches and its workers' claims each have the
// per-tenant limit: a client token that parks as many waits as the limit
// allows (an outside probe parked 2,600) does not keep its tenant's
// workers from parking their claims, which then take a job the moment it
// is ready, nor do they keep it from parking more waits.
func TestATenantsWaitsDoNotKeepItsWorkersFromParkingClaims(t *testing.T) {
	const perTenant = 2
	ts := startServer(t, serverOptions{config: server.Config{
		Tokens: testTokens(t), MaxParkedCalls: 100, MaxParkedCallsPerTenant: perTenant, WaitCap: time.Minute, ClaimCap: time.Minute,
	}})
	p := authProtocols[1]
	client, worker := ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, acmeWorker)
	queued := submit(t, client, &jobwatchv1.SubmitJobRequest{Kind: "queued"})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waits := make(chan error, perTenant)
	for range perTenant {
		go func() {
			_, err := client.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: queued.GetId()})
			waits <- err
		}()
	}
	ts.waitForMetric("acme's waits parked", 10*time.Second, func(v float64) bool { return v == perTenant },
		"jobwatch_parked_calls_by_tenant", "tenant", "acme")
	wantTenantLimit(t, watchErr(t, client, queued.GetId()), `tenant "acme"`)

	claimed := make(chan string, 1)
	go func() {
		resp, err := worker.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"later"}})
		if err != nil {
			t.Errorf("acme's worker's claim while acme's waits fill its limit: %v", err)
		}
		claimed <- resp.GetJob().GetId()
	}()
	ts.waitForMetric("acme's claim parked beside its waits", 10*time.Second, func(v float64) bool { return v == perTenant+1 },
		"jobwatch_parked_calls_by_tenant", "tenant", "acme")
	later := submit(t, client, &jobwatchv1.SubmitJobRequest{Kind: "later"})
	if got := <-claimed; got != later.GetId() {
		t.Fatalf("the parked claim took %q, want the job submitted while it was parked, %s", got, later.GetId())
	}
	cancel()
	for range perTenant {
		<-waits
	}
}
