package jobs_test

import (
	"context"
	"testing"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// cancelBetween is a store that, once a bulk action has read its page,
// lets another operator cancel some of the page's jobs before the action
// comes to them.
type cancelBetween struct {
	store.Store
	engine *jobs.Engine
	t      *testing.T
	every  int // cancels every every-th job of the page
}

func (s *cancelBetween) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	page, next, err := s.Store.ListJobs(ctx, f)
	if s.engine != nil {
		other := jobs.WithActor(context.Background(), "other (admin)")
		for i := 0; i < len(page); i += s.every {
			if _, err := s.engine.Cancel(other, page[i].ID); err != nil {
				s.t.Errorf("the other operator's cancel: %v", err)
			}
		}
	}
	return page, next, err
}

// A bulk cancel counts as changed only the jobs it cancelled: a job
// another operator cancelled between the page's read and its turn is
// matched, not changed, and not logged or recorded as this caller's.
// Both counted it as changed: two operators' concurrent bulk cancels of
// 3,000 jobs each reported 3,000 changed, and the log credited each with
// the other's (an outside probe).
func TestABulkCancelCountsOnlyTheJobsItCancelled(t *testing.T) {
	st := &cancelBetween{Store: openStore(t), t: t, every: 3}
	e := newEngineOver(t, st, jobs.Config{})
	for range 30 {
		submit(t, e, jobs.SubmitRequest{Queue: "bulk"})
	}
	st.engine = e
	r, err := e.Bulk(jobs.WithActor(context.Background(), "ops (admin)"), e.CancelAction(), jobs.BulkFilter{Queues: []string{"bulk"}}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	st.engine = nil
	if r.Matched != 30 || r.Changed != 20 {
		t.Errorf("matched %d, changed %d; want 30 matched, 20 changed (the other operator cancelled 10)", r.Matched, r.Changed)
	}
	list, _, err := e.List(context.Background(), jobs.ListRequest{Queue: "bulk", Full: true})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for _, j := range list {
		if j.State != jobtype.Cancelled {
			t.Errorf("job %s is %s", j.ID, j.State)
		}
		for _, h := range j.History {
			if h.State == jobtype.Cancelled {
				by[h.By]++
			}
		}
	}
	if by["ops (admin)"] != 20 || by["other (admin)"] != 10 || len(by) != 2 {
		t.Errorf("the jobs' histories say %v cancelled them, want ops 20 and other 10", by)
	}
}
