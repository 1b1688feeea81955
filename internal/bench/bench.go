package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/client"
	"github.com/jobwatch/jobwatch/jobtype"
)

const benchUsage = `Usage: jobwatch bench [flags]

Measures jobwatch against a floor and prints one table (rows: figures,
columns: servers), or the same figures as JSON with --json. Each server
runs as a process of its own, started afresh for each scenario:

  floor     connect-go handlers over an in-memory map, served with h2c
            like jobwatch: the cost of the wire alone
  before    the jobwatch binary given by --before (optional)
  jobwatch  this binary's serve (or --binary's), on a temporary SQLite file

Scenarios (--scenarios, comma-separated; default all):

  throughput-rpc     --workers remote Workers (the Go client over RPC) run
                     no-op jobs that --submitters keep queued; jobs/s
                     completed over --duration after --warmup
  throughput-inproc  the same with --inproc-workers in-process Workers and
                     --inproc-submitters on an embedded engine and SQLite in
                     this process (jobwatch only): more of each than over
                     RPC, since group commit needs writes in flight to share
                     a commit and here nothing else bounds them
  fanout             N WaitJob, then N WatchJob, parked on one job (N from
                     --fanout); time from the worker's CompleteJob call
                     until the last of them has the finished job
  parked             park N WaitJob (then, in a new process, N WatchJob) on
                     N distinct jobs for each N of --parked; server RSS and
                     goroutines per parked call, short-call (GetJob)
                     p50/p99, idle CPU, and wake-up p50/p99 of one more
                     waiter after the worker's CompleteJob reply
  wakeup             for --jobs jobs one after another: how much later
                     than the worker's reply a WaitJob, a WatchJob and a
                     GetJob poll loop learn that the job ended
  logs               one job appends 1,000 lines a second (10 every 10 ms)
                     for 5 s while 100 WatchJobLogs streams follow it: how
                     long after each append's reply every watcher had its
                     lines (p50/p99); then a new watcher's time to a
                     backlog of 10,000 lines; then the server's RSS before
                     and after 10,000 and 100,000 lines go to 100 watchers
                     that never read (jobwatch only)
  burndown           not in the default (all): at the default --depths it
                     takes an hour or more. For each depth of --depths,
                     on a fresh database: --burndown-submitters goroutines
                     insert that many no-op jobs (Engine.Submit, one job
                     each), then --burndown-slots worker slots claim and
                     complete them all; jobs/s from the workers' start to
                     the last completion (or the part done when
                     --burndown-cap passes first), and the p50/p99 of the
                     claim calls that returned work. In process (one
                     Worker with every slot over an embedded engine) and
                     over RPC (--burndown-rpc-workers remote Workers
                     sharing the slots, against a fresh serve process
                     whose database the bench fills in process first);
                     see --burndown-modes. Then the steady loop
                     (--burndown-submitters keep --backlog jobs
                     unfinished, as in throughput) for --duration after
                     --warmup, with no backlog and with as many ready
                     jobs as the largest depth, of a kind no worker
                     runs, waiting in the same queue (--burndown-steady).
                     With --burndown-priorities 0,0-9 each depth is
                     burned down twice, one run right after the other,
                     on a fresh database each: every job at priority 0,
                     then job i at priority i mod 10 (interleaved job by
                     job, so the most urgent are every tenth row); their
                     rows come side by side, with the ratio of their
                     jobs/s (claims per second with priorities in use
                     against without)
  batches            not in the default (all): about a minute and a half
                     at its defaults (jobwatch only). --batch-calls
                     SubmitJobs of --batch-jobs no-op jobs, one call at a
                     time, each followed by a round of as many SubmitJob
                     calls from 8 goroutines: p50/p99 of the call (and of
                     the round) and jobs/s. Then --batch-waits WaitJobs
                     of --batch-jobs queued jobs each parked, and in
                     another process as many WaitJob as they wait for
                     jobs: the server's RSS, heap in use and goroutines
                     per job waited for, each against its process's own
                     baseline. Then --batch-wakes times each, turn about,
                     a WaitJobs (ALL) of --batch-jobs jobs whose last one
                     is completed and a WaitJob of one job: how much
                     later than the worker's CompleteJob reply the call
                     answered (p50/p99)
  fair               not in the default (all): a few minutes at its
                     defaults (jobwatch only). What fair claiming costs:
                     the burndown scenario's burn-down of --fair-depth
                     no-op jobs in one queue, once all of one tenant and
                     once with job i of tenant i mod --fair-tenants, one
                     right after the other on fresh databases, with the
                     same workers (--burndown-slots, --burndown-rpc-workers,
                     --burndown-modes, --burndown-stores, --burndown-cap,
                     --burndown-submitters); jobs/s and claim p50 of each
                     and the ratio of their jobs/s, medians over
                     --fair-pairs pairs (the order alternating)

With --postgres URL, throughput-rpc and wakeup also run jobwatch on that
PostgreSQL database, each run in a schema of its own that the bench
creates and drops (jobwatch_bench_...; nothing else in the database is
touched): throughput with 1 and with 3 replicas (submits and workers
spread round-robin over them), and wakeup with the observers on the
worker's replica and on another one. These are rows of the jobwatch
column beside its SQLite figures. burndown runs on PostgreSQL too, in a
schema of its own for each run, and so do the batches scenario's
SubmitJobs and SubmitJob rounds, and the fair scenario's burn-downs.

Flags:
`

// benchOptions are the flags of "jobwatch bench".
type benchOptions struct {
	scenarios                       map[string]bool
	before                          string
	binary                          string
	json                            bool
	jsonFile                        string
	codec                           string
	workers                         int
	inprocWorkers, inprocSubmitters int
	submitters                      int
	backlog                         int
	duration                        time.Duration
	warmup                          time.Duration
	fanout                          []int
	parked                          []int
	conns                           int
	probes                          int
	shortCalls                      int
	idle                            time.Duration
	settle                          time.Duration
	jobs                            int
	poll                            time.Duration
	serveFloor                      string
	cpuProfile                      string
	scenarioArg                     string
	postgres                        string
	// The burndown scenario's flags.
	depths                                                []int
	burndownSlots, burndownRPCWorkers, burndownSubmitters int
	burndownFillBatch                                     int
	burndownModes                                         []string
	burndownStores                                        []string
	burndownCap                                           time.Duration
	burndownPriorities                                    []priorityLayout
	burndownSteady                                        bool
	// The batches scenario's flags.
	batchJobs, batchCalls, batchWaits, batchWakes int
	// The fair scenario's flags.
	fairDepth, fairTenants, fairPairs int
}

// benchScenarios are the scenarios in the order they run; "all" (the
// default) is every one but burndown, batches and fair, which only run
// when named.
var benchScenarios = []string{"throughput-rpc", "throughput-inproc", "fanout", "parked", "wakeup", "logs", "burndown", "batches", "fair"}

// benchAll is what "all" means: every scenario that takes minutes, not
// hours, at its defaults, and measures every server (batches measures
// jobwatch alone, whose calls the floor and an older --before lack).
var benchAll = slices.DeleteFunc(slices.Clone(benchScenarios), func(s string) bool { return s == "burndown" || s == "batches" || s == "fair" })

// CLI is what the command line lends the bench, so that "jobwatch
// bench" reports a bad flag as every other command does. Its zero value
// is usable: flag's own parse and plain errors.
type CLI struct {
	// ParseFlags parses args into fs: -h prints fs.Usage and returns
	// flag.ErrHelp; a bad flag is a usage error in the command line's
	// format. Nil: fs.Parse.
	ParseFlags func(fs *flag.FlagSet, args []string) error
	// UsageError is msg, a bad flag value or argument, as the command
	// line's usage error (exit status 2). Nil: errors.New.
	UsageError func(msg string) error
}

func (c CLI) parseFlags(fs *flag.FlagSet, args []string) error {
	if c.ParseFlags == nil {
		return fs.Parse(args)
	}
	return c.ParseFlags(fs, args)
}

func (c CLI) usageError(msg string) error {
	if c.UsageError == nil {
		return errors.New(msg)
	}
	return c.UsageError(msg)
}

// parseBenchFlags reads the flags of "jobwatch bench".
func (c CLI) parseBenchFlags(args []string, stderr io.Writer) (benchOptions, error) {
	var o benchOptions
	var fanout, parked, depths, modes, stores, priorities string
	// Named as every command's flag set is: the command line's parse
	// errors say "bench" and point to "jobwatch bench -h".
	fs := flag.NewFlagSet("jobwatch bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchUsage); fs.PrintDefaults() }
	fs.StringVar(&o.scenarioArg, "scenarios", strings.Join(benchAll, ","), "comma-separated `scenarios` to run (\"throughput\" is both throughput ones; \"all\" is every one but burndown, batches and fair)")
	fs.StringVar(&o.before, "before", "", "another jobwatch `binary` to measure as the \"before\" column")
	fs.StringVar(&o.binary, "binary", "", "the jobwatch `binary` of the \"jobwatch\" column and of the floor (default: this one)")
	fs.BoolVar(&o.json, "json", false, "print the figures as JSON instead of a table")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the figures as JSON to `file` (for tools/benchplot), whatever is printed")
	fs.StringVar(&o.codec, "codec", "proto", "`codec` of every RPC the bench makes: proto or json")
	fs.IntVar(&o.workers, "workers", 16, "workers of the throughput scenarios, one job at a time each")
	fs.IntVar(&o.submitters, "submitters", 16, "goroutines submitting jobs in the throughput scenarios")
	fs.IntVar(&o.inprocWorkers, "inproc-workers", 128, "workers of the throughput-inproc scenario")
	fs.IntVar(&o.inprocSubmitters, "inproc-submitters", 64, "goroutines submitting jobs in the throughput-inproc scenario")
	fs.IntVar(&o.backlog, "backlog", 2048, "most jobs submitted but not completed in the throughput scenarios")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each throughput run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured time before it")
	fs.StringVar(&fanout, "fanout", "10000,20000", "comma-separated `counts` of waiters and watchers of one job")
	fs.StringVar(&parked, "parked", "1000,5000,10000,20000", "comma-separated `counts` of parked calls, each measured against none")
	fs.IntVar(&o.conns, "conns", 64, "client connections the fanout and parked calls are spread over")
	fs.IntVar(&o.probes, "probes", 100, "wake-ups timed at each parked count")
	fs.IntVar(&o.shortCalls, "short-calls", 2000, "sequential GetJob calls timed at each parked count")
	fs.DurationVar(&o.idle, "idle", 3*time.Second, "time over which idle CPU is measured at each parked count")
	fs.DurationVar(&o.settle, "settle", time.Second, "pause between parking calls and measuring the server, for its handlers to park and its heap to grow")
	fs.IntVar(&o.jobs, "jobs", 200, "jobs of the wakeup scenario, one after another")
	fs.DurationVar(&o.poll, "poll", 10*time.Millisecond, "interval of the wakeup scenario's GetJob poll loop")
	fs.StringVar(&o.postgres, "postgres", "", "PostgreSQL `URL` (postgres://...) to also measure jobwatch on, in schemas the bench creates and drops; empty: SQLite only")
	fs.StringVar(&depths, "depths", "2000,20000,200000,1000000", "comma-separated `counts` of queued jobs the burndown scenario burns down, each on a fresh database")
	fs.IntVar(&o.burndownSlots, "burndown-slots", 100, "worker slots (concurrent jobs) of the burndown scenario")
	fs.IntVar(&o.burndownRPCWorkers, "burndown-rpc-workers", 4, "remote Workers sharing --burndown-slots over RPC in the burndown scenario, each with a client of its own")
	fs.IntVar(&o.burndownSubmitters, "burndown-submitters", 8, "goroutines inserting jobs in the burndown scenario")
	fs.IntVar(&o.burndownFillBatch, "burndown-fill-batch", 500, "jobs each of the burndown scenario's inserts submits at once (Engine.SubmitMany), 1 to 1,000; 1 is River's shape, one Submit a job, and takes minutes at a million (the inserts are not measured); jobs of several tenants always go one a call")
	fs.StringVar(&modes, "burndown-modes", "inproc,rpc", "comma-separated `modes` of the burndown scenario: inproc, rpc")
	fs.StringVar(&stores, "burndown-stores", "sqlite,postgres", "comma-separated `stores` of the burndown scenario: sqlite, postgres (postgres only with --postgres)")
	fs.StringVar(&priorities, "burndown-priorities", "0", "comma-separated priority `layouts` of the burndown scenario's jobs, each burned down in turn at every depth: P (every job at priority P) or P-Q (job i at P + i mod (Q-P+1), interleaved job by job), from 0 to 9")
	fs.BoolVar(&o.burndownSteady, "burndown-steady", true, "also run the burndown scenario's steady loop after its burn-downs")
	fs.DurationVar(&o.burndownCap, "burndown-cap", 5*time.Minute, "longest one burn-down may take (not counting its inserts); past it the run reports the rate of the part done")
	fs.IntVar(&o.batchJobs, "batch-jobs", 1000, "jobs of each SubmitJobs and each WaitJobs of the batches scenario, at most 1000")
	fs.IntVar(&o.batchCalls, "batch-calls", 30, "SubmitJobs calls timed in the batches scenario, and rounds of as many SubmitJob")
	fs.IntVar(&o.batchWaits, "batch-waits", 10, "WaitJobs parked at once in the batches scenario, each on --batch-jobs jobs of its own")
	fs.IntVar(&o.batchWakes, "batch-wakes", 50, "wake-ups timed in the batches scenario, of a WaitJobs and of a WaitJob each")
	fs.IntVar(&o.fairDepth, "fair-depth", 20000, "jobs each burn-down of the fair scenario works off")
	fs.IntVar(&o.fairTenants, "fair-tenants", 10, "tenants the fair scenario spreads its jobs over, against one, at least 2")
	fs.IntVar(&o.fairPairs, "fair-pairs", 1, "pairs of burn-downs (one tenant, --fair-tenants) the fair scenario runs in each mode and store")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to `file` (the in-process scenario runs in it; the servers do not)")
	fs.StringVar(&o.serveFloor, "serve-floor", "", "internal: serve the floor on `host:port` instead of measuring (the bench starts it so)")
	if err := c.parseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, c.usageError(fmt.Sprintf("bench takes no arguments, got %q", fs.Args()))
	}
	o.scenarios = map[string]bool{}
	for _, s := range listItems(o.scenarioArg) {
		switch {
		case s == "all":
			for _, n := range benchAll {
				o.scenarios[n] = true
			}
		case s == "throughput":
			o.scenarios["throughput-rpc"], o.scenarios["throughput-inproc"] = true, true
		case slices.Contains(benchScenarios, s):
			o.scenarios[s] = true
		default:
			return o, c.usageError(fmt.Sprintf("--scenarios: unknown scenario %q (known: %s, throughput, all)", s, strings.Join(benchScenarios, ", ")))
		}
	}
	var err error
	if o.fanout, err = c.parseCounts("fanout", fanout); err != nil {
		return o, err
	}
	if o.parked, err = c.parseCounts("parked", parked); err != nil {
		return o, err
	}
	if o.depths, err = c.parseCounts("depths", depths); err != nil {
		return o, err
	}
	if len(o.depths) == 0 {
		return o, c.usageError("--depths: no depth given")
	}
	if o.burndownModes, err = choices("--burndown-modes", "mode", modes, modeInproc, modeRPC); err != nil {
		return o, c.usageError(err.Error())
	}
	if o.burndownStores, err = choices("--burndown-stores", "store", stores, storeSQLite, storePostgres); err != nil {
		return o, c.usageError(err.Error())
	}
	for _, item := range listItems(priorities) {
		p, err := parsePriorityLayout(item)
		if err != nil {
			return o, c.usageError(fmt.Sprintf("--burndown-priorities: %v", err))
		}
		if !slices.Contains(o.burndownPriorities, p) {
			o.burndownPriorities = append(o.burndownPriorities, p)
		}
	}
	if len(o.burndownPriorities) == 0 {
		return o, c.usageError("--burndown-priorities: no layout given")
	}
	if o.codec != "proto" && o.codec != "json" {
		return o, c.usageError(fmt.Sprintf("--codec must be proto or json, got %q", o.codec))
	}
	for name, n := range map[string]int{"workers": o.workers, "submitters": o.submitters, "backlog": o.backlog,
		"inproc-workers": o.inprocWorkers, "inproc-submitters": o.inprocSubmitters,
		"conns": o.conns, "probes": o.probes, "short-calls": o.shortCalls, "jobs": o.jobs,
		"burndown-slots": o.burndownSlots, "burndown-rpc-workers": o.burndownRPCWorkers, "burndown-submitters": o.burndownSubmitters, "burndown-fill-batch": o.burndownFillBatch,
		"batch-jobs": o.batchJobs, "batch-calls": o.batchCalls, "batch-waits": o.batchWaits, "batch-wakes": o.batchWakes,
		"fair-depth": o.fairDepth, "fair-pairs": o.fairPairs} {
		if n <= 0 {
			return o, c.usageError(fmt.Sprintf("--%s must be positive, got %d", name, n))
		}
	}
	for name, d := range map[string]time.Duration{"duration": o.duration, "idle": o.idle, "poll": o.poll, "burndown-cap": o.burndownCap} {
		if d <= 0 {
			return o, c.usageError(fmt.Sprintf("--%s must be positive, got %v", name, d))
		}
	}
	if o.burndownFillBatch > jobtype.MaxBatchJobs {
		return o, c.usageError(fmt.Sprintf("--burndown-fill-batch must be at most %d (SubmitJobs' bound), got %d", jobtype.MaxBatchJobs, o.burndownFillBatch))
	}
	if o.fairTenants < 2 {
		return o, c.usageError(fmt.Sprintf("--fair-tenants must be at least 2, got %d", o.fairTenants))
	}
	if err := c.checkBatchJobs(o.batchJobs); err != nil {
		return o, err
	}
	if err := c.checkPostgresURL(o.postgres); err != nil {
		return o, err
	}
	if o.warmup < 0 || o.settle < 0 {
		return o, c.usageError("--warmup and --settle must not be negative")
	}
	if len(o.scenarios) == 0 && o.serveFloor == "" {
		return o, c.usageError(fmt.Sprintf("--scenarios: no scenario given (known: %s, throughput, all)", strings.Join(benchScenarios, ", ")))
	}
	if (o.scenarios["burndown"] || o.scenarios["fair"]) && o.postgres == "" && !slices.Contains(o.burndownStores, storeSQLite) {
		return o, c.usageError("--burndown-stores postgres needs --postgres URL: without it there is nothing to measure")
	}
	return o, nil
}

// checkBeforeRunning finds out what would fail only after minutes of
// measuring, before the first: a --postgres the bench cannot make a
// schema in, a --json-file it cannot write, a --before that is no
// program.
func checkBeforeRunning(ctx context.Context, o benchOptions) error {
	if o.postgres != "" {
		_, drop, err := postgresSchema(ctx, o.postgres)
		if err != nil {
			return fmt.Errorf("--postgres: %w", err)
		}
		if err := drop(); err != nil {
			return fmt.Errorf("--postgres: %w", err)
		}
	}
	if o.jsonFile != "" {
		f, err := os.CreateTemp(filepath.Dir(o.jsonFile), ".jobwatch-bench-*")
		if err != nil {
			return fmt.Errorf("--json-file %s: cannot write there: %w", o.jsonFile, err)
		}
		f.Close()
		os.Remove(f.Name())
	}
	if o.before != "" {
		if fi, err := os.Stat(o.before); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("--before %s: not a program this user may run", o.before)
		}
	}
	return nil
}

// choices reads a comma-separated list of some of known, each once, in
// the order given; flag and what name them in its refusals.
func choices(flag, what, list string, known ...string) ([]string, error) {
	var out []string
	for _, item := range listItems(list) {
		if !slices.Contains(known, item) {
			return nil, fmt.Errorf("%s: unknown %s %q (known: %s)", flag, what, item, strings.Join(known, ", "))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s given", flag, what)
	}
	return out, nil
}

// listItems is the comma-separated items of a list flag, trimmed, empty
// ones left out, as jobwatch's other commands read their lists.
func listItems(s string) []string {
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return slices.DeleteFunc(items, func(v string) bool { return v == "" })
}

// parseCounts parses "1000,5000" into sorted distinct positive counts.
func (c CLI) parseCounts(name, s string) ([]int, error) {
	var out []int
	for _, f := range listItems(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, c.usageError(fmt.Sprintf("--%s: %q is not a positive count", name, f))
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Run is "jobwatch bench": it measures jobwatch against the floor (and
// --before) and prints the figures to stdout, its progress to stderr; see
// benchUsage and docs/BENCHMARKS.md. With --serve-floor it serves the
// floor instead, until ctx ends: the process Run starts for the floor
// column, from the jobwatch binary (this one, or --binary), whose bench
// command must be Run.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, cli CLI) error {
	o, err := cli.parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.serveFloor != "" {
		return serveFloor(ctx, o.serveFloor)
	}
	if err := checkBeforeRunning(ctx, o); err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.binary == "" {
		if o.binary, err = os.Executable(); err != nil {
			return fmt.Errorf("find this binary (give --binary): %w", err)
		}
	}
	servers := []benchServer{{name: "floor", binary: o.binary, floor: true}}
	if o.before != "" {
		servers = append(servers, benchServer{name: "before", binary: o.before})
	}
	servers = append(servers, benchServer{name: "jobwatch", binary: o.binary})

	dir, err := os.MkdirTemp("", "jobwatch-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	bi, _ := debug.ReadBuildInfo()
	res := &benchResult{Commit: builtFrom(bi), Settings: o.settings(), Machine: thisMachine(), Results: map[string]*serverFigures{}}
	for _, s := range servers {
		res.Servers = append(res.Servers, s.name)
		res.Results[s.name] = &serverFigures{}
	}
	began := time.Now()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "bench: %4.0fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
	}
	b := &benchRun{o: o, dir: dir, progress: progress, quiet: slog.New(slog.DiscardHandler)}
	var batches *batchesFigures

	for _, name := range benchScenarios {
		if !o.scenarios[name] {
			continue
		}
		if name == "throughput-inproc" {
			progress("throughput-inproc: %d in-process workers on SQLite", o.inprocWorkers)
			v, err := b.throughputInproc(ctx)
			if err != nil {
				return fmt.Errorf("throughput-inproc: %w", err)
			}
			res.Results["jobwatch"].ThroughputInprocPerS = &v
			continue
		}
		if name == "logs" {
			progress("logs: %d watchers of one job's log", logsWatchers)
			f, err := b.logs(ctx, servers[len(servers)-1])
			if err != nil {
				return fmt.Errorf("logs: %w", err)
			}
			res.Results["jobwatch"].Logs = f
			continue
		}
		if name == "burndown" {
			f, err := b.burndown(ctx, servers[len(servers)-1])
			if err != nil {
				return fmt.Errorf("burndown: %w", err)
			}
			res.Results["jobwatch"].Burndown = f
			continue
		}
		if name == "batches" {
			if batches, err = b.batches(ctx, servers[len(servers)-1]); err != nil {
				return fmt.Errorf("batches: %w", err)
			}
			continue
		}
		if name == "fair" {
			if res.Results["jobwatch"].Fair, err = b.fair(ctx, servers[len(servers)-1]); err != nil {
				return fmt.Errorf("fair: %w", err)
			}
			continue
		}
		for _, s := range servers {
			progress("%s: %s", name, s.name)
			f := res.Results[s.name]
			var err error
			switch name {
			case "throughput-rpc":
				var v float64
				v, err = b.throughputRPC(ctx, s)
				f.ThroughputRPCPerS = &v
			case "fanout":
				f.Fanout, err = b.fanout(ctx, s)
			case "parked":
				f.Parked, err = b.parked(ctx, s)
			case "wakeup":
				f.Wakeup, err = b.wakeup(ctx, s)
			}
			if err != nil {
				return fmt.Errorf("%s, %s: %w", name, s.name, err)
			}
			if o.postgres != "" && s.name == "jobwatch" && (name == "throughput-rpc" || name == "wakeup") {
				if f.Postgres == nil {
					f.Postgres = &postgresFigures{}
				}
				if err := b.postgresRows(ctx, name, s, f.Postgres); err != nil {
					return fmt.Errorf("%s, %s: %w", name, s.name, err)
				}
			}
		}
	}
	js, err := json.MarshalIndent(benchOutput{res, batches}, "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	if o.jsonFile != "" {
		if err := os.WriteFile(o.jsonFile, js, 0o644); err != nil {
			return err
		}
	}
	if o.json {
		_, err := stdout.Write(js)
		return err
	}
	if batches == nil {
		return res.writeTable(stdout)
	}
	if len(o.scenarios) > 1 { // the bench's table has figures: the batches' below it
		if err := res.writeTable(stdout); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	return batches.writeTable(stdout)
}

// benchRun is one run of the bench: its options and scratch directory.
type benchRun struct {
	o        benchOptions
	dir      string
	progress func(format string, a ...any)
	quiet    *slog.Logger
}

// serverOptions start a process of scenario on a database of its own,
// with room for the largest scenario's parked calls, its probes and
// claims.
func (b *benchRun) serverOptions(scenario string) serverOptions {
	most := 0
	for _, n := range append(slices.Clone(b.o.fanout), b.o.parked...) {
		most = max(most, n)
	}
	return serverOptions{db: scenario, parked: most + 1000}
}

// newClient returns a client of the bench's codec whose long calls share
// longConns connections, with extra options after those.
func (b *benchRun) newClient(base string, longConns int, extra ...client.Option) *client.Client {
	opts := []client.Option{client.WithLongCallConns(longConns)}
	if b.o.codec == "json" {
		opts = append(opts, client.WithJSON())
	}
	return client.New(base, append(opts, extra...)...)
}

// clients returns --conns clients of one long connection each, for calls
// spread over many connections as many callers would.
func (b *benchRun) clients(base string) (cs []*client.Client, closeAll func()) {
	for range b.o.conns {
		cs = append(cs, b.newClient(base, 1))
	}
	return cs, func() {
		for _, c := range cs {
			c.Close()
		}
	}
}

func (o benchOptions) settings() benchSettings {
	s := benchSettings{
		Scenarios: strings.Split(o.scenarioArg, ","), Codec: o.codec,
		Workers: o.workers, Submitters: o.submitters, Backlog: o.backlog,
		InprocWorkers: o.inprocWorkers, InprocSubmitters: o.inprocSubmitters,
		DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(),
		Fanout: o.fanout, Parked: o.parked, Conns: o.conns, Probes: o.probes,
		ShortCalls: o.shortCalls, IdleS: o.idle.Seconds(), SettleS: o.settle.Seconds(), Jobs: o.jobs, PollMS: ms(o.poll),
		Before: o.before, Postgres: o.postgres != "",
	}
	if o.scenarios["burndown"] {
		s.Burndown = &burndownSettings{Depths: o.depths, Slots: o.burndownSlots, RPCWorkers: o.burndownRPCWorkers,
			Submitters: o.burndownSubmitters, Modes: o.burndownModes, CapS: o.burndownCap.Seconds(), Steady: o.burndownSteady}
		for _, p := range o.burndownPriorities {
			s.Burndown.Priorities = append(s.Burndown.Priorities, p.String())
		}
	}
	if o.scenarios["fair"] {
		s.Fair = &fairSettings{Depth: o.fairDepth, Tenants: o.fairTenants, Pairs: o.fairPairs,
			Slots: o.burndownSlots, RPCWorkers: o.burndownRPCWorkers, Modes: o.burndownModes}
	}
	return s
}

// ms is d in milliseconds, for the figures.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// thisMachine describes where the figures were measured.
func thisMachine() benchMachine {
	m := benchMachine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					m.MemKiB, _ = strconv.ParseFloat(f[0], 64)
				}
			}
		}
	}
	return m
}
