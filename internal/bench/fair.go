package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
)

// The fair scenario measures what fair claiming (store.FairState) costs:
// the burndown scenario's burn-down of --fair-depth no-op jobs in one
// queue, once with every job of one tenant and once with job i of tenant
// i mod --fair-tenants, so that every claim decides between that many
// tenants with ready jobs. The two runs of a pair come one right after
// the other, each on a fresh database, with the same workers (the
// burndown scenario's --burndown-slots, --burndown-rpc-workers,
// --burndown-modes and --burndown-stores); --fair-pairs repeats the
// pair, its order alternating, and the figures are the medians. The jobs
// of several tenants are interleaved job by job, so that a fair claim,
// which takes each tenant's oldest in turn, takes them in the order one
// tenant's claims would: what differs is the fair claim's own work. Both
// runs insert their jobs one Submit each (--burndown-fill-batch does not
// apply), so that their tables are laid out alike.

// fairFigures are the fair scenario's burn-downs (jobwatch only), in the
// order they ran.
type fairFigures struct {
	Runs []fairRunFigures `json:"runs"`
}

// fairRunFigures is one burn-down of the scenario: Depth jobs spread over
// Tenants tenants, the Pair-th pair (from 1) of its store and mode.
type fairRunFigures struct {
	Pair    int `json:"pair"`
	Tenants int `json:"tenants"`
	burndownRunFigures
}

// fairSettings are the fair scenario's flags, in the JSON when it ran.
type fairSettings struct {
	Depth      int      `json:"depth"`
	Tenants    int      `json:"tenants"`
	Pairs      int      `json:"pairs"`
	Slots      int      `json:"slots"`
	RPCWorkers int      `json:"rpc_workers"`
	Modes      []string `json:"modes"`
}

// spreadTenant is job i's tenant when the jobs are spread over tenants:
// tenant-(i mod tenants), or the default tenant ("") for one or fewer.
func spreadTenant(i int64, tenants int) string {
	if tenants <= 1 {
		return ""
	}
	return "tenant-" + strconv.FormatInt(i%int64(tenants), 10)
}

// fair runs the scenario on each store of --burndown-stores (PostgreSQL
// only with --postgres), in each mode of --burndown-modes; srv is the
// jobwatch whose serve the RPC runs start.
func (b *benchRun) fair(ctx context.Context, srv benchServer) (*fairFigures, error) {
	f := &fairFigures{}
	for _, st := range b.burndownStores() {
		for _, mode := range b.o.burndownModes {
			for pair := range b.o.fairPairs {
				// The order alternates from pair to pair: the first
				// burn-down of a process tends to be the slower.
				order := []int{1, b.o.fairTenants}
				if pair%2 == 1 {
					slices.Reverse(order)
				}
				for _, tenants := range order {
					b.progress("fair: %s, %s, %d queued over %d tenant(s), pair %d of %d",
						modeLabel(mode, b.o), storeLabel(st), b.o.fairDepth, tenants, pair+1, b.o.fairPairs)
					r, err := b.burndownOnce(ctx, srv, st, mode, b.o.fairDepth, priorityLayout{}, tenants, 1)
					if err != nil {
						return nil, fmt.Errorf("%s, %s, %d tenants: %w", mode, st, tenants, err)
					}
					f.Runs = append(f.Runs, fairRunFigures{Pair: pair + 1, Tenants: tenants, burndownRunFigures: r})
				}
			}
		}
	}
	return f, nil
}

// fairRows are the rows of the fair scenario: for each store and mode,
// in the order they ran, the jobs/s and claim p50 of one tenant and of
// --fair-tenants, and the ratio of their jobs/s; medians over the pairs.
func (r *benchResult) fairRows() []benchRow {
	s := r.Settings.Fair
	if s == nil {
		return nil
	}
	o := benchOptions{burndownSlots: s.Slots, burndownRPCWorkers: s.RPCWorkers}
	type where struct{ mode, store string }
	var places []where
	for _, name := range r.Servers {
		if f := r.Results[name]; f != nil && f.Fair != nil {
			for _, run := range f.Fair.Runs {
				if w := (where{run.Mode, run.Store}); !slices.Contains(places, w) {
					places = append(places, w)
				}
			}
		}
	}
	of := ""
	if s.Pairs > 1 {
		of = fmt.Sprintf(" (median of %d)", s.Pairs)
	}
	var rows []benchRow
	for _, w := range places {
		label := fmt.Sprintf("fair, %d queued, %s, %s: ", s.Depth, modeLabel(w.mode, o), storeLabel(w.store))
		// median reads v of each pair's run with tenants (0: the ratio
		// of each pair's --fair-tenants run to its one-tenant run).
		median := func(tenants int, v func(burndownRunFigures) float64) func(*serverFigures) (float64, bool) {
			return func(f *serverFigures) (float64, bool) {
				if f.Fair == nil {
					return 0, false
				}
				byPair := map[int]map[int]burndownRunFigures{}
				for _, run := range f.Fair.Runs {
					if run.Mode == w.mode && run.Store == w.store {
						if byPair[run.Pair] == nil {
							byPair[run.Pair] = map[int]burndownRunFigures{}
						}
						byPair[run.Pair][run.Tenants] = run.burndownRunFigures
					}
				}
				var xs []float64
				for _, runs := range byPair {
					one, many := runs[1], runs[s.Tenants]
					switch {
					case tenants != 0 && runs[tenants].Completed > 0:
						xs = append(xs, v(runs[tenants]))
					case tenants == 0 && one.BurndownPerS > 0 && many.BurndownPerS > 0:
						xs = append(xs, many.BurndownPerS/one.BurndownPerS)
					}
				}
				if len(xs) == 0 {
					return 0, false
				}
				slices.Sort(xs)
				if n := len(xs); n%2 == 0 {
					return (xs[n/2-1] + xs[n/2]) / 2, true
				}
				return xs[len(xs)/2], true
			}
		}
		perS := func(x burndownRunFigures) float64 { return x.BurndownPerS }
		p50 := func(x burndownRunFigures) float64 { return x.P50MS }
		rows = append(rows,
			benchRow{label + "jobs/s, 1 tenant" + of, median(1, perS)},
			benchRow{label + fmt.Sprintf("jobs/s, %d tenants", s.Tenants) + of, median(s.Tenants, perS)},
			benchRow{label + fmt.Sprintf("jobs/s, %d tenants over 1", s.Tenants) + of, median(0, nil)},
			benchRow{label + "claim p50, ms, 1 tenant" + of, median(1, p50)},
			benchRow{label + fmt.Sprintf("claim p50, ms, %d tenants", s.Tenants) + of, median(s.Tenants, p50)},
		)
	}
	return rows
}
