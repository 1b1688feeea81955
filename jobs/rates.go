package jobs

import (
	"context"
	"slices"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Rate limits are the store's to keep (store.QueueLimit.Rate): it counts
// each rate-limited queue's claims in the window in the transaction that
// claims, so the limit holds across replicas. A queue at its limit
// offers NextReady nothing, and no commit will say when it has room
// again: time will. So a claim that parks reads when the rate-limited
// queues it may take from next have room (store.RateWindows) and parks
// until then at the latest, as for a job due later, one read per park,
// never a poll.

// A window is kept a little longer than its rate's Per (heldRate): a
// claim's start is counted at the time the engine gave its claim, and
// its worker learns of it later, by more for one claim than another: a
// replica's first claims wait for PostgreSQL to plan their statement
// (100 to 230 ms measured on the 2-core test machine), a busy server or
// a slower network path delays some answers, a claim woken at the
// window's edge is answered at once. With exactly Per between two
// windows' first starts on the server, a worker could see more than
// Limit starts within Per on its own clock. The guard is a quarter of
// Per, at most maxRateGuard: a rate of 60 a minute lets at most 60 start
// in every 60.5 s, one of 10 a second 10 in every 1.25 s.
const maxRateGuard = 500 * time.Millisecond

// heldRate is r as the store keeps it: its Per lengthened by the guard.
func heldRate(r jobtype.Rate) jobtype.Rate {
	if !r.IsZero() {
		r.Per += min(r.Per/4, maxRateGuard)
	}
	return r
}

// rates returns the rates of the queues f may claim from, nil if none.
func rates(f store.ClaimFilter) map[string]jobtype.Rate {
	var out map[string]jobtype.Rate
	for q, l := range f.Limits {
		if l.Rate.IsZero() || (len(f.Queues) > 0 && !slices.Contains(f.Queues, q)) {
			continue
		}
		if out == nil {
			out = map[string]jobtype.Rate{}
		}
		out[q] = l.Rate
	}
	return out
}

// rateRoom returns the earliest time after f.Now at which a queue f may
// claim from, held by its rate now, has room again; ok false when none
// is held.
func (e *Engine) rateRoom(ctx context.Context, f store.ClaimFilter) (at time.Time, ok bool, err error) {
	rs := rates(f)
	if rs == nil {
		return time.Time{}, false, nil
	}
	windows, err := e.store.RateWindows(ctx, f.Now, rs)
	if err != nil {
		return time.Time{}, false, err
	}
	for _, w := range windows {
		if w.HeldUntil.IsZero() {
			continue
		}
		if !ok || w.HeldUntil.Before(at) {
			at, ok = w.HeldUntil, true
		}
	}
	return at, ok, nil
}

// QueueRate is a rate-limited queue's rule and its window now, as
// ListQueues and /metrics show them.
type QueueRate struct {
	Rate jobtype.Rate
	store.RateWindow
}

// QueueRates reads the window of every queue the rules give a rate:
// how many claims it holds now and, for a queue at its limit, when it
// next has room (store.RateWindows).
func (e *Engine) QueueRates(ctx context.Context) (map[string]QueueRate, error) {
	rs := map[string]jobtype.Rate{}
	held := map[string]jobtype.Rate{}
	for name, q := range e.rules.Load().Queues {
		if !q.Rate.IsZero() {
			rs[name], held[name] = q.Rate, heldRate(q.Rate)
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	windows, err := e.store.RateWindows(ctx, e.now(), held)
	if err != nil {
		return nil, wrap("read rates", "", err)
	}
	out := make(map[string]QueueRate, len(rs))
	for name, r := range rs {
		out[name] = QueueRate{Rate: r, RateWindow: windows[name]}
	}
	return out, nil
}
