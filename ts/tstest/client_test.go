package tstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/internal/ci"
	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

// TestMain stops the throwaway PostgreSQL cluster the test may have
// started (internal/pgtest) when it runs on PostgreSQL without one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// The server's caps, short so the TypeScript tests see several of each
// in a few seconds: a wait re-issued at its cap, a watch resumed at its
// stream's lifetime, a job kept past its lease by heartbeats, a stream
// kept alive by keepalives.
const (
	waitCap        = 250 * time.Millisecond
	streamLifetime = time.Second
	leaseTimeout   = 3 * time.Second
	keepalive      = 200 * time.Millisecond
)

// The tokens the TypeScript tests use, and what the server's tokens file
// says of each.
var tokens = []struct{ env, token, entry string }{
	{"JOBWATCH_CLIENT_TOKEN", "ts-client-token", "role: client\n    tenant: ts"},
	{"JOBWATCH_WORKER_TOKEN", "ts-worker-token", "role: worker"},
	{"JOBWATCH_NARROW_WORKER_TOKEN", "ts-narrow-worker-token", "role: worker\n    kinds: [ts.narrow]"},
	{"JOBWATCH_QUOTA_TOKEN", "ts-quota-token", "role: client\n    tenant: ts-quota"},
}

// quotaTenant is the tenant of JOBWATCH_QUOTA_TOKEN, whose max_queued is
// one job.
const quotaTenant = "ts-quota"

// TestTypeScriptClientAndWorker builds ts/client (tsc) and runs its tests
// (node --test: the client, the worker and the example worker) against a
// server started here with tokens and short caps, and a second one like
// it that traces its calls (JOBWATCH_TRACED_URL), whose jobs carry the
// trace context of the call that submitted them, and a third that parks
// one call at most, for a minute (JOBWATCH_FULL_URL), whose other waits
// are answered at once as full (Jobwatch-Parked-Calls: full).
func TestTypeScriptClientAndWorker(t *testing.T) {
	npm := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	build := exec.CommandContext(ctx, npm, "run", "--silent", "build")
	build.Dir = clientDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("npm run build in ts/client: %v\n%s", err, out)
	}

	addr := startServer(t, nil, nil)
	// The traced server records spans and exports none: the TypeScript
	// tests look at the worker's spans, in their own process; what they
	// need of the server is the traceparent it keeps with a job submitted
	// in a trace.
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracedAddr := startServer(t, tp, nil)
	fullAddr := startServer(t, nil, func(c *server.Config) {
		c.MaxParkedCalls = 1
		c.WaitCap = time.Minute
	})
	env := append(os.Environ(),
		"JOBWATCH_URL=http://"+addr,
		"JOBWATCH_TRACED_URL=http://"+tracedAddr,
		"JOBWATCH_FULL_URL=http://"+fullAddr,
		"JOBWATCH_WAIT_CAP_MS="+strconv.FormatInt(waitCap.Milliseconds(), 10),
		"JOBWATCH_STREAM_LIFETIME_MS="+strconv.FormatInt(streamLifetime.Milliseconds(), 10),
		"JOBWATCH_LEASE_MS="+strconv.FormatInt(leaseTimeout.Milliseconds(), 10),
		"JOBWATCH_KEEPALIVE_MS="+strconv.FormatInt(keepalive.Milliseconds(), 10),
	)
	for _, tk := range tokens {
		env = append(env, tk.env+"="+tk.token)
	}

	// Each file is a subtest of its own: node --test runs it in a process
	// of its own, and one that hangs is killed with every process it
	// started.
	files, err := filepath.Glob(filepath.Join(clientDir, "dist", "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no TypeScript tests in ts/client/dist/test (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".test.js"), func(t *testing.T) {
			runCtx, cancelRun := context.WithTimeout(ctx, 3*time.Minute)
			defer cancelRun()
			cmd := exec.CommandContext(runCtx, "node", "--test", "--test-reporter=spec", filepath.Join("dist", "test", filepath.Base(file)))
			cmd.Dir = clientDir
			cmd.Env = env
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Logf("node --test %s:\n%s", filepath.Base(file), &out)
			if err != nil {
				t.Fatalf("the TypeScript tests failed: %v (their output is above)", err)
			}
		})
	}
}

// clientDir is the TypeScript package, from this package's directory.
var clientDir = filepath.Join("..", "client")

// requireNode skips where Node or ts/client/node_modules is missing,
// except in CI, which installs both (npm ci in ts/client) and must run
// the tests.
func requireNode(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(clientDir, "node_modules", ".bin", "tsc"))
	}
	ci.Require(t, err, "the TypeScript tests need node, npm and ts/client/node_modules (npm ci in ts/client)")
	return npm
}

// startServer starts a jobwatch server over HTTP on a free loopback port,
// with the engine's sweeps running (so an expired lease is noticed), and
// returns its address; with tp, it traces its calls, and with tweak, it
// has tweak's changes to its configuration. It is shut down, as SIGTERM
// would, when t ends.
func startServer(t *testing.T, tp trace.TracerProvider, tweak func(*server.Config)) string {
	t.Helper()
	st, err := testdb.Open(testdb.New(t))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	engine := jobs.New(st, jobs.Config{
		Logger:              logger,
		LeaseTimeout:        leaseTimeout,
		SweepInterval:       100 * time.Millisecond,
		RetryInitialBackoff: 10 * time.Millisecond,
		RetryMaxBackoff:     50 * time.Millisecond,
		Rules:               jobtype.Rules{Tenants: map[string]jobtype.TenantRules{quotaTenant: {MaxQueued: 1}}},
	})
	var file bytes.Buffer
	file.WriteString("tokens:\n")
	for _, tk := range tokens {
		fmt.Fprintf(&file, "  - sha256: %s\n    %s\n", auth.Digest(tk.token), tk.entry)
	}
	toks, err := auth.ParseTokens("tokens.yaml", file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{
		Logger:         logger,
		Tokens:         toks,
		WaitCap:        waitCap,
		StreamLifetime: streamLifetime,
		Keepalive:      keepalive,
		ClaimCap:       5 * time.Second,
		// Short, so the test never waits on a parked call at shutdown.
		ShutdownGrace:  2 * time.Second,
		TracerProvider: tp,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv := server.New(engine, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	served := make(chan error, 1)
	go func() { swept <- engine.Run(ctx) }()
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if err := <-swept; err != nil {
			t.Errorf("engine: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return ln.Addr().String()
}
