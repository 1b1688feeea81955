package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	healthv1 "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

const (
	healthWatchPath    = "/grpc.health.v1.Health/Watch"
	reflectionV1Path   = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectionV1Alpha  = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
	grpcStatusServing  = 1 // grpc.health.v1.HealthCheckResponse.SERVING
	submitJobPath      = "/jobwatch.v1.JobService/SubmitJob"
	listServicesReqMsg = "\x3a\x00" // ServerReflectionRequest{list_services: ""}
)

// healthWatch opens grpc.health.v1.Health/Watch over gRPC. Its messages
// are internal to grpchealth; on the wire HealthCheckRequest is a
// StringValue (field 1, the service) and HealthCheckResponse an
// Int32Value (field 1, the status).
func healthWatch(ctx context.Context, hc *http.Client, url string, opts ...connect.ClientOption) (*connect.ServerStreamForClient[wrapperspb.Int32Value], error) {
	if len(opts) == 0 {
		opts = []connect.ClientOption{connect.WithGRPC()}
	}
	c := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int32Value](hc, url+healthWatchPath, opts...)
	return c.CallServerStream(ctx, connect.NewRequest(&wrapperspb.StringValue{}))
}

// firstHealth opens a health Watch and waits for its first message.
func firstHealth(ctx context.Context, hc *http.Client, url string, opts ...connect.ClientOption) (*connect.ServerStreamForClient[wrapperspb.Int32Value], error) {
	s, err := healthWatch(ctx, hc, url, opts...)
	if err != nil {
		return nil, err
	}
	if !s.Receive() {
		err := s.Err()
		s.Close()
		if err == nil {
			err = errors.New("the health Watch ended without a message")
		}
		return nil, err
	}
	if got := s.Msg().GetValue(); got != grpcStatusServing {
		s.Close()
		return nil, fmt.Errorf("health Watch sent status %d, want SERVING", got)
	}
	return s, nil
}

// reflectionStream opens a reflection stream and lists the services once.
func reflectionStream(ctx context.Context, hc *http.Client, url string, opts ...connect.ClientOption) (*grpcreflect.ClientStream, error) {
	s := grpcreflect.NewClient(hc, url, append([]connect.ClientOption{connect.WithGRPC()}, opts...)...).NewStream(ctx)
	if _, err := s.ListServices(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// With tokens, every stream needs one: a health Watch and reflection take
// a token of any role; only health's unary Check stays open, for load
// balancers and orchestrators.
func TestWithTokensHealthWatchAndReflectionNeedATokenOfAnyRole(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	withToken := func(token string) *http.Client {
		hc := ts.h2cClient()
		hc.Transport = bearerTransport{base: hc.Transport, token: token}
		return hc
	}

	health := grpchealth.NewClient(withToken(""), ts.url, connect.WithGRPC())
	if resp, err := health.Check(ctxTimeout(t, 5*time.Second), &grpchealth.CheckRequest{}); err != nil || resp.Status != grpchealth.StatusServing {
		t.Errorf("health Check without a token = %v, %v; want SERVING", resp, err)
	}
	list := connect.NewClient[healthv1.HealthListRequest, healthv1.HealthListResponse](withToken(""), ts.url+"/grpc.health.v1.Health/List", connect.WithGRPC())
	if resp, err := list.CallUnary(ctxTimeout(t, 5*time.Second), connect.NewRequest(&healthv1.HealthListRequest{})); err != nil ||
		resp.Msg.GetStatuses()[""].GetStatus() != healthv1.HealthCheckResponse_SERVING {
		t.Errorf("health List without a token = %v, %v; want SERVING", resp, err)
	}
	if resp, err := http.Get(ts.url + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz without a token = %v, %v; want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	for _, token := range []string{"", unknownToken} {
		_, err := firstHealth(ctxTimeout(t, 5*time.Second), withToken(token), ts.url)
		wantCode(t, err, connect.CodeUnauthenticated)
		_, err = reflectionStream(ctxTimeout(t, 5*time.Second), withToken(token), ts.url)
		wantCode(t, err, connect.CodeUnauthenticated)
	}
	if got := ts.metric("jobwatch_streams_refused_total", "reason", "token"); got != 4 {
		t.Errorf("jobwatch_streams_refused_total{reason=token} = %v, want 4", got)
	}

	for _, token := range []string{acmeToken, workerToken, adminToken} {
		s, err := reflectionStream(ctxTimeout(t, 5*time.Second), withToken(token), ts.url)
		if err != nil {
			t.Errorf("reflection with a %s token: %v", token, err)
			continue
		}
		ts.waitForGauge("jobwatch_parked_calls", 1)
		s.Close()
		ts.waitForGauge("jobwatch_parked_calls", 0)
	}
	w, err := firstHealth(ctxTimeout(t, 5*time.Second), withToken(workerToken), ts.url)
	if err != nil {
		t.Fatalf("health Watch with a worker token: %v", err)
	}
	ts.waitForGauge("jobwatch_parked_calls", 1)
	w.Close()
	ts.waitForGauge("jobwatch_parked_calls", 0)

	// A reload that revokes the token ends its streams.
	r, err := reflectionStream(ctxTimeout(t, 10*time.Second), withToken(workerToken), ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts.srv.SetTokens(testTokens(t, acmeToken, adminToken))
	ts.waitForGauge("jobwatch_parked_calls", 0)
}

// Health Watch and reflection streams are parked calls: counted against
// the server's limit and their connection's, refused with
// resource_exhausted past either, and nobody's stream already open is
// ended for it.
func TestHealthWatchAndReflectionStreamsCountAsParkedCalls(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{
		MaxParkedCalls: 4, MaxParkedCallsPerConn: 2, MaxStreamsPerConn: 10,
	}})
	ctx := ctxTimeout(t, 30*time.Second)
	first := ts.h2cClient() // one connection
	r1, err := reflectionStream(ctx, first, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	w1, err := firstHealth(ctx, first, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	ts.waitForGauge("jobwatch_parked_calls", 2)

	// The connection is at its limit; its short calls still go through.
	_, err = reflectionStream(ctx, first, ts.url)
	wantCode(t, err, connect.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "open another connection") {
		t.Errorf("the refusal %q does not say what to do", err)
	}
	_, err = firstHealth(ctx, first, ts.url)
	wantCode(t, err, connect.CodeResourceExhausted)
	if _, err := ts.clients(first).jobs.GetServerInfo(ctx, &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Errorf("a short call on the connection at its limit: %v", err)
	}

	// Another connection parks until the server is at its limit.
	second := ts.h2cClient()
	r2, err := reflectionStream(ctx, second, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	w2, err := firstHealth(ctx, second, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	ts.waitForGauge("jobwatch_parked_calls", 4)
	_, err = reflectionStream(ctx, ts.h2cClient(), ts.url)
	wantCode(t, err, connect.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "--max-parked-calls") {
		t.Errorf("the refusal %q does not name the limit", err)
	}
	for kind, want := range map[string]float64{"reflection": 1, "health_watch": 0} {
		if got := ts.metric("jobwatch_parked_calls_refused_total", "kind", kind); got != want {
			t.Errorf("jobwatch_parked_calls_refused_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	for kind, want := range map[string]float64{"reflection": 1, "health_watch": 1} {
		if got := ts.metric("jobwatch_parked_calls_conn_refused_total", "kind", kind); got != want {
			t.Errorf("jobwatch_parked_calls_conn_refused_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	// The streams already open still answer.
	if _, err := r1.ListServices(); err != nil {
		t.Errorf("a reflection stream open before the limit: %v", err)
	}
	r1.Close()
	ts.waitForGauge("jobwatch_parked_calls", 3)
	if r, err := reflectionStream(ctx, ts.h2cClient(), ts.url); err != nil {
		t.Errorf("reflection once a place is free: %v", err)
	} else {
		r.Close()
	}
}

// A connection's parked calls leave it streams for its short calls: past
// --max-parked-calls-per-conn its waits answer at once (marked full), its
// watches are refused, and its GetJob calls are answered; another
// connection still parks.
func TestAConnectionsParkedCallsLeaveItStreamsForShortCalls(t *testing.T) {
	const perConn = 3
	ts := startServer(t, serverOptions{config: server.Config{
		MaxStreamsPerConn: 5, MaxParkedCallsPerConn: perConn, WaitCap: time.Minute,
	}})
	c := ts.h2c() // one connection, as grpc-go or grpcurl would use
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waits := make(chan error, perConn)
	for range perConn {
		go func() {
			_, err := c.jobs.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			waits <- err
		}()
	}
	ts.waitForGauge("jobwatch_parked_calls", perConn)

	callCtx, call := connect.NewClientContext(ctxTimeout(t, 10*time.Second))
	resp, err := c.jobs.WaitJob(callCtx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
	if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("a wait past the connection's limit: %v, %v; want OK with the QUEUED job at once", resp, err)
	}
	if got := call.ResponseHeader().Get(server.ParkedCallsHeader); got != "full" {
		t.Errorf("its %s header = %q, want full", server.ParkedCallsHeader, got)
	}
	wantCode(t, watchErr(t, c, job.GetId()), connect.CodeResourceExhausted)
	for range 20 {
		if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
			t.Fatalf("GetJob on the connection holding its parked calls: %v", err)
		}
	}
	if err := watchErr(t, ts.h2c(), job.GetId()); err != nil {
		t.Errorf("a watch on another connection: %v", err)
	}
	if got := ts.metric("jobwatch_parked_calls_conn_refused_total"); got != 2 {
		t.Errorf("jobwatch_parked_calls_conn_refused_total = %v, want 2", got)
	}
	complete(t, c, claim(t, c, "k"), nil)
	for range perConn {
		if err := <-waits; err != nil {
			t.Errorf("a parked wait: %v", err)
		}
	}
}

// Health Watch and reflection streams end, OK, at StreamLifetime, as a
// WatchJob does, and at once when the server shuts down; the client opens
// another.
func TestHealthWatchAndReflectionStreamsEndAtTheirLifetime(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{StreamLifetime: 300 * time.Millisecond}})
	ctx := ctxTimeout(t, 30*time.Second)
	w, err := firstHealth(ctx, ts.h2cClient(), ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := reflectionStream(ctx, ts.h2cClient(), ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	browser, err := firstHealth(ctx, ts.http1Client(), ts.url, connect.WithReadMaxBytes(1<<20)) // the Connect protocol over HTTP/1.1
	if err != nil {
		t.Fatal(err)
	}
	defer browser.Close()
	for _, s := range []*connect.ServerStreamForClient[wrapperspb.Int32Value]{w, browser} {
		for s.Receive() {
		}
		if err := s.Err(); err != nil {
			t.Errorf("a health Watch at its lifetime ended with %v, want OK", err)
		}
	}
	ts.waitForMetric("both streams ended", 10*time.Second, func(v float64) bool { return v == 0 }, "jobwatch_parked_calls")
	if _, err := r.ListServices(); err == nil {
		t.Errorf("the reflection stream still answers after its lifetime")
	}
}

func TestHealthWatchAndReflectionStreamsEndAtShutdown(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{ShutdownGrace: time.Minute}})
	ctx := ctxTimeout(t, 30*time.Second)
	w, err := firstHealth(ctx, ts.h2cClient(), ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := reflectionStream(ctx, ts.h2cClient(), ts.url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts.waitForGauge("jobwatch_parked_calls", 2)
	start := time.Now()
	if err := ts.stop(); err != nil { // fails after 15 s, long before the grace
		t.Fatal(err)
	}
	t.Logf("shut down with a health Watch and a reflection stream open in %v (grace %v)", time.Since(start).Round(time.Millisecond), time.Minute)
	if strings.Contains(ts.logs.String(), "still in flight after the grace") {
		t.Errorf("the streams held the shutdown for its grace")
	}
}

// openStream opens a stream on c with headers for a POST to path of
// contentType and, if body is not nil, sends it without ending the
// stream: the request is never complete.
func (c *rawH2) openStream(path, contentType string, body []byte) uint32 {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextID
	c.nextID += 2
	c.buf.Reset()
	for _, hf := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", c.conn.RemoteAddr().String()},
		{":path", path}, {"content-type", contentType}, {"te", "trailers"},
	} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true}); err != nil {
		return 0
	}
	if body != nil {
		if err := c.fr.WriteData(id, false, body); err != nil {
			return 0
		}
	}
	return id
}

// grpcMessage frames msg as one gRPC message.
func grpcMessage(msg string) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// rssKiB is the process's resident set (VmRSS), 0 where /proc does not
// say.
func rssKiB() int64 { return procStatusKiB("VmRSS:") }

// peakRSSKiB is the process's largest resident set so far (VmHWM).
func peakRSSKiB() int64 { return procStatusKiB("VmHWM:") }

func procStatusKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib
		}
	}
	return 0
}

// measureReflectionEnv names the number of reflection streams
// TestReflectionStreamsOnOneConnectionAreBounded opens with the default
// limits; unset, it opens 1,000 against a stream cap of 200.
const measureReflectionEnv = "JOBWATCH_MEASURE_REFLECTION_STREAMS"

// A client without a token opens reflection streams on one connection,
// as many as it likes, and keeps answering pings: the probe's 40,000 took
// 600 MB. The connection holds at most its parked-call limit of them
// (3,600 by default), the rest are refused or reset, and short calls of
// others keep being answered. The test logs RSS, heap, goroutines and
// GetJob p99 before, during and after:
//
//	JOBWATCH_MEASURE_REFLECTION_STREAMS=40000 go test ./server -run TestReflectionStreamsOnOneConnectionAreBounded -v
func TestReflectionStreamsOnOneConnectionAreBounded(t *testing.T) {
	n, cfg, held := 1000, server.Config{MaxStreamsPerConn: 200}, 180
	if v, err := strconv.Atoi(os.Getenv(measureReflectionEnv)); err == nil && v > 0 {
		n, cfg, held = v, server.Config{}, server.DefaultMaxParkedCallsPerConn
	}
	ts := startServer(t, serverOptions{config: cfg})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	shortCalls := func() time.Duration {
		took := make([]time.Duration, 0, 200)
		for range 200 {
			start := time.Now()
			if _, err := c.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
				t.Fatalf("GetJob: %v", err)
			}
			took = append(took, time.Since(start))
		}
		return percentile(took, 99)
	}
	quietP99 := shortCalls()
	before, rssBefore := heapAndGoroutines(), rssKiB()

	raw := dialRawH2Window(t, addrOf(ts.url), 1<<20)
	for i := range n {
		path := reflectionV1Path
		if i%2 == 1 {
			path = reflectionV1Alpha
		}
		if raw.openStream(path, "application/grpc", grpcMessage(listServicesReqMsg)) == 0 {
			t.Logf("the server closed the connection after %d streams", i)
			break
		}
	}
	ts.waitForMetric("the connection holds its limit", time.Minute, func(v float64) bool { return v == float64(held) },
		"jobwatch_parked_calls")
	during, rssDuring := heapAndGoroutines(), rssKiB()
	duringP99 := shortCalls()
	if got := ts.gauge("jobwatch_parked_calls"); got > float64(held) {
		t.Errorf("one connection holds %v reflection streams, want at most %d", got, held)
	}
	if grew := during.goroutines - before.goroutines; grew > 2*held+100 {
		t.Errorf("%d reflection streams on one connection added %d goroutines", n, grew)
	}
	raw.conn.Close()
	ts.waitForMetric("the streams ended", time.Minute, func(v float64) bool { return v == 0 }, "jobwatch_parked_calls")
	after, rssAfter := heapAndGoroutines(), rssKiB()
	t.Logf("%d reflection streams asked on one connection: held %v, refused %v; RSS %d → %d → %d MiB, heap %d → %d → %d KiB, goroutines %d → %d → %d; "+
		"GetJob p99 %v before, %v during",
		n, held, ts.metric("jobwatch_parked_calls_conn_refused_total"),
		rssBefore>>10, rssDuring>>10, rssAfter>>10,
		before.heap>>10, during.heap>>10, after.heap>>10, before.goroutines, during.goroutines, after.goroutines,
		quietP99, duringP99)
}

// The probe's lockout: with --max-connections 50, 50 connections each
// holding one reflection stream made every new GetJob fail for 40 s.
// With tokens, a connection without one holds no stream: its refused
// connection is idle, and makes room for a client that speaks.
func TestConnectionsWithoutATokenCannotHoldTheConnectionLimitWithStreams(t *testing.T) {
	const places = 6
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t), MaxConnections: places, MaxNewConnections: 1}})
	for i := range places {
		hc := ts.h2cClient() // a connection of its own
		if _, err := reflectionStream(ctxTimeout(t, 5*time.Second), hc, ts.url); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("reflection stream %d without a token: %v, want unauthenticated", i, err)
		}
		if _, err := firstHealth(ctxTimeout(t, 5*time.Second), hc, ts.url); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("health Watch %d without a token: %v, want unauthenticated", i, err)
		}
	}
	if got := ts.gauge("jobwatch_parked_calls"); got != 0 {
		t.Fatalf("connections without a token hold %v streams", got)
	}
	hc := ts.h2cClient()
	hc.Transport = bearerTransport{base: hc.Transport, token: acmeToken}
	c := ts.clients(hc)
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatalf("a client with a token while others tried to hold streams: %v", err)
	}
}
