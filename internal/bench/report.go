package bench

import (
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// benchResult is what "jobwatch bench --json" prints; the table shows the
// same figures. Field names are stable (tools/benchplot reads them) and
// carry their unit: _ms, _kib, _per_s, _pct. A figure a scenario did not
// measure is absent.
type benchResult struct {
	// Commit is the commit this binary was built from, as go build
	// stamped it: the full revision, "-dirty" appended when the checkout
	// had changes; absent from a binary without the stamp (go run, or
	// -buildvcs=false), whose figures then name no code. Build with go
	// build in the checkout to have it.
	Commit   string                    `json:"commit,omitempty"`
	Servers  []string                  `json:"servers"` // the table's columns, in order
	Machine  benchMachine              `json:"machine"`
	Settings benchSettings             `json:"settings"`
	Results  map[string]*serverFigures `json:"results"` // by server name
}

// builtFrom is the commit bi says the binary was built from (see
// benchResult.Commit), or "" when go build stamped none.
func builtFrom(bi *debug.BuildInfo) string {
	if bi == nil {
		return ""
	}
	setting := func(key string) string {
		if i := slices.IndexFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == key }); i >= 0 {
			return bi.Settings[i].Value
		}
		return ""
	}
	rev := setting("vcs.revision")
	if rev != "" && setting("vcs.modified") == "true" {
		rev += "-dirty"
	}
	return rev
}

type benchMachine struct {
	CPU    string  `json:"cpu"`
	Cores  int     `json:"cores"`
	MemKiB float64 `json:"mem_kib"`
	Go     string  `json:"go"`
	OS     string  `json:"os"`
}

type benchSettings struct {
	Scenarios        []string `json:"scenarios"`
	Codec            string   `json:"codec"`
	Workers          int      `json:"workers"`
	Submitters       int      `json:"submitters"`
	InprocWorkers    int      `json:"inproc_workers"`
	InprocSubmitters int      `json:"inproc_submitters"`
	Backlog          int      `json:"backlog"`
	DurationS        float64  `json:"duration_s"`
	WarmupS          float64  `json:"warmup_s"`
	Fanout           []int    `json:"fanout"`
	Parked           []int    `json:"parked"`
	Conns            int      `json:"conns"`
	Probes           int      `json:"probes"`
	ShortCalls       int      `json:"short_calls"`
	IdleS            float64  `json:"idle_s"`
	SettleS          float64  `json:"settle_s"`
	Jobs             int      `json:"jobs"`
	PollMS           float64  `json:"poll_ms"`
	Before           string   `json:"before,omitempty"`
	// Postgres: jobwatch was also measured on PostgreSQL (the URL is
	// left out: it may hold a password).
	Postgres bool `json:"postgres,omitempty"`
	// Burndown: the burndown scenario's flags, when it ran.
	Burndown *burndownSettings `json:"burndown,omitempty"`
	// Fair: the fair scenario's flags, when it ran.
	Fair *fairSettings `json:"fair,omitempty"`
}

// serverFigures are one server's figures.
type serverFigures struct {
	ThroughputRPCPerS    *float64        `json:"throughput_rpc_per_s,omitempty"`
	ThroughputInprocPerS *float64        `json:"throughput_inproc_per_s,omitempty"`
	Fanout               []fanoutFigures `json:"fanout,omitempty"`
	Parked               []parkedFigures `json:"parked,omitempty"`
	Wakeup               *wakeupFigures  `json:"wakeup,omitempty"`
	// Postgres: jobwatch's figures on PostgreSQL, with --postgres.
	Postgres *postgresFigures `json:"postgres,omitempty"`
	// Logs: the logs scenario (jobwatch only).
	Logs *logsFigures `json:"logs,omitempty"`
	// Burndown: the burndown scenario (jobwatch only).
	Burndown *burndownFigures `json:"burndown,omitempty"`
	// Fair: the fair scenario (jobwatch only).
	Fair *fairFigures `json:"fair,omitempty"`
}

// fanoutFigures: N callers parked on one job; the time from the worker's
// CompleteJob call until the last of them had the finished job.
type fanoutFigures struct {
	N           int     `json:"n"`
	WaitLastMS  float64 `json:"wait_last_answer_ms"`
	WatchLastMS float64 `json:"watch_last_answer_ms"`
}

// parkedFigures: the server with N WaitJob parked (waits) and, in another
// process, N WatchJob open (watches). N = 0 is the baseline.
type parkedFigures struct {
	N       int         `json:"n"`
	Waits   parkedStage `json:"waits"`
	Watches parkedStage `json:"watches"`
}

type parkedStage struct {
	RSSKiB     float64 `json:"rss_kib"`
	Goroutines float64 `json:"goroutines"`
	// Per parked call: the growth over the baseline (N = 0) over N.
	RSSPerCallKiB     float64 `json:"rss_per_call_kib"`
	GoroutinesPerCall float64 `json:"goroutines_per_call"`
	ShortP50MS        float64 `json:"short_call_p50_ms"`
	ShortP99MS        float64 `json:"short_call_p99_ms"`
	IdleCPUPct        float64 `json:"idle_cpu_pct"`
	// Wake-up: when one more caller's answer came, less when the worker
	// had its CompleteJob reply (negative: the caller knew first).
	WakeP50MS float64 `json:"wake_p50_ms"`
	WakeP99MS float64 `json:"wake_p99_ms"`
	// The worker's CompleteJob round trip, for scale.
	CompleteP50MS float64 `json:"complete_call_p50_ms"`
}

// wakeupFigures: per observer, how much later than the worker's reply it
// learnt that the job ended (negative: sooner); the reply itself from
// the job's finished_at.
type wakeupFigures struct {
	Jobs             int     `json:"jobs"`
	ReplyP50MS       float64 `json:"complete_reply_p50_ms"`
	WaitBehindP50MS  float64 `json:"wait_behind_reply_p50_ms"`
	WaitBehindP99MS  float64 `json:"wait_behind_reply_p99_ms"`
	WatchBehindP50MS float64 `json:"watch_behind_reply_p50_ms"`
	WatchBehindP99MS float64 `json:"watch_behind_reply_p99_ms"`
	PollBehindP50MS  float64 `json:"poll_behind_reply_p50_ms"`
	PollBehindP99MS  float64 `json:"poll_behind_reply_p99_ms"`
}

// benchRow is one row of the table: a label and how to read the figure
// from one server's results.
type benchRow struct {
	label string
	value func(*serverFigures) (float64, bool)
}

// rows lists the table's rows for the figures present in r.
func (r *benchResult) rows() []benchRow {
	var rows []benchRow
	s := r.Settings
	rows = append(rows,
		benchRow{fmt.Sprintf("jobs/s over RPC, %d remote workers (%s)", s.Workers, s.Codec), func(f *serverFigures) (float64, bool) {
			return deref(f.ThroughputRPCPerS)
		}},
	)
	if s.Postgres {
		rows = append(rows,
			benchRow{fmt.Sprintf("jobs/s over RPC, %d remote workers (%s), PostgreSQL, 1 replica", s.Workers, s.Codec), func(f *serverFigures) (float64, bool) {
				if f.Postgres == nil {
					return 0, false
				}
				return deref(f.Postgres.ThroughputRPC1PerS)
			}},
			benchRow{fmt.Sprintf("jobs/s over RPC, %d remote workers (%s), PostgreSQL, %d replicas", s.Workers, s.Codec, benchReplicas), func(f *serverFigures) (float64, bool) {
				if f.Postgres == nil {
					return 0, false
				}
				return deref(f.Postgres.ThroughputRPCNPerS)
			}},
		)
	}
	rows = append(rows,
		benchRow{fmt.Sprintf("jobs/s in process, %d workers, SQLite", s.InprocWorkers), func(f *serverFigures) (float64, bool) {
			return deref(f.ThroughputInprocPerS)
		}},
	)
	for _, n := range s.Fanout {
		rows = append(rows,
			benchRow{fmt.Sprintf("%d WaitJob of one job: last answered, ms after CompleteJob", n), func(f *serverFigures) (float64, bool) {
				i := slices.IndexFunc(f.Fanout, func(x fanoutFigures) bool { return x.N == n })
				if i < 0 {
					return 0, false
				}
				return f.Fanout[i].WaitLastMS, true
			}},
			benchRow{fmt.Sprintf("%d WatchJob of one job: last answered, ms after CompleteJob", n), func(f *serverFigures) (float64, bool) {
				i := slices.IndexFunc(f.Fanout, func(x fanoutFigures) bool { return x.N == n })
				if i < 0 {
					return 0, false
				}
				return f.Fanout[i].WatchLastMS, true
			}},
		)
	}
	type stageField struct {
		label string
		get   func(parkedStage) float64
		base  bool // also shown for N = 0
	}
	fields := []stageField{
		{"server RSS, MiB", func(p parkedStage) float64 { return p.RSSKiB / 1024 }, true},
		{"RSS per call, KiB", func(p parkedStage) float64 { return p.RSSPerCallKiB }, false},
		{"goroutines per call", func(p parkedStage) float64 { return p.GoroutinesPerCall }, false},
		{"short-call p50, ms", func(p parkedStage) float64 { return p.ShortP50MS }, true},
		{"short-call p99, ms", func(p parkedStage) float64 { return p.ShortP99MS }, true},
		{"idle CPU, % of a core", func(p parkedStage) float64 { return p.IdleCPUPct }, true},
		{"wake-up p50, ms after the reply", func(p parkedStage) float64 { return p.WakeP50MS }, true},
		{"wake-up p99, ms after the reply", func(p parkedStage) float64 { return p.WakeP99MS }, true},
	}
	for _, kind := range []string{"WaitJob", "WatchJob"} {
		for _, n := range append([]int{0}, s.Parked...) {
			for _, fd := range fields {
				if n == 0 && !fd.base {
					continue
				}
				rows = append(rows, benchRow{fmt.Sprintf("%d %s parked: %s", n, kind, fd.label), func(f *serverFigures) (float64, bool) {
					i := slices.IndexFunc(f.Parked, func(x parkedFigures) bool { return x.N == n })
					if i < 0 {
						return 0, false
					}
					if kind == "WaitJob" {
						return fd.get(f.Parked[i].Waits), true
					}
					return fd.get(f.Parked[i].Watches), true
				}})
			}
		}
	}
	wake := func(label string, get func(*wakeupFigures) float64) benchRow {
		return benchRow{label, func(f *serverFigures) (float64, bool) {
			if f.Wakeup == nil {
				return 0, false
			}
			return get(f.Wakeup), true
		}}
	}
	poll := time.Duration(s.PollMS * float64(time.Millisecond))
	rows = append(rows,
		wake("one at a time: CompleteJob reply p50, ms after finished_at", func(w *wakeupFigures) float64 { return w.ReplyP50MS }),
		wake("one at a time: WaitJob p50, ms behind the reply", func(w *wakeupFigures) float64 { return w.WaitBehindP50MS }),
		wake("one at a time: WaitJob p99, ms behind the reply", func(w *wakeupFigures) float64 { return w.WaitBehindP99MS }),
		wake("one at a time: WatchJob p50, ms behind the reply", func(w *wakeupFigures) float64 { return w.WatchBehindP50MS }),
		wake("one at a time: WatchJob p99, ms behind the reply", func(w *wakeupFigures) float64 { return w.WatchBehindP99MS }),
		wake(fmt.Sprintf("one at a time: GetJob every %v p50, ms behind the reply", poll), func(w *wakeupFigures) float64 { return w.PollBehindP50MS }),
		wake(fmt.Sprintf("one at a time: GetJob every %v p99, ms behind the reply", poll), func(w *wakeupFigures) float64 { return w.PollBehindP99MS }),
	)
	logs := func(label string, get func(*logsFigures) float64) benchRow {
		return benchRow{label, func(f *serverFigures) (float64, bool) {
			if f.Logs == nil {
				return 0, false
			}
			return get(f.Logs), true
		}}
	}
	rows = append(rows,
		logs(fmt.Sprintf("logs, %d lines/s to %d watchers: line p50, ms behind its append's reply", logsRate, logsWatchers),
			func(l *logsFigures) float64 { return l.BehindP50MS }),
		logs(fmt.Sprintf("logs, %d lines/s to %d watchers: line p99, ms behind its append's reply", logsRate, logsWatchers),
			func(l *logsFigures) float64 { return l.BehindP99MS }),
		logs(fmt.Sprintf("logs: AppendJobLogs of %d lines, reply p50, ms", logsBatch), func(l *logsFigures) float64 { return l.AppendP50MS }),
		logs(fmt.Sprintf("logs: a new watcher's %d-line backlog, ms", logsBacklog), func(l *logsFigures) float64 { return l.BacklogMS }),
		logs(fmt.Sprintf("logs: server RSS with %d watchers that never read, MiB, before", logsWatchers),
			func(l *logsFigures) float64 { return l.StalledRSSBeforeMiB }),
		logs(fmt.Sprintf("logs: the same after %d lines, MiB", logsStalled/10), func(l *logsFigures) float64 { return l.StalledRSSTenthMiB }),
		logs(fmt.Sprintf("logs: the same after %d lines, MiB", logsStalled), func(l *logsFigures) float64 { return l.StalledRSSAfterMiB }),
	)
	rows = append(rows, r.burndownRows()...)
	rows = append(rows, r.fairRows()...)
	if !s.Postgres {
		return rows
	}
	for _, variant := range []struct {
		label string
		get   func(*postgresFigures) *wakeupFigures
	}{
		{"PostgreSQL, 1 replica", func(p *postgresFigures) *wakeupFigures { return p.Wakeup }},
		{"PostgreSQL, observers on another replica", func(p *postgresFigures) *wakeupFigures { return p.WakeupCross }},
	} {
		wake := func(label string, get func(*wakeupFigures) float64) benchRow {
			return benchRow{variant.label + ": " + label, func(f *serverFigures) (float64, bool) {
				if f.Postgres == nil || variant.get(f.Postgres) == nil {
					return 0, false
				}
				return get(variant.get(f.Postgres)), true
			}}
		}
		rows = append(rows,
			wake("CompleteJob reply p50, ms after finished_at", func(w *wakeupFigures) float64 { return w.ReplyP50MS }),
			wake("WaitJob p50, ms behind the reply", func(w *wakeupFigures) float64 { return w.WaitBehindP50MS }),
			wake("WaitJob p99, ms behind the reply", func(w *wakeupFigures) float64 { return w.WaitBehindP99MS }),
			wake("WatchJob p50, ms behind the reply", func(w *wakeupFigures) float64 { return w.WatchBehindP50MS }),
			wake("WatchJob p99, ms behind the reply", func(w *wakeupFigures) float64 { return w.WatchBehindP99MS }),
			wake(fmt.Sprintf("GetJob every %v p50, ms behind the reply", poll), func(w *wakeupFigures) float64 { return w.PollBehindP50MS }),
		)
	}
	return rows
}

func deref(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

// writeTable prints the rows some server has a figure for, one column per
// server, numbers right-aligned; "-" where a server has none.
func (r *benchResult) writeTable(w io.Writer) error {
	table := [][]string{append([]string{"figure"}, r.Servers...)}
	for _, row := range r.rows() {
		line := []string{row.label}
		measured := false
		for _, name := range r.Servers {
			cell := "-"
			if v, ok := row.value(r.Results[name]); ok {
				cell, measured = formatFigure(v), true
			}
			line = append(line, cell)
		}
		if measured {
			table = append(table, line)
		}
	}
	widths := make([]int, len(table[0]))
	for _, line := range table {
		for i, cell := range line {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var sb strings.Builder
	for _, line := range table {
		for i, cell := range line {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				sb.WriteString(cell + pad)
			} else {
				sb.WriteString("  " + pad + cell)
			}
		}
		sb.WriteString("\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// formatFigure keeps three significant digits or so, and whole numbers
// from 100 up.
func formatFigure(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// burndownRows are the rows of the burndown scenario's runs, in the order
// they ran: for each burn-down its jobs/s, claim p50 and p99, its insert
// rate in process, and how many jobs it completed if --burndown-cap cut
// it short; with more than one priority layout, after the last of a
// depth, the ratio of each later layout's jobs/s to the first's; then
// the steady loop's.
func (r *benchResult) burndownRows() []benchRow {
	if r.Settings.Burndown == nil {
		return nil
	}
	var runs []burndownRunFigures
	var steady []steadyFigures
	for _, name := range r.Servers {
		if f := r.Results[name]; f != nil && f.Burndown != nil {
			runs, steady = append(runs, f.Burndown.Runs...), append(steady, f.Burndown.Steady...)
		}
	}
	o := benchOptions{burndownSlots: r.Settings.Burndown.Slots, burndownRPCWorkers: r.Settings.Burndown.RPCWorkers}
	// Priorities are named in the labels unless every job was at 0, as
	// before the layouts were a flag.
	layouts := r.Settings.Burndown.Priorities
	named := !(len(layouts) == 0 || len(layouts) == 1 && layouts[0] == "0")
	find := func(f *serverFigures, mode, store string, depth int, priorities string) (burndownRunFigures, bool) {
		if f.Burndown == nil {
			return burndownRunFigures{}, false
		}
		i := slices.IndexFunc(f.Burndown.Runs, func(x burndownRunFigures) bool {
			return x.Mode == mode && x.Store == store && x.Depth == depth && x.Priorities == priorities
		})
		if i < 0 {
			return burndownRunFigures{}, false
		}
		return f.Burndown.Runs[i], true
	}
	var rows []benchRow
	for _, run := range runs {
		where := fmt.Sprintf("burn-down of %d queued, %s, %s", run.Depth, modeLabel(run.Mode, o), storeLabel(run.Store))
		label := where + ": "
		if named {
			label = fmt.Sprintf("burn-down of %d queued, priorities %s, %s, %s: ", run.Depth, run.Priorities, modeLabel(run.Mode, o), storeLabel(run.Store))
		}
		get := func(v func(burndownRunFigures) (float64, bool)) func(*serverFigures) (float64, bool) {
			return func(f *serverFigures) (float64, bool) {
				x, ok := find(f, run.Mode, run.Store, run.Depth, run.Priorities)
				if !ok {
					return 0, false
				}
				return v(x)
			}
		}
		rows = append(rows,
			benchRow{label + "jobs/s", get(func(x burndownRunFigures) (float64, bool) { return x.BurndownPerS, true })},
			benchRow{label + "claim p50, ms", get(func(x burndownRunFigures) (float64, bool) { return x.P50MS, true })},
			benchRow{label + "claim p99, ms", get(func(x burndownRunFigures) (float64, bool) { return x.P99MS, true })},
		)
		if run.InsertPerS != nil {
			rows = append(rows, benchRow{label + fmt.Sprintf("inserts/s (%d submitters)", r.Settings.Burndown.Submitters),
				get(func(x burndownRunFigures) (float64, bool) { return deref(x.InsertPerS) })})
		}
		if run.Completed < run.Depth {
			rows = append(rows, benchRow{label + "jobs completed before --burndown-cap",
				get(func(x burndownRunFigures) (float64, bool) { return float64(x.Completed), true })})
		}
		if len(layouts) < 2 || run.Priorities != layouts[len(layouts)-1] {
			continue
		}
		for _, p := range layouts[1:] {
			cut := ""
			for _, f := range r.Results {
				x, _ := find(f, run.Mode, run.Store, run.Depth, p)
				base, _ := find(f, run.Mode, run.Store, run.Depth, layouts[0])
				if x.Capped || base.Capped {
					cut = " (of runs cut short by --burndown-cap)"
				}
			}
			rows = append(rows, benchRow{fmt.Sprintf("%s: jobs/s with priorities %s over with %s%s", where, p, layouts[0], cut),
				func(f *serverFigures) (float64, bool) {
					x, ok := find(f, run.Mode, run.Store, run.Depth, p)
					base, baseOK := find(f, run.Mode, run.Store, run.Depth, layouts[0])
					if !ok || !baseOK || base.BurndownPerS == 0 {
						return 0, false
					}
					return x.BurndownPerS / base.BurndownPerS, true
				}})
		}
	}
	for _, st := range steady {
		label := fmt.Sprintf("steady, %d idle jobs waiting behind, %s, %s: ", st.Backlog, modeLabel(st.Mode, o), storeLabel(st.Store))
		get := func(v func(steadyFigures) float64) func(*serverFigures) (float64, bool) {
			return func(f *serverFigures) (float64, bool) {
				if f.Burndown == nil {
					return 0, false
				}
				i := slices.IndexFunc(f.Burndown.Steady, func(x steadyFigures) bool {
					return x.Mode == st.Mode && x.Store == st.Store && x.Backlog == st.Backlog
				})
				if i < 0 {
					return 0, false
				}
				return v(f.Burndown.Steady[i]), true
			}
		}
		rows = append(rows,
			benchRow{label + "jobs/s", get(func(x steadyFigures) float64 { return x.PerS })},
			benchRow{label + "claim p50, ms", get(func(x steadyFigures) float64 { return x.P50MS })},
			benchRow{label + "claim p99, ms", get(func(x steadyFigures) float64 { return x.P99MS })},
		)
	}
	return rows
}
