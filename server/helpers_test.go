package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// testServer is a real server on a loopback port over a real SQLite file.
type testServer struct {
	t        testing.TB
	url      string
	dbPath   string
	engine   *jobs.Engine
	registry *prometheus.Registry
	logs     *syncBuffer
	cancel   context.CancelFunc
	served   chan error
	stopOnce sync.Once
	stopErr  error
	srv      *server.Server

	mu         sync.Mutex
	transports []*http.Transport
}

// serverOptions adjust a test server; the zero value is the defaults with
// a fresh database file.
type serverOptions struct {
	dbPath string // "": a new database of the backend under test (testdb)
	config server.Config
	// engine configures the engine; its Logger, Metrics and Now are set
	// from the test server's.
	engine jobs.Config
	// wrapStore lets a test inject faults around the real store.
	wrapStore func(store.Store) store.Store
	// now is the engine's clock; nil is the real one.
	now func() time.Time
	// storeConfig tunes the SQLite store; its Logger defaults to the
	// server's.
	storeConfig sqlite.Config
}

func startServer(t testing.TB, o serverOptions) *testServer {
	t.Helper()
	if o.dbPath == "" && o.storeConfig != (sqlite.Config{}) {
		o.dbPath = filepath.Join(t.TempDir(), "jobwatch.db") // a test of SQLite itself
	}
	if o.dbPath == "" {
		o.dbPath = testdb.New(t)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.storeConfig.Logger == nil {
		o.storeConfig.Logger = log
	}
	var st store.Store
	var err error
	if testdb.IsSQLite(o.dbPath) {
		st, err = sqlite.OpenWith(o.dbPath, o.storeConfig)
	} else {
		st, err = testdb.Open(o.dbPath)
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	base := st
	if o.wrapStore != nil {
		st = o.wrapStore(st)
	}
	metrics := server.NewMetrics()
	ecfg := o.engine
	ecfg.Logger, ecfg.Metrics, ecfg.Now = log, metrics, o.now
	engine := jobs.New(st, ecfg)
	cfg := o.config
	cfg.Logger = log
	cfg.Metrics = metrics
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	srv := server.New(engine, cfg)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{
		t:        t,
		url:      "http://" + ln.Addr().String(),
		dbPath:   o.dbPath,
		engine:   engine,
		registry: cfg.Registry,
		logs:     logs,
		cancel:   cancel,
		served:   make(chan error, 1),
		srv:      srv,
	}
	go func() { ts.served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		if err := ts.stop(); err != nil {
			t.Errorf("serve: %v", err)
		}
		base.Close()
	})
	return ts
}

// stop shuts the server down as SIGTERM would and returns Serve's error.
func (ts *testServer) stop() error {
	ts.stopOnce.Do(func() {
		// Idle client connections would hold HTTP/2 graceful shutdown for
		// its one-second GOAWAY grace; real clients just go away.
		ts.mu.Lock()
		for _, tr := range ts.transports {
			tr.CloseIdleConnections()
		}
		ts.mu.Unlock()
		ts.cancel()
		select {
		case ts.stopErr = <-ts.served:
		case <-time.After(15 * time.Second):
			ts.stopErr = errors.New("Serve did not return after shutdown")
		}
	})
	return ts.stopErr
}

// gauge reads a metric's current value straight from the registry.
func (ts *testServer) gauge(name string) float64 {
	ts.t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		ts.t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// waitForGauge waits until the gauge reaches want: how a test knows that
// calls are really parked before it acts.
func (ts *testServer) waitForGauge(name string, want float64) {
	ts.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for ts.gauge(name) != want {
		if time.Now().After(deadline) {
			ts.t.Fatalf("%s = %v, want %v", name, ts.gauge(name), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitUntil waits until cond holds, for what: how a test knows that
// calls have reached the point it acts on. The bound is generous: it is
// reached only when something is wrong.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// h2cClient speaks only HTTP/2 without TLS, like Go and gRPC clients.
func (ts *testServer) h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return ts.httpClient(&p)
}

// http1Client speaks only HTTP/1.1, like a browser or curl.
func (ts *testServer) http1Client() *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	return ts.httpClient(&p)
}

func (ts *testServer) httpClient(p *http.Protocols) *http.Client {
	tr := &http.Transport{Protocols: p}
	ts.mu.Lock()
	ts.transports = append(ts.transports, tr)
	ts.mu.Unlock()
	return &http.Client{Transport: tr}
}

type clients struct {
	jobs    jobwatchv1connect.JobServiceClient
	workers jobwatchv1connect.WorkerServiceClient
	queues  jobwatchv1connect.QueueServiceClient
}

func (ts *testServer) clients(hc *http.Client, opts ...connect.ClientOption) clients {
	return clients{
		jobs:    jobwatchv1connect.NewJobServiceClient(hc, ts.url, opts...),
		workers: jobwatchv1connect.NewWorkerServiceClient(hc, ts.url, opts...),
		queues:  jobwatchv1connect.NewQueueServiceClient(hc, ts.url, opts...),
	}
}

// h2c returns Connect clients over h2c, the usual Go client setup.
func (ts *testServer) h2c() clients { return ts.clients(ts.h2cClient()) }

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// callBound bounds the calls of the helpers below from above only: a
// store write on a machine running two race-enabled suites beside a
// PostgreSQL server can take seconds, and a bound that short fails a
// test that is right.
const callBound = 30 * time.Second

func submit(t testing.TB, c clients, req *jobwatchv1.SubmitJobRequest) *jobwatchv1.Job {
	t.Helper()
	resp, err := c.jobs.SubmitJob(ctxTimeout(t, callBound), req)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return resp.GetJob()
}

// claim claims the only ready job of kind.
func claim(t *testing.T, c clients, kind string) *jobwatchv1.ClaimJobResponse {
	t.Helper()
	resp, err := c.workers.ClaimJob(ctxTimeout(t, callBound), &jobwatchv1.ClaimJobRequest{
		WorkerId: "worker-1", Kinds: []string{kind},
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if resp.GetJob() == nil {
		t.Fatalf("claim of %q found no job", kind)
	}
	return resp
}

func complete(t *testing.T, c clients, lease *jobwatchv1.ClaimJobResponse, result *structpb.Value) *jobwatchv1.Job {
	t.Helper()
	resp, err := c.workers.CompleteJob(ctxTimeout(t, callBound), &jobwatchv1.CompleteJobRequest{
		JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(), Result: result,
	})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return resp.GetJob()
}

// finishedJob submits a job, claims it and completes it with result.
func finishedJob(t *testing.T, c clients, kind string, result *structpb.Value) *jobwatchv1.Job {
	t.Helper()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind})
	return complete(t, c, claim(t, c, kind), result)
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	pv, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return pv
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if got := connect.CodeOf(err); err == nil || got != code {
		t.Fatalf("error = %v (code %v), want code %v", err, got, code)
	}
}

// syncBuffer collects logs written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rawPost sends body to path the way curl would, over HTTP/1.1, and
// returns the status and body.
func rawPost(t *testing.T, url, contentType string, body []byte, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true // one request per connection, like curl
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}
