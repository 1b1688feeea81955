// Package watch is a per-key latest-value broadcaster: the mechanism that
// wakes every parked WaitJob and WatchJob (and tenant feed) the moment a
// value changes. Parked ClaimJob calls are not woken through it: the
// engine wakes one claim per job (jobs/claimers.go). It imports nothing
// of jobwatch.
//
// The invariants, which the rest of jobwatch relies on:
//
//   - Subscribe before read. A reader subscribes to a key first and then
//     reads the authoritative value elsewhere (the store). Any Publish that
//     happens after Subscribe returns is seen by the subscription, so no
//     change can slip between the subscribe and the read.
//   - Versions only go up. Publish keeps a value only if its version is
//     above the cell's current one; a late or duplicate publish is dropped.
//   - No per-subscriber buffer. A cell holds one value and one channel that
//     is closed (and replaced) on every accepted publish. A slow reader
//     never makes the publisher wait or the hub buffer: it skips straight
//     to the latest value when it looks again.
//   - Cells live only while someone subscribes. The last Close frees the
//     cell; a publish to a key nobody watches costs one map lookup. A value
//     published before the last Close (a terminal job, say) stays readable
//     by every subscription that is still open.
//
// No lock is shared by all keys, and none is taken to read a
// subscription's value or to wake it. The cells are spread over shards,
// each a map under its own lock, which Subscribe takes (shared, unless it
// creates the cell), Publish and Version take shared to find the cell,
// and only the last Close of a cell takes to free it. A cell's value,
// version and channel are one immutable state behind an atomic pointer:
// Latest is one atomic load, and Publish swaps in a new state with
// compare-and-swap and closes the old state's channel, so the 10,000
// readers that one publish wakes each read the new state without
// queueing on anything. A subscription counts itself in the cell with an
// atomic add; the count is decremented without a lock, and a Close that
// takes it to zero frees the cell under the shard's lock only if no
// Subscribe has counted itself in again meanwhile (Subscribe counts under
// the shard's lock, so the two cannot interleave).
package watch

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// shards spreads the cells over this many maps, each with its own lock.
const shards = 64

// Hub holds one cell per key that has subscribers. The zero value is not
// usable; call NewHub.
type Hub[V any] struct {
	seed   maphash.Seed
	shards [shards]shard[V]
}

type shard[V any] struct {
	mu    sync.RWMutex
	cells map[string]*cell[V]
	_     [32]byte // a shard per 64-byte line: neighbours' locks do not share one
}

type cell[V any] struct {
	refs  atomic.Int64
	state atomic.Pointer[state[V]]
	// groups are the wake channels of the Groups subscribed to the cell
	// (nil: none), replaced whole under groupsMu: Publish reads it with
	// one atomic load.
	groups   atomic.Pointer[[]chan struct{}]
	groupsMu sync.Mutex
}

// state is what a cell holds at one version. It is never modified once
// stored: Publish replaces it whole.
type state[V any] struct {
	version int64 // 0: nothing published since the cell was created
	value   V
	changed chan struct{} // closed when a newer state replaces this one
}

// NewHub returns an empty hub.
func NewHub[V any]() *Hub[V] {
	h := &Hub[V]{seed: maphash.MakeSeed()}
	for i := range h.shards {
		h.shards[i].cells = make(map[string]*cell[V])
	}
	return h
}

func (h *Hub[V]) shard(key string) *shard[V] {
	return &h.shards[maphash.String(h.seed, key)%shards]
}

// Publish offers value at version for key. It is kept, and every
// subscriber woken, only if version is above the cell's current version.
// It reports whether the value was kept; with no subscribers it is dropped
// and Publish returns false.
func (h *Hub[V]) Publish(key string, version int64, value V) bool {
	sh := h.shard(key)
	sh.mu.RLock()
	c, ok := sh.cells[key]
	sh.mu.RUnlock()
	if !ok {
		return false
	}
	// A cell freed since the lookup has no subscriber left; one created
	// for key since then was created after this publish started, which
	// the invariant does not promise to reach.
	next := &state[V]{version: version, value: value}
	for {
		cur := c.state.Load()
		if version <= cur.version {
			return false
		}
		if next.changed == nil {
			next.changed = make(chan struct{})
		}
		if c.state.CompareAndSwap(cur, next) {
			close(cur.changed) // only the publisher that replaced cur closes it
			if gs := c.groups.Load(); gs != nil {
				for _, wake := range *gs {
					select {
					case wake <- struct{}{}:
					default: // already woken, not yet looked
					}
				}
			}
			return true
		}
	}
}

// Subscribe opens a subscription to key. Every Publish to key that starts
// after Subscribe returns is visible through it. Close it when done.
func (h *Hub[V]) Subscribe(key string) *Subscription[V] {
	sh := h.shard(key)
	sh.mu.RLock()
	c, ok := sh.cells[key]
	if ok {
		c.refs.Add(1)
	}
	sh.mu.RUnlock()
	if !ok {
		sh.mu.Lock()
		c, ok = sh.cells[key]
		if !ok {
			c = &cell[V]{}
			c.state.Store(&state[V]{changed: make(chan struct{})})
			sh.cells[key] = c
		}
		c.refs.Add(1)
		sh.mu.Unlock()
	}
	return &Subscription[V]{hub: h, key: key, cell: c}
}

// Version reports the version key's cell holds (0 if nothing was
// published to it since it was created) and whether key has any
// subscriber at all. It takes no lock but its shard's read lock.
func (h *Hub[V]) Version(key string) (version int64, subscribed bool) {
	sh := h.shard(key)
	sh.mu.RLock()
	c, ok := sh.cells[key]
	sh.mu.RUnlock()
	if !ok {
		return 0, false
	}
	return c.state.Load().version, true
}

// Keys returns the keys that have at least one subscriber, in no order.
func (h *Hub[V]) Keys() []string {
	var keys []string
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		for k := range sh.cells {
			keys = append(keys, k)
		}
		sh.mu.RUnlock()
	}
	return keys
}

// Len reports how many keys have at least one subscriber.
func (h *Hub[V]) Len() int {
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		n += len(sh.cells)
		sh.mu.RUnlock()
	}
	return n
}

// Subscription is one reader's view of a cell. Its methods are safe for
// concurrent use.
type Subscription[V any] struct {
	hub    *Hub[V]
	key    string
	cell   *cell[V]
	closed atomic.Bool
}

// Latest returns the newest value published since the cell was created
// (version 0 and the zero V when none was), and a channel that is closed
// once a newer version is published. Typical use:
//
//	for {
//		v, version, changed := sub.Latest()
//		// ... use v if version is new to you ...
//		select {
//		case <-changed:
//		case <-ctx.Done():
//			return
//		}
//	}
func (s *Subscription[V]) Latest() (value V, version int64, changed <-chan struct{}) {
	st := s.cell.state.Load()
	return st.value, st.version, st.changed
}

// Close ends the subscription; the last one to close frees the cell.
// Close is idempotent.
func (s *Subscription[V]) Close() {
	if !s.closed.CompareAndSwap(false, true) {
		return
	}
	if s.cell.refs.Add(-1) > 0 {
		return
	}
	sh := s.hub.shard(s.key)
	sh.mu.Lock()
	// A Subscribe may have found the cell and counted itself in after the
	// count reached zero, and it may even have been freed and replaced
	// since: free only this cell, and only if it is still unused.
	if s.cell.refs.Load() == 0 && sh.cells[s.key] == s.cell {
		delete(sh.cells, s.key)
	}
	sh.mu.Unlock()
}

// Group is one reader's subscriptions to several keys with one channel
// that any publish to any of them wakes, so that a reader of a thousand
// keys waits on one channel, not a thousand, and costs the hub a
// subscription and a channel reference per key. Its methods are safe for
// concurrent use.
type Group[V any] struct {
	subs []*Subscription[V]
	wake chan struct{}
}

// SubscribeGroup opens a subscription to each of keys (which should be
// distinct) sharing one wake channel. Every Publish to one of keys that
// starts after SubscribeGroup returns is visible through its
// subscription and sends on Changed. Close it when done.
func (h *Hub[V]) SubscribeGroup(keys []string) *Group[V] {
	g := &Group[V]{subs: make([]*Subscription[V], len(keys)), wake: make(chan struct{}, 1)}
	for i, key := range keys {
		sub := h.Subscribe(key)
		sub.cell.groupsMu.Lock()
		var gs []chan struct{}
		if old := sub.cell.groups.Load(); old != nil {
			gs = append(gs, *old...)
		}
		gs = append(gs, g.wake)
		sub.cell.groups.Store(&gs)
		sub.cell.groupsMu.Unlock()
		g.subs[i] = sub
	}
	return g
}

// Len is how many keys the group holds.
func (g *Group[V]) Len() int { return len(g.subs) }

// Latest is Subscription.Latest of the group's i-th key, without the
// channel: wait on Changed instead.
func (g *Group[V]) Latest(i int) (value V, version int64) {
	st := g.subs[i].cell.state.Load()
	return st.value, st.version
}

// Changed receives once after one or more publishes to the group's keys
// since it last received: look at every key's Latest after each receive.
func (g *Group[V]) Changed() <-chan struct{} { return g.wake }

// Close ends every subscription of the group. Close is idempotent.
func (g *Group[V]) Close() {
	for _, sub := range g.subs {
		if sub.closed.Load() {
			continue
		}
		c := sub.cell
		c.groupsMu.Lock()
		if old := c.groups.Load(); old != nil {
			var gs []chan struct{}
			for _, w := range *old {
				if w != g.wake {
					gs = append(gs, w)
				}
			}
			if len(gs) == 0 {
				c.groups.Store(nil)
			} else {
				c.groups.Store(&gs)
			}
		}
		c.groupsMu.Unlock()
		sub.Close()
	}
}
