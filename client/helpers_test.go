package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// testServer is a real jobwatch server on a loopback port over a real
// SQLite file: what a client meets in production, minus the network.
type testServer struct {
	URL      string
	Addr     string
	DB       string
	Engine   *jobs.Engine
	registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

type serverOptions struct {
	db     string // "": a fresh file
	addr   string // "": any free port
	engine jobs.Config
	server server.Config
}

func startServer(t testing.TB, o serverOptions) *testServer {
	t.Helper()
	if o.db == "" {
		o.db = testdb.New(t)
	}
	s, err := launch(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// launch starts a server; o.db must be set. Stop it with Stop.
func launch(o serverOptions) (*testServer, error) {
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
	}
	st, err := testdb.Open(o.db)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	metrics := server.NewMetrics()
	ecfg := o.engine
	ecfg.Logger, ecfg.Metrics = log, metrics
	if ecfg.SweepInterval == 0 {
		ecfg.SweepInterval = 20 * time.Millisecond
	}
	engine := jobs.New(st, ecfg)
	reg := prometheus.NewRegistry()
	scfg := o.server
	scfg.Logger, scfg.Metrics, scfg.Registry = log, metrics, reg
	if scfg.ShutdownGrace == 0 {
		scfg.ShutdownGrace = 100 * time.Millisecond
	}
	srv := server.New(engine, scfg)

	var ln net.Listener
	// The address may still be held for a moment by the server that used
	// it before a restart.
	for deadline := time.Now().Add(5 * time.Second); ; {
		ln, err = net.Listen("tcp", o.addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{
		URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), DB: o.db,
		Engine: engine, registry: reg, cancel: cancel, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		engineCtx, stopEngine := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { _ = engine.Run(engineCtx); close(ran) }()
		_ = srv.Serve(ctx, ln)
		stopEngine()
		<-ran
		st.Close()
	}()
	return s, nil
}

// Stop shuts the server down as SIGTERM would and waits until it has.
func (s *testServer) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.done
	})
}

// gauge reads one of the server's gauges, such as jobwatch_parked_waits.
func (s *testServer) gauge(name string) float64 {
	mfs, _ := s.registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// counter reads one of the server's counters, summed over its labels.
func (s *testServer) counter(name string) float64 {
	mfs, _ := s.registry.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// roundTripFunc is an http.RoundTripper of one function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// eventually polls cond until it holds or a generous deadline passes.
// Tests use it only to wait for the server to reach a state (parked
// calls) that has no event to wait on.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func submit(t testing.TB, c *client.Client, kind string) *jobwatchv1.Job {
	t.Helper()
	j, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: kind})
	if err != nil {
		t.Fatalf("submit %s: %v", kind, err)
	}
	return j
}

// claim takes the next job of kind from the engine directly, as a worker
// in the server's process would.
func claim(t testing.TB, e *jobs.Engine, kind string) (id, lease string) {
	t.Helper()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "test", Kinds: []string{kind}},
		time.Now().Add(5*time.Second))
	if err != nil {
		t.Errorf("claim %s: %v", kind, err) // Errorf: called from goroutines too
	}
	return j.ID, j.LeaseID
}

func complete(t testing.TB, e *jobs.Engine, id, lease, result string) {
	t.Helper()
	if _, err := e.Complete(context.Background(), id, lease, []byte(result)); err != nil {
		t.Errorf("complete %s: %v", id, err)
	}
}

// proxy is a TCP proxy that a test can cut: Drop closes every connection
// through it at once, as a load balancer restart or a NAT timeout would,
// and keeps accepting new ones.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	drops  int
	// frozen is the generation up to which connections forward nothing:
	// Freeze makes every open connection a silent black hole.
	gen, frozen atomic.Int64
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.Drop() })
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		gen := p.gen.Add(1)
		pipe := func(dst, src net.Conn) {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 && gen > p.frozen.Load() {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			dst.Close()
			src.Close()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// Freeze makes every connection open now swallow what it is sent, in both
// directions, without closing: a peer that died without a word (a pulled
// cable, a crashed host behind NAT). New connections work as before.
func (p *proxy) Freeze() { p.frozen.Store(p.gen.Load()) }

// Drop closes every connection through the proxy.
func (p *proxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
	p.drops++
}

// fastClient is a client whose retries are quick enough for tests. It is
// closed before the server stops (cleanups run last-in first-out), since
// the server's graceful shutdown waits for open client connections.
func fastClient(t testing.TB, url string, opts ...client.Option) *client.Client {
	opts = append([]client.Option{client.WithBackoff(5*time.Millisecond, 50*time.Millisecond)}, opts...)
	c := client.New(url, opts...)
	t.Cleanup(c.Close)
	return c
}
