package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// waitClosed waits until the server closes conn (a read returns EOF or a
// reset), or fails.
func waitClosed(t *testing.T, conn net.Conn, within time.Duration, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	if isTimeout(err) {
		t.Fatalf("%s is still open after %v", what, within)
	}
}

// A connection that sends nothing, or not a whole request, is closed at
// --first-request-timeout: over HTTP/1.1 silent or in the middle of its
// headers, over HTTP/2 after its preface and settings alone.
func TestAConnectionThatSaysNothingIsClosedAtTheFirstRequestTimeout(t *testing.T) {
	const first = 200 * time.Millisecond
	ts := startServer(t, serverOptions{config: server.Config{FirstRequestTimeout: first}})
	for _, tt := range []struct {
		name string
		send func(net.Conn)
	}{
		{"silent", func(net.Conn) {}},
		{"half a request line", func(c net.Conn) { fmt.Fprint(c, "POST /jobwatch.v1.JobService/GetJob HT") }},
		{"headers without their end", func(c net.Conn) {
			fmt.Fprint(c, "POST /jobwatch.v1.JobService/GetJob HTTP/1.1\r\nHost: localhost\r\n")
		}},
		{"an HTTP/2 preface and settings", func(c net.Conn) {
			fmt.Fprint(c, http2.ClientPreface)
			_ = http2.NewFramer(c, c).WriteSettings()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addrOf(ts.url))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			tt.send(conn)
			waitClosed(t, conn, 30*time.Second, "the connection")
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
	if got := ts.metric("jobwatch_connections_first_request_timeouts_total"); got != 4 {
		t.Errorf("jobwatch_connections_first_request_timeouts_total = %v, want 4", got)
	}
	ts.waitForGauge("jobwatch_connections_new", 0)
	// A client that speaks at once is served, and stays past the timeout.
	c := ts.clients(ts.http1Client())
	for range 2 {
		if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * first) // an idle client between calls is not "silent"
	}
	if got := ts.metric("jobwatch_connections_first_request_timeouts_total"); got != 4 {
		t.Errorf("a client idle between calls was closed as silent: %v timeouts", got)
	}
}

// Silent connections, any number of them, can only push out each other:
// a client idle between calls keeps its connection, and a newcomer that
// speaks gets in. (The probe: 17,500 silent connections made new calls
// fail with EOF, and pushed out other clients' idle connections first.)
func TestSilentConnectionsDoNotLockOutClientsThatSpeak(t *testing.T) {
	const maxConns, maxNew, silent = 20, 5, 60
	ts := startServer(t, serverOptions{config: server.Config{
		MaxConnections: maxConns, MaxNewConnections: maxNew, FirstRequestTimeout: time.Minute,
	}})
	idle := ts.clients(ts.http1Client())
	if _, err := idle.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Fatal(err)
	}

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range silent {
		conn, err := net.Dial("tcp", addrOf(ts.url))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	ts.waitForMetric("silent ones closed for newer ones", 10*time.Second, func(v float64) bool { return v == silent-maxNew },
		"jobwatch_connections_new_closed_total")
	if got := ts.gauge("jobwatch_connections_new"); got != maxNew {
		t.Errorf("jobwatch_connections_new = %v, want %d", got, maxNew)
	}

	// The idle client's next call goes over the connection it had.
	reused := false
	ctx := httptrace.WithClientTrace(ctxTimeout(t, 5*time.Second), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
	})
	if _, err := idle.jobs.GetServerInfo(ctx, &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Fatalf("a client idle while silent connections flooded in: %v", err)
	}
	if !reused {
		t.Errorf("the idle client's connection was closed for silent newcomers")
	}
	// Newcomers that speak get in, over HTTP/1.1 and HTTP/2.
	for range 5 {
		for _, c := range []clients{ts.clients(ts.http1Client()), ts.h2c()} {
			if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
				t.Fatalf("a newcomer that speaks while silent connections flood in: %v", err)
			}
		}
	}
	if got := ts.metric("jobwatch_connections_refused_total"); got != 0 {
		t.Errorf("jobwatch_connections_refused_total = %v, want 0", got)
	}
}

// At the connection limit a client idle between calls makes room for a
// newcomer only once the newcomer has sent a request, and a newcomer
// never takes the place of a busy one.
func TestAnIdleConnectionMakesRoomOnlyForANewcomerThatSpeaks(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxConnections: 4, MaxNewConnections: 1, FirstRequestTimeout: time.Minute}})
	for range 3 { // the places of connections that spoke: 4 - 1
		c := ts.clients(ts.http1Client())
		if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	silent, err := net.Dial("tcp", addrOf(ts.url))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ts.waitForGauge("jobwatch_connections_new", 1)
	if got := ts.metric("jobwatch_connections_idle_closed_total"); got != 0 {
		t.Fatalf("a silent newcomer closed %v idle connections", got)
	}
	c := ts.clients(ts.http1Client())
	if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Fatalf("a newcomer that speaks: %v", err)
	}
	if got := ts.metric("jobwatch_connections_idle_closed_total"); got != 1 {
		t.Errorf("jobwatch_connections_idle_closed_total = %v, want 1 (for the newcomer that spoke)", got)
	}
	if got := ts.metric("jobwatch_connections_new_closed_total"); got != 1 {
		t.Errorf("jobwatch_connections_new_closed_total = %v, want 1 (the silent one, for the newcomer)", got)
	}
	waitClosed(t, silent, 10*time.Second, "the silent connection")
}

// One HTTP/2 connection may have at most --max-streams-per-conn streams
// open: the probe's 60,000 streams with headers and no body (969 MB) are
// cut to that many, the rest reset at once.
func TestAnHTTP2ConnectionHoldsAtMostItsStreamLimit(t *testing.T) {
	const streams, asked = 50, 200
	ts := startServer(t, serverOptions{config: server.Config{MaxStreamsPerConn: streams, BodyTimeout: time.Minute}})
	raw := dialRawH2Window(t, addrOf(ts.url), 1<<20)
	for range asked {
		raw.openStream(submitJobPath, "application/json", nil)
	}
	raw.waitReset(asked-streams, 30*time.Second)
	ts.waitForMetric("bodies awaited", 10*time.Second, func(v float64) bool { return v == streams }, "jobwatch_request_bodies_reading")
	if _, err := ts.h2c().jobs.GetServerInfo(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
		t.Errorf("another client while one holds its streams: %v", err)
	}
}

// Bodies on their way are bounded across the server: past
// --max-pending-bodies the connection whose body has been awaited the
// longest is closed, which frees its streams, and clients whose requests
// arrive whole keep being served.
func TestBodiesThatNeverArriveAreBoundedAcrossTheServer(t *testing.T) {
	const perConn, bound = 40, 100
	ts := startServer(t, serverOptions{config: server.Config{
		MaxStreamsPerConn: perConn, MaxPendingBodies: bound, BodyTimeout: time.Minute,
		PendingBodyGrace: time.Nanosecond, // every body held back is blamed at once
	}})
	c := ts.h2c()
	var conns []*rawH2
	for i := range 5 {
		raw := dialRawH2Window(t, addrOf(ts.url), 1<<20)
		conns = append(conns, raw)
		for range perConn {
			raw.openStream(submitJobPath, "application/json", nil)
		}
		ts.waitForMetric("the connection's bodies awaited", 10*time.Second, func(v float64) bool {
			return v >= float64(min((i+1)*perConn, bound-perConn))
		}, "jobwatch_request_bodies_reading")
		if got := ts.gauge("jobwatch_request_bodies_reading"); got > bound {
			t.Errorf("%v bodies awaited, over the bound of %d", got, bound)
		}
		if _, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "whole"}); err != nil {
			t.Fatalf("a submit whose body arrives whole, with %d connections holding bodies back: %v", i+1, err)
		}
	}
	// The oldest connections were closed, the newest kept.
	for i, raw := range conns[:2] {
		select {
		case <-raw.closed:
		case <-time.After(10 * time.Second):
			t.Errorf("connection %d, among the oldest, is still open", i)
		}
	}
	for i, raw := range conns[3:] {
		select {
		case <-raw.closed:
			t.Errorf("connection %d, among the newest, was closed", i+3)
		default:
		}
	}
	for _, raw := range conns {
		raw.conn.Close()
	}
	if got := ts.metric("jobwatch_connections_closed_pending_bodies_total"); got < 2 {
		t.Errorf("jobwatch_connections_closed_pending_bodies_total = %v, want at least 2", got)
	}
}

// A body awaited for less than a grace (a second) is taken for one on
// its way, as in a burst of healthy calls whose handlers start faster
// than two busy cores read their bodies: past --max-pending-bodies no
// connection is closed for it, until the oldest body has been awaited
// the grace, or the count passes four times the bound.
func TestBodiesAwaitedBrieflyCloseNoConnection(t *testing.T) {
	const perConn, bound = 40, 50
	ts := startServer(t, serverOptions{config: server.Config{
		MaxStreamsPerConn: perConn, MaxPendingBodies: bound, BodyTimeout: time.Hour,
		PendingBodyGrace: time.Hour,
	}})
	var conns []*rawH2
	open := func() *rawH2 {
		raw := dialRawH2Window(t, addrOf(ts.url), 1<<20)
		conns = append(conns, raw)
		for range perConn {
			raw.openStream(submitJobPath, "application/json", nil)
		}
		return raw
	}
	for range 4 { // 160 bodies: past the bound, within four times it
		open()
	}
	ts.waitForMetric("the bodies awaited", 10*time.Second, func(v float64) bool { return v == 4*perConn }, "jobwatch_request_bodies_reading")
	for i, raw := range conns {
		select {
		case <-raw.closed:
			t.Errorf("connection %d was closed for bodies awaited less than the grace", i)
		default:
		}
	}
	// Past four times the bound the oldest go, whatever their age (the
	// oldest body's connection: the order its handlers started in).
	for range 2 {
		open()
	}
	ts.waitForMetric("a connection closed for its bodies", 10*time.Second, func(v float64) bool { return v >= 1 },
		"jobwatch_connections_closed_pending_bodies_total")
	// The closed connection's bodies come off as its handlers fail.
	ts.waitForMetric("the bodies awaited back within four times the bound", 10*time.Second,
		func(v float64) bool { return v <= 4*bound }, "jobwatch_request_bodies_reading")
	for _, raw := range conns {
		raw.conn.Close()
	}
}

// measureBodiesEnv names the number of header-only streams
// TestMeasureStreamsWhoseBodyNeverComes opens on one connection; unset,
// it does not run.
const measureBodiesEnv = "JOBWATCH_MEASURE_BODILESS_STREAMS"

// measureBodiesConnsEnv names over how many connections; unset, one.
const measureBodiesConnsEnv = "JOBWATCH_MEASURE_BODILESS_CONNS"

// TestMeasureStreamsWhoseBodyNeverComes is the probe's case with the
// defaults: one connection (or several), no token, streams that send
// headers and never the body, for as long as the client answers pings.
// It logs what they hold and GetJob's p99 before, during and after:
//
//	JOBWATCH_MEASURE_BODILESS_STREAMS=60000 go test ./server -run TestMeasureStreamsWhoseBodyNeverComes -v
//	JOBWATCH_MEASURE_BODILESS_STREAMS=60000 JOBWATCH_MEASURE_BODILESS_CONNS=20 go test ./server -run TestMeasureStreamsWhoseBodyNeverComes -v
func TestMeasureStreamsWhoseBodyNeverComes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(measureBodiesEnv))
	if n <= 0 {
		t.Skipf("set %s to the number of streams to open", measureBodiesEnv)
	}
	ts := startServer(t, serverOptions{config: server.Config{BodyTimeout: time.Hour}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	p99 := func() time.Duration {
		took := make([]time.Duration, 0, 500)
		for range 500 {
			start := time.Now()
			if _, err := c.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
				t.Fatalf("GetJob: %v", err)
			}
			took = append(took, time.Since(start))
		}
		return percentile(took, 99)
	}
	quiet := p99()
	before, rssBefore := heapAndGoroutines(), rssKiB()
	conns, _ := strconv.Atoi(os.Getenv(measureBodiesConnsEnv))
	conns = max(1, conns)
	var raws []*rawH2
	opened := 0
	for range conns {
		raw := dialRawH2Window(t, addrOf(ts.url), 1<<20)
		raws = append(raws, raw)
		for range n / conns {
			if raw.openStream(submitJobPath, "application/json", nil) == 0 {
				break
			}
			opened++
		}
	}
	// The server holds them until they pass the bound, then closes the
	// connection that has waited the longest (with one, that one).
	ts.waitForMetric("bodies awaited, or the connection closed", time.Minute, func(v float64) bool {
		return v >= float64(min(opened, server.DefaultMaxPendingBodies)) ||
			ts.metric("jobwatch_connections_closed_pending_bodies_total") > 0
	}, "jobwatch_request_bodies_reading")
	during, rssDuring := heapAndGoroutines(), rssKiB()
	held := ts.gauge("jobwatch_request_bodies_reading")
	duringP99 := p99()
	for _, raw := range raws {
		raw.conn.Close()
	}
	ts.waitForMetric("bodies freed", time.Minute, func(v float64) bool { return v == 0 }, "jobwatch_request_bodies_reading")
	after, rssAfter := heapAndGoroutines(), rssKiB()
	afterP99 := p99()
	t.Logf("%d header-only streams sent on %d connections, %v still awaited when measured, %v connections closed for holding the oldest, peak RSS %d MiB: RSS %d → %d → %d MiB, heap %d → %d → %d KiB, goroutines %d → %d → %d; "+
		"GetJob p99 %v before, %v during, %v after",
		opened, conns, held, ts.metric("jobwatch_connections_closed_pending_bodies_total"), peakRSSKiB()>>10, rssBefore>>10, rssDuring>>10, rssAfter>>10, before.heap>>10, during.heap>>10, after.heap>>10,
		before.goroutines, during.goroutines, after.goroutines, quiet, duringP99, afterP99)
}

// When every place is held by a client that has spoken and none is idle
// (parked calls), a newcomer is accepted and closed at once, counted and
// warned about, and the busy connections keep their calls.
func TestWhenEveryPlaceIsBusyANewcomerIsClosedAtOnce(t *testing.T) {
	const places = 3
	ts := startServer(t, serverOptions{config: server.Config{
		MaxConnections: places, MaxNewConnections: 1, WaitCap: time.Hour, FirstRequestTimeout: time.Minute,
	}})
	job := submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "k"})
	answers := make(chan error, places)
	for i := range places {
		c := ts.clients(ts.http1Client()) // a connection of its own
		go func() {
			_, err := c.jobs.WaitJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			answers <- err
		}()
		ts.waitForGauge("jobwatch_parked_calls", float64(i+1)) // one at a time: each speaks before the next connects
	}
	ts.waitForGauge("jobwatch_connections", places)
	conn, err := net.Dial("tcp", addrOf(ts.url))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitClosed(t, conn, 10*time.Second, "a newcomer while every place is busy")
	if got := ts.metric("jobwatch_connections_refused_total"); got != 1 {
		t.Errorf("jobwatch_connections_refused_total = %v, want 1", got)
	}
	if !strings.Contains(ts.logs.String(), "connection limit reached") {
		t.Errorf("no warning about the connection limit in the log")
	}
	if _, err := ts.engine.Cancel(context.Background(), job.GetId()); err != nil {
		t.Fatal(err)
	}
	for range places {
		if err := <-answers; err != nil {
			t.Errorf("a parked wait at the connection limit: %v, want its answer", err)
		}
	}
}

// measureSilentEnv names how long, in seconds,
// TestMeasureSilentConnectionFlood floods; unset, it does not run.
const measureSilentEnv = "JOBWATCH_MEASURE_SILENT_FLOOD"

// measureSilentRateEnv sets how many silent connections a second the
// flood dials; unset, 2,000 (the probe's).
const measureSilentRateEnv = "JOBWATCH_MEASURE_SILENT_RATE"

// TestMeasureSilentConnectionFlood is the probe's lockout case: clients
// that dial and say nothing, redialling 2,000 a second and holding each
// for 1.5 s (three times the limit in all), against a
// server at --max-connections 2000, while a probe opens a new connection
// for one GetJob every 50 ms and a client idle between calls calls every
// 500 ms. It logs how many probes and idle-client calls failed and the
// probes' p99:
//
//	JOBWATCH_MEASURE_SILENT_FLOOD=20 go test ./server -run TestMeasureSilentConnectionFlood -v
func TestMeasureSilentConnectionFlood(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv(measureSilentEnv))
	if secs <= 0 {
		t.Skipf("set %s to the seconds to flood", measureSilentEnv)
	}
	rate := 2000
	if v, err := strconv.Atoi(os.Getenv(measureSilentRateEnv)); err == nil && v > 0 {
		rate = v
	}
	const maxConns = 2000
	ts := startServer(t, serverOptions{config: server.Config{MaxConnections: maxConns}})
	job := submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "k"})
	idle := ts.clients(ts.http1Client())
	if _, err := idle.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer stop()
	var dialed atomic.Int64
	var flood sync.WaitGroup
	for range 8 {
		flood.Go(func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			pace := time.NewTicker(8 * time.Second / time.Duration(rate))
			defer pace.Stop()
			for ctx.Err() == nil {
				<-pace.C
				c, err := net.Dial("tcp", addrOf(ts.url))
				if err != nil {
					continue
				}
				dialed.Add(1)
				held = append(held, c)
				if len(held) >= 3*maxConns/8 { // each held 1.5 s, three times the limit in all
					held[0].Close()
					held = held[1:]
				}
			}
		})
	}
	var probes, probeFails, idleCalls, idleFails int
	var took []time.Duration
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		<-tick.C
		probe := ts.clients(ts.http1Client())
		start := time.Now()
		_, err := probe.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
		took = append(took, time.Since(start))
		probes++
		if err != nil {
			probeFails++
		}
		if i%10 == 0 {
			idleCalls++
			if _, err := idle.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
				idleFails++
			}
		}
	}
	flood.Wait()
	t.Logf("%v of silent connections, %d dialled (%.0f/s), --max-connections %d: %d of %d probes on new connections failed (p99 %v), "+
		"%d of %d calls of a client idle between calls failed; silent connections closed for newer ones %v, at the first-request timeout %v, refused %v",
		time.Duration(secs)*time.Second, dialed.Load(), float64(dialed.Load())/float64(secs), maxConns, probeFails, probes, percentile(took, 99),
		idleFails, idleCalls, ts.metric("jobwatch_connections_new_closed_total"), ts.metric("jobwatch_connections_first_request_timeouts_total"),
		ts.metric("jobwatch_connections_refused_total"))
	if probeFails > 0 || idleFails > 0 {
		t.Errorf("calls failed during the flood")
	}
}
