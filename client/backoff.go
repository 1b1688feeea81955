package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is an exponential delay with jitter: about Initial before the
// first retry, doubling up to Max. Zero fields take the package defaults.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// retrier counts consecutive failures of one loop; reset it after any
// success so the next outage starts from Initial again.
type retrier struct {
	b        Backoff
	failures int
	notify   func(err error, delay time.Duration)
}

func (r *retrier) reset() { r.failures = 0 }

// delay is the next sleep: half of the exponential step fixed, half
// random, so many clients cut off together do not come back together
// while each still waits at least half its step.
func (r *retrier) delay() time.Duration {
	initial, maxd := r.b.Initial, r.b.Max
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if maxd <= 0 {
		maxd = DefaultBackoffMax
	}
	maxd = max(maxd, initial)
	step := initial
	for i := 0; i < r.failures && step < maxd; i++ {
		step *= 2
	}
	step = min(step, maxd)
	r.failures++
	half := step / 2
	return half + rand.N(step-half+1)
}

// wait sleeps the next delay after err, or returns ctx's error first.
func (r *retrier) wait(ctx context.Context, err error) error {
	d := r.delay()
	if r.notify != nil {
		r.notify(err, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
