package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// TestBenchBurndownCompletesEveryJob runs the burndown scenario at a tiny
// depth in process on SQLite and checks its outcome: every inserted job
// completed (the scenario itself checks the database against the
// completions it counted), and every figure present and positive. The
// numbers themselves are the machine's and are not judged.
func TestBenchBurndownCompletesEveryJob(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--json", "--scenarios", "burndown", "--depths", "200", "--burndown-modes", "inproc",
		"--burndown-slots", "10", "--burndown-submitters", "2", "--backlog", "20", "--duration", "300ms", "--warmup", "100ms"}
	if err := Run(context.Background(), args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	f := res.Results["jobwatch"].Burndown
	if f == nil {
		t.Fatalf("no burndown figures in %s", &out)
	}
	if len(f.Runs) != 1 {
		t.Fatalf("runs = %+v, want one: 200 queued, in process, on SQLite", f.Runs)
	}
	r := f.Runs[0]
	if r.Mode != modeInproc || r.Store != storeSQLite || r.Depth != 200 {
		t.Errorf("run = %+v, want 200 queued, in process, on SQLite", r)
	}
	if r.Completed != 200 {
		t.Errorf("%d of 200 jobs completed", r.Completed)
	}
	// Every job claimed once, by calls that each returned one or more.
	if r.Jobs != 200 || r.Calls == 0 || r.Calls > 200 {
		t.Errorf("%d claim calls timed returning %d jobs, want 1 to 200 calls returning 200", r.Calls, r.Jobs)
	}
	if r.InsertPerS == nil || *r.InsertPerS <= 0 || r.BurndownPerS <= 0 || r.BurndownS <= 0 || r.P50MS <= 0 || r.P99MS < r.P50MS {
		t.Errorf("run figures = %+v (insert %v), want each positive and p99 ≥ p50", r, r.InsertPerS)
	}
	// The steady loop with no backlog and with the largest depth of
	// another kind waiting behind.
	if len(f.Steady) != 2 || f.Steady[0].Backlog != 0 || f.Steady[1].Backlog != 200 {
		t.Fatalf("steady = %+v, want backlogs 0 and 200", f.Steady)
	}
	for _, s := range f.Steady {
		if s.Mode != modeInproc || s.Store != storeSQLite || s.PerS <= 0 || s.Calls == 0 || s.Jobs < s.Calls || s.P50MS <= 0 || s.P99MS < s.P50MS {
			t.Errorf("steady = %+v, want in process on SQLite, each figure positive and p99 ≥ p50", s)
		}
	}

	// The table shows the same figures, a row for each.
	var table bytes.Buffer
	if err := res.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"burn-down of 200 queued, in process, SQLite: jobs/s",
		"burn-down of 200 queued, in process, SQLite: claim p99, ms",
		"burn-down of 200 queued, in process, SQLite: inserts/s (2 submitters)",
		"steady, 0 idle jobs waiting behind, in process, SQLite: jobs/s",
		"steady, 200 idle jobs waiting behind, in process, SQLite: claim p99, ms",
	} {
		if !strings.Contains(table.String(), row) {
			t.Errorf("the table has no row %q:\n%s", row, &table)
		}
	}
}

// TestBenchBurndownOverRPCOnSQLite burns down over RPC on SQLite, where
// the server started for it holds the file alone: the bench counts the
// jobs once that server has stopped (it failed to open the file, and
// panicked closing the store it did not open).
func TestBenchBurndownOverRPCOnSQLite(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--json", "--binary", jobwatchBinary(t), "--scenarios", "burndown", "--depths", "200", "--burndown-modes", "rpc",
		"--burndown-slots", "10", "--burndown-submitters", "2", "--burndown-steady=false"}
	if err := Run(context.Background(), args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	f := res.Results["jobwatch"].Burndown
	if f == nil || len(f.Runs) != 1 {
		t.Fatalf("burndown = %+v, want one run", f)
	}
	if r := f.Runs[0]; r.Mode != modeRPC || r.Store != storeSQLite || r.Completed != 200 || r.BurndownPerS <= 0 {
		t.Errorf("run = %+v, want 200 of 200 completed over RPC on SQLite", r)
	}
}

// A ratio of priority layouts whose runs --burndown-cap cut short says
// so: such runs reached only the first jobs of each layout, and the JSON
// marks each of them capped.
func TestBenchBurndownSaysARatioOfCappedRunsIsCutShort(t *testing.T) {
	run := func(p string, completed int) burndownRunFigures {
		return burndownRunFigures{Mode: modeInproc, Store: storeSQLite, Depth: 1000, Priorities: p,
			Completed: completed, Capped: completed < 1000, BurndownPerS: 100}
	}
	for _, tt := range []struct {
		runs []burndownRunFigures
		want bool
	}{
		{[]burndownRunFigures{run("0", 1000), run("0-9", 1000)}, false},
		{[]burndownRunFigures{run("0", 1000), run("0-9", 500)}, true},
	} {
		r := &benchResult{Servers: []string{"jobwatch"},
			Settings: benchSettings{Burndown: &burndownSettings{Priorities: []string{"0", "0-9"}, Slots: 10}},
			Results:  map[string]*serverFigures{"jobwatch": {Burndown: &burndownFigures{Runs: tt.runs}}}}
		said := false
		for _, row := range r.burndownRows() {
			if strings.Contains(row.label, "over with 0") {
				said = strings.Contains(row.label, "cut short by --burndown-cap")
			}
		}
		if said != tt.want {
			t.Errorf("runs completed %d and %d: the ratio's label says it was cut short: %v, want %v",
				tt.runs[0].Completed, tt.runs[1].Completed, said, tt.want)
		}
	}
}

// TestBenchBurndownIsNotInAll: "all", the default, leaves the burndown
// scenario out (it runs for an hour at its defaults), and a bad
// --burndown-modes or --burndown-stores is a usage error.
func TestBenchBurndownIsNotInAll(t *testing.T) {
	for _, args := range [][]string{nil, {"--scenarios", "all"}} {
		o, err := CLI{}.parseBenchFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.scenarios["burndown"] || !o.scenarios["throughput-rpc"] {
			t.Errorf("bench %q runs %v, want every scenario but burndown", args, o.scenarios)
		}
	}
	if msg := refusal(t, "--burndown-modes", "inproc,grpc"); !strings.Contains(msg, `"grpc"`) {
		t.Errorf("--burndown-modes inproc,grpc: %s, want a usage error naming grpc", msg)
	}
	if msg := refusal(t, "--burndown-stores", "sqlite,mysql"); !strings.Contains(msg, `"mysql"`) || !strings.Contains(msg, "sqlite, postgres") {
		t.Errorf("--burndown-stores sqlite,mysql: %s, want a usage error naming mysql and the stores known", msg)
	}
	if msg := refusal(t, "--burndown-stores", ","); !strings.Contains(msg, "no store given") {
		t.Errorf("--burndown-stores ,: %s, want a usage error", msg)
	}
}

// TestBenchBurndownComparesPriorityLayouts: with --burndown-priorities
// 0,0-9 each depth is burned down once per layout, every job completed
// each time, and the table shows both runs' rows, named by their
// priorities, and the ratio of their jobs/s; --burndown-steady=false
// leaves the steady loop out.
func TestBenchBurndownComparesPriorityLayouts(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--json", "--scenarios", "burndown", "--depths", "200", "--burndown-modes", "inproc",
		"--burndown-slots", "10", "--burndown-submitters", "2", "--burndown-priorities", "0,0-9", "--burndown-steady=false"}
	if err := Run(context.Background(), args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if s := res.Settings.Burndown; s == nil || !slices.Equal(s.Priorities, []string{"0", "0-9"}) || s.Steady {
		t.Errorf("settings = %+v, want priorities 0 and 0-9, no steady loop", s)
	}
	f := res.Results["jobwatch"].Burndown
	if f == nil || len(f.Runs) != 2 || len(f.Steady) != 0 {
		t.Fatalf("burndown = %+v, want two runs and no steady loop", f)
	}
	for i, want := range []string{"0", "0-9"} {
		if r := f.Runs[i]; r.Priorities != want || r.Depth != 200 || r.Completed != 200 || r.BurndownPerS <= 0 {
			t.Errorf("run %d = %+v, want priorities %s, 200 of 200 completed", i, r, want)
		}
	}
	var table bytes.Buffer
	if err := res.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"burn-down of 200 queued, priorities 0, in process, SQLite: jobs/s",
		"burn-down of 200 queued, priorities 0-9, in process, SQLite: claim p99, ms",
		"burn-down of 200 queued, in process, SQLite: jobs/s with priorities 0-9 over with 0",
	} {
		if !strings.Contains(table.String(), row) {
			t.Errorf("the table has no row %q:\n%s", row, &table)
		}
	}
	if strings.Contains(table.String(), "steady") {
		t.Errorf("the table has steady rows with --burndown-steady=false:\n%s", &table)
	}
}

// TestBenchFillInterleavesPriorities: the burn-down's jobs of layout
// 0-9 take priority i mod 10, job i being the one whose payload is i;
// those of 3 all take 3. Spread over 3 tenants (the fair scenario), job
// i is tenant-(i mod 3)'s; over one, the default tenant's. Every job is
// inserted once, one a call or in batches (the last one short).
func TestBenchFillInterleavesPriorities(t *testing.T) {
	for _, tc := range []struct {
		layout  string
		tenants int
		batch   int
	}{{"0-9", 1, 1}, {"0-9", 1, 7}, {"3", 3, 7}} {
		layout := tc.layout
		t.Run(fmt.Sprintf("%s/batch=%d", layout, tc.batch), func(t *testing.T) {
			p, err := parsePriorityLayout(layout)
			if err != nil {
				t.Fatal(err)
			}
			st, err := sqlite.Open(filepath.Join(t.TempDir(), "fill.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			b := &benchRun{o: benchOptions{burndownSubmitters: 3}, progress: func(string, ...any) {}, quiet: slog.New(slog.DiscardHandler)}
			engine, stop := b.startEngine(t.Context(), st)
			defer stop()
			const n = 40
			if _, err := b.fill(t.Context(), engine, throughputKind, n, p, tc.tenants, tc.batch); err != nil {
				t.Fatal(err)
			}
			jobs, _, err := st.ListJobs(t.Context(), store.ListFilter{Limit: 2 * n, Full: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) != n {
				t.Fatalf("%d jobs, want %d", len(jobs), n)
			}
			for _, j := range jobs {
				i, err := strconv.ParseInt(string(j.Payload), 10, 64)
				if err != nil {
					t.Fatalf("job %s: payload %s", j.ID, j.Payload)
				}
				want := int32(3)
				if layout == "0-9" {
					want = int32(i % 10)
				}
				if j.Priority != want {
					t.Errorf("job %d: priority %d, want %d", i, j.Priority, want)
				}
				wantTenant := "default"
				if tc.tenants == 3 {
					wantTenant = "tenant-" + strconv.FormatInt(i%3, 10)
				}
				if j.Tenant != wantTenant {
					t.Errorf("job %d: tenant %q, want %q", i, j.Tenant, wantTenant)
				}
			}
		})
	}
}

// TestBenchRefusesABadPriorityLayout: a layout outside 0 to 9, or not a
// priority or a rising range of them, is a usage error naming it.
func TestBenchRefusesABadPriorityLayout(t *testing.T) {
	for _, bad := range []string{"0-10", "5-3", "-1", "high", "0-9-1"} {
		if msg := refusal(t, "--burndown-priorities", "0,"+bad); !strings.Contains(msg, strconv.Quote(bad)) {
			t.Errorf("--burndown-priorities 0,%s: %s, want a usage error naming %q", bad, msg, bad)
		}
	}
}
