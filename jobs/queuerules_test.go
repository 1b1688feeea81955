package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// claimNow claims without parking long: a job ready now, or ErrNoJob.
func claimNow(e *jobs.Engine, queue string) (jobtype.Job, error) {
	return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Queues: []string{queue}}, time.Now())
}

// Many workers race for the jobs of a serial queue, a bounded queue and
// two queues sharing a pool, each holding its job a moment: none of them
// ever sees more RUNNING than the rules allow, the serial queue runs its
// jobs in submission order, and a head that fails is retried before the
// next one runs (on_failure: block).
func TestQueueRulesHoldWithManyWorkersRacing(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{
			"index":  {Serial: true, BlockOnFailure: true, MaxAttempts: 3},
			"readme": {MaxRunning: 3, Uses: []string{"db"}},
			"stats":  {Uses: []string{"db"}},
			"free":   {},
		},
		Pools: map[string]int{"db": 4},
	}})
	const perQueue, workers = 12, 16
	queues := []string{"index", "readme", "stats", "free"}
	var serial []string
	for range perQueue {
		for _, q := range queues {
			j := submit(t, e, jobs.SubmitRequest{Queue: q})
			if q == "index" {
				serial = append(serial, j.ID)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		running  = map[string]int{}
		pool     int
		order    []string // the serial queue's claims, retries included
		finished int
		allDone  = make(chan struct{})
	)
	inPool := func(q string) bool { return q == "readme" || q == "stats" }
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: fmt.Sprintf("w%d", w)}, soon())
				if errors.Is(err, jobtype.ErrNoJob) {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				// Counted after the claim committed and uncounted before
				// the end commits: the count is never above the store's.
				mu.Lock()
				running[j.Queue]++
				if inPool(j.Queue) {
					pool++
				}
				// Every other serial job fails its first attempt.
				fail := false
				if j.Queue == "index" {
					order = append(order, j.ID)
					fail = j.Attempt == 1 && len(order)%2 == 0
				}
				if running["index"] > 1 || running["readme"] > 3 || pool > 4 {
					t.Errorf("after %s was claimed: running %v, pool db %d; want index ≤ 1, readme ≤ 3, db ≤ 4", j.ID, running, pool)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // hold the job, so claims overlap it

				mu.Lock()
				running[j.Queue]--
				if inPool(j.Queue) {
					pool--
				}
				mu.Unlock()
				if fail {
					if _, err := e.Fail(context.Background(), j.ID, j.LeaseID, jobtype.JobError{Type: "Busy"}, true); err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
					t.Error(err)
				}
				mu.Lock()
				finished++
				if finished == perQueue*len(queues) {
					close(allDone)
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-allDone:
	case <-time.After(60 * time.Second): // a generous bound: two test suites and PostgreSQL on 2 cores took over 30 s once
		mu.Lock()
		t.Errorf("%d of %d jobs finished within 60s", finished, perQueue*len(queues))
		mu.Unlock()
	}
	cancel()
	wg.Wait()

	// Retries of the head come right after it; dropping them leaves the
	// submission order.
	var distinct []string
	for i, id := range order {
		if i > 0 && order[i-1] == id {
			continue
		}
		distinct = append(distinct, id)
	}
	if fmt.Sprint(distinct) != fmt.Sprint(serial) {
		t.Errorf("serial claims (retries folded) = %v, want the submission order %v", distinct, serial)
	}
	if len(order) == len(distinct) {
		t.Errorf("no serial job was retried; the test meant to fail some")
	}
}

// One claimer holds a serial queue's only slot; another waits parked. The
// end of the running job, not a new submission, must wake it.
func TestAClaimParkedBehindAFullQueueWakesWhenTheRunningJobEnds(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {Serial: true}}}})
	first := submit(t, e, jobs.SubmitRequest{Queue: "index"})
	second := submit(t, e, jobs.SubmitRequest{Queue: "index"})
	j, err := claimNow(e, "index")
	if err != nil || j.ID != first.ID {
		t.Fatalf("claim = %v, %v; want %s", j.ID, err, first.ID)
	}
	parked := async(func() (jobtype.Job, error) {
		// A cap beyond await's 10 s: only the wake-up can answer in time.
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Queues: []string{"index"}}, time.Now().Add(time.Minute))
	})
	waitParked(t, e, 1)
	if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	got, err := await(t, parked)
	if err != nil || got.ID != second.ID {
		t.Errorf("parked claim = %v, %v; want %s once %s ended", got.ID, err, second.ID, first.ID)
	}
}

// A serial queue's head fails (or its worker vanishes) with attempts left:
// with on_failure block nothing else of the queue runs until the head has
// run again; with skip the next job runs meanwhile. A cancelled head
// never holds the queue.
func TestSerialBlockHoldsTheQueueBehindItsHeadAndSkipMovesOn(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 10 * time.Second, Rules: jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{
			"block":   {Serial: true, BlockOnFailure: true, MaxAttempts: 3, InitialBackoff: time.Minute, MaxBackoff: time.Minute},
			"skip":    {Serial: true, MaxAttempts: 3, InitialBackoff: time.Minute, MaxBackoff: time.Minute},
			"lost":    {Serial: true, BlockOnFailure: true, MaxAttempts: 3, InitialBackoff: time.Minute, MaxBackoff: time.Minute},
			"cancels": {Serial: true, BlockOnFailure: true, MaxAttempts: 3, InitialBackoff: time.Minute, MaxBackoff: time.Minute},
		},
	}})
	ctx := context.Background()
	heads := map[string]jobtype.Job{}
	nexts := map[string]jobtype.Job{}
	// lost first: its sweep moves the clock, which must not end the
	// others' backoffs (full jitter may draw a short one).
	for _, q := range []string{"lost", "block", "skip", "cancels"} {
		heads[q] = submit(t, e, jobs.SubmitRequest{Queue: q})
		nexts[q] = submit(t, e, jobs.SubmitRequest{Queue: q})
		j, err := claimNow(e, q)
		if err != nil || j.ID != heads[q].ID {
			t.Fatalf("%s: first claim = %v, %v; want the head", q, j.ID, err)
		}
		switch q {
		case "lost":
			clock.Advance(11 * time.Second)
			if err := e.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := get(t, e, j.ID); got.State != jobtype.Queued {
				t.Fatalf("lost head is %s, want queued again", got.State)
			}
		default:
			if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Busy"}, true); err != nil {
				t.Fatal(err)
			}
		}
		if q == "cancels" {
			if _, err := e.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	for q, want := range map[string]string{"block": "", "lost": "", "skip": nexts["skip"].ID, "cancels": nexts["cancels"].ID} {
		j, err := claimNow(e, q)
		if want == "" && !errors.Is(err, jobtype.ErrNoJob) {
			t.Errorf("%s: claim while the head backs off = %v, %v; want nothing", q, j.ID, err)
		}
		if want != "" && (err != nil || j.ID != want) {
			t.Errorf("%s: claim while the head backs off = %v, %v; want the next job %s", q, j.ID, err, want)
		}
	}
	clock.Advance(2 * time.Minute)
	for _, q := range []string{"block", "lost"} {
		j, err := claimNow(e, q)
		if err != nil || j.ID != heads[q].ID || j.Attempt != 2 {
			t.Errorf("%s: claim once the backoff passed = %v (attempt %d), %v; want the head's second attempt", q, j.ID, j.Attempt, err)
		}
	}
}

func TestSetRulesRefusesQueueLimitsItCannotApply(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{})
	tests := []struct {
		name  string
		rules jobtype.Rules
	}{
		{"a queue using an undeclared pool", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"a": {Uses: []string{"db"}}}}},
		{"a pool of no units", jobtype.Rules{Pools: map[string]int{"db": 0}}},
		{"a serial queue running two", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"a": {Serial: true, MaxRunning: 2}}}},
		{"a parallel queue blocking on failure", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"a": {BlockOnFailure: true}}}},
		{"a negative max_running", jobtype.Rules{Queues: map[string]jobtype.QueueRules{"a": {MaxRunning: -1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.SetRules(tt.rules); err == nil {
				t.Errorf("SetRules(%+v) = nil, want a refusal", tt.rules)
			}
		})
	}
}

// A reload that raises a queue's limit lets a claimer parked behind the
// old one go at once, without waiting for a job to end or be submitted.
func TestAReloadThatGivesRoomWakesAParkedClaim(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {Serial: true}}}})
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	second := submit(t, e, jobs.SubmitRequest{Queue: "index"})
	if _, err := claimNow(e, "index"); err != nil {
		t.Fatal(err)
	}
	parked := async(func() (jobtype.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Queues: []string{"index"}}, time.Now().Add(time.Minute))
	})
	waitParked(t, e, 1)
	// The cap is a minute and await gives up after 10 s: only the wake-up
	// can answer in time.
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {MaxRunning: 2}}}); err != nil {
		t.Fatal(err)
	}
	got, err := await(t, parked)
	if err != nil || got.ID != second.ID {
		t.Errorf("parked claim after the reload = %v, %v; want %s", got.ID, err, second.ID)
	}
}
