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
