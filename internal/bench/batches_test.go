package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// runBatches runs the batches scenario at a tiny size (20 jobs a batch,
// 3 calls, 2 WaitJobs parked, 3 wake-ups) with extra args, and returns
// its figures and the table it prints.
func runBatches(t *testing.T, extra ...string) (*batchesFigures, string) {
	t.Helper()
	args := append([]string{"--binary", jobwatchBinary(t), "--scenarios", "batches",
		"--batch-jobs", "20", "--batch-calls", "3", "--batch-waits", "2", "--batch-wakes", "3",
		"--conns", "4", "--settle", "50ms"}, extra...)
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), append([]string{"--json"}, args...), &out, &errOut, CLI{}); err != nil {
		t.Fatalf("bench: %v\n%s", err, &errOut)
	}
	var res struct {
		Batches *batchesFigures `json:"batches"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bench --json printed no JSON: %v\n%s", err, &out)
	}
	if res.Batches == nil {
		t.Fatalf("no batches figures in %s", &out)
	}
	var table bytes.Buffer
	if err := res.Batches.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	return res.Batches, table.String()
}

// checkSubmit checks one store's submit figures: each present and
// positive, p99 at least p50.
func checkSubmit(t *testing.T, where string, s batchSubmitFigures) {
	t.Helper()
	for name, v := range map[string]float64{"SubmitJobs p50": s.BatchP50MS, "SubmitJobs jobs/s": s.BatchPerS,
		"SubmitJob round p50": s.SingleP50MS, "SubmitJob jobs/s": s.SinglePerS} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s: %s = %v, want a positive figure", where, name, v)
		}
	}
	if s.BatchP99MS < s.BatchP50MS || s.SingleP99MS < s.SingleP50MS {
		t.Errorf("%s: %+v, want each p99 at least its p50", where, s)
	}
}

// TestBenchBatchesMeasuresEveryFigure runs the batches scenario at a
// tiny size on SQLite and checks what a reader of its table relies on:
// the sizes asked for, every parked call counted on every job (the
// scenario waits for the server's gauge), each figure present and
// finite, positive where a measurement must be, and a row of the table
// for each. The numbers themselves are the machine's and are not judged.
func TestBenchBatchesMeasuresEveryFigure(t *testing.T) {
	f, table := runBatches(t)
	if f.Jobs != 20 || f.Calls != 3 || f.Waits != 2 || f.Wakes != 3 {
		t.Errorf("sizes = %d jobs, %d calls, %d waits, %d wakes; want 20, 3, 2, 3", f.Jobs, f.Calls, f.Waits, f.Wakes)
	}
	checkSubmit(t, "SQLite", f.Submit)
	if f.SubmitPostgres != nil {
		t.Errorf("PostgreSQL figures without --postgres: %+v", f.SubmitPostgres)
	}

	// Two WaitJobs of 20 jobs each, and 40 WaitJob, on the same 40 jobs.
	for _, x := range []struct {
		name  string
		p     batchParkedFigures
		calls int
	}{{"WaitJobs", f.WaitJobsParked, 2}, {"WaitJob", f.WaitJobParked, 40}} {
		if x.p.Calls != x.calls || x.p.Jobs != 40 {
			t.Errorf("%s parked: %d calls on %d jobs, want %d on 40", x.name, x.p.Calls, x.p.Jobs, x.calls)
		}
		for name, v := range map[string]float64{"RSS before": x.p.RSSBeforeKiB, "RSS": x.p.RSSKiB,
			"heap before": x.p.HeapBeforeKiB, "heap": x.p.HeapKiB, "goroutines before": x.p.GoroutinesBefore} {
			if !(v > 0) {
				t.Errorf("%s parked: %s = %v, want it positive", x.name, name, v)
			}
		}
		// Per job may be negative for RSS and heap at this size (the
		// runtime may return memory in between), never infinite.
		for name, v := range map[string]float64{"RSS per job": x.p.RSSPerJobKiB, "heap per job": x.p.HeapPerJobKiB} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s parked: %s = %v", x.name, name, v)
			}
		}
	}
	// A parked WaitJob holds at least its handler's goroutine; two
	// WaitJobs hold a few between them, not one for each job.
	if g := f.WaitJobParked.GoroutinesPerJob; g < 1 {
		t.Errorf("WaitJob parked: %v goroutines per job, want at least 1", g)
	}
	if g := f.WaitJobsParked.GoroutinesPerJob; g <= 0 || g >= f.WaitJobParked.GoroutinesPerJob {
		t.Errorf("WaitJobs parked: %v goroutines per job, want more than 0 and fewer than WaitJob's %v", g, f.WaitJobParked.GoroutinesPerJob)
	}

	w := f.Wake
	for name, v := range map[string]float64{"WaitJobs p50": w.WaitJobsP50MS, "WaitJobs p99": w.WaitJobsP99MS,
		"WaitJob p50": w.WaitJobP50MS, "WaitJob p99": w.WaitJobP99MS} {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > time.Minute.Seconds()*1000 {
			t.Errorf("wake: %s = %v ms, want a finite figure under a minute", name, v)
		}
	}
	if w.WaitJobsP99MS < w.WaitJobsP50MS || w.WaitJobP99MS < w.WaitJobP50MS || w.Redone < 0 {
		t.Errorf("wake = %+v, want each p99 at least its p50", w)
	}
	// Each answer arrives before its client has decoded it.
	if w.WaitJobsArrivedP50MS == 0 || w.WaitJobsArrivedP50MS > w.WaitJobsP50MS || w.WaitJobsArrivedP99MS > w.WaitJobsP99MS {
		t.Errorf("wake = %+v, want WaitJobs' answers arrived (not zero) no later than decoded, at p50 and p99", w)
	}
	if !(w.CompleteP50MS > 0) || !(w.AnswerWaitJobsP50MS > 0) || !(w.AnswerWaitJobP50MS > 0) {
		t.Errorf("wake = %+v, want positive round trips of CompleteJob and of the answers at once", w)
	}

	for _, row := range []string{
		"batches: SubmitJobs of 20 jobs, SQLite: p50, ms",
		"batches: 20 SubmitJob from 8 goroutines, SQLite: jobs/s",
		"batches: 2 WaitJobs of 20 jobs parked: RSS per job, KiB",
		"batches: 40 WaitJob parked: goroutines per job",
		"batches: WaitJobs (ALL) of 20, the last completed: p99, ms behind the reply",
		"batches: WaitJob of one job: p50, ms behind the reply",
		"batches: WaitJobs of 20 jobs all ended (answers at once): p50, ms",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("the table has no row %q:\n%s", row, table)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		if f := strings.Fields(line); f[len(f)-1] == "-" || !strings.HasPrefix(line, "batches: ") {
			t.Errorf("row %q: want a batches figure", line)
		}
	}
}

// TestBenchBatchesSubmitsOnPostgreSQL: with --postgres the scenario's
// submit part runs on PostgreSQL too, in a schema it drops.
func TestBenchBatchesSubmitsOnPostgreSQL(t *testing.T) {
	dbURL := pgtest.URL(t)
	// Other runs may share the database: only this run's schemas are
	// looked for afterwards.
	prefix := fmt.Sprintf("jobwatch_bench_t%d_", time.Now().UnixNano())
	defer func(p string) { benchSchemaPrefix = p }(benchSchemaPrefix)
	benchSchemaPrefix = prefix
	f, table := runBatches(t, "--postgres", dbURL)
	if f.SubmitPostgres == nil {
		t.Fatalf("no PostgreSQL figures: %+v", f)
	}
	checkSubmit(t, "PostgreSQL", *f.SubmitPostgres)
	if !strings.Contains(table, "batches: SubmitJobs of 20 jobs, PostgreSQL: jobs/s") {
		t.Errorf("the table has no PostgreSQL row:\n%s", table)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", prefix).Scan(&left); err != nil || left != 0 {
		t.Errorf("schemas of the bench left behind: %d, %v", left, err)
	}
}

// TestBenchBatchesIsNotInAll: "all", the default, leaves the batches
// scenario out, and a --batch-jobs no SubmitJobs takes is a usage error.
func TestBenchBatchesIsNotInAll(t *testing.T) {
	for _, args := range [][]string{nil, {"--scenarios", "all"}} {
		o, err := CLI{}.parseBenchFlags(args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.scenarios["batches"] {
			t.Errorf("bench %q runs %v, want no batches", args, o.scenarios)
		}
	}
	if msg := refusal(t, "--scenarios", "batches", "--batch-jobs", "1001"); !strings.Contains(msg, "at most 1000") {
		t.Errorf("--batch-jobs 1001: %s, want a usage error saying at most 1000", msg)
	}
	if msg := refusal(t, "--batch-waits", "0"); !strings.Contains(msg, "--batch-waits must be positive") {
		t.Errorf("--batch-waits 0: %s, want a usage error", msg)
	}
}
