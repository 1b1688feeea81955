package server_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

func TestListQueuesShowsEachQueuesCountsAndHowLongItsOldestJobHasWaited(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{ClaimCap: 100 * time.Millisecond}})
	c := ts.h2c()
	start := time.Now()
	hourAgo := timestamppb.New(start.Add(-time.Hour))
	tomorrow := timestamppb.New(start.Add(24 * time.Hour))

	// mail: one job ready since an hour ago, one ready now, one scheduled
	// for tomorrow, one running, one finished, one held.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail.send", Queue: "mail", RunAt: hourAgo})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail.later", Queue: "mail", RunAt: tomorrow})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail.run", Queue: "mail"})
	claim(t, c, "mail.run")
	finishedJob(t, c, "mail.done", nil)
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail.held", Queue: "mail", Hold: true})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail.now", Queue: "mail"})
	// bulk: two running and one scheduled for tomorrow, so nothing waits.
	for _, kind := range []string{"bulk.a", "bulk.b"} {
		submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: kind, Queue: "bulk"})
		claim(t, c, kind)
	}
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.later", Queue: "bulk", RunAt: tomorrow})
	// A queue whose every job has ended is not listed.
	j := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "gone", Queue: "archive"})
	if _, err := c.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: j.GetId()}); err != nil {
		t.Fatal(err)
	}

	resp, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listedBy := time.Since(start)
	type row struct {
		name            string
		queued, running int64
		// age is the least oldest_queued_age may be; -1: must be unset.
		age time.Duration
	}
	want := []row{
		{"bulk", 1, 2, -1},
		{"default", 0, 0, -1}, // mail.done ran in the default queue and ended
		{"mail", 3, 1, time.Hour},
	}
	queues := resp.GetQueues()
	if len(queues) != len(want) {
		t.Fatalf("ListQueues = %v, want the queues %v", queues, want)
	}
	for i, w := range want {
		q := queues[i]
		if q.GetName() != w.name || q.GetQueued() != w.queued || q.GetRunning() != w.running {
			t.Errorf("queue %d = %s queued %d running %d, want %s queued %d running %d",
				i, q.GetName(), q.GetQueued(), q.GetRunning(), w.name, w.queued, w.running)
		}
		if q.GetMode() != jobwatchv1.QueueMode_QUEUE_MODE_PARALLEL || q.GetMaxRunning() != 0 {
			t.Errorf("queue %s: mode %v max_running %d, want PARALLEL and 0 until queues are configured", q.GetName(), q.GetMode(), q.GetMaxRunning())
		}
		if q.GetLastDrainedAt() != nil || q.GetAlerting() {
			t.Errorf("queue %s: last_drained_at %v alerting %v, want both unset", q.GetName(), q.GetLastDrainedAt(), q.GetAlerting())
		}
		switch age := q.GetOldestQueuedAge(); {
		case w.age < 0 && age != nil:
			t.Errorf("queue %s: oldest_queued_age %v, want unset: nothing waits", q.GetName(), age.AsDuration())
		case w.age >= 0 && age == nil:
			t.Errorf("queue %s: oldest_queued_age unset, want about %v", q.GetName(), w.age)
		case w.age >= 0 && (age.AsDuration() < w.age || age.AsDuration() > w.age+listedBy):
			// The oldest job became ready an hour before start; the
			// answer came at most listedBy after start.
			t.Errorf("queue %s: oldest_queued_age %v, want between %v and %v", q.GetName(), age.AsDuration(), w.age, w.age+listedBy)
		}
	}
}
