package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestBenchFairComparesOneTenantWithMany runs the fair scenario at a tiny
// depth in process on SQLite, two pairs: each pair burns down one tenant's
// jobs and then 4 tenants' (the second pair the other way round), every
// job completed each time, and the table shows each one's jobs/s and
// claim p50 and the ratio, medians of the two pairs. The numbers are the
// machine's and are not judged.
func TestBenchFairComparesOneTenantWithMany(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"--json", "--scenarios", "fair", "--fair-depth", "200", "--fair-tenants", "4", "--fair-pairs", "2",
		"--burndown-modes", "inproc", "--burndown-slots", "10", "--burndown-submitters", "2"}
	if err := Run(context.Background(), args, &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res benchResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if s := res.Settings.Fair; s == nil || s.Depth != 200 || s.Tenants != 4 || s.Pairs != 2 {
		t.Errorf("settings = %+v, want depth 200, 4 tenants, 2 pairs", s)
	}
	f := res.Results["jobwatch"].Fair
	if f == nil || len(f.Runs) != 4 {
		t.Fatalf("fair = %+v, want four runs", f)
	}
	for i, want := range []struct{ pair, tenants int }{{1, 1}, {1, 4}, {2, 4}, {2, 1}} {
		r := f.Runs[i]
		if r.Pair != want.pair || r.Tenants != want.tenants || r.Mode != modeInproc || r.Store != storeSQLite ||
			r.Depth != 200 || r.Completed != 200 || r.BurndownPerS <= 0 || r.P50MS <= 0 {
			t.Errorf("run %d = %+v, want pair %d, %d tenants, in process on SQLite, 200 of 200 completed", i, r, want.pair, want.tenants)
		}
	}
	// The table's figures are the medians of the two pairs: of two, their
	// mean; the ratio's, of each pair's own ratio.
	var table bytes.Buffer
	if err := res.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	cells := map[string]string{}
	for line := range strings.Lines(table.String()) {
		if row, ok := strings.CutPrefix(line, "fair, 200 queued, in process, SQLite: "); ok {
			f := strings.Fields(row)
			cells[strings.Join(f[:len(f)-2], " ")] = f[len(f)-1] // the floor's "-", then jobwatch's figure
		}
	}
	rs := f.Runs
	mean := func(a, b float64) string { return formatFigure((a + b) / 2) }
	for row, want := range map[string]string{
		"jobs/s, 1 tenant (median of 2)":         mean(rs[0].BurndownPerS, rs[3].BurndownPerS),
		"jobs/s, 4 tenants (median of 2)":        mean(rs[1].BurndownPerS, rs[2].BurndownPerS),
		"jobs/s, 4 tenants over 1 (median of 2)": mean(rs[1].BurndownPerS/rs[0].BurndownPerS, rs[2].BurndownPerS/rs[3].BurndownPerS),
		"claim p50, ms, 1 tenant (median of 2)":  mean(rs[0].P50MS, rs[3].P50MS),
		"claim p50, ms, 4 tenants (median of 2)": mean(rs[1].P50MS, rs[2].P50MS),
	} {
		if got := cells[row]; got != want {
			t.Errorf("the table's %q for in process, SQLite = %q, want %s:\n%s", row, got, want, &table)
		}
	}
	if len(cells) != 5 {
		t.Errorf("the table has %d fair rows, want 5:\n%s", len(cells), &table)
	}
}

// TestBenchFairIsNotInAll: "all" leaves the fair scenario out, and
// --fair-tenants below 2 is a usage error.
func TestBenchFairIsNotInAll(t *testing.T) {
	o, err := CLI{}.parseBenchFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.scenarios["fair"] {
		t.Errorf("bench runs %v by default, want no fair", o.scenarios)
	}
	if msg := refusal(t, "--fair-tenants", "1"); !strings.Contains(msg, "--fair-tenants must be at least 2") {
		t.Errorf("--fair-tenants 1: %s, want a usage error", msg)
	}
}
