package jobs

import (
	"sync"
	"sync/atomic"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Snapshot is one committed version of a job as handed to waiters and
// watchers. The engine publishes one Snapshot per (job, version), and
// every Wait and Watch that the publish wakes gets the same pointer, so
// whatever the layer above derives from it (the server's wire message and
// its encoded bytes) can be built once, through Memo, and shared by all of
// them instead of once per call.
//
// A Snapshot is immutable: nobody may modify Job, or anything it points
// to, once it has been handed out.
type Snapshot struct {
	Job jobtype.Job

	// Gone: the job was deleted (Engine.Delete) after its last version;
	// Job is that version with Version one past it. Waits and watches
	// that see it end with ErrNotFound.
	Gone bool

	// shared: published through the hub, so possibly handed to many
	// calls. A snapshot read for one call is not.
	shared bool

	memo     atomic.Pointer[memoValue]
	building sync.Mutex
}

type memoValue struct{ v any }

// newSnapshot wraps a job read for one call.
func newSnapshot(j jobtype.Job) *Snapshot { return &Snapshot{Job: j} }

// Shared reports whether the snapshot came from a publish, and so may be
// held by every waiter and watcher of its job at once; false for one read
// from the store for a single call. A layer that caches per snapshot can
// skip the bookkeeping for snapshots that are not shared.
func (s *Snapshot) Shared() bool { return s.shared }

// Memo returns the value build returned on the first call for this
// snapshot, calling build only once however many goroutines ask at once.
// It holds one value: it is the slot of the one layer above the engine
// that keeps something per snapshot (the server's wire form). build must
// not call Memo on the same snapshot.
//
// Once built, Memo is one atomic load: the thousands of calls one publish
// wakes do not queue on a lock to read it.
func (s *Snapshot) Memo(build func(*jobtype.Job) any) any {
	if m := s.memo.Load(); m != nil {
		return m.v
	}
	s.building.Lock()
	defer s.building.Unlock()
	if m := s.memo.Load(); m != nil {
		return m.v
	}
	m := &memoValue{v: build(&s.Job)}
	s.memo.Store(m)
	return m.v
}
