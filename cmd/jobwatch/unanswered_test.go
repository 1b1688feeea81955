package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// TestAClaimUnansweredWhenServeIsKilledIsNotCountedAsAnAttempt: serve is
// killed (SIGKILL) right after a claim committed, and the worker never
// had the answer (here: it threw it away). On SQLite, after serve starts
// again on the file, the job is QUEUED again once its lease expires,
// its one attempt not counted, and the next claim runs it; it does not
// end LOST without having run. With PostgreSQL another replica may have
// made such a claim and live on, so there the lease's expiry spends the
// attempt, as docs/OPERATING.md says.
func TestAClaimUnansweredWhenServeIsKilledIsNotCountedAsAnAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := testdb.New(t)
	args := []string{"--db", db, "--lease-timeout", "2s", "--log-level", "info"}
	base, cmd, _ := startServe(t, ctx, args...)
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	workers := jobwatchv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	sub, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "unanswered", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.GetJob().GetId()
	if _, err := workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w1", Kinds: []string{"unanswered"}}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	base, _, logs := startServe(t, ctx, args...)
	jobsClient = jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	workers = jobwatchv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	var job *jobwatchv1.Job
	waitFor(t, "the lease of the claim made before the kill to expire", func() bool {
		resp, err := jobsClient.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		job = resp.GetJob()
		return job.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING
	})
	if !testdb.IsSQLite(db) {
		if job.GetState() != jobwatchv1.JobState_JOB_STATE_LOST {
			t.Fatalf("after the lease of a claim from before the kill expired: %v; want LOST on PostgreSQL", job.GetState())
		}
		return
	}
	if job.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || job.GetAttempt() != 0 {
		t.Fatalf("after the lease of a claim from before the kill expired: %v at attempt %d; want QUEUED at attempt 0",
			job.GetState(), job.GetAttempt())
	}
	// The sweep logs after its commit, which GetJob may see first.
	waitFor(t, "serve to log the job given back", func() bool {
		return strings.Contains(logs.String(), "the attempt not counted") && strings.Contains(logs.String(), id)
	})
	claim, err := workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w2", Kinds: []string{"unanswered"}})
	if err != nil || claim.GetJob().GetId() != id || claim.GetJob().GetAttempt() != 1 {
		t.Fatalf("claim after the restart: %s at attempt %d, %v; want %s at attempt 1", claim.GetJob().GetId(), claim.GetJob().GetAttempt(), err, id)
	}
	if _, err := workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: id, LeaseId: claim.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
}
