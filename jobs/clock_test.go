package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// steppedClock is the real clock shifted by an offset that the test
// changes at will, as an operator or NTP steps a machine's wall clock.
type steppedClock struct{ offset atomic.Int64 }

func (c *steppedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *steppedClock) Step(d time.Duration) { c.offset.Add(int64(d)) }

func TestParkedCallsAnswerAtTheirCapWhenTheWallClockSteps(t *testing.T) {
	const capAfter = 300 * time.Millisecond
	calls := []struct {
		name string
		park func(e *jobs.Engine, id string, deadline time.Time) error
	}{
		{"wait", func(e *jobs.Engine, id string, deadline time.Time) error {
			_, err := e.Wait(context.Background(), id, deadline)
			return err
		}},
		{"watch", func(e *jobs.Engine, id string, deadline time.Time) error {
			return e.Watch(context.Background(), id, jobs.WatchOptions{Deadline: deadline, Send: func(*jobs.Snapshot) error { return nil }})
		}},
		{"claim", func(e *jobs.Engine, _ string, deadline time.Time) error {
			_, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"nothing-of-this-kind"}}, deadline)
			if errors.Is(err, jobtype.ErrNoJob) {
				return nil
			}
			return err
		}},
	}
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		for _, call := range calls {
			t.Run(call.name+" with the clock stepped by "+step.String(), func(t *testing.T) {
				clock := &steppedClock{}
				e, _ := newEngine(t, jobs.Config{Now: clock.Now})
				j := submit(t, e, jobs.SubmitRequest{Kind: "never-claimed"})

				start := time.Now()
				deadline := start.Add(capAfter)
				clock.Step(step)
				parked := async(func() (struct{}, error) { return struct{}{}, call.park(e, j.ID, deadline) })
				// A change the parked call wakes up for (and a claimer
				// re-reads its deadline after), under the stepped clock.
				submit(t, e, jobs.SubmitRequest{Kind: "other"})
				if _, err := e.Heartbeat(context.Background(), j.ID, "l_none", 0, ""); !errors.Is(err, jobs.ErrStaleLease) {
					t.Fatalf("heartbeat with no lease: %v", err)
				}

				if _, err := await(t, parked); err != nil {
					t.Fatalf("parked %s: %v", call.name, err)
				}
				if took := time.Since(start); took < capAfter {
					t.Errorf("%s answered after %v, before its cap of %v", call.name, took, capAfter)
				}
			})
		}
	}
}
