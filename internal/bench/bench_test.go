package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/client"
	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// TestBenchMeasuresEveryFigure runs a tiny bench of every scenario, with
// a jobwatch built from this checkout as the jobwatch and the floor
// (--before runs the same code with another binary: left out to keep the
// test short), and checks that the JSON holds every figure for every
// server, each a finite number, positive where a measurement must be.
// The numbers themselves are the machine's and are not judged.
func TestBenchMeasuresEveryFigure(t *testing.T) {
	defer func(seconds, stalled int) { logsSeconds, logsStalled = seconds, stalled }(logsSeconds, logsStalled)
	logsSeconds, logsStalled = 1, 10_000
	var out, errOut bytes.Buffer
	args := []string{"--json", "--binary", jobwatchBinary(t),
		"--workers", "2", "--submitters", "1", "--inproc-workers", "2", "--inproc-submitters", "1", "--duration", "300ms", "--warmup", "100ms",
		"--fanout", "5,20", "--parked", "10,20", "--conns", "3", "--probes", "3", "--short-calls", "10",
		"--idle", "100ms", "--settle", "50ms", "--jobs", "3"}
	if err := Run(context.Background(), args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if want := []string{"floor", "jobwatch"}; !slices.Equal(res.Servers, want) {
		t.Fatalf("servers = %q, want %q", res.Servers, want)
	}
	// Every figure by its JSON name, read generically so a field the
	// struct gained but a scenario forgot to fill shows up as missing.
	var raw struct {
		Results map[string]map[string]any `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	// Differences between two readings of the clock (a caller's answer
	// less the worker's reply) may be negative, and so may RSS per call
	// with ten calls parked (the runtime may return memory in between);
	// everything else is positive, or at least zero for CPU.
	signed := regexp.MustCompile(`^wake_|_behind_reply_|^rss_per_call_kib$`)
	nonNegative := regexp.MustCompile(`^idle_cpu_pct$`)
	check := func(where string, m map[string]any, keys ...string) {
		t.Helper()
		for _, k := range keys {
			v, ok := m[k].(float64)
			switch {
			case !ok:
				t.Errorf("%s: no figure %s in %v", where, k, m)
			case math.IsNaN(v) || math.IsInf(v, 0):
				t.Errorf("%s: %s = %v", where, k, v)
			case signed.MatchString(k):
			case nonNegative.MatchString(k) && v < 0, !nonNegative.MatchString(k) && v <= 0:
				t.Errorf("%s: %s = %v, want it positive", where, k, v)
			}
		}
	}
	stageKeys := []string{"rss_kib", "goroutines", "short_call_p50_ms", "short_call_p99_ms", "idle_cpu_pct",
		"wake_p50_ms", "wake_p99_ms", "complete_call_p50_ms"}
	for _, name := range res.Servers {
		r := raw.Results[name]
		check(name, r, "throughput_rpc_per_s")
		if name == "jobwatch" {
			check(name, r, "throughput_inproc_per_s")
			logs, _ := r["logs"].(map[string]any)
			// A watcher may have a line before its append's reply: 0 ms.
			check(name+" logs", logs, "watchers", "lines", "append_reply_p50_ms", "backlog_ms",
				"stalled_rss_before_mib", "stalled_rss_tenth_mib", "stalled_rss_after_mib")
			if p50, p99 := logs["behind_append_p50_ms"], logs["behind_append_p99_ms"]; p50 == nil || p99 == nil || p99.(float64) < p50.(float64) {
				t.Errorf("logs: behind p50 %v, p99 %v; want both, p99 at least p50", p50, p99)
			}
		}
		fanout, _ := r["fanout"].([]any)
		if len(fanout) != 2 {
			t.Errorf("%s: fanout = %v, want N = 5 and 20", name, r["fanout"])
		}
		for _, f := range fanout {
			check(name+" fanout", f.(map[string]any), "n", "wait_last_answer_ms", "watch_last_answer_ms")
		}
		parked, _ := r["parked"].([]any)
		if len(parked) != 3 {
			t.Errorf("%s: parked = %v, want N = 0, 10 and 20", name, r["parked"])
		}
		for i, p := range parked {
			p := p.(map[string]any)
			for _, kind := range []string{"waits", "watches"} {
				where := fmt.Sprintf("%s parked %v %s", name, p["n"], kind)
				st, _ := p[kind].(map[string]any)
				check(where, st, stageKeys...)
				if i > 0 { // per call: against the baseline, so from N = 10 on
					// A parked call holds at least its handler's goroutine.
					check(where, st, "rss_per_call_kib", "goroutines_per_call")
				}
			}
		}
		wakeup, _ := r["wakeup"].(map[string]any)
		check(name+" wakeup", wakeup, "jobs", "complete_reply_p50_ms", "wait_behind_reply_p50_ms", "wait_behind_reply_p99_ms",
			"watch_behind_reply_p50_ms", "watch_behind_reply_p99_ms", "poll_behind_reply_p50_ms", "poll_behind_reply_p99_ms")
	}

	// The table shows the same figures: a row for each, a number in every
	// column but the in-process throughput's and the logs', which are
	// jobwatch's alone.
	var table bytes.Buffer
	if err := res.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if want := len(res.rows()) + 1; len(lines) != want {
		t.Errorf("table has %d lines, want %d (a header and a row per figure):\n%s", len(lines), want, &table)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		cells := f[len(f)-len(res.Servers):]
		dashes := slices.Index(cells, "-") >= 0
		jobwatchOnly := strings.HasPrefix(line, "jobs/s in process") || strings.HasPrefix(line, "logs")
		if dashes != jobwatchOnly {
			t.Errorf("row %q: a column without a figure", line)
		}
	}
}

// usageError is the command line's usage error in these tests: what
// CLI.UsageError makes of a message.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// refusal runs the bench with args and returns its error, which must be
// the CLI's usage error.
func refusal(t *testing.T, args ...string) string {
	t.Helper()
	cli := CLI{UsageError: func(msg string) error { return usageError{msg} }}
	err := Run(context.Background(), args, io.Discard, io.Discard, cli)
	if !errors.As(err, new(usageError)) {
		t.Fatalf("bench %q = %v, want a usage error", args, err)
	}
	return err.Error()
}

// TestBenchRefusesAnUnknownScenario: a typo is a usage error, not a run
// of nothing.
func TestBenchRefusesAnUnknownScenario(t *testing.T) {
	if msg := refusal(t, "--scenarios", "fanout,parkd"); !strings.Contains(msg, `"parkd"`) {
		t.Errorf("the error does not name the unknown scenario: %s", msg)
	}
}

// TestBenchRefusesARunOfNothing: no scenario, or a burn-down on
// PostgreSQL alone without a --postgres to run it on, is a usage error,
// not a table of nothing and exit 0.
func TestBenchRefusesARunOfNothing(t *testing.T) {
	for _, args := range [][]string{{"--scenarios", ""}, {"--scenarios", ","}, {"--scenarios", "burndown", "--burndown-stores", "postgres"}} {
		if msg := refusal(t, args...); !strings.Contains(msg, "no scenario") && !strings.Contains(msg, "needs --postgres") {
			t.Errorf("bench %q: %s; want it to say what is missing", args, msg)
		}
	}
}

// TestBenchFindsWhatWouldFailBeforeMeasuring: a --json-file it cannot
// write, a --before that is no program or a --postgres it cannot reach
// stops the bench at once, before
// minutes of figures it would then lose.
func TestBenchFindsWhatWouldFailBeforeMeasuring(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenarios", "parked", "--json-file", filepath.Join(t.TempDir(), "no", "such", "x.json")}, "--json-file"},
		{[]string{"--scenarios", "parked", "--before", filepath.Join(t.TempDir(), "jobwatch")}, "--before"},
		{[]string{"--scenarios", "parked", "--postgres", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"}, "--postgres"},
	} {
		began := time.Now()
		err := Run(context.Background(), tt.args, io.Discard, io.Discard, CLI{})
		if err == nil || !strings.Contains(err.Error(), tt.want) || time.Since(began) > 10*time.Second {
			t.Errorf("bench %q = %v after %v; want a refusal naming %s at once", tt.args, err, time.Since(began), tt.want)
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
		res, err := benchOne(context.Background(), c, c, 10*time.Millisecond)
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

// TestBenchMeasuresJobwatchOnPostgreSQL: with --postgres, throughput-rpc
// and wakeup also measure jobwatch on PostgreSQL with one replica and
// with several, and the table shows those rows in the jobwatch column
// beside its SQLite figures. The bench works in schemas of its own and
// drops them: a table of the database's own schema is still there, and
// no schema of the bench is left.
func TestBenchMeasuresJobwatchOnPostgreSQL(t *testing.T) {
	dbURL := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE users_own (v text); INSERT INTO users_own VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}

	// Other runs of this test may share the database: only this run's
	// schemas are looked for afterwards.
	prefix := fmt.Sprintf("jobwatch_bench_t%d_", time.Now().UnixNano())
	defer func(p string) { benchSchemaPrefix = p }(benchSchemaPrefix)
	benchSchemaPrefix = prefix
	var out, errOut bytes.Buffer
	// A pool setting in the URL is for the pools of serve, not a
	// parameter the bench may send to the server.
	args := []string{"--json", "--binary", jobwatchBinary(t), "--scenarios", "throughput-rpc,wakeup", "--postgres", dbURL + "&pool_max_conns=8",
		"--workers", "3", "--submitters", "1", "--duration", "300ms", "--warmup", "100ms", "--jobs", "3"}
	if err := Run(ctx, args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if res.Results["floor"].Postgres != nil {
		t.Errorf("the floor has PostgreSQL figures: %+v", res.Results["floor"].Postgres)
	}
	pg := res.Results["jobwatch"].Postgres
	if pg == nil {
		t.Fatalf("jobwatch has no PostgreSQL figures:\n%s", &out)
	}
	for name, v := range map[string]*float64{"1 replica": pg.ThroughputRPC1PerS, "3 replicas": pg.ThroughputRPCNPerS} {
		if v == nil || !(*v > 0) || math.IsInf(*v, 0) {
			t.Errorf("jobs/s on PostgreSQL, %s = %v, want a positive figure", name, v)
		}
	}
	for name, w := range map[string]*wakeupFigures{"1 replica": pg.Wakeup, "across replicas": pg.WakeupCross} {
		if w == nil || w.Jobs != 3 || !(w.ReplyP50MS > 0) {
			t.Errorf("wakeup on PostgreSQL, %s = %+v, want 3 jobs and their figures", name, w)
		}
	}

	var table bytes.Buffer
	if err := res.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	var pgRows int
	for line := range strings.Lines(table.String()) {
		if !strings.Contains(line, "PostgreSQL") {
			continue
		}
		pgRows++
		f := strings.Fields(line)
		if floor, jw := f[len(f)-2], f[len(f)-1]; floor != "-" || jw == "-" {
			t.Errorf("row %q: want a figure for jobwatch only", line)
		}
	}
	if want := 2 + 2*6; pgRows != want {
		t.Errorf("the table has %d PostgreSQL rows, want %d:\n%s", pgRows, want, &table)
	}

	var kept string
	if err := conn.QueryRow(ctx, "SELECT v FROM users_own").Scan(&kept); err != nil || kept != "kept" {
		t.Errorf("the database's own table after the bench: %q, %v", kept, err)
	}
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", prefix).Scan(&left); err != nil || left != 0 {
		t.Errorf("schemas of the bench left behind: %d, %v", left, err)
	}
}

// TestBenchRefusesAPostgreSQLDSN: --postgres must be a URL, to which the
// bench adds its own schema.
func TestBenchRefusesAPostgreSQLDSN(t *testing.T) {
	if msg := refusal(t, "--postgres", "host=127.0.0.1 user=postgres"); !strings.Contains(msg, "postgres:// or postgresql:// URL") {
		t.Errorf("the error does not say what --postgres takes: %s", msg)
	}
}
