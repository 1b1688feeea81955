package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
)

// queueRow is what a user reads in a queue table.
type queueRow struct {
	name            string
	queued, running int64
	waiting         bool
	age             time.Duration
}

func TestQueueStats(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, e *jobs.Engine, clock *fakeClock)
		want  []queueRow
	}{
		{
			name:  "with no jobs only the idle default queue is listed",
			setup: func(*testing.T, *jobs.Engine, *fakeClock) {},
			want:  []queueRow{{name: "default"}},
		},
		{
			name: "queues are sorted by name and the default queue is listed among them",
			setup: func(t *testing.T, e *jobs.Engine, clock *fakeClock) {
				submit(t, e, jobs.SubmitRequest{Queue: "zulu"})
				running(t, e, jobs.SubmitRequest{Queue: "alpha"})
			},
			want: []queueRow{
				{name: "alpha", running: 1},
				{name: "default"},
				{name: "zulu", queued: 1, waiting: true},
			},
		},
		{
			name: "the age is how long the oldest ready job has waited by the engine's clock",
			setup: func(t *testing.T, e *jobs.Engine, clock *fakeClock) {
				submit(t, e, jobs.SubmitRequest{Queue: "mail"})
				clock.Advance(time.Minute)
				submit(t, e, jobs.SubmitRequest{Queue: "mail"})
				running(t, e, jobs.SubmitRequest{Queue: "mail"})
				clock.Advance(30 * time.Second)
			},
			want: []queueRow{
				{name: "default"},
				{name: "mail", queued: 2, running: 1, waiting: true, age: 90 * time.Second},
			},
		},
		{
			name: "a job scheduled for later is queued but not waiting, until it is due",
			setup: func(t *testing.T, e *jobs.Engine, clock *fakeClock) {
				submit(t, e, jobs.SubmitRequest{Queue: "later", RunAt: clock.Now().Add(time.Hour)})
				submit(t, e, jobs.SubmitRequest{Queue: "soon", RunAt: clock.Now().Add(time.Minute)})
				clock.Advance(2 * time.Minute)
			},
			want: []queueRow{
				{name: "default"},
				{name: "later", queued: 1},
				{name: "soon", queued: 1, waiting: true, age: time.Minute},
			},
		},
		{
			name: "pending and ended jobs are not unfinished work",
			setup: func(t *testing.T, e *jobs.Engine, clock *fakeClock) {
				submit(t, e, jobs.SubmitRequest{Queue: "held", Hold: true})
				j := running(t, e, jobs.SubmitRequest{Queue: "done"})
				if _, err := e.Cancel(context.Background(), j.ID); err != nil {
					t.Fatal(err)
				}
				submit(t, e, jobs.SubmitRequest{})
			},
			want: []queueRow{{name: "default", queued: 1, waiting: true}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			e, _ := newEngine(t, jobs.Config{Now: clock.Now})
			tc.setup(t, e, clock)
			stats, err := e.QueueStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var got []queueRow
			for _, q := range stats {
				got = append(got, queueRow{q.Name, q.Queued, q.Running, q.Waiting(), q.OldestQueuedAge})
			}
			if len(got) != len(tc.want) {
				t.Fatalf("queues = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("queue %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
