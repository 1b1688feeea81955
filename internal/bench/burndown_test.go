package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
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

// TestBenchBurndownIsNotInAll: "all", the default, leaves the burndown
// scenario out (it runs for an hour at its defaults), and a bad
// --burndown-modes is a usage error.
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
}
