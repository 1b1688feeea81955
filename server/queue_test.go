package server_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
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

// testClock is an engine clock that moves only when told to.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// metricLine is the line of name{labels} in the /metrics text, or "".
func metricLine(t *testing.T, url, series string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return line
		}
	}
	return ""
}

func TestListQueuesAndMetricsShowAQueueAlertingUntilItDrains(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules:        jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 5 * time.Minute}}},
	}})
	c := ts.h2c()
	ctx := ctxTimeout(t, 10*time.Second)
	sweep := func() {
		t.Helper()
		if err := ts.engine.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	index := func() *jobwatchv1.Queue {
		t.Helper()
		resp, err := c.queues.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range resp.GetQueues() {
			if q.GetName() == "index" {
				return q
			}
		}
		t.Fatalf("index not listed: %v", resp.GetQueues())
		return nil
	}
	// ListQueues reuses a read that took long for ten times as long
	// (listQueuesReuse), so on a loaded machine the read right after a
	// change may be older than it: read until it shows the change.
	indexWhen := func(changed func(*jobwatchv1.Queue) bool) *jobwatchv1.Queue {
		t.Helper()
		return readUntil(t, index, changed)
	}
	const series = `jobwatch_queue_alerting{queue="index"}`

	sweep()
	drainedAt := clock.Now()
	if q := index(); q.GetAlerting() || !q.GetLastDrainedAt().AsTime().Equal(drainedAt) {
		t.Fatalf("idle declared queue: %v; want listed, drained now, not alerting", q)
	}
	if line := metricLine(t, ts.url, series); line != series+" 0" {
		t.Fatalf("metrics: %q, want %q", line, series+" 0")
	}

	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "reindex", Queue: "index"})
	clock.Advance(5*time.Minute + time.Second)
	sweep()
	if q := indexWhen(func(q *jobwatchv1.Queue) bool { return q.GetQueued() == 1 }); !q.GetAlerting() ||
		!q.GetLastDrainedAt().AsTime().Equal(drainedAt) || q.GetQueued() != 1 {
		t.Fatalf("undrained for 5m1s: %v; want alerting, last drained at %v", q, drainedAt)
	}
	if line := metricLine(t, ts.url, series); line != series+" 1" {
		t.Fatalf("metrics: %q, want %q", line, series+" 1")
	}
	if !strings.Contains(ts.logs.String(), "queue alerting") {
		t.Errorf("no log line on entering:\n%s", ts.logs.String())
	}

	complete(t, c, claim(t, c, "reindex"), nil)
	sweep()
	if q := indexWhen(func(q *jobwatchv1.Queue) bool { return q.GetQueued()+q.GetRunning() == 0 }); q.GetAlerting() ||
		!q.GetLastDrainedAt().AsTime().Equal(clock.Now()) {
		t.Fatalf("drained: %v; want not alerting, drained now", q)
	}
	if line := metricLine(t, ts.url, series); line != series+" 0" {
		t.Fatalf("metrics: %q, want %q", line, series+" 0")
	}
	if !strings.Contains(ts.logs.String(), "queue no longer alerting") {
		t.Errorf("no log line on leaving:\n%s", ts.logs.String())
	}
}

// readUntil calls read until what it returns is changed, or 10 s have
// passed (then the last answer, for the test to judge): a read that
// ListQueues reused from before a change comes back unchanged.
func readUntil[T any](t *testing.T, read func() T, changed func(T) bool) T {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if v := read(); changed(v) || time.Now().After(deadline) {
			return v
		}
	}
}

func TestListQueuesShowsWhenAnAlertBeganAndFifteenMinutesOfDepth(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules:        jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 5 * time.Minute}}},
	}})
	// JSON over HTTP/1.1, as the page and curl read it.
	c := ts.clients(ts.http1Client(), connect.WithProtoJSON())
	ctx := ctxTimeout(t, 10*time.Second)
	list := func() *jobwatchv1.ListQueuesResponse {
		t.Helper()
		resp, err := c.queues.ListQueues(ctx, &jobwatchv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	queue := func(resp *jobwatchv1.ListQueuesResponse, name string) *jobwatchv1.Queue {
		t.Helper()
		for _, q := range resp.GetQueues() {
			if q.GetName() == name {
				return q
			}
		}
		t.Fatalf("%s not listed: %v", name, resp.GetQueues())
		return nil
	}

	// Sampled every 15s: idle, then a job in each queue, then a second
	// one in index for the last 5 minutes.
	drainedAt := clock.Now()
	for i := range 25 {
		switch i {
		case 1:
			submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "reindex", Queue: "index"})
			submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "mail", Queue: "mail"})
		case 5:
			claim(t, c, "reindex")
			submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "reindex", Queue: "index"})
		}
		if err := ts.engine.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(15 * time.Second)
	}
	// 6m15s after the first sweep saw index empty, the last time it was.
	resp := list()
	if got := resp.GetDepthInterval().AsDuration(); got != 15*time.Second {
		t.Errorf("depth_interval %v, want 15s", got)
	}
	index := queue(resp, "index")
	if !index.GetAlerting() || !index.GetAlertingSince().AsTime().Equal(drainedAt.Add(5*time.Minute)) ||
		index.GetAlertAfter().AsDuration() != 5*time.Minute || !index.GetLastDrainedAt().AsTime().Equal(drainedAt) {
		t.Errorf("index: alerting %v since %v, alert_after %v, last drained %v; want alerting since %v, 5m, drained at %v",
			index.GetAlerting(), index.GetAlertingSince().AsTime(), index.GetAlertAfter().AsDuration(), index.GetLastDrainedAt().AsTime(),
			drainedAt.Add(5*time.Minute), drainedAt)
	}
	history := index.GetDepthHistory()
	if len(history) != 26 {
		t.Fatalf("index has %d depth samples, want 25 sweeps and now", len(history))
	}
	for i, d := range history {
		wantQueued, wantRunning := int64(1), int64(0)
		switch {
		case i == 0:
			wantQueued = 0
		case i >= 5:
			wantRunning = 1
		}
		if d.GetQueued() != wantQueued || d.GetRunning() != wantRunning || !d.GetAt().AsTime().Equal(drainedAt.Add(time.Duration(i)*15*time.Second)) {
			t.Errorf("index sample %d: %v; want %d queued and %d running at +%v", i, d, wantQueued, wantRunning, time.Duration(i)*15*time.Second)
		}
	}
	// A queue without alert_after says nothing of alerts, yet has a
	// history.
	mail := queue(resp, "mail")
	if mail.GetAlertAfter() != nil || mail.GetAlertingSince() != nil || mail.GetAlerting() || len(mail.GetDepthHistory()) != 25 {
		t.Errorf("mail: %v; want no alert_after, no alert, 24 samples (from its first job) and now", mail)
	}

	// After an hour of sweeps, 15 minutes of them: 60 samples, the last
	// now.
	for range 4 * 60 {
		if err := ts.engine.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(15 * time.Second)
	}
	history = readUntil(t, func() *jobwatchv1.Queue { return queue(list(), "index") }, func(q *jobwatchv1.Queue) bool {
		h := q.GetDepthHistory()
		return len(h) > 0 && h[len(h)-1].GetAt().AsTime().Equal(clock.Now()) // not a read from before the hour
	}).GetDepthHistory()
	if len(history) != 60 || !history[59].GetAt().AsTime().Equal(clock.Now()) || history[0].GetAt().AsTime().Before(clock.Now().Add(-15*time.Minute)) {
		t.Errorf("after an hour: %d samples from %v to %v; want 60 within the 15 minutes before %v", len(history),
			history[0].GetAt().AsTime(), history[len(history)-1].GetAt().AsTime(), clock.Now())
	}
}

func TestAnAttemptPastItsQueueTimeoutLosesItsLeaseOverTheWire(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules:        jobtype.Rules{Queues: map[string]jobtype.QueueRules{"slow": {Timeout: time.Minute}}},
	}})
	c := ts.h2c()
	ctx := ctxTimeout(t, 10*time.Second)
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "crawl", Queue: "slow"})
	lease := claim(t, c, "crawl")
	clock.Advance(time.Minute + time.Second)
	if err := ts.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// The worker's next heartbeat says to stop; its completion is refused.
	hb, err := c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(), Percent: 10})
	if err != nil || !hb.GetCancelled() {
		t.Fatalf("heartbeat after the timeout: %v, %v; want cancelled", hb, err)
	}
	_, err = c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId()})
	wantCode(t, err, connect.CodeFailedPrecondition)
	got, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: lease.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if j := got.GetJob(); j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "Timeout" {
		t.Fatalf("job after its timeout: %v; want FAILED with error type Timeout (one attempt)", j)
	}
}

// Queue names are the clients': ListQueues lists at most max_queues of
// them (500 by default), keeping first those an operator must see (a
// paused queue), then those it declared, then the busiest, in order by
// name, and counts the rest. One tenant that named 50,000 queues made an
// admin's ListQueues 17 MB, which the page drew as 200,000 rows and
// stopped answering.
func TestListQueuesListsTheMostPressingQueuesAndCountsTheRest(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	if err := ts.engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"configured": {MaxRunning: 2}}}); err != nil {
		t.Fatal(err)
	}
	var reqs []*jobwatchv1.SubmitJobRequest
	for i := range 600 {
		reqs = append(reqs, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: fmt.Sprintf("q%03d", i)})
	}
	for range 3 {
		reqs = append(reqs, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: "q300"}) // the busiest: 4 jobs
	}
	reqs = append(reqs, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: "stopped"})
	if _, err := c.jobs.SubmitJobs(ctxTimeout(t, time.Minute), &jobwatchv1.SubmitJobsRequest{Jobs: reqs}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.queues.PauseQueue(ctxTimeout(t, 5*time.Second), &jobwatchv1.PauseQueueRequest{Queue: "stopped"}); err != nil {
		t.Fatal(err)
	}
	// 600 queues, stopped, configured and default.
	const queues = 603
	list := func(max int32) *jobwatchv1.ListQueuesResponse {
		t.Helper()
		resp, err := c.queues.ListQueues(ctxTimeout(t, 10*time.Second), &jobwatchv1.ListQueuesRequest{MaxQueues: max})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var byDefault *jobwatchv1.ListQueuesResponse
	waitUntil(t, "ListQueues to see every queue", func() bool {
		byDefault = list(0)
		return len(byDefault.GetQueues())+int(byDefault.GetQueuesLeftOut()) == queues
	})
	if n := len(byDefault.GetQueues()); n != 500 || byDefault.GetQueuesLeftOut() != queues-500 {
		t.Errorf("ListQueues{} listed %d queues and left out %d; want 500 and %d", n, byDefault.GetQueuesLeftOut(), queues-500)
	}
	if !slices.IsSortedFunc(byDefault.GetQueues(), func(a, b *jobwatchv1.Queue) int { return strings.Compare(a.GetName(), b.GetName()) }) {
		t.Errorf("ListQueues{} listed its queues out of order by name")
	}

	// First a queue in trouble or stopped, then those the operator
	// declared (and default), then the busiest.
	for _, c := range []struct {
		max  int32
		want []string
	}{
		{1, []string{"stopped"}},
		{3, []string{"configured", "default", "stopped"}},
		{4, []string{"configured", "default", "q300", "stopped"}},
	} {
		resp := list(c.max)
		var names []string
		for _, q := range resp.GetQueues() {
			names = append(names, q.GetName())
		}
		if !slices.Equal(names, c.want) || resp.GetQueuesLeftOut() != queues-c.max {
			t.Errorf("ListQueues{max_queues: %d} listed %v and left out %d; want %v and %d", c.max, names, resp.GetQueuesLeftOut(), c.want, queues-c.max)
		}
	}
	if all := list(1_000_000); len(all.GetQueues()) != queues || all.GetQueuesLeftOut() != 0 {
		t.Errorf("ListQueues{max_queues: 1000000} listed %d and left out %d; want all %d", len(all.GetQueues()), all.GetQueuesLeftOut(), queues)
	}
	_, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{MaxQueues: -1})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "max_queues: must not be negative") {
		t.Errorf("ListQueues{max_queues: -1} = %v; want invalid_argument naming max_queues", err)
	}
}
