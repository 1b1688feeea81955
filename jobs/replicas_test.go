package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Two engines over two Stores on one database stand for two replicas:
// what one commits must wake what is parked on the other, through the
// store's listener alone.

func replicas(t *testing.T) (a, b *jobs.Engine) {
	t.Helper()
	sa, sb := openSharedStores(t)
	return newEngineOver(t, sa, jobs.Config{}), newEngineOver(t, sb, jobs.Config{})
}

func TestAWaiterOnOneReplicaWakesWhenAWorkerOnAnotherCompletesTheJob(t *testing.T) {
	sa, sb := openSharedStores(t)
	a, b := newEngineOver(t, sa, jobs.Config{}), newEngineOver(t, callReads{sb}, jobs.Config{})
	j := running(t, a, jobs.SubmitRequest{})
	waited := waitedRead(t, b, context.Background(), j.ID, soon())
	if _, err := a.Complete(context.Background(), j.ID, j.LeaseID, mustJSON("done")); err != nil {
		t.Fatalf("complete: %v", err)
	}
	got, err := await(t, waited)
	if err != nil || got.State != jobtype.Succeeded {
		t.Fatalf("wait on the other replica = %s, %v; want succeeded", got.State, err)
	}
}

func TestAWatcherOnOneReplicaSeesEveryChangeMadeOnAnother(t *testing.T) {
	a, b := replicas(t)
	j := running(t, a, jobs.SubmitRequest{})
	seen := make(chan *jobs.Snapshot, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Watch(ctx, j.ID, jobs.WatchOptions{Deadline: soon(), Send: func(s *jobs.Snapshot) error {
		seen <- s
		return nil
	}})
	next := func() jobtype.Job {
		t.Helper()
		select {
		case s := <-seen:
			return s.Job
		case <-time.After(10 * time.Second):
			t.Fatal("no snapshot within 10s")
			panic("unreachable")
		}
	}
	if got := next(); got.Version != j.Version {
		t.Fatalf("first snapshot at version %d, want %d", got.Version, j.Version)
	}
	if _, err := a.Heartbeat(context.Background(), j.ID, j.LeaseID, 40, "half"); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if got := next(); got.Percent != 40 {
		t.Errorf("snapshot after the heartbeat: %d%%, want 40", got.Percent)
	}
	if _, err := a.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if got := next(); got.State != jobtype.Succeeded {
		t.Errorf("last snapshot %s, want succeeded", got.State)
	}
}

func TestAClaimerParkedOnOneReplicaTakesAJobSubmittedOnAnother(t *testing.T) {
	a, b := replicas(t)
	claimed := async(func() (jobtype.Job, error) {
		return b.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w-b", Kinds: []string{"remote"}}, soon())
	})
	waitParked(t, b, 1)
	j := submit(t, a, jobs.SubmitRequest{Kind: "remote"})
	got, err := await(t, claimed)
	if err != nil || got.ID != j.ID {
		t.Fatalf("claim on the other replica = %q, %v; want %s", got.ID, err, j.ID)
	}
}

func TestATenantFeedOnOneReplicaSeesJobsSubmittedOnAnother(t *testing.T) {
	a, b := replicas(t)
	batches := make(chan []jobtype.Job, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.WatchTenant(ctx, "acme", jobs.TenantWatchOptions{Deadline: soon(), Send: func(jobs []jobtype.Job, _ []string, _ string) error {
		batches <- jobs
		return nil
	}})
	<-batches // the recent jobs: none
	j := submit(t, a, jobs.SubmitRequest{Tenant: "acme"})
	select {
	case got := <-batches:
		if len(got) != 1 || got[0].ID != j.ID {
			t.Errorf("batch %v, want the job submitted on the other replica", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10s")
	}
}

// deafStore drops every change while deaf, as a lost LISTEN connection
// would, and lets the test say when the store has heard again.
type deafStore struct {
	store.Store
	mu   sync.Mutex // held while a change is handed on, so goDeaf waits for it
	deaf bool
	fn   func([]store.Change, bool)
	// handed is the highest version of each job handed on (and so
	// handled by the engine) while not deaf.
	handed map[string]int64
}

func (s *deafStore) Listen(ctx context.Context, fn func([]store.Change, bool)) error {
	s.mu.Lock()
	s.fn = fn
	s.mu.Unlock()
	return s.Store.Listen(ctx, func(changes []store.Change, missed bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.deaf {
			fn(changes, missed)
			if s.handed == nil {
				s.handed = map[string]int64{}
			}
			for _, c := range changes {
				s.handed[c.JobID] = max(s.handed[c.JobID], c.Version)
			}
		}
	})
}

// heard waits until the engine has handled a change of job id at
// version or later.
func (s *deafStore) heard(t *testing.T, id string, version int64) {
	t.Helper()
	until := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		v := s.handed[id]
		s.mu.Unlock()
		if v >= version {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("job %s at version %d not heard within 20s (heard %d)", id, version, v)
		}
		time.Sleep(time.Millisecond)
	}
}

// goDeaf makes the store drop every change from now on. It returns once
// a change being handed on has been handled: an earlier change still on
// its way (PostgreSQL's notifications arrive when they arrive) would
// otherwise have the engine read the job after the test changed it, and
// announce the change it must not hear.
func (s *deafStore) goDeaf() {
	s.mu.Lock()
	s.deaf = true
	s.mu.Unlock()
}

func (s *deafStore) hearAgain() {
	s.mu.Lock()
	s.deaf = false
	fn := s.fn
	s.mu.Unlock()
	fn(nil, true)
}

func TestAfterAGapInHearingAReplicaAnnouncesWhatChangedMeanwhile(t *testing.T) {
	sa, sb := openSharedStores(t)
	deaf := &deafStore{Store: sb}
	a, b := newEngineOver(t, sa, jobs.Config{}), newEngineOver(t, callReads{deaf}, jobs.Config{})
	j := running(t, a, jobs.SubmitRequest{})
	// Both calls are parked before B goes deaf: a wait that read the job
	// only after the gap would see it ended without any announcement.
	waited := waitedRead(t, b, context.Background(), j.ID, soon())
	claimed := async(func() (jobtype.Job, error) {
		return b.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w-b", Kinds: []string{"later"}}, soon())
	})
	waitParked(t, b, 1)

	deaf.goDeaf()
	if _, err := a.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	queued := submit(t, a, jobs.SubmitRequest{Kind: "later"})
	notYet(t, waited, 50*time.Millisecond)

	deaf.hearAgain()
	if got, err := await(t, waited); err != nil || got.State != jobtype.Succeeded {
		t.Errorf("wait after the gap = %s, %v; want succeeded", got.State, err)
	}
	if got, err := await(t, claimed); err != nil || got.ID != queued.ID {
		t.Errorf("claim after the gap = %q, %v; want %s", got.ID, err, queued.ID)
	}
}

// A job queued on a replica whose own claimer takes it wakes no claimer
// of another replica; one queued where no claimer waits is taken by
// another replica's.
func TestAJobClaimedWhereItWasQueuedWakesNoClaimerOfAnotherReplica(t *testing.T) {
	a, b := replicas(t)
	// Long enough for A's claim to be heard on B before B would wake its
	// claimer, however loaded the machine.
	b.SetClaimWakeDelay(2 * time.Second)
	claim := func(e *jobs.Engine, worker string) <-chan outcome[jobtype.Job] {
		return async(func() (jobtype.Job, error) {
			return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: worker, Kinds: []string{"herd"}}, soon())
		})
	}
	onA, onB := claim(a, "w-a"), claim(b, "w-b")
	waitParked(t, a, 1)
	waitParked(t, b, 1)
	wakesB := b.ClaimWakes()

	first := submit(t, a, jobs.SubmitRequest{Kind: "herd"})
	if got, err := await(t, onA); err != nil || got.ID != first.ID {
		t.Fatalf("claim on the replica that queued it = %q, %v; want %s", got.ID, err, first.ID)
	}
	notYet(t, onB, 200*time.Millisecond)
	if n := b.ClaimWakes() - wakesB; n != 0 {
		t.Errorf("the other replica's claimer was woken %d times for a job claimed where it was queued", n)
	}

	second := submit(t, a, jobs.SubmitRequest{Kind: "herd"})
	if got, err := await(t, onB); err != nil || got.ID != second.ID {
		t.Fatalf("claim on the other replica = %q, %v; want %s", got.ID, err, second.ID)
	}
}

// A wait that ends at its cap (or at Shutdown) answers with what the
// database has, not with what its replica last heard: another replica's
// change can be committed, and its worker answered, a while before this
// replica hears of it (an outside probe saw WaitJob and WaitJobs answer
// RUNNING at their cap for jobs a worker on the other replica had
// completed seconds before). Here B hears the jobs' progress, then
// nothing: its waits, ended by its Shutdown, still answer every job's
// end.
func TestAWaitAtItsCapAnswersWhatTheDatabaseHasNotWhatItsReplicaHeard(t *testing.T) {
	sa, sb := openSharedStores(t)
	deaf := &deafStore{Store: sb}
	a, b := newEngineOver(t, sa, jobs.Config{}), newEngineOver(t, callReads{deaf}, jobs.Config{})
	one, two := running(t, a, jobs.SubmitRequest{}), running(t, a, jobs.SubmitRequest{})
	waited := waitedRead(t, b, context.Background(), one.ID, soon())
	many := async(func() (jobs.WaitManyResult, error) {
		return b.WaitMany(context.Background(), jobs.WaitManyRequest{IDs: []string{one.ID, two.ID}}, soon())
	})
	for _, j := range []jobtype.Job{one, two} {
		progress, err := a.Heartbeat(context.Background(), j.ID, j.LeaseID, 50, "half way")
		if err != nil {
			t.Fatal(err)
		}
		deaf.heard(t, j.ID, progress.Version)
	}

	deaf.goDeaf()
	if _, err := a.Complete(context.Background(), one.ID, one.LeaseID, mustJSON("done")); err != nil {
		t.Fatalf("complete: %v", err)
	}
	notYet(t, waited, 50*time.Millisecond)
	b.Shutdown()
	if got, err := await(t, waited); err != nil || got.State != jobtype.Succeeded || string(got.Result) != `"done"` {
		t.Errorf("wait ended by Shutdown = %s %s, %v; want succeeded with its result, as the database has it", got.State, got.Result, err)
	}
	res, err := await(t, many)
	if err != nil || len(res.Ended) != 1 || res.Ended[0].ID != one.ID || res.Ended[0].State != jobtype.Succeeded ||
		len(res.Unfinished) != 1 || res.Unfinished[0] != two.ID {
		t.Errorf("WaitMany ended by Shutdown = %+v, %v; want %s ended, %s unfinished", res, err, one.ID, two.ID)
	}
}
