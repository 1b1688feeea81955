package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// answerLost is a store whose next ClaimJobs, once armed, loses its
// answer as a connection cut after the statement was sent does: the
// claim commits (or not, by commit) and the caller hears only
// ErrUnavailable.
type answerLost struct {
	store.Store
	armed  atomic.Bool
	commit bool
}

func (s *answerLost) ClaimJobs(ctx context.Context, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	if !s.armed.CompareAndSwap(true, false) {
		return s.Store.ClaimJobs(ctx, f, c)
	}
	if s.commit {
		if _, err := s.Store.ClaimJobs(ctx, f, c); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: read tcp: connection reset by peer", jobtype.ErrUnavailable)
}

// TestAJobWhoseClaimAnswerWasLostIsQueuedAgain: a claim that committed
// but whose answer was lost took jobs no worker runs; the next sweep
// puts them back as if never claimed, instead of leaving them to the
// lease's expiry, where a job without attempts left ends LOST.
func TestAJobWhoseClaimAnswerWasLostIsQueuedAgain(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprintf("claim committed %v", committed), func(t *testing.T) {
			st := &answerLost{Store: openStore(t), commit: committed}
			e := newEngineOver(t, st, jobs.Config{LeaseTimeout: time.Hour})
			var submitted []jobtype.Job
			for range 3 {
				submitted = append(submitted, submit(t, e, jobs.SubmitRequest{Kind: "sync", MaxAttempts: 1}))
			}
			st.armed.Store(true)
			_, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"sync"}}, 3, time.Now())
			if !errors.Is(err, jobtype.ErrUnavailable) {
				t.Fatalf("claim whose answer was lost: %v; want unavailable", err)
			}
			if err := e.Sweep(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, s := range submitted {
				j := get(t, e, s.ID)
				if j.State != jobtype.Queued || j.Attempt != 0 || j.LeaseID != "" || j.WorkerID != "" {
					t.Errorf("after the sweep %s is %v, attempt %d, lease %q, worker %q; want QUEUED as if never claimed",
						j.ID, j.State, j.Attempt, j.LeaseID, j.WorkerID)
				}
			}
			claimed, err := e.ClaimJobs(context.Background(), jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{"sync"}}, 3, time.Now())
			if err != nil || len(claimed) != 3 {
				t.Fatalf("claim after the sweep: %d jobs, %v; want all 3", len(claimed), err)
			}
			for _, j := range claimed {
				if j.Attempt != 1 {
					t.Errorf("%s claimed again at attempt %d, want 1", j.ID, j.Attempt)
				}
			}
		})
	}
}

// TestAClaimUnansweredWhenTheServerStoppedIsNotCountedAsAnAttempt: a
// claim that committed just before the server was killed may never have
// reached its worker. After a restart on the same SQLite file, such a
// job, whose worker never answered, is QUEUED again when its lease
// expires, its attempt not counted, rather than LOST with its one
// attempt spent on a run that never began. A job whose worker had
// heartbeaten before the stop, and one claimed after the restart, expire
// as any lease does, whatever lease timeout the server restarts with.
// With PostgreSQL the claim may have come from another replica, which
// may live on: there every one of them expires.
func TestAClaimUnansweredWhenTheServerStoppedIsNotCountedAsAnAttempt(t *testing.T) {
	// The server after the restart gives the lease of the one before, or
	// a shorter or a longer one: the judgement is the same.
	for _, leaseAfter := range []time.Duration{time.Minute, 30 * time.Second, 2 * time.Minute} {
		t.Run("a lease of "+leaseAfter.String()+" after the restart", func(t *testing.T) {
			ctx := context.Background()
			db := testdb.New(t)
			clock := newFakeClock()
			cfg := jobs.Config{Now: clock.Now, LeaseTimeout: time.Minute}
			claim := func(e *jobs.Engine, kind string) jobtype.Job {
				t.Helper()
				j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-" + kind, Kinds: []string{kind}}, time.Now())
				if err != nil {
					t.Fatalf("claim %s: %v", kind, err)
				}
				return j
			}

			// The server before the stop: two claims, one of whose workers
			// heartbeats.
			before, err := testdb.Open(db)
			if err != nil {
				t.Fatal(err)
			}
			e := newEngineOver(t, before, cfg)
			unanswered := submit(t, e, jobs.SubmitRequest{Kind: "unanswered", MaxAttempts: 1})
			heard := submit(t, e, jobs.SubmitRequest{Kind: "heard", MaxAttempts: 1})
			claim(e, "unanswered")
			lease := claim(e, "heard")
			clock.Advance(10 * time.Second)
			if _, err := e.Heartbeat(ctx, heard.ID, lease.LeaseID, 10, ""); err != nil {
				t.Fatal(err)
			}
			// Killed: nothing more of this engine or store runs.
			e.Shutdown()
			if err := before.Close(); err != nil {
				t.Fatal(err)
			}

			clock.Advance(5 * time.Second)
			after := testdb.OpenT(t, db)
			e = newEngineOver(t, after, jobs.Config{Now: clock.Now, LeaseTimeout: leaseAfter})
			fresh := submit(t, e, jobs.SubmitRequest{Kind: "fresh", MaxAttempts: 1})
			claim(e, "fresh")
			clock.Advance(3 * time.Minute) // every lease has expired
			if err := e.Sweep(ctx); err != nil {
				t.Fatal(err)
			}

			sole := testdb.IsSQLite(db)
			if j := get(t, e, unanswered.ID); sole && (j.State != jobtype.Queued || j.Attempt != 0 || j.LeaseID != "" || j.WorkerID != "") {
				t.Errorf("unanswered claim from before the restart: %v, attempt %d, lease %q, worker %q; want QUEUED as if never claimed",
					j.State, j.Attempt, j.LeaseID, j.WorkerID)
			} else if !sole && j.State != jobtype.Lost {
				t.Errorf("unanswered claim from before a replica's restart: %v; want LOST (another replica may have made it)", j.State)
			}
			if j := get(t, e, heard.ID); j.State != jobtype.Lost || j.Error == nil || j.Error.Type != "LeaseExpired" {
				t.Errorf("claim heard from before the restart: %v, error %v; want LOST, LeaseExpired", j.State, j.Error)
			}
			if j := get(t, e, fresh.ID); j.State != jobtype.Lost {
				t.Errorf("claim made after the restart, unanswered: %v; want LOST", j.State)
			}
			if sole {
				j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "w2", Kinds: []string{"unanswered"}}, time.Now())
				if err != nil || j.ID != unanswered.ID || j.Attempt != 1 {
					t.Fatalf("claim of the job given back: %s at attempt %d, %v; want %s at attempt 1", j.ID, j.Attempt, err, unanswered.ID)
				}
			}
		})
	}
}
