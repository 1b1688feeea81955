package jobs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestAPauseOnOneReplicaStopsClaimsOnAnotherAndAResumeWakesAClaimParkedThere(t *testing.T) {
	a, b := replicas(t)
	ctx := context.Background()
	j := submit(t, a, jobs.SubmitRequest{Kind: "report", Queue: "reports"})
	if _, err := a.Pause(ctx, "reports", "token ops (admin)"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	// b claims from the store, which passes over the paused queue: no
	// notice of the pause is needed for that.
	if _, err := b.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-b", Queues: []string{"reports"}}, time.Now()); !errors.Is(err, jobtype.ErrNoJob) {
		t.Fatalf("claim on b of a queue a paused: %v, want ErrNoJob", err)
	}
	claimed := async(func() (jobtype.Job, error) {
		return b.Claim(ctx, jobs.ClaimRequest{WorkerID: "w-b", Kinds: []string{"report"}}, soon())
	})
	waitParked(t, b, 1)
	// A job queued on a while paused leaves b's claim parked.
	submit(t, a, jobs.SubmitRequest{Kind: "report", Queue: "reports"})
	waitParked(t, b, 1)
	select {
	case o := <-claimed:
		t.Fatalf("a claim of a paused queue's kind returned %v, %v", o.v.ID, o.err)
	default:
	}
	if _, err := a.Resume(ctx, "reports", "token ops (admin)"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	got, err := await(t, claimed)
	if err != nil || got.ID != j.ID {
		t.Fatalf("the claim parked on b after a's resume: %v, %v; want %s", got.ID, err, j.ID)
	}
}

func TestPauseRefusesAnEmptyOrUnknownQueueAndKeepsTheFirstPause(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"declared": {}}}})
	ctx := context.Background()
	var invalid *jobtype.InvalidError
	if _, err := e.Pause(ctx, "", "me"); !errors.As(err, &invalid) || invalid.Field != "queue" {
		t.Errorf("pause of no queue: %v, want an invalid queue", err)
	}
	if _, err := e.Pause(ctx, "typo", "me"); !errors.Is(err, jobs.ErrUnknownQueue) {
		t.Errorf("pause of an unknown queue: %v, want ErrUnknownQueue", err)
	}
	if _, err := e.Resume(ctx, "typo", "me"); !errors.Is(err, jobs.ErrUnknownQueue) {
		t.Errorf("resume of an unknown queue: %v, want ErrUnknownQueue", err)
	}
	first, err := e.Pause(ctx, "declared", "me")
	if err != nil {
		t.Fatalf("pause of a declared queue without jobs: %v", err)
	}
	again, err := e.Pause(ctx, "declared", "someone else")
	if err != nil || again != first {
		t.Errorf("second pause = %+v, %v; want the first kept: %+v", again, err, first)
	}
	if resumed, err := e.Resume(ctx, "default", "me"); err != nil || resumed {
		t.Errorf("resume of a queue not paused = %v, %v; want false, nil", resumed, err)
	}
}

// A schedule's queue is named by the rules: listed while empty, and
// paused before the schedule's first run puts a job in it.
func TestAScheduledQueueIsListedAndPausedWhileEmpty(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Schedules: []jobtype.Schedule{
		{Name: "nightly", Kind: "report.build", Queue: "reports", Every: time.Hour, Payload: []byte(`{}`)}}}})
	ctx := context.Background()
	stats, err := e.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(stats, func(q jobs.QueueStats) bool { return q.Name == "reports" }) {
		t.Errorf("queues listed: %v; want the schedule's queue reports among them", stats)
	}
	if _, err := e.Pause(ctx, "reports", "me"); err != nil {
		t.Errorf("pause of the schedule's empty queue: %v", err)
	}
}

func TestAPausedQueueDoesNotAlertAndCountsFromItsResume(t *testing.T) {
	clock := newFakeClock()
	e := newEngineOver(t, openStore(t), jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour})
	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 5 * time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sweep(t, e)
	submit(t, e, jobs.SubmitRequest{Queue: "index"})
	if _, err := e.Pause(ctx, "index", "me"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		clock.Advance(time.Minute)
		sweep(t, e)
	}
	if q := queueStat(t, e, "index"); q.Alerting {
		t.Fatalf("paused 10m with a job waiting: %+v; want no alert", q)
	}
	// The resume comes between two sweeps: alert_after counts from it,
	// not from the last sweep that saw the queue paused.
	clock.Advance(50 * time.Second)
	if _, err := e.Resume(ctx, "index", "me"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(4*time.Minute + 30*time.Second)
	sweep(t, e)
	if q := queueStat(t, e, "index"); q.Alerting {
		t.Fatalf("4m30s after the resume, 5m20s after the last sweep that saw it paused: %+v; want no alert yet: alert_after counts from the resume", q)
	}
	clock.Advance(2 * time.Minute)
	sweep(t, e)
	if q := queueStat(t, e, "index"); !q.Alerting {
		t.Fatalf("6m after the resume: %+v; want alerting", q)
	}
}
