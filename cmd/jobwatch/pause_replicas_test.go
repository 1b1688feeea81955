package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// TestAPauseOnOneReplicaHoldsClaimsOnAnotherUntilAResumeThereWakesThem
// runs two jobwatch serve processes on one PostgreSQL schema: a queue
// paused through A hands nothing to a worker parked on B while its job
// waits, and the resume through A wakes that claim on B at once (its
// cap is a minute).
func TestAPauseOnOneReplicaHoldsClaimsOnAnotherUntilAResumeThereWakesThem(t *testing.T) {
	ctx, a, b := twoReplicasWithReports(t)

	if _, err := a.client.PauseQueue(ctx, "reports"); err != nil {
		t.Fatalf("pause on A: %v", err)
	}
	job, err := a.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "report", Queue: "reports"})
	if err != nil {
		t.Fatalf("submit on A: %v", err)
	}
	type claimed struct {
		resp *jobwatchv1.ClaimJobResponse
		err  error
	}
	done := make(chan claimed, 1)
	go func() {
		resp, err := b.client.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w-b", Queues: []string{"reports"}})
		done <- claimed{resp, err}
	}()
	waitFor(t, "the claim parked on B", func() bool { return b.metric(t, "jobwatch_parked_claims") == 1 })
	if rows, err := b.client.ListQueues(ctx); err != nil || !pausedIn(rows, "reports") {
		t.Errorf("B's ListQueues: %v, %v; want reports paused", rows, err)
	}
	select {
	case c := <-done:
		t.Fatalf("B handed out %v, %v from a queue paused on A", c.resp.GetJob(), c.err)
	default:
	}

	if _, err := a.client.ResumeQueue(ctx, "reports"); err != nil {
		t.Fatalf("resume on A: %v", err)
	}
	select {
	case c := <-done:
		if c.err != nil || c.resp.GetJob().GetId() != job.GetId() {
			t.Fatalf("the claim on B after A's resume got %v, %v; want %s", c.resp.GetJob(), c.err, job.GetId())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the claim parked on B was not woken by the resume on A")
	}
}

// twoReplicasWithReports starts two serve processes on one fresh
// PostgreSQL schema, with a queue "reports", for a minute at most.
func twoReplicasWithReports(t *testing.T) (ctx context.Context, a, b *replica) {
	t.Helper()
	dbURL := pgtest.URL(t)
	cfg := filepath.Join(t.TempDir(), "jobwatch.yaml")
	writeFile(t, cfg, "queues:\n  - name: reports\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, startReplica(t, ctx, "A", dbURL, cfg), startReplica(t, ctx, "B", dbURL, cfg)
}

func pausedIn(rows []*jobwatchv1.Queue, queue string) bool {
	for _, q := range rows {
		if q.GetName() == queue {
			return q.GetPaused()
		}
	}
	return false
}

// TestAStopOnOneReplicaAnswersTheWorkersClaimParkedOnAnother: a worker
// behind a load balancer may ask one replica to stop its claims while
// its claim is parked on another. StopClaiming through A answers the
// worker's claim parked on B at once (its cap is a minute), with no
// job, and leaves another worker's claim on B parked.
func TestAStopOnOneReplicaAnswersTheWorkersClaimParkedOnAnother(t *testing.T) {
	ctx, a, b := twoReplicasWithReports(t)

	type claimed struct {
		resp *jobwatchv1.ClaimJobResponse
		err  error
	}
	claims := map[string]chan claimed{}
	for _, w := range []string{"w-stopping", "w-staying"} {
		ch := make(chan claimed, 1)
		claims[w] = ch
		go func() {
			resp, err := b.client.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: w, Queues: []string{"reports"}})
			ch <- claimed{resp, err}
		}()
	}
	waitFor(t, "both claims parked on B", func() bool { return b.metric(t, "jobwatch_parked_claims") == 2 })

	if _, err := a.client.WorkerService().StopClaiming(ctx, &jobwatchv1.StopClaimingRequest{WorkerId: "w-stopping"}); err != nil {
		t.Fatalf("StopClaiming on A: %v", err)
	}
	select {
	case c := <-claims["w-stopping"]:
		if c.err != nil || c.resp.GetJob() != nil || len(c.resp.GetClaims()) != 0 {
			t.Fatalf("the stopping worker's claim on B: %v, %v; want OK with no job", c.resp, c.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stopping worker's claim parked on B was not answered by its stop on A")
	}
	waitFor(t, "the other worker's claim still parked on B", func() bool { return b.metric(t, "jobwatch_parked_claims") == 1 })
	job, err := a.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "report", Queue: "reports"})
	if err != nil {
		t.Fatalf("submit on A: %v", err)
	}
	if c := <-claims["w-staying"]; c.err != nil || c.resp.GetJob().GetId() != job.GetId() {
		t.Fatalf("the other worker's claim on B: %v, %v; want job %s", c.resp.GetJob(), c.err, job.GetId())
	}
}
