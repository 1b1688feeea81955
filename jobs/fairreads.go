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
	turns *turns
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

// turns hands out places, places of them at once, to callers that
// take turns by key (a reader, or a writer: fairwrites.go). A call
// holds cost places (a read one; a write as fairwrites.go says). A call
// past the free places waits, and freed places go to the waiting key
// with the fewest places held, the one that waited longest among
// equals; that call runs once enough places are free for it, and no
// call of another key passes it meanwhile, so a large call is not kept
// waiting by a stream of small ones. A key alone still has every place.
type turns struct {
	mu      sync.Mutex
	places  int                      // every place
	free    int                      // places no call holds
	running map[string]int           // places held, by key
	queued  map[string][]*turnWaiter // calls waiting, by key, oldest first
	arrived int64                    // numbers the waiters in order of arrival
	waiting atomic.Int64             // len of every queue, for ReadsWaiting and WritesWaiting
}

// turnWaiter is a call waiting for its places; ready is closed when it
// has them (granted, under mu).
type turnWaiter struct {
	key     string
	cost    int
	n       int64
	ready   chan struct{}
	granted bool
}

func newTurns(places int) *turns {
	places = max(1, places)
	return &turns{places: places, free: places, running: map[string]int{}, queued: map[string][]*turnWaiter{}}
}

// noTurn is take's release for a call that takes no turn.
func noTurn() {}

// take waits for a place for ctx's reader, if ctx has one, and returns
// its release; or the context's error if the caller left first.
func (t *turns) take(ctx context.Context) (release func(), err error) {
	reader, ok := ctx.Value(readerKey{}).(string)
	if !ok {
		return noTurn, nil
	}
	return t.takeAs(ctx, reader, 1)
}

// takeAs waits for cost places (at most every place) for key and
// returns their release; or the context's error if the caller left
// first.
func (t *turns) takeAs(ctx context.Context, key string, cost int) (release func(), err error) {
	if release, ok := t.tryTake(key, cost); ok {
		return release, nil
	}
	cost = min(max(cost, 1), t.places)
	t.mu.Lock()
	t.arrived++
	w := &turnWaiter{key: key, cost: cost, n: t.arrived, ready: make(chan struct{})}
	t.queued[key] = append(t.queued[key], w)
	t.waiting.Add(1)
	t.grant() // places freed since tryTake looked go to the waiter in turn
	t.mu.Unlock()
	select {
	case <-w.ready:
		return func() { t.release(key, cost) }, nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	if w.granted { // as the caller left: the places go on to the next
		t.mu.Unlock()
		t.release(key, cost)
		return nil, context.Cause(ctx)
	}
	q := t.queued[key]
	i := slices.Index(q, w)
	if q = slices.Delete(q, i, i+1); len(q) > 0 {
		t.queued[key] = q
	} else {
		delete(t.queued, key)
	}
	t.waiting.Add(-1)
	t.grant() // the next in turn may have been waiting behind w
	t.mu.Unlock()
	return nil, context.Cause(ctx)
}

// tryTake takes cost places (at most every place) for key if they are
// free and nobody waits, and returns their release; ok is false, and
// nothing taken, otherwise.
func (t *turns) tryTake(key string, cost int) (release func(), ok bool) {
	cost = min(max(cost, 1), t.places)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queued) > 0 || t.free < cost {
		return nil, false
	}
	t.free -= cost
	t.running[key] += cost
	return func() { t.release(key, cost) }, true
}

// release ends a call of key that held cost places, and gives them on.
func (t *turns) release(key string, cost int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.free += cost
	if t.running[key] -= cost; t.running[key] == 0 {
		delete(t.running, key)
	}
	t.grant()
}

// grant gives free places to the waiting calls in turn, for as long as
// the next one's fit. Under mu.
func (t *turns) grant() {
	for {
		var next *turnWaiter
		for key, q := range t.queued {
			w := q[0]
			if next == nil || t.running[key] < t.running[next.key] ||
				t.running[key] == t.running[next.key] && w.n < next.n {
				next = w
			}
		}
		if next == nil || next.cost > t.free {
			return
		}
		if q := t.queued[next.key][1:]; len(q) > 0 {
			t.queued[next.key] = q
		} else {
			delete(t.queued, next.key)
		}
		t.waiting.Add(-1)
		t.free -= next.cost
		t.running[next.key] += next.cost
		next.granted = true
		close(next.ready)
	}
}

// ReadsWaiting is how many callers' reads wait for their turn now.
func (e *Engine) ReadsWaiting() int64 { return e.turns.waiting.Load() }
