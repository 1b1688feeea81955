package jobs

import (
	"sync"
	"time"
)

// deadlines are the caps of parked calls (Wait, Watch, WatchTenant,
// Claim), shared: calls whose deadlines fall in the same slot wait on one
// channel and one runtime timer, so 10,000 calls parked within a second
// hold about a hundred timers between them instead of 10,000, and a call
// that joins a slot already armed allocates nothing for its cap.
//
// A slot is a deadline rounded up, never down: a call never ends before
// its cap, and ends at most a 64th of its wait (at most maxDeadlineSlack)
// after it, well inside the margin the server keeps before a caller's
// own deadline (a tenth of the time allowed).
//
// Slots are keyed by their offset from base, a reading of the monotonic
// clock, so a step of the wall clock cannot move a cap.
type deadlines struct {
	base time.Time

	mu    sync.Mutex
	slots map[int64]*deadlineSlot // by offset from base, in nanoseconds
}

// maxDeadlineSlack bounds how late past its deadline a cap fires.
const maxDeadlineSlack = 16 * time.Millisecond

type deadlineSlot struct {
	c     chan time.Time // closed when the slot's time has come
	refs  int            // calls waiting on c that have not stopped
	timer *time.Timer
}

func newDeadlines() *deadlines {
	return &deadlines{base: time.Now(), slots: map[int64]*deadlineSlot{}}
}

// until returns a channel that is closed at t (rounded up to its slot)
// and the function that gives the place up. The zero t never fires.
//
// t is an instant taken from time.Now (or a context's deadline, which is
// one) plus the time allowed, so it carries a monotonic reading and its
// offset from base is measured by the monotonic clock: a step of the
// wall clock, or an engine clock (Config.Now) that is not the wall clock,
// cannot stretch or cut it.
func (d *deadlines) until(t time.Time) (<-chan time.Time, func()) {
	if t.IsZero() {
		return nil, func() {}
	}
	now := time.Since(d.base)
	at := t.Sub(d.base)
	slack := min(maxDeadlineSlack, max(at-now, 0)/64)
	if slack > 0 {
		at = (at + slack - 1) / slack * slack
	}
	key := int64(at)

	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.slots[key]
	if !ok {
		s = &deadlineSlot{c: make(chan time.Time)}
		d.slots[key] = s
		s.timer = time.AfterFunc(at-now, func() { d.fire(key, s) })
	}
	s.refs++
	return s.c, func() { d.stop(key, s) }
}

// fire closes a slot's channel; its calls end, and later calls of the
// same slot get a new one.
func (d *deadlines) fire(key int64, s *deadlineSlot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.slots[key] == s {
		delete(d.slots, key)
	}
	close(s.c)
}

// stop gives up one call's place in its slot; the last call to leave a
// slot that has not fired stops its timer.
func (d *deadlines) stop(key int64, s *deadlineSlot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.refs--; s.refs > 0 || d.slots[key] != s {
		return
	}
	if s.timer.Stop() {
		delete(d.slots, key)
	}
}

// armed reports how many slots are waiting to fire.
func (d *deadlines) armed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.slots)
}
