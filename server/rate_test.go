package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A queue held back by its rate says so in ListQueues (JSON, as the page
// and curl read it) and in /metrics, and a claim parked on it is handed
// the next job once the window has room, not before. Once no job waits,
// ListQueues no longer says it is held.
func TestAQueueHeldByItsRateSaysSoAndItsParkedClaimIsWokenWhenTheWindowHasRoom(t *testing.T) {
	const per = 2 * time.Second
	ts := startServer(t, serverOptions{engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules:        jobtype.Rules{Queues: map[string]jobtype.QueueRules{"metered": {Rate: jobtype.Rate{Limit: 2, Per: per}}}},
	}})
	c := ts.clients(ts.http1Client(), connect.WithProtoJSON())
	ctx := ctxTimeout(t, 30*time.Second)
	rate := func() *jobwatchv1.QueueRate {
		t.Helper()
		resp, err := c.queues.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range resp.GetQueues() {
			if q.GetName() == "metered" {
				return q.GetRate()
			}
		}
		t.Fatal("ListQueues has no row for metered, a declared queue")
		return nil
	}
	// The jobs go in before ListQueues is first asked: it may answer
	// from a read of the queues made up to ten times as long ago as that
	// read took (listQueuesReuse), and a slow first read, made before
	// any job was queued, left the row without a waiting job, and so
	// without held_until, on a loaded machine.
	for range 3 {
		if _, err := c.jobs.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "call", Queue: "metered"}); err != nil {
			t.Fatal(err)
		}
	}
	if r := rate(); r.GetLimit() != 2 || r.GetPer().AsDuration() != per || r.GetStarted() != 0 || r.GetHeldUntil() != nil {
		t.Fatalf("metered's rate before any claim = %v, want 2 per %v, none started, not held", r, per)
	}
	first := claim(t, c, "call").GetJob().GetStartedAt().AsTime()
	claim(t, c, "call")
	r := rate()
	// The window is kept a quarter longer than per (at most 500 ms), so
	// that workers, who learn of their claims a little after the server
	// counts them, see no more than the limit within per either.
	room := first.Add(per + 500*time.Millisecond)
	if r.GetStarted() != 2 || !r.GetHeldUntil().AsTime().Equal(room) {
		t.Fatalf("metered's rate after 2 claims = %v, want 2 started, held until the first is %v old (%v)", r, per+500*time.Millisecond, room)
	}
	if got := ts.metric("jobwatch_queue_rate_held", "queue", "metered"); got != 1 {
		t.Errorf("jobwatch_queue_rate_held{queue=metered} = %v, want 1", got)
	}
	if got := ts.metric("jobwatch_queue_rate_started", "queue", "metered"); got != 2 {
		t.Errorf("jobwatch_queue_rate_started{queue=metered} = %v, want 2", got)
	}

	claimed := make(chan *jobwatchv1.ClaimJobResponse, 1)
	go func() {
		resp, err := c.workers.ClaimJob(context.Background(), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"call"}})
		if err != nil {
			t.Errorf("parked claim: %v", err)
		}
		claimed <- resp
	}()
	ts.waitForGauge("jobwatch_parked_claims", 1)
	select {
	case resp := <-claimed:
		if started := resp.GetJob().GetStartedAt().AsTime(); resp.GetJob().GetQueue() != "metered" || started.Before(room) {
			t.Fatalf("the parked claim got %v, started %v; want metered's third job, not before %v", resp.GetJob(), started, room)
		}
	case <-time.After(callBound + per):
		t.Fatal("the parked claim was not handed the job once the window had room")
	}
	// Nothing waits now: whatever the window holds, the queue holds
	// nothing back, and ListQueues does not say it does.
	if r := rate(); r.GetHeldUntil() != nil {
		t.Errorf("metered's rate with no job queued = %v, want not held", r)
	}
}
