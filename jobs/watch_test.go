package jobs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// recorder is a WatchOptions.Send that keeps what it was sent.
type recorder struct {
	mu         sync.Mutex
	versions   []int64
	states     []jobtype.State
	keepalives int
	sent       chan struct{} // gets a value per call, if anyone listens
}

func newRecorder() *recorder { return &recorder{sent: make(chan struct{}, 1000)} }

func (r *recorder) send(s *jobs.Snapshot) error {
	r.mu.Lock()
	if s == nil {
		r.keepalives++
	} else {
		r.versions = append(r.versions, s.Job.Version)
		r.states = append(r.states, s.Job.State)
	}
	r.mu.Unlock()
	r.sent <- struct{}{}
	return nil
}

func (r *recorder) got() ([]int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.versions...), r.keepalives
}

func (r *recorder) waitSent(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.sent:
		case <-time.After(5 * time.Second):
			t.Fatal("nothing sent within 5s")
		}
	}
}

func equalVersions(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWatchSendsTheCurrentSnapshotThenEachChangeAndEndsAfterTheTerminalOne(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := submit(t, e, jobs.SubmitRequest{Kind: "k", Hold: true}) // v1, pending: watching it is fine
	rec := newRecorder()
	done := async(func() (struct{}, error) {
		return struct{}{}, e.Watch(ctx, j.ID, jobs.WatchOptions{Deadline: soon(), Send: rec.send})
	})
	rec.waitSent(t, 1)

	if _, err := e.Start(ctx, j.ID); err != nil { // v2
		t.Fatal(err)
	}
	rec.waitSent(t, 1)
	c, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, soon()) // v3
	if err != nil {
		t.Fatal(err)
	}
	rec.waitSent(t, 1)
	if _, err := e.Heartbeat(ctx, j.ID, c.LeaseID, 50, ""); err != nil { // v4
		t.Fatal(err)
	}
	rec.waitSent(t, 1)
	if _, err := e.Complete(ctx, j.ID, c.LeaseID, nil); err != nil { // v5
		t.Fatal(err)
	}
	if _, err := await(t, done); err != nil {
		t.Fatalf("watch: %v, want nil after the terminal snapshot", err)
	}
	if versions, _ := rec.got(); !equalVersions(versions, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("sent versions %v, want 1..5", versions)
	}
	if rec.states[0] != jobtype.Pending || rec.states[4] != jobtype.Succeeded {
		t.Errorf("states %v", rec.states)
	}
}

func TestWatchResumesByAfterVersion(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		after int64
		want  []int64
	}{
		{"after 0 sends the current snapshot", 0, []int64{4}},
		{"after an older version sends the current snapshot", 2, []int64{4}},
		{"after the current version sends only what comes next", 4, nil},
		{"after a version the store never had (a restored database) sends the current snapshot", 9, []int64{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			j := running(t, e, jobs.SubmitRequest{}) // v2
			e.Heartbeat(ctx, j.ID, j.LeaseID, 10, "")
			e.Heartbeat(ctx, j.ID, j.LeaseID, 20, "") // v4
			rec := newRecorder()
			done := async(func() (struct{}, error) {
				return struct{}{}, e.Watch(ctx, j.ID, jobs.WatchOptions{AfterVersion: tt.after, Deadline: soon(), Send: rec.send})
			})
			rec.waitSent(t, len(tt.want))
			notYet(t, done, 20*time.Millisecond)
			if versions, _ := rec.got(); !equalVersions(versions, tt.want) {
				t.Fatalf("first sent %v, want %v", versions, tt.want)
			}
			if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, 30, ""); err != nil { // v5
				t.Fatal(err)
			}
			rec.waitSent(t, 1)
			if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil { // v6
				t.Fatal(err)
			}
			if _, err := await(t, done); err != nil {
				t.Fatal(err)
			}
			if versions, _ := rec.got(); !equalVersions(versions, append(tt.want, 5, 6)) {
				t.Errorf("sent %v, want %v then 5, 6: no duplicate, no gap", versions, tt.want)
			}
		})
	}
}

func TestWatchOfAnEndedJobTheCallerHasSeenEndsAtOnce(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{})
	c, _ := e.Cancel(context.Background(), j.ID)
	rec := newRecorder()
	err := e.Watch(context.Background(), j.ID, jobs.WatchOptions{AfterVersion: c.Version, Deadline: soon(), Send: rec.send})
	if versions, _ := rec.got(); err != nil || len(versions) != 0 {
		t.Fatalf("watch: sent %v, %v; want nothing and nil", versions, err)
	}
	err = e.Watch(context.Background(), j.ID, jobs.WatchOptions{Deadline: soon(), Send: rec.send})
	if versions, _ := rec.got(); err != nil || !equalVersions(versions, []int64{c.Version}) {
		t.Fatalf("watch from 0: sent %v, %v; want the terminal snapshot", versions, err)
	}
}

func TestWatchSkipsToTheLatestForASlowReader(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	ctx := context.Background()
	j := running(t, e, jobs.SubmitRequest{}) // v2

	release := make(chan struct{})
	var (
		mu       sync.Mutex
		versions []int64
	)
	first := make(chan struct{})
	done := async(func() (struct{}, error) {
		return struct{}{}, e.Watch(ctx, j.ID, jobs.WatchOptions{Deadline: soon(), Send: func(s *jobs.Snapshot) error {
			mu.Lock()
			versions = append(versions, s.Job.Version)
			n := len(versions)
			mu.Unlock()
			if n == 1 {
				close(first)
				<-release // the reader stalls on its first snapshot
			}
			return nil
		}})
	})
	<-first
	for p := int32(1); p <= 20; p++ { // v3..v22 while the reader stalls
		if _, err := e.Heartbeat(ctx, j.ID, j.LeaseID, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	// Back from the stall, the reader is sent the latest version, 22:
	// complete only once it has been, so the skip is what is tested.
	sent := func() int { mu.Lock(); defer mu.Unlock(); return len(versions) }
	for deadline := time.Now().Add(10 * time.Second); sent() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader was sent nothing within 10s of its stall")
		}
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil { // v23
		t.Fatal(err)
	}
	if _, err := await(t, done); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// After the stall the reader gets 22, never the versions it was too
	// slow for, then 23.
	if !equalVersions(versions, []int64{2, 22, 23}) {
		t.Errorf("sent %v, want 2, then straight to 22, then 23", versions)
	}
}

func TestWatchSendsKeepalivesWhileNothingChanges(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	rec := newRecorder()
	err := e.Watch(context.Background(), j.ID, jobs.WatchOptions{
		Deadline:  time.Now().Add(200 * time.Millisecond),
		Keepalive: 30 * time.Millisecond,
		Send:      rec.send,
	})
	if err != nil {
		t.Fatalf("watch at its deadline: %v, want nil", err)
	}
	versions, keepalives := rec.got()
	if !equalVersions(versions, []int64{j.Version}) || keepalives < 2 {
		t.Errorf("sent %v and %d keepalives; want the snapshot and at least 2 keepalives", versions, keepalives)
	}
}

func TestWatchEnds(t *testing.T) {
	tests := []struct {
		name    string
		end     func(e *jobs.Engine, cancel context.CancelFunc)
		send    error
		wantErr error
	}{
		{"with nil on shutdown", func(e *jobs.Engine, _ context.CancelFunc) { e.Shutdown() }, nil, nil},
		{"with the context's error when the caller goes away", func(_ *jobs.Engine, cancel context.CancelFunc) { cancel() }, nil, context.Canceled},
		{"with Send's error", func(*jobs.Engine, context.CancelFunc) {}, errors.New("broken pipe"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngineOver(t, callReads{openStore(t)}, jobs.Config{})
			j := running(t, e, jobs.SubmitRequest{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var reads atomic.Int64
			readCtx := countingReads(ctx, &reads)
			done := async(func() (struct{}, error) {
				return struct{}{}, e.Watch(readCtx, j.ID, jobs.WatchOptions{Deadline: time.Now().Add(time.Hour), Send: func(*jobs.Snapshot) error { return tt.send }})
			})
			waitReads(t, &reads, 1) // the watch has read its job: it cannot miss the end
			tt.end(e, cancel)
			_, err := await(t, done)
			want := tt.wantErr
			if tt.send != nil {
				want = tt.send
			}
			if !errors.Is(err, want) {
				t.Fatalf("got %v, want %v", err, want)
			}
		})
	}
}

func TestWatchSeesAChangeBetweenItsReadAndItsPark(t *testing.T) {
	hs := &hookStore{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{})
	j := running(t, e, jobs.SubmitRequest{})
	hs.afterGet = func(read jobtype.Job) {
		if _, err := e.Complete(context.Background(), read.ID, read.LeaseID, nil); err != nil {
			t.Error(err)
		}
	}
	rec := newRecorder()
	if err := e.Watch(context.Background(), j.ID, jobs.WatchOptions{Deadline: time.Now().Add(5 * time.Second), Send: rec.send}); err != nil {
		t.Fatal(err)
	}
	if versions, _ := rec.got(); !equalVersions(versions, []int64{j.Version, j.Version + 1}) {
		t.Fatalf("sent %v, want the read snapshot and then the completion", versions)
	}
}

func TestASnapshotFromAnotherReplicaWakesLocalWatchersOncePublished(t *testing.T) {
	st := openStore(t)
	a := newEngineOver(t, st, jobs.Config{})
	b := newEngineOver(t, callReads{st}, jobs.Config{})
	ctx := context.Background()
	j := running(t, a, jobs.SubmitRequest{})
	parked := waitedRead(t, b, ctx, j.ID, soon())

	done, err := a.Complete(ctx, j.ID, j.LeaseID, nil)
	if err != nil {
		t.Fatal(err)
	}
	notYet(t, parked, 50*time.Millisecond) // b's hub has not heard of it
	b.Publish(done)
	if got, err := await(t, parked); err != nil || got.State != jobtype.Succeeded {
		t.Fatalf("wait on the other replica: %s, %v", got.State, err)
	}
}
