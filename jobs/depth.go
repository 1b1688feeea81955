package jobs

import (
	"sync"
	"time"
)

// Depth history: ListQueues shows each queue's depth (queued + running)
// over the last DepthWindow. The samples live in this engine's memory
// only: the sweep takes one per Config.DepthInterval from the queue stats
// it reads anyway (watchQueues), so a server pays one store read per
// interval for it, and none of a write. A restarted engine, or another
// replica, has samples only from when it started; the answer says so by
// having fewer of them.
//
// Memory is bounded: at most DepthWindow / DepthInterval samples per
// queue (60 by default), for at most MaxDepthQueues queues. A queue that
// is no longer listed (its jobs all ended, and no rule declares it) is
// sampled as empty until it has been empty for DepthWindow, then
// forgotten. Queues beyond MaxDepthQueues get no history (only their
// depth now) until others are forgotten; the engine logs that once.

// DepthWindow is how far back a queue's depth history reaches.
const DepthWindow = 15 * time.Minute

// MaxDepthQueues is how many queues an engine keeps a depth history for.
const MaxDepthQueues = 1000

// DepthSample is a queue's unfinished work at one moment.
type DepthSample struct {
	At      time.Time
	Queued  int64
	Running int64
}

func (s DepthSample) empty() bool { return s.Queued+s.Running == 0 }

// depthHistory is the samples of every queue the sweep has seen.
type depthHistory struct {
	mu sync.Mutex
	// slot is the interval (the time truncated to a multiple of
	// DepthInterval) of the last sample: one sample per slot, so samples
	// stay DepthInterval apart whatever the sweep's own period.
	slot   time.Time
	queues map[string]*depthRing
	full   bool // the cap was hit and logged
}

// depthRing is one queue's samples, oldest first.
type depthRing struct {
	samples  []DepthSample
	lastBusy time.Time // the last sample that was not empty
}

// depthCapacity is how many samples of one queue cover DepthWindow.
func (e *Engine) depthCapacity() int {
	return max(1, int(DepthWindow/e.cfg.DepthInterval))
}

// depthDue reports whether a sweep at now should take a depth sample.
func (e *Engine) depthDue(now time.Time) bool {
	d := &e.depth
	d.mu.Lock()
	defer d.mu.Unlock()
	return now.Truncate(e.cfg.DepthInterval).After(d.slot)
}

// recordDepth takes the sample of every listed queue at now, if one is
// due, and of every queue still remembered that stats no longer list.
func (e *Engine) recordDepth(now time.Time, stats []QueueStats) {
	d := &e.depth
	d.mu.Lock()
	defer d.mu.Unlock()
	slot := now.Truncate(e.cfg.DepthInterval)
	if !slot.After(d.slot) {
		return
	}
	d.slot = slot
	if d.queues == nil {
		d.queues = map[string]*depthRing{}
	}
	capacity := e.depthCapacity()
	listed := make(map[string]bool, len(stats))
	for _, q := range stats {
		listed[q.Name] = true
		ring, ok := d.queues[q.Name]
		if !ok {
			if len(d.queues) >= MaxDepthQueues {
				if !d.full {
					d.full = true
					e.log.Warn("depth history is full: further queues show only their depth now", "max_queues", MaxDepthQueues)
				}
				continue
			}
			ring = &depthRing{}
			d.queues[q.Name] = ring
		}
		ring.add(DepthSample{At: now, Queued: q.Queued, Running: q.Running}, capacity)
	}
	for name, ring := range d.queues {
		if listed[name] {
			continue
		}
		if now.Sub(ring.lastBusy) >= DepthWindow {
			delete(d.queues, name)
			continue
		}
		ring.add(DepthSample{At: now}, capacity)
	}
}

func (r *depthRing) add(s DepthSample, capacity int) {
	if len(r.samples) >= capacity {
		n := copy(r.samples, r.samples[len(r.samples)-capacity+1:])
		r.samples = r.samples[:n]
	}
	r.samples = append(r.samples, s)
	if !s.empty() {
		r.lastBusy = s.At
	}
}

// depthHistoryOf returns queue's history as ListQueues shows it at now:
// the samples taken in the last DepthWindow before now, at most one
// fewer than depthCapacity, then now itself.
func (e *Engine) depthHistoryOf(name string, now DepthSample) []DepthSample {
	d := &e.depth
	d.mu.Lock()
	defer d.mu.Unlock()
	var kept []DepthSample
	if ring := d.queues[name]; ring != nil {
		kept = ring.samples
	}
	first := len(kept)
	for first > 0 && kept[first-1].At.After(now.At.Add(-DepthWindow)) {
		first--
	}
	last := len(kept)
	for last > first && !kept[last-1].At.Before(now.At) {
		last-- // taken at now (or after, by a clock stepped back): now replaces it
	}
	first = max(first, last-(e.depthCapacity()-1))
	history := make([]DepthSample, 0, last-first+1)
	history = append(history, kept[first:last]...)
	return append(history, now)
}
