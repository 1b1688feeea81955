package server_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// newRunEngine is an engine over a fresh database whose duties, when
// run, expire a silent lease within a fraction of a second.
func newRunEngine(t *testing.T) *jobs.Engine {
	t.Helper()
	st := testdb.OpenT(t, testdb.New(t))
	e := jobs.New(st, jobs.Config{
		LeaseTimeout:  300 * time.Millisecond,
		SweepInterval: 10 * time.Millisecond,
		Logger:        slog.New(slog.DiscardHandler),
	})
	t.Cleanup(e.Shutdown)
	return e
}

func quietConfig(cfg server.Config) server.Config {
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Registry = prometheus.NewRegistry()
	cfg.ShutdownGrace = 2 * time.Second
	return cfg
}

// An embedder who forgets to say anything gets the safe server: with
// server.Config{} (no tokens, not insecure), Serve and Run refuse a
// listener on every interface, say what to do, and close it; neither
// answers a call.
func TestTheZeroConfigRefusesToListenBeyondLoopbackWithoutTokens(t *testing.T) {
	for _, run := range []struct {
		name string
		call func(*server.Server, context.Context, net.Listener) error
	}{
		{"Serve", (*server.Server).Serve},
		{"Run", (*server.Server).Run},
	} {
		t.Run(run.name, func(t *testing.T) {
			srv := server.New(newRunEngine(t), quietConfig(server.Config{}))
			ln, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Skipf("cannot listen on every interface here: %v", err)
			}
			returned := make(chan error, 1)
			go func() { returned <- run.call(srv, context.Background(), ln) }()
			select {
			case err = <-returned:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s on %s without tokens is serving; want it refused", run.name, ln.Addr())
			}
			if !errors.Is(err, server.ErrNoAuthBeyondLoopback) {
				t.Fatalf("%s: %v; want an error wrapping ErrNoAuthBeyondLoopback", run.name, err)
			}
			for _, want := range []string{"Tokens", "127.0.0.1", "Insecure", "--insecure", ln.Addr().String()} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
				c.Close()
				t.Errorf("the refused listener still accepts connections")
			}
		})
	}
}

// With tokens, or with Insecure said out loud, the same listener serves.
func TestTokensOrInsecureLetTheServerListenBeyondLoopback(t *testing.T) {
	tokens, err := auth.ParseTokens("tokens.yaml", []byte("tokens:\n  - {sha256: "+auth.Digest("admin-token")+", role: admin}\n"))
	if err != nil {
		t.Fatalf("tokens: %v", err)
	}
	for name, cfg := range map[string]server.Config{
		"tokens":   {Tokens: tokens},
		"insecure": {Insecure: true, AnyHost: true},
	} {
		t.Run(name, func(t *testing.T) {
			srv := server.New(newRunEngine(t), quietConfig(cfg))
			ln, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Skipf("cannot listen on every interface here: %v", err)
			}
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan error, 1)
			go func() { returned <- srv.Run(ctx, ln) }()
			c := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, "http://127.0.0.1:"+port)
			if _, err := c.GetServerInfo(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
				t.Errorf("GetServerInfo: %v", err)
			}
			cancel()
			if err := <-returned; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// Run starts the engine's duties with the server (a silent worker's
// lease expires while it serves), and on shutdown answers a parked wait
// at once, OK with the job as it is, returns nil, and leaves the engine
// shut down: a later wait does not park.
func TestRunRunsTheEngineWhileItServesAndShutsBothDown(t *testing.T) {
	e := newRunEngine(t)
	cfg := quietConfig(server.Config{})
	srv := server.New(e, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- srv.Run(ctx, ln) }()
	c := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, "http://"+ln.Addr().String())

	// A claimed job whose worker never heartbeats: only the engine's
	// duties can end it.
	silent, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "gone", Kinds: []string{"silent"}}, 1, time.Now().Add(10*time.Second)); err != nil {
		t.Fatalf("claim: %v", err)
	}
	waited, err := c.WaitJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.WaitJobRequest{JobId: silent.ID})
	if err != nil || waited.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_LOST {
		t.Fatalf("WaitJob on a job whose lease runs out: %v %v; want LOST (the duties run)", waited.GetJob().GetState(), err)
	}

	queued, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "nobody-runs-it"})
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		state jobwatchv1.JobState
		err   error
	}
	parked := make(chan outcome, 1)
	go func() {
		r, err := c.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: queued.ID})
		parked <- outcome{r.GetJob().GetState(), err}
	}()
	(&testServer{t: t, registry: cfg.Registry}).waitForGauge("jobwatch_parked_calls", 1)
	start := time.Now()
	cancel()
	select {
	case got := <-parked:
		if got.err != nil || got.state != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Errorf("the parked wait at shutdown: %v %v; want OK with QUEUED", got.state, got.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parked wait did not answer at shutdown")
	}
	if err := <-returned; err != nil {
		t.Errorf("Run: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown took %v with one parked wait; want it at once", d)
	}
	later := make(chan error, 1)
	go func() {
		_, err := e.Wait(context.Background(), queued.ID, time.Now().Add(time.Hour))
		later <- err
	}()
	select {
	case err := <-later:
		if err != nil {
			t.Errorf("a wait after Run returned: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a wait after Run returned parks: the engine was not shut down")
	}
}
