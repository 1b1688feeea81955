package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/store"
)

func TestClaimParksUntilAJobIsSubmitted(t *testing.T) {
	metrics := &recordingMetrics{}
	e, _ := newEngine(t, jobs.Config{Metrics: metrics})
	parked := async(func() (store.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"mail"}}, soon())
	})
	notYet(t, parked, 50*time.Millisecond)

	submit(t, e, jobs.SubmitRequest{Kind: "report"}) // not a kind it runs
	notYet(t, parked, 50*time.Millisecond)

	want := submit(t, e, jobs.SubmitRequest{Kind: "mail"})
	j, err := await(t, parked)
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if metrics.count("claim") != 1 {
		t.Errorf("claim wake-ups recorded: %d, want 1", metrics.count("claim"))
	}
}

func TestClaimParksUntilRunAtArrives(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	runAt := time.Now().Add(150 * time.Millisecond)
	want := submit(t, e, jobs.SubmitRequest{RunAt: runAt})
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, soon())
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if now := time.Now(); now.Before(runAt.Truncate(time.Microsecond)) {
		t.Errorf("claimed at %v, before run_at %v", now, runAt)
	}
}

func TestClaimWakesWhenAHeldJobStarts(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	held := submit(t, e, jobs.SubmitRequest{Hold: true})
	parked := async(func() (store.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, soon())
	})
	notYet(t, parked, 50*time.Millisecond)
	if _, err := e.Start(context.Background(), held.ID); err != nil {
		t.Fatal(err)
	}
	if j, err := await(t, parked); err != nil || j.ID != held.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, held.ID)
	}
}

func TestClaimEndsWithErrNoJob(t *testing.T) {
	tests := []struct {
		name string
		end  func(e *jobs.Engine, cancel context.CancelFunc)
		dl   time.Duration
	}{
		{"at its deadline", func(*jobs.Engine, context.CancelFunc) {}, 50 * time.Millisecond},
		{"when the caller goes away", func(_ *jobs.Engine, cancel context.CancelFunc) { cancel() }, time.Hour},
		{"on shutdown", func(e *jobs.Engine, _ context.CancelFunc) { e.Shutdown() }, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newEngine(t, jobs.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			parked := async(func() (store.Job, error) {
				return e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(tt.dl))
			})
			time.Sleep(20 * time.Millisecond)
			tt.end(e, cancel)
			if _, err := await(t, parked); !errors.Is(err, jobs.ErrNoJob) {
				t.Fatalf("got %v, want ErrNoJob", err)
			}
		})
	}
}

func TestClaimAfterShutdownDoesNotPark(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	e.Shutdown()
	if _, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(time.Hour)); !errors.Is(err, jobs.ErrNoJob) {
		t.Fatalf("got %v, want ErrNoJob at once", err)
	}
	// A ready job is still handed out: shutdown stops parking, not work.
	want := submit(t, e, jobs.SubmitRequest{})
	if j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(time.Hour)); err != nil || j.ID != want.ID {
		t.Fatalf("claim of a ready job after shutdown: %s, %v", j.ID, err)
	}
}

func TestTwoClaimersNeverShareAJob(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	const workers, jobCount = 8, 40
	// The workers park until the test has seen every job claimed and
	// cancels them: no claim deadline that a slow disk could outlast.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type claim struct{ job, worker string }
	claims := make(chan claim, 2*jobCount)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("w%d", w)
			for {
				j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: worker}, soon())
				if errors.Is(err, jobs.ErrNoJob) {
					return
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				claims <- claim{j.ID, worker}
			}
		})
	}
	for range jobCount {
		submit(t, e, jobs.SubmitRequest{})
	}
	claimed := map[string]string{}
	for len(claimed) < jobCount {
		select {
		case c := <-claims:
			if prev, ok := claimed[c.job]; ok {
				t.Errorf("job claimed twice: %s by %s and %s", c.job, prev, c.worker)
			}
			claimed[c.job] = c.worker
		case <-time.After(10 * time.Second):
			t.Fatalf("%d jobs claimed within 10s, want %d", len(claimed), jobCount)
		}
	}
	cancel()
	wg.Wait()
	close(claims)
	for c := range claims {
		t.Errorf("job claimed twice: %s by %s and %s", c.job, claimed[c.job], c.worker)
	}
}

// nextReadyHook runs hook once right after the first NextReady has read
// the store: after a claim found nothing and before it parks. Only the
// claim signal can tell the claimer about what hook does.
type nextReadyHook struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *nextReadyHook) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	runAt, ok, err := s.Store.NextReady(ctx, f)
	s.once.Do(s.hook)
	return runAt, ok, err
}

func TestClaimSeesAJobQueuedBetweenItsLookAndItsPark(t *testing.T) {
	hs := &nextReadyHook{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{})
	var want store.Job
	hs.hook = func() { want = submit(t, e, jobs.SubmitRequest{}) }
	start := time.Now()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(5*time.Second))
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("claim took %v: it slept through the submit", time.Since(start))
	}
}

// afterClaim runs hook once, right after the first ClaimJob returned.
type afterClaim struct {
	store.Store
	once sync.Once
	hook func()
}

func (s *afterClaim) ClaimJob(ctx context.Context, f store.ClaimFilter, claim func(*store.Job)) (store.Job, error) {
	j, err := s.Store.ClaimJob(ctx, f, claim)
	s.once.Do(s.hook)
	return j, err
}

func TestClaimSeesAJobThatBecomesReadyBetweenItsLookAndItsPark(t *testing.T) {
	clock := newFakeClock()
	hs := &afterClaim{Store: openStore(t)}
	e := newEngineOver(t, hs, jobs.Config{Now: clock.Now})
	want := submit(t, e, jobs.SubmitRequest{RunAt: clock.Now().Add(time.Millisecond)})
	// The claim finds nothing ready; before it asks when to look again,
	// the job's RunAt passes.
	hs.hook = func() { clock.Advance(time.Millisecond) }
	start := time.Now()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w"}, time.Now().Add(5*time.Second))
	if err != nil || j.ID != want.ID {
		t.Fatalf("claim: %s, %v; want %s", j.ID, err, want.ID)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("claim took %v: it parked until its deadline with a ready job", time.Since(start))
	}
}
