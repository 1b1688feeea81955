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
package watch

import "sync"

// Hub holds one cell per key that has subscribers. The zero value is not
// usable; call NewHub.
type Hub[V any] struct {
	mu    sync.Mutex
	cells map[string]*cell[V]
}

type cell[V any] struct {
	refs    int
	version int64 // 0: nothing published since the cell was created
	value   V
	changed chan struct{} // closed and replaced on every accepted publish
}

// NewHub returns an empty hub.
func NewHub[V any]() *Hub[V] {
	return &Hub[V]{cells: make(map[string]*cell[V])}
}

// Publish offers value at version for key. It is kept, and every
// subscriber woken, only if version is above the cell's current version.
// It reports whether the value was kept; with no subscribers it is dropped
// and Publish returns false.
func (h *Hub[V]) Publish(key string, version int64, value V) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.cells[key]
	if !ok || version <= c.version {
		return false
	}
	c.version = version
	c.value = value
	close(c.changed)
	c.changed = make(chan struct{})
	return true
}

// Subscribe opens a subscription to key. Every Publish to key that starts
// after Subscribe returns is visible through it. Close it when done.
func (h *Hub[V]) Subscribe(key string) *Subscription[V] {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.cells[key]
	if !ok {
		c = &cell[V]{changed: make(chan struct{})}
		h.cells[key] = c
	}
	c.refs++
	return &Subscription[V]{hub: h, key: key, cell: c}
}

// Len reports how many keys have at least one subscriber.
func (h *Hub[V]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.cells)
}

// Subscription is one reader's view of a cell. Its methods are safe for
// concurrent use.
type Subscription[V any] struct {
	hub  *Hub[V]
	key  string
	cell *cell[V]
	once sync.Once
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
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.cell.value, s.cell.version, s.cell.changed
}

// Close ends the subscription; the last one to close frees the cell.
// Close is idempotent.
func (s *Subscription[V]) Close() {
	s.once.Do(func() {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		s.cell.refs--
		if s.cell.refs == 0 {
			delete(s.hub.cells, s.key)
		}
	})
}
