// Package backoff is jobwatch's one retry delay: exponential steps with
// full jitter. Everything that retries waits a delay from here (a queue's
// failed jobs, the Go client's calls and its worker's claims and reports,
// the alert webhook, the PostgreSQL listener's reconnects), so there is
// one policy to reason about. It imports nothing of jobwatch.
//
// The policy: the step after attempt n (1 for the first try that failed)
// is Initial doubled n-1 times, at most Max, and the delay is drawn
// uniformly from 0 to that step ("full jitter"). Callers cut off together
// (replicas when the database restarts, clients when the server does, jobs
// that one outage failed) spread their retries over the whole step instead
// of coming back together, which of the usual policies (none, equal,
// full) makes the fewest retries collide. The price: a delay may be close
// to 0; the step, not the delay, grows with each failure.
//
// Steps and delays are whole microseconds, as the stores keep times, so a
// backend that computes a delay in SQL from the same jitter (store/postgres
// does, for a job's retry) gets exactly the delay Go gets.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: Initial doubled per attempt after the
// first, capped at Max. A Max below Initial caps Initial too; a zero
// Policy never waits.
type Policy struct {
	Initial, Max time.Duration
}

// Step is the backoff step after attempt (1 for the first attempt; less
// counts as 1), in whole microseconds.
func (p Policy) Step(attempt int) time.Duration {
	d := p.Initial.Truncate(time.Microsecond)
	limit := p.Max.Truncate(time.Microsecond)
	for i := 1; i < attempt && d > 0 && d < limit; i++ {
		if d > limit/2 {
			return limit // doubling would pass the limit, or overflow
		}
		d *= 2
	}
	return min(d, limit)
}

// Delay is the delay before the try after attempt, for a jitter in
// [0, 1): uniform over [0, Step(attempt)], floored to the microsecond
// (jitter * (step + 1µs)), so a jitter just below 1 waits the whole step.
func (p Policy) Delay(attempt int, jitter float64) time.Duration {
	step := p.Step(attempt).Microseconds()
	return time.Duration(math.Floor(jitter*float64(step+1))) * time.Microsecond
}

// Jitter draws a jitter for Delay: uniform in [0, 1). A caller that
// computes the delay elsewhere (a store, in SQL) draws it here and hands
// it on, so that every place computes the same delay from it.
func Jitter() float64 { return rand.Float64() }

// Retry is the backoff of one retry loop: it counts the loop's
// consecutive failures. Its zero value, given a Policy, is ready to use.
// It is not safe for concurrent use.
type Retry struct {
	Policy
	failures int
	jitter   func() float64 // nil: Jitter
}

// Next counts one more failure and returns the delay before the next try.
func (r *Retry) Next() time.Duration {
	r.failures++
	draw := Jitter
	if r.jitter != nil {
		draw = r.jitter
	}
	return r.Delay(r.failures, draw())
}

// Reset starts over from Initial: call it after a success, so the next
// outage does not begin with the last one's long steps.
func (r *Retry) Reset() { r.failures = 0 }

// Sleep waits d, or less if done is closed first (a context's Done, a
// shutdown channel), and reports whether all of d passed. A done closed
// already wins, also over a delay of 0.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return false
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
