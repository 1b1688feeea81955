package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/alerthook"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// newEngine returns an engine over a fresh SQLite file. cfg.Now nil means
// the real clock; tests of lease expiry and retention pass a fakeClock.
func newEngine(t *testing.T, cfg jobs.Config) (*jobs.Engine, store.Store) {
	t.Helper()
	st := openStore(t)
	return newEngineOver(t, st, cfg), st
}

func openStore(t *testing.T) store.Store {
	t.Helper()
	return testdb.OpenT(t, testdb.New(t))
}

// openSharedStores returns two Stores on one fresh database, as two
// replicas would have.
func openSharedStores(t *testing.T) (a, b store.Store) {
	t.Helper()
	db := testdb.New(t)
	return testdb.OpenT(t, db), testdb.OpenT(t, db)
}

func newEngineOver(t testing.TB, st store.Store, cfg jobs.Config) *jobs.Engine {
	t.Helper()
	if cfg.RetryInitialBackoff == 0 {
		cfg.RetryInitialBackoff = time.Millisecond
		cfg.RetryMaxBackoff = 4 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Alerts == nil {
		// The engine posts no webhook itself: serve hands it a hook.
		// It stops after the engine (cleanups run last first).
		done := make(chan struct{})
		t.Cleanup(func() { close(done) })
		cfg.Alerts = alerthook.New(cfg.Logger, done)
	}
	e := jobs.New(st, cfg)
	t.Cleanup(e.Shutdown)
	return e
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recordingMetrics remembers every wake-up by kind.
type recordingMetrics struct {
	mu    sync.Mutex
	woken map[string]int
}

func (m *recordingMetrics) Woke(kind string, latency time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.woken == nil {
		m.woken = map[string]int{}
	}
	m.woken[kind]++
}

func (m *recordingMetrics) count(kind string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.woken[kind]
}

func submit(t *testing.T, e *jobs.Engine, r jobs.SubmitRequest) jobtype.Job {
	t.Helper()
	if r.Kind == "" {
		r.Kind = "test"
	}
	j, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

var kinds atomic.Int64

// running submits a job of a kind of its own and claims it.
func running(t *testing.T, e *jobs.Engine, r jobs.SubmitRequest) jobtype.Job {
	t.Helper()
	if r.Kind == "" {
		r.Kind = "k" + strconv.FormatInt(kinds.Add(1), 10)
	}
	submit(t, e, r)
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w1", Kinds: []string{r.Kind}}, time.Time{})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return j
}

func get(t *testing.T, e *jobs.Engine, id string) jobtype.Job {
	t.Helper()
	j, err := e.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// soon is a deadline far enough for any test to finish before it, so that
// a test that hangs fails instead of blocking.
func soon() time.Time { return time.Now().Add(10 * time.Second) }

// result runs f in a goroutine and returns a channel with its outcome.
func async[T any](f func() (T, error)) <-chan outcome[T] {
	c := make(chan outcome[T], 1)
	go func() {
		v, err := f()
		c <- outcome[T]{v, err}
	}()
	return c
}

type outcome[T any] struct {
	v   T
	err error
}

func await[T any](t *testing.T, c <-chan outcome[T]) (T, error) {
	t.Helper()
	select {
	case o := <-c:
		return o.v, o.err
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return within 10s")
		panic("unreachable")
	}
}

// notYet fails the test if c delivers within d. It shows that a call has
// not returned, never that it has parked: a test that needs a parked call
// waits for it with waitParked (claims) or waitedRead (waits, watches).
func notYet[T any](t *testing.T, c <-chan outcome[T], d time.Duration) {
	t.Helper()
	select {
	case o := <-c:
		t.Fatalf("call returned early: %+v, %v", o.v, o.err)
	case <-time.After(d):
	}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func isInvalid(err error, field string) bool {
	var inv *jobtype.InvalidError
	return errors.As(err, &inv) && inv.Field == field
}
