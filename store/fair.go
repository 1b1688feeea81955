package store

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Fair claiming. Inside one queue, the ready jobs of several tenants are
// handed out by stride scheduling, in proportion to each tenant's weight:
// each tenant has a pass, the tenant with the lowest pass among those
// with ready jobs is served next, and its pass then moves on by its
// stride, 1/weight. A tenant of weight 3 is served three times for each
// time one of weight 1 is, and a tenant alone gets every claim: nobody
// waits while a worker is idle.
//
// The queue keeps a virtual time, Clock: the pass of the last tenant it
// served. A tenant's pass is never taken as below it (its effective pass
// is max(pass, Clock)), so a tenant that had no ready jobs for a while
// comes back level with the others, not owed the claims it did not ask
// for; and a tenant that had none at the last decision is forgotten
// (Prune), so it does not come back behind either. So a tenant that
// submits one job while another has a backlog of any depth is served
// within as many claims as there are tenants with ready jobs.
//
// The stores keep Clock and the passes per queue in the database, so
// every replica hands out the same shares: read and written in the
// transaction that claims (SQLite, whose writes take turns anyway; and
// PostgreSQL's claims job by job, under the queue's lock), or, for
// PostgreSQL's claims of several jobs of one queue, read without a lock
// and added to after the claim commits (Served), so that those claims run
// side by side. They are written only when a queue has ready jobs of
// more than one tenant: a tenant alone costs the claim nothing more than
// a look for a second tenant.

// FairState is one queue's fair-claiming state.
type FairState struct {
	Clock  float64
	Passes map[string]float64 // tenant -> pass; a tenant missing has Clock's
}

// Weight is tenant's weight under weights: 1 when absent (or below 1,
// which the rules refuse).
func Weight(weights map[string]int, tenant string) int {
	if w := weights[tenant]; w >= 1 {
		return w
	}
	return 1
}

// effective is tenant's pass as a decision takes it.
func (s FairState) effective(tenant string) float64 {
	if p, ok := s.Passes[tenant]; ok && p > s.Clock {
		return p
	}
	return s.Clock
}

// Order returns tenants in the order a claim tries them: the lowest
// effective pass first, ties by name. The claim takes the first whose
// job it may take (its kinds, the queue's rules), so a tenant whose jobs
// no worker here runs holds nobody back.
func (s FairState) Order(tenants []string) []string {
	out := slices.Clone(tenants)
	slices.SortFunc(out, s.compare)
	return out
}

// compare is Order's: by effective pass, then by name.
func (s FairState) compare(a, b string) int {
	return cmp.Or(cmp.Compare(s.effective(a), s.effective(b)), cmp.Compare(a, b))
}

// Charge records that tenant was served one job: its pass moves a
// stride past its effective pass, and Clock to that effective pass if
// it is later.
func (s *FairState) Charge(tenant string, weight int) {
	e := s.effective(tenant)
	if s.Passes == nil {
		s.Passes = map[string]float64{}
	}
	s.Passes[tenant] = e + 1/float64(max(weight, 1))
	s.Clock = max(s.Clock, e)
}

// Turns takes up to n turns, charging each: each turn goes to the tenant
// Order puts first among those with a job left in avail (tenant -> how
// many it has; counted down). It returns the tenants served, in turn
// order: a claim of several jobs takes its turns at once.
func (s *FairState) Turns(avail map[string]int, weights map[string]int, n int) []string {
	out := make([]string, 0, n)
	for len(out) < n {
		// The tenant Order would put first, without sorting them all.
		t, first := "", true
		for u, k := range avail {
			if k > 0 && (first || s.compare(u, t) < 0) {
				t, first = u, false
			}
		}
		if first {
			break
		}
		s.Charge(t, Weight(weights, t))
		avail[t]--
		out = append(out, t)
	}
	return out
}

// TakeTurns takes up to n turns on s among tenants (of them, only those
// in only, when it names any) and returns the jobs they give, in turn
// order: a claim of several jobs takes its turns at once. It simulates
// the turns as if each tenant had n jobs, reads what each is due with
// read (want: tenant -> how many of its first jobs to read, for each
// tenant whose jobs read so far fall short), and simulates again with a
// tenant that had fewer held to what it has: at most once more per
// tenant. Then it takes the turns on s on what was read.
func TakeTurns[J any](s *FairState, tenants, only []string, weights map[string]int, n int, read func(want map[string]int) (map[string][]J, error)) ([]J, error) {
	avail := map[string]int{}
	for _, t := range tenants {
		if len(only) == 0 || slices.Contains(only, t) {
			avail[t] = n
		}
	}
	jobs := map[string][]J{}
	for {
		sim := s.Clone()
		want := map[string]int{}
		for _, t := range sim.Turns(maps.Clone(avail), weights, n) {
			want[t]++
		}
		for t, k := range want {
			if len(jobs[t]) >= k {
				delete(want, t)
			}
		}
		if len(want) == 0 {
			break
		}
		got, err := read(want)
		if err != nil {
			return nil, err
		}
		short := false
		for t, k := range want {
			jobs[t] = got[t]
			if len(got[t]) < k {
				avail[t], short = len(got[t]), true
			}
		}
		if !short {
			break
		}
	}
	found := map[string]int{}
	for t, js := range jobs {
		found[t] = len(js)
	}
	var out []J
	next := map[string]int{}
	for _, t := range s.Turns(found, weights, n) {
		out = append(out, jobs[t][next[t]])
		next[t]++
	}
	return out, nil
}

// Clone is a copy of s to simulate turns on.
func (s FairState) Clone() FairState {
	s.Passes = maps.Clone(s.Passes)
	return s
}

// Served is how far the turns taken on s since before moved each
// tenant's pass past its effective pass in before: its strides, for
// each tenant served. A store whose claims take their turns side by side
// adds these to the stored passes (each over the stored Clock), so that
// no claim's charges overwrite another's.
func (s FairState) Served(before FairState) map[string]float64 {
	out := map[string]float64{}
	for t, p := range s.Passes {
		if d := p - before.effective(t); d > 0 {
			out[t] = d
		}
	}
	return out
}

// Prune forgets the passes of tenants not in active, the tenants with
// ready jobs when the decision was made.
func (s *FairState) Prune(active []string) {
	for t := range s.Passes {
		if !slices.Contains(active, t) {
			delete(s.Passes, t)
		}
	}
}

// PerTenantWindow is a per-tenant rate's window (jobtype.Rate.PerTenant)
// from the starts in it of each tenant, oldest first: Started is the
// busiest tenant's count, and HeldUntil, when some tenant has reached
// the limit, the earliest time one such tenant has room again.
func PerTenantWindow(starts map[string][]time.Time, rate jobtype.Rate) RateWindow {
	var w RateWindow
	for _, at := range starts {
		w.Started = max(w.Started, min(len(at), rate.Limit))
		if len(at) < rate.Limit {
			continue
		}
		// The start that leaves Limit-1 after it.
		room := at[len(at)-rate.Limit].Add(rate.Per)
		if w.HeldUntil.IsZero() || room.Before(w.HeldUntil) {
			w.HeldUntil = room
		}
	}
	return w
}
