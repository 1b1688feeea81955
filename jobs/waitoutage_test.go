package jobs_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// awayStore is a store whose database goes away after its first read
// of a job: later reads fail unavailable, as PostgreSQL's do in an
// outage.
type awayStore struct {
	store.Store
	reads atomic.Int64
}

func (s *awayStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if s.reads.Add(1) > 1 {
		return jobtype.Job{}, fmt.Errorf("get job: %w", jobtype.ErrUnavailable)
	}
	return s.Store.GetJob(ctx, id)
}

// A wait that reaches its cap while the database cannot be read ends OK,
// as every wait at its cap does, with the latest state the server saw
// (without the payload it does not keep while parked), not unavailable
// after the caller waited the whole cap.
func TestAWaitAtItsCapDuringAnOutageEndsOKWithTheLastStateSeen(t *testing.T) {
	inner := openStore(t)
	e := newEngineOver(t, &awayStore{Store: inner}, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Kind: "k", Payload: []byte(`{"big":true}`)})
	got, err := e.Wait(context.Background(), j.ID, time.Now().Add(300*time.Millisecond))
	if err != nil || got.ID != j.ID || got.State != jobtype.Queued {
		t.Fatalf("the wait at its cap during the outage = %v, %v; want OK with the job QUEUED", got.State, err)
	}
}

// hungStore is a store whose database stops answering after its first
// read of a job: later reads wait until their context ends, as a frozen
// PostgreSQL's do.
type hungStore struct {
	store.Store
	reads atomic.Int64
}

func (s *hungStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if s.reads.Add(1) > 1 {
		<-ctx.Done()
		return jobtype.Job{}, ctx.Err()
	}
	return s.Store.GetJob(ctx, id)
}

func (s *hungStore) ReadJobs(ctx context.Context, ids []string, read store.JobRead) ([]jobtype.Job, error) {
	if s.reads.Add(1) > 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.ReadJobs(ctx, ids, read)
}

// A wait that ends at its caller's deadline, less the server's margin,
// while the database hangs answers OK with the latest state it saw
// before that deadline: its read of the job again is bounded by half
// the time left, where it took up to 2 s, and the caller got
// deadline_exceeded.
func TestAWaitAtItsCallersDeadlineWhileTheDatabaseHangsAnswersInTime(t *testing.T) {
	for _, many := range []bool{false, true} {
		inner := openStore(t)
		e := newEngineOver(t, &hungStore{Store: inner}, jobs.Config{})
		j := submit(t, e, jobs.SubmitRequest{Kind: "k"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		margin := 200 * time.Millisecond
		deadline, _ := ctx.Deadline()
		var state jobtype.State
		var err error
		if many {
			var res jobs.WaitManyResult
			res, err = e.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{j.ID}}, deadline.Add(-margin))
			if len(res.Unfinished) == 1 {
				state = jobtype.Queued
			}
		} else {
			var got jobtype.Job
			got, err = e.Wait(ctx, j.ID, deadline.Add(-margin))
			state = got.State
		}
		late := time.Since(deadline)
		cancel()
		if err != nil || state != jobtype.Queued || late > 0 {
			t.Errorf("many %v: the wait while the database hangs = %v, %v, %v after the caller's deadline; want OK, QUEUED, before it", many, state, err, late)
		}
	}
}

// jobReads counts the store's reads of jobs.
type jobReads struct {
	store.Store
	reads atomic.Int64
}

func (s *jobReads) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	s.reads.Add(1)
	return s.Store.GetJob(ctx, id)
}

// Waits of one job that Shutdown ends at once share their read of it
// again: 200 waits read it 200 times on their way in, and about once,
// not 200 times, on their way out.
func TestWaitsEndedAtOnceShareTheirReadOfTheJob(t *testing.T) {
	counting := &jobReads{Store: openStore(t)}
	e := newEngineOver(t, counting, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Kind: "k", Payload: []byte(`{"n":1}`)})
	const waits = 200
	ended := make(chan error, waits)
	for range waits {
		go func() {
			got, err := e.Wait(context.Background(), j.ID, soon())
			if err == nil && string(got.Payload) != `{"n":1}` {
				err = fmt.Errorf("the wait's job has payload %s", got.Payload)
			}
			ended <- err
		}()
	}
	waitUntil(t, "every wait to read the job", func() bool { return counting.reads.Load() == waits })
	e.Shutdown()
	for range waits {
		if err := <-ended; err != nil {
			t.Fatal(err)
		}
	}
	if again := counting.reads.Load() - waits; again > waits/10 {
		t.Errorf("the %d waits Shutdown ended read the job %d times more, want them to share a read", waits, again)
	}
}

// stuckStore is a store whose database stops answering before the first
// read: every read waits until its context ends.
type stuckStore struct {
	store.Store
	stuck atomic.Bool
}

func (s *stuckStore) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if s.stuck.Load() {
		<-ctx.Done()
		return jobtype.Job{}, ctx.Err()
	}
	return s.Store.GetJob(ctx, id)
}

func (s *stuckStore) ReadJobs(ctx context.Context, ids []string, read store.JobRead) ([]jobtype.Job, error) {
	if s.stuck.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Store.ReadJobs(ctx, ids, read)
}

// A wait that arrives while the database already hangs ends at its
// caller's deadline, as a GetJob does, where its first read, made
// without the caller's cancellation, held it until the database came
// back.
func TestAWaitThatArrivesWhileTheDatabaseHangsEndsAtItsCallersDeadline(t *testing.T) {
	st := &stuckStore{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{})
	j := submit(t, e, jobs.SubmitRequest{Kind: "k"})
	st.stuck.Store(true)
	for _, many := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		deadline, _ := ctx.Deadline()
		var err error
		if many {
			_, err = e.WaitMany(ctx, jobs.WaitManyRequest{IDs: []string{j.ID}}, deadline.Add(-30*time.Millisecond))
		} else {
			_, err = e.Wait(ctx, j.ID, deadline.Add(-30*time.Millisecond))
		}
		late := time.Since(deadline)
		cancel()
		if err == nil || late > 2*time.Second {
			t.Errorf("many %v: the wait while the database hangs = %v, %v after the caller's deadline; want an error at the deadline", many, err, late)
		}
	}
	st.stuck.Store(false)
}
