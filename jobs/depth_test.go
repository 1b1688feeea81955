package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// depths is a queue's history as a list of queued+running, as the
// page's sparkline draws it.
func depths(q jobs.QueueStats) []int64 {
	var d []int64
	for _, s := range q.DepthHistory {
		d = append(d, s.Queued+s.Running)
	}
	return d
}

func TestTheSweepSamplesEachQueuesDepthOncePerInterval(t *testing.T) {
	clock := newFakeClock()
	e, st := newEngine(t, jobs.Config{Now: clock.Now, DepthInterval: 15 * time.Second, LeaseTimeout: time.Hour})

	// One more job before each sample: 1, 2, 3 deep, one of them running.
	start := clock.Now()
	running(t, e, jobs.SubmitRequest{Queue: "mail"})
	for i := range 45 {
		if i == 15 || i == 30 {
			submit(t, e, jobs.SubmitRequest{Queue: "mail"})
		}
		sweep(t, e) // every second: samples only when a new interval begins
		clock.Advance(time.Second)
	}
	submit(t, e, jobs.SubmitRequest{Queue: "mail"})

	q := queueStat(t, e, "mail")
	// The fake clock starts 5s into an interval: samples at 0s, 10s
	// (the next interval), 25s and 40s, then now (45s) from this read.
	wantAt := []time.Duration{0, 10 * time.Second, 25 * time.Second, 40 * time.Second, 45 * time.Second}
	if got, want := fmt.Sprint(depths(q)), "[1 1 2 3 4]"; got != want {
		t.Fatalf("mail's depth history %s, want %s (%+v)", got, want, q.DepthHistory)
	}
	for i, s := range q.DepthHistory {
		if !s.At.Equal(start.Add(wantAt[i])) {
			t.Errorf("sample %d at %v, want %v", i, s.At.Sub(start), wantAt[i])
		}
	}
	if last := q.DepthHistory[len(q.DepthHistory)-1]; last.Running != 1 || last.Queued != 3 {
		t.Errorf("the last sample %+v, want now's 3 queued and 1 running", last)
	}
	// An idle queue the answer lists has samples too: zeros.
	if got, want := fmt.Sprint(depths(queueStat(t, e, "default"))), "[0 0 0 0 0]"; got != want {
		t.Errorf("default's history %s, want %s", got, want)
	}

	// Another engine over the same database (a restart, a replica) has
	// only samples of its own.
	other := newEngineOver(t, st, jobs.Config{Now: clock.Now})
	if got, want := fmt.Sprint(depths(queueStat(t, other, "mail"))), "[4]"; got != want {
		t.Errorf("a new engine's history %s, want only now: %s", got, want)
	}
}

func TestADepthHistoryCoversFifteenMinutesAtMost(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	submit(t, e, jobs.SubmitRequest{Queue: "mail"})
	for range 100 {
		clock.Advance(15 * time.Second)
		sweep(t, e)
	}
	clock.Advance(7 * time.Second)
	q := queueStat(t, e, "mail")
	h := q.DepthHistory
	if len(h) != 60 {
		t.Fatalf("%d samples, want 60: 15 minutes at the default 15s", len(h))
	}
	now := clock.Now()
	if !h[59].At.Equal(now) || h[0].At.Before(now.Add(-jobs.DepthWindow)) {
		t.Errorf("samples from %v to %v, want within the 15 minutes before %v, the last now", h[0].At, h[59].At, now)
	}
	for i := 1; i < 59; i++ {
		if d := h[i].At.Sub(h[i-1].At); d != 15*time.Second {
			t.Errorf("samples %d and %d are %v apart, want 15s", i-1, i, d)
		}
	}
}

func TestAQueueThatVanishesIsForgottenAfterFifteenMinutesEmpty(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	ctx := context.Background()
	// Both queues hold a job at the first sample, then none: no rule
	// declares them, so they are no longer listed.
	short := submit(t, e, jobs.SubmitRequest{Queue: "short"})
	long := submit(t, e, jobs.SubmitRequest{Queue: "long"})
	sweep(t, e)
	for _, j := range []string{short.ID, long.ID} {
		if _, err := e.Cancel(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	// 14 minutes later "short" is back: its history still shows the
	// busy sample and the empty ones since.
	for range 14 * 4 {
		clock.Advance(15 * time.Second)
		sweep(t, e)
	}
	submit(t, e, jobs.SubmitRequest{Queue: "short"})
	if h := depths(queueStat(t, e, "short")); len(h) != 57 || h[0] != 1 || h[1] != 0 || h[56] != 1 {
		t.Errorf("short after 14 minutes away: %v; want the busy sample, 55 empty ones, then now (the last sweep's time)", h)
	}
	// "long" comes back after 15 minutes empty: forgotten, only now.
	for range 4 {
		clock.Advance(15 * time.Second)
		sweep(t, e)
	}
	submit(t, e, jobs.SubmitRequest{Queue: "long"})
	if got, want := fmt.Sprint(depths(queueStat(t, e, "long"))), "[1]"; got != want {
		t.Errorf("long after 15 minutes away: %s, want %s", got, want)
	}
}

func mustStats(t *testing.T, e *jobs.Engine) []jobs.QueueStats {
	t.Helper()
	stats, err := e.QueueStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func TestAtMostMaxDepthQueuesKeepAHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("submits a thousand jobs")
	}
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now})
	// The default queue and 1,001 more: two too many.
	for i := range jobs.MaxDepthQueues + 1 {
		submit(t, e, jobs.SubmitRequest{Queue: fmt.Sprintf("q%04d", i)})
	}
	sweep(t, e)
	clock.Advance(15 * time.Second)
	sweep(t, e)
	clock.Advance(time.Second)
	kept, bare := 0, 0
	for _, q := range mustStats(t, e) {
		switch len(q.DepthHistory) {
		case 3:
			kept++
		case 1:
			bare++
		default:
			t.Fatalf("%s has %d samples, want 3 (two sweeps and now) or 1 (now)", q.Name, len(q.DepthHistory))
		}
	}
	if kept != jobs.MaxDepthQueues || bare != 2 {
		t.Errorf("%d queues with a history and %d with only now, want %d and 2", kept, bare, jobs.MaxDepthQueues)
	}
}

// The sweep reads the queues' stats once per depth interval, for the
// depth samples and the alerts together; with a queue watched for
// alerting it asks, at each other sweep, only which watched queues are
// busy, a read whose cost does not grow with their depth.
func TestTheSweepReadsTheQueuesOnceForDepthAndAlertsTogether(t *testing.T) {
	tests := []struct {
		name       string
		rules      jobtype.Rules
		want, busy int64 // stats and busy reads over 30 sweeps a second apart
	}{
		{"without alert_after, once per depth interval", jobtype.Rules{}, 2, 0},
		{"with alert_after, stats once per depth interval and which are busy at the other sweeps",
			jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}, 2, 28},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock() // 5s into a 15s interval
			clock.Advance(10 * time.Second)
			st := &drainCountingStore{Store: openStore(t)}
			e := newEngineOver(t, st, jobs.Config{Now: clock.Now, Rules: tt.rules})
			for range 30 {
				sweep(t, e)
				clock.Advance(time.Second)
			}
			if n := st.statReads.Load(); n != tt.want {
				t.Errorf("%d queue stats reads, want %d", n, tt.want)
			}
			if n := st.busyReads.Load(); n != tt.busy {
				t.Errorf("%d busy queue reads, want %d", n, tt.busy)
			}
			if h := queueStat(t, e, "default").DepthHistory; len(h) != 3 {
				t.Errorf("%d depth samples, want 2 and now", len(h))
			}
		})
	}
}
