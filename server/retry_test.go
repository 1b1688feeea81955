package server_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// failedJob submits a job of kind with one attempt, claims it as
// worker-1 and fails it with message: a FAILED job.
func failedJob(t *testing.T, c clients, req *jobwatchv1.SubmitJobRequest, message string) *jobwatchv1.Job {
	t.Helper()
	req.MaxAttempts = 1
	submit(t, c, req)
	lease := claim(t, c, req.GetKind())
	resp, err := c.workers.FailJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.FailJobRequest{
		JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(),
		Error: &jobwatchv1.JobError{Type: "Boom", Message: message},
	})
	if err != nil {
		t.Fatalf("fail: %v", err)
	}
	if resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_FAILED {
		t.Fatalf("failed job is %v", resp.GetJob().GetState())
	}
	return resp.GetJob()
}

func TestRetryRunsAFailedJobAgainAndItsHistoryKeepsTheFailedAttempt(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	failed := failedJob(t, c, &jobwatchv1.SubmitJobRequest{Kind: "flaky"}, "disk full")

	resp, err := c.jobs.RetryJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobRequest{JobId: failed.GetId()})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	retried := resp.GetJob()
	if retried.GetId() != failed.GetId() || retried.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED ||
		retried.GetVersion() != failed.GetVersion()+1 || retried.GetWorkerId() != "" {
		t.Fatalf("retried: id %s state %v version %d worker %q; want %s QUEUED at version %d without worker",
			retried.GetId(), retried.GetState(), retried.GetVersion(), retried.GetWorkerId(), failed.GetId(), failed.GetVersion()+1)
	}
	if retried.GetMaxAttempts() != 2 {
		t.Errorf("max_attempts after the retry = %d, want 2 (attempt 1 plus the queue's allowance of 1)", retried.GetMaxAttempts())
	}

	// A waiter parked after the retry returns when the new attempt ends.
	waited := make(chan *jobwatchv1.Job, 1)
	go func() {
		w, err := c.jobs.WaitJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.WaitJobRequest{JobId: failed.GetId()})
		if err != nil {
			t.Errorf("wait: %v", err)
			waited <- nil
			return
		}
		waited <- w.GetJob()
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)
	lease := claim(t, c, "flaky")
	if lease.GetJob().GetAttempt() != 2 {
		t.Errorf("the retry's attempt is %d, want 2", lease.GetJob().GetAttempt())
	}
	complete(t, c, lease, mustValue(t, "ok"))
	var done *jobwatchv1.Job
	select {
	case done = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not return when the retried job succeeded")
	}
	if done.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("waiter got %v, want SUCCEEDED", done.GetState())
	}

	got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: failed.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	h := got.GetJob().GetAttempts()
	if len(h) != 3 {
		t.Fatalf("history has %d entries, want 3 (failed attempt, retry, succeeded attempt): %v", len(h), h)
	}
	first, retry, second := h[0], h[1], h[2]
	if first.GetAttempt() != 1 || first.GetWorkerId() != "worker-1" || first.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED ||
		first.GetError().GetMessage() != "disk full" || first.GetStartedAt() == nil || first.GetFinishedAt() == nil ||
		first.GetFinishedAt().AsTime().Before(first.GetStartedAt().AsTime()) {
		t.Errorf("the failed attempt's entry: %v", first)
	}
	if retry.GetBy() != "anonymous" || retry.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || retry.GetFinishedAt() == nil {
		t.Errorf("the retry's entry: %v; want QUEUED by anonymous with its time", retry)
	}
	if second.GetAttempt() != 2 || second.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || second.GetError() != nil {
		t.Errorf("the second attempt's entry: %v", second)
	}
	if !strings.Contains(ts.logs.String(), "job retried") {
		t.Errorf("the retry was not logged")
	}
}

func TestRetryAndDeleteRefuseWhatTheyCannotDo(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	queued := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "waiting"})
	running := claim(t, c, submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "busy"}).GetKind()).GetJob()
	succeeded := finishedJob(t, c, "done", mustValue(t, 1))

	for _, tc := range []struct {
		name string
		id   string
		want connect.Code
		msg  string
	}{
		{"retry of a queued job", queued.GetId(), connect.CodeFailedPrecondition, "it is queued"},
		{"retry of a running job", running.GetId(), connect.CodeFailedPrecondition, "it is running"},
		{"retry of a succeeded job", succeeded.GetId(), connect.CodeFailedPrecondition, "it has succeeded"},
		{"retry of an unknown job", "01JZZZZZZZZZZZZZZZZZZZZZZZ", connect.CodeNotFound, ""},
		{"retry without an id", "", connect.CodeInvalidArgument, "job_id"},
		{"retry of a malformed id", "not an id", connect.CodeInvalidArgument, "job_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.RetryJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobRequest{JobId: tc.id})
			wantCode(t, err, tc.want)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
	for _, tc := range []struct {
		name string
		id   string
		want connect.Code
		msg  string
	}{
		{"delete of a running job", running.GetId(), connect.CodeFailedPrecondition, "cancel it first"},
		{"delete of a queued job", queued.GetId(), connect.CodeFailedPrecondition, "cancel it first"},
		{"delete of an unknown job", "01JZZZZZZZZZZZZZZZZZZZZZZZ", connect.CodeNotFound, ""},
		{"delete without an id", "", connect.CodeInvalidArgument, "job_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.DeleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobRequest{JobId: tc.id})
			wantCode(t, err, tc.want)
			if err != nil && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
	// Nothing changed: the running job still runs.
	got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: running.GetId()})
	if err != nil || got.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		t.Errorf("the running job after the refusals: %v %v", got.GetJob().GetState(), err)
	}
}

func TestRetryThatWouldMakeTwoActiveJobsWithOneKeyIsAlreadyExists(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	old := failedJob(t, c, &jobwatchv1.SubmitJobRequest{Kind: "report", UniqueKey: "daily"}, "boom")
	holder := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "report-2", UniqueKey: "daily"})

	_, err := c.jobs.RetryJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobRequest{JobId: old.GetId()})
	wantCode(t, err, connect.CodeAlreadyExists)
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("not a connect error: %v", err)
	}
	found := false
	for _, d := range cerr.Details() {
		v, derr := d.Value()
		if a, ok := v.(*jobwatchv1.JobAlreadyActive); derr == nil && ok {
			found = a.GetJobId() == holder.GetId() && a.GetUniqueKey() == "daily"
		}
	}
	if !found {
		t.Errorf("no JobAlreadyActive detail naming %s: %v", holder.GetId(), cerr.Details())
	}
	got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: old.GetId()})
	if err != nil || got.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || got.GetJob().GetVersion() != old.GetVersion() {
		t.Errorf("the refused job: %v version %d, %v; want FAILED unchanged", got.GetJob().GetState(), got.GetJob().GetVersion(), err)
	}
}

func TestDeleteMakesAJobNotFoundEverywhere(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	done := finishedJob(t, c, "gone", mustValue(t, 1))
	feed, err := c.jobs.WatchJobs(ctxTimeout(t, 30*time.Second), &jobwatchv1.WatchJobsRequest{})
	if err != nil || !feed.Receive() {
		t.Fatalf("watch jobs: %v", errors.Join(err, feed.Err()))
	}
	if _, err := c.jobs.DeleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobRequest{JobId: done.GetId()}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for !slices.Contains(feed.Msg().GetDeletedJobIds(), done.GetId()) {
		if !feed.Receive() {
			t.Fatalf("the tenant's feed ended before it announced the deletion: %v", feed.Err())
		}
	}
	feed.Close()
	_, err = c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: done.GetId()})
	wantCode(t, err, connect.CodeNotFound)
	_, err = c.jobs.WaitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.WaitJobRequest{JobId: done.GetId()})
	wantCode(t, err, connect.CodeNotFound)
	list, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range list.GetJobs() {
		if j.GetId() == done.GetId() {
			t.Errorf("ListJobs still lists the deleted job")
		}
	}
	_, err = c.jobs.DeleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobRequest{JobId: done.GetId()})
	wantCode(t, err, connect.CodeNotFound)

	stream, err := c.jobs.WatchJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.WatchJobRequest{JobId: done.GetId()})
	if err == nil {
		for stream.Receive() {
			t.Errorf("a watch of the deleted job sent %v", stream.Msg())
		}
		err = stream.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
	if !strings.Contains(ts.logs.String(), "job deleted") {
		t.Errorf("the delete was not logged")
	}
}

func TestClientsActOnTheirOwnTenantsJobsAndHistorySaysWho(t *testing.T) {
	tokens := testTokens(t)
	ts := startServer(t, serverOptions{config: server.Config{Tokens: tokens}})
	p := authProtocols[1]
	admin, acme, globex := ts.clientsWithToken(p, adminToken), ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, globexToken)
	failed := failedJob(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "mine"}, "boom")

	_, err := globex.jobs.RetryJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobRequest{JobId: failed.GetId()})
	wantCode(t, err, connect.CodeNotFound)
	_, err = globex.jobs.DeleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobRequest{JobId: failed.GetId()})
	wantCode(t, err, connect.CodeNotFound)

	resp, err := acme.jobs.RetryJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobRequest{JobId: failed.GetId()})
	if err != nil {
		t.Fatalf("retry by acme's client: %v", err)
	}
	h := resp.GetJob().GetAttempts()
	p2, _ := tokens.Lookup(acmeToken)
	if want := p2.Describe(); len(h) == 0 || h[len(h)-1].GetBy() != want || !strings.Contains(want, "client, tenant acme") {
		t.Errorf("the retry's entry says by %q, want %q", h[len(h)-1].GetBy(), want)
	}
	if _, err := acme.jobs.CancelJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobRequest{JobId: failed.GetId()}); err != nil {
		t.Fatalf("cancel by acme's client: %v", err)
	}
	if _, err := acme.jobs.DeleteJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobRequest{JobId: failed.GetId()}); err != nil {
		t.Fatalf("delete by acme's client: %v", err)
	}
	_, err = admin.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: failed.GetId()})
	wantCode(t, err, connect.CodeNotFound)
}

// Starting a held job is an operator's action like a retry: logged once
// at info with who did it; starting it again, a no-op, is not.
func TestStartingAHeldJobIsLoggedWithWhoDidIt(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	held := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
	for range 2 {
		if _, err := c.jobs.StartJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.StartJobRequest{JobId: held.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(ts.logs.String(), `msg="job started" job_id=`+held.GetId()); n != 1 {
		t.Errorf("the start was logged %d times, want once:\n%s", n, ts.logs.String())
	}
	if !strings.Contains(ts.logs.String(), "by=anonymous") {
		t.Errorf("the start's log line does not say who started it:\n%s", ts.logs.String())
	}
}
