package jobs_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// hookStore runs afterGet once, right after the first GetJob has read the
// job and before the engine sees the result: the moment between a
// subscribe-then-read and the park.
type hookStore struct {
	store.Store
	once     sync.Once
	afterGet func(jobtype.Job)
}

func (s *hookStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	j, err := s.Store.GetJob(ctx, id)
	if err == nil && s.afterGet != nil {
		s.once.Do(func() { s.afterGet(j) })
	}
	return j, err
}

func TestWaitSeesAnEndBetweenItsReadAndItsPark(t *testing.T) {
	hs := &hookStore{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	hs.afterGet = func(read jobtype.Job) {
		if _, err := e.Complete(context.Background(), read.ID, read.LeaseID, nil); err != nil {
			t.Error(err)
		}
	}
	start := time.Now()
	got, err := e.Wait(context.Background(), j.ID, time.Now().Add(5*time.Second))
	if err != nil || got.State != jobtype.Succeeded {
		t.Fatalf("wait: %s, %v; want succeeded", got.State, err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("wait took %v: it slept through the change instead of seeing it", time.Since(start))
	}
}

func TestWaitReturnsAtOnce(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		prepare func(t *testing.T, e *jobs.Engine) string
		want    jobtype.State
		wantErr error
	}{
		{"for a job that already succeeded", func(t *testing.T, e *jobs.Engine) string {
			j := running(t, e, jobs.SubmitRequest{})
			e.Complete(ctx, j.ID, j.LeaseID, nil)
			return j.ID
		}, jobtype.Succeeded, nil},
		{"for a cancelled job", func(t *testing.T, e *jobs.Engine) string {
			j := submit(t, e, jobs.SubmitRequest{})
			e.Cancel(ctx, j.ID)
			return j.ID
		}, jobtype.Cancelled, nil},
		{"with ErrNotStarted for a pending job", func(t *testing.T, e *jobs.Engine) string {
			return submit(t, e, jobs.SubmitRequest{Hold: true}).ID
		}, "", jobs.ErrNotStarted},
		{"with ErrNotFound for an unknown job", func(t *testing.T, e *jobs.Engine) string {
			return "j_unknown"
		}, "", jobtype.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			id := tt.prepare(t, e)
			start := time.Now()
			j, err := e.Wait(ctx, id, time.Now().Add(time.Hour))
			if !errors.Is(err, tt.wantErr) || j.State != tt.want {
				t.Fatalf("wait: %q, %v; want %q, %v", j.State, err, tt.want, tt.wantErr)
			}
			if time.Since(start) > 2*time.Second {
				t.Errorf("wait took %v", time.Since(start))
			}
		})
	}
}

func TestWaitForAJobWhoseCellWasFreedReadsTheStore(t *testing.T) {
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	parked := waitedRead(t, e, ctx, j.ID, soon())
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, mustJSON("done")); err != nil {
		t.Fatal(err)
	}
	if got, err := await(t, parked); err != nil || got.State != jobtype.Succeeded {
		t.Fatalf("first wait: %s, %v", got.State, err)
	}
	if n := e.WatchedJobs(); n != 0 {
		t.Fatalf("%d cells left in the hub, want 0", n)
	}
	got, err := e.Wait(ctx, j.ID, time.Now().Add(time.Hour))
	if err != nil || got.State != jobtype.Succeeded || string(got.Result) != `"done"` {
		t.Fatalf("second wait: %+v, %v; want the stored result", got, err)
	}
}

func TestWaitAtItsDeadlineReturnsTheLatestState(t *testing.T) {
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{})
	// The deadline leaves the heartbeat below room to land before it on
	// a loaded machine; the test waits for it.
	parked := waitedRead(t, e, ctx, j.ID, time.Now().Add(time.Second))
	if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 45, "batch 5 of 11"); err != nil {
		t.Fatal(err)
	}
	got, err := await(t, parked)
	if err != nil || got.State != jobtype.Running || got.Percent != 45 || got.Step != "batch 5 of 11" {
		t.Fatalf("wait: %s %d%% %q, %v; want running at 45%% with the step, no error", got.State, got.Percent, got.Step, err)
	}
}

func TestWaitWhenTheCallerGoesAwayReturnsTheLatestState(t *testing.T) {
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	ctx, cancel := context.WithCancel(context.Background())
	parked := waitedRead(t, e, ctx, j.ID, time.Time{})
	cancel()
	if got, err := await(t, parked); err != nil || got.State != jobtype.Running {
		t.Fatalf("wait: %s, %v", got.State, err)
	}
	if n := e.WatchedJobs(); n != 0 {
		t.Errorf("%d cells left in the hub after the caller left, want 0", n)
	}
}

func TestShutdownReleasesEveryParkedCallAtOnce(t *testing.T) {
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
	var reads atomic.Int64
	ctx := countingReads(context.Background(), &reads)
	j := running(t, e, jobs.SubmitRequest{})
	far := time.Now().Add(time.Hour)

	const each = 20
	var wg sync.WaitGroup
	errs := make(chan error, 3*each)
	for range each {
		wg.Go(func() {
			got, err := e.Wait(ctx, j.ID, far)
			if err == nil && got.State != jobtype.Running {
				err = errors.New("wait returned " + string(got.State))
			}
			errs <- err
		})
		wg.Go(func() {
			errs <- e.Watch(ctx, j.ID, jobs.WatchOptions{Deadline: far, Send: func(*jobs.Snapshot) error { return nil }})
		})
		wg.Go(func() {
			_, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, far)
			if errors.Is(err, jobtype.ErrNoJob) {
				err = nil
			}
			errs <- err
		})
	}
	waitReads(t, &reads, 2*each) // the waits and watches have parked, or cannot miss Shutdown
	waitParked(t, e, each)       // so have the claims
	start := time.Now()
	e.Shutdown()
	wg.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("parked calls took %v to return", d)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Later calls do not park either.
	if got, err := e.Wait(ctx, j.ID, far); err != nil || got.State != jobtype.Running {
		t.Errorf("wait after shutdown: %s, %v", got.State, err)
	}
}

func TestOneCompletionWakesAThousandWaiters(t *testing.T) {
	metrics := &recordingMetrics{}
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{Metrics: metrics})
	var reads atomic.Int64
	ctx := countingReads(context.Background(), &reads)
	j := running(t, e, jobs.SubmitRequest{})

	const waiters = 1000
	var wg sync.WaitGroup
	states := make(chan jobtype.State, waiters)
	for range waiters {
		wg.Go(func() {
			got, err := e.Wait(ctx, j.ID, time.Now().Add(20*time.Second))
			if err != nil {
				t.Error(err)
			}
			states <- got.State
		})
	}
	waitReads(t, &reads, waiters) // every waiter has read RUNNING: the completion must wake each
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(states)
	for s := range states {
		if s != jobtype.Succeeded {
			t.Fatalf("a waiter returned %s, want succeeded", s)
		}
	}
	if metrics.count("wait") == 0 {
		t.Error("no wait wake-up was recorded")
	}
}

// A parked wait holds its job without the payload (see Wait), and still
// answers with the whole job, payload included, at its deadline and on
// Shutdown.
func TestAWaitThatEndsWithoutAChangeAnswersWithTheWholeJob(t *testing.T) {
	e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
	payload := mustJSON(map[string]string{"file": strings.Repeat("x", 1000)})
	j := submit(t, e, jobs.SubmitRequest{Payload: payload})
	got, err := e.Wait(context.Background(), j.ID, time.Now().Add(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got.State != jobtype.Queued || string(got.Payload) != string(payload) {
		t.Fatalf("at the deadline: %s with payload %.30q, want QUEUED with the payload", got.State, got.Payload)
	}

	parked := waitedRead(t, e, context.Background(), j.ID, time.Time{})
	e.Shutdown()
	got, err = await(t, parked)
	if err != nil || string(got.Payload) != string(payload) {
		t.Fatalf("on shutdown: %v with payload %.30q, want the payload", err, got.Payload)
	}
}

// TestCallsWokenByOnePublishShareOneSnapshot: the waits and watches that
// one completion wakes all get the same *Snapshot, so what the server
// builds from it through Memo (the wire message, its encoded bytes) is
// built once for all of them; a job read for one call is its own.
func TestCallsWokenByOnePublishShareOneSnapshot(t *testing.T) {
	const waiters, watchers = 40, 10
	st := openStore(t)
	counted := &readCounter{Store: st}
	e := newEngineOver(t, counted, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{Payload: []byte(`{"n":1}`)})
	before := counted.reads.Load()

	got := make(chan *jobs.Snapshot, waiters+watchers)
	for range waiters {
		go func() {
			snap, err := e.WaitSnapshot(ctx, j.ID, soon())
			if err != nil {
				t.Errorf("wait: %v", err)
			}
			got <- snap
		}()
	}
	for range watchers {
		go func() {
			err := e.Watch(ctx, j.ID, jobs.WatchOptions{AfterVersion: j.Version, Deadline: soon(), Send: func(s *jobs.Snapshot) error {
				if s.Job.State.Terminal() {
					got <- s
				}
				return nil
			}})
			if err != nil {
				t.Errorf("watch: %v", err)
			}
		}()
	}
	for counted.reads.Load()-before < waiters+watchers {
		time.Sleep(time.Millisecond) // each has subscribed once its read returns
	}
	done, err := e.Complete(ctx, j.ID, j.LeaseID, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}

	var builds atomic.Int64
	var first *jobs.Snapshot
	for range waiters + watchers {
		var snap *jobs.Snapshot
		select {
		case snap = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("a woken call did not return")
		}
		if first == nil {
			first = snap
		}
		if snap != first {
			t.Fatal("two calls woken by one publish got different snapshots")
		}
		if !snap.Shared() || snap.Job.Version != done.Version || string(snap.Job.Result) != `{"ok":true}` {
			t.Fatalf("snapshot = shared %v, v%d, result %s; want shared v%d with the result", snap.Shared(), snap.Job.Version, snap.Job.Result, done.Version)
		}
		snap.Memo(func(*jobtype.Job) any { builds.Add(1); return nil })
	}
	if n := builds.Load(); n != 1 {
		t.Fatalf("Memo built %d times for one snapshot, want 1", n)
	}

	again, err := e.WaitSnapshot(ctx, j.ID, soon())
	if err != nil {
		t.Fatal(err)
	}
	if again == first || again.Shared() {
		t.Fatal("a wait answered from the store shares the published snapshot")
	}
}
