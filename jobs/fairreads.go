package jobs

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Callers' reads of jobs and logs take turns by reader (a tenant, as the
// server names it, WithReader), so that one reader's many reads cannot
// keep another's few waiting: a store reads a few at a time (SQLite's
// read pool holds 4 connections), and a database pool hands a freed
// connection to any of its waiters, so 200 ListJobs loops of one tenant
// kept another tenant's GetJob waiting 615 ms at the median and 5 s at
// the 99th percentile (server's BenchmarkAnotherTenantsGetJobBehindManyLists;
// 8.4 ms and 69 ms with turns), and an outside probe's 500 WaitJobs of
// 1,000 ids, 13 s. Now at most Store.ReadConns of them
// run at once; a read past that waits, and a finished read hands its
// place to the waiting reader with the fewest reads running, the one
// that waited longest among equals. A reader alone still has every
// place. The engine's own reads (a change's fan-out, claims, the sweep)
// carry no reader and do not wait.

// readerKey is the context key of WithReader.
type readerKey struct{}

// WithReader returns ctx carrying reader, whose store reads of jobs and
// logs made with ctx take their turn beside other readers' (see
// fairReads).
func WithReader(ctx context.Context, reader string) context.Context {
	return context.WithValue(ctx, readerKey{}, reader)
}

// DefaultReads is how many callers' reads run at once over a store that
// does not say (ReadConns).
const DefaultReads = 4

// fairReads is the store as the engine sees it: reads of jobs and logs
// made with a reader (WithReader) take turns (readTurns); everything
// else goes straight to the store.
type fairReads struct {
	store.Store
	turns *readTurns
}

func (s fairReads) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return jobtype.Job{}, err
	}
	defer release()
	return s.Store.GetJob(ctx, id)
}

func (s fairReads) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return jobtype.Job{}, err
	}
	defer release()
	return s.Store.ReadJob(ctx, id, r)
}

func (s fairReads) ReadJobs(ctx context.Context, ids []string, r store.JobRead) ([]jobtype.Job, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return s.Store.ReadJobs(ctx, ids, r)
}

func (s fairReads) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return nil, "", err
	}
	defer release()
	return s.Store.ListJobs(ctx, f)
}

func (s fairReads) JobLogs(ctx context.Context, id string, afterSeq int64, limit int) (store.LogPage, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return store.LogPage{}, err
	}
	defer release()
	return s.Store.JobLogs(ctx, id, afterSeq, limit)
}

func (s fairReads) JobsDeleted(ctx context.Context, f store.DeletedFilter) ([]string, string, error) {
	release, err := s.turns.take(ctx)
	if err != nil {
		return nil, "", err
	}
	defer release()
	return s.Store.JobsDeleted(ctx, f)
}

// readTurns hands out places to read, places of them at once.
type readTurns struct {
	mu      sync.Mutex
	free    int                      // places no read holds
	running map[string]int           // reads running, by reader
	queued  map[string][]*readWaiter // reads waiting, by reader, oldest first
	arrived int64                    // numbers the waiters in order of arrival
	waiting atomic.Int64             // len of every queue, for ReadsWaiting
}

// readWaiter is a read waiting for its place; ready is closed when it
// has it (granted, under mu).
type readWaiter struct {
	reader  string
	n       int64
	ready   chan struct{}
	granted bool
}

func newReadTurns(places int) *readTurns {
	return &readTurns{free: max(1, places), running: map[string]int{}, queued: map[string][]*readWaiter{}}
}

// noTurn is take's release for a read without a reader.
func noTurn() {}

// take waits for a place for ctx's reader, if ctx has one, and returns
// its release; or the context's error if the caller left first.
func (t *readTurns) take(ctx context.Context) (release func(), err error) {
	reader, ok := ctx.Value(readerKey{}).(string)
	if !ok {
		return noTurn, nil
	}
	t.mu.Lock()
	if t.free > 0 { // then nobody waits: a freed place goes to a waiter
		t.free--
		t.running[reader]++
		t.mu.Unlock()
		return func() { t.release(reader) }, nil
	}
	t.arrived++
	w := &readWaiter{reader: reader, n: t.arrived, ready: make(chan struct{})}
	t.queued[reader] = append(t.queued[reader], w)
	t.waiting.Add(1)
	t.mu.Unlock()
	select {
	case <-w.ready:
		return func() { t.release(reader) }, nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	if w.granted { // as the caller left: the place goes on to the next
		t.mu.Unlock()
		t.release(reader)
		return nil, context.Cause(ctx)
	}
	q := t.queued[reader]
	i := slices.Index(q, w)
	if q = slices.Delete(q, i, i+1); len(q) > 0 {
		t.queued[reader] = q
	} else {
		delete(t.queued, reader)
	}
	t.waiting.Add(-1)
	t.mu.Unlock()
	return nil, context.Cause(ctx)
}

// release ends a read of reader and gives its place to the next.
func (t *readTurns) release(reader string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running[reader]--; t.running[reader] == 0 {
		delete(t.running, reader)
	}
	var next *readWaiter
	for r, q := range t.queued {
		w := q[0]
		if next == nil || t.running[r] < t.running[next.reader] ||
			t.running[r] == t.running[next.reader] && w.n < next.n {
			next = w
		}
	}
	if next == nil {
		t.free++
		return
	}
	if q := t.queued[next.reader][1:]; len(q) > 0 {
		t.queued[next.reader] = q
	} else {
		delete(t.queued, next.reader)
	}
	t.waiting.Add(-1)
	t.running[next.reader]++
	next.granted = true
	close(next.ready)
}

// ReadsWaiting is how many callers' reads wait for their turn now.
func (e *Engine) ReadsWaiting() int64 { return e.turns.waiting.Load() }
