package server_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// Over the wire: a job after two others is WAITING, names them, is
// released by the second success, and runs.
func TestSubmitAfterOverTheWire(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	a := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "dep-a"})
	b := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "dep-b"})
	after := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "after", After: []string{a.GetId(), b.GetId()}})
	if after.GetState() != jobwatchv1.JobState_JOB_STATE_WAITING || len(after.GetAfter()) != 2 ||
		after.GetOnDependencyFailure() != jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL {
		t.Fatalf("submitted %v, want WAITING after both, cancel on failure", after)
	}
	waited := make(chan *jobwatchv1.Job, 1)
	go func() {
		resp, err := c.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: after.GetId()})
		if err != nil {
			t.Errorf("WaitJob: %v", err)
		}
		waited <- resp.GetJob()
	}()
	complete(t, c, claim(t, c, "dep-a"), nil)
	complete(t, c, claim(t, c, "dep-b"), nil)
	complete(t, c, claim(t, c, "after"), mustValue(t, "done"))
	select {
	case j := <-waited:
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetResult().GetStringValue() != "done" {
			t.Fatalf("WaitJob = %v", j)
		}
	case <-time.After(callBound):
		t.Fatal("WaitJob did not return")
	}

	// curl's JSON names the state.
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json",
		[]byte(`{"kind":"curl-after","after":["`+submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "curl-dep"}).GetId()+`"],"onDependencyFailure":"DEPENDENCY_FAILURE_RUN"}`))
	if status != http.StatusOK || !strings.Contains(body, `"JOB_STATE_WAITING"`) || !strings.Contains(body, `"DEPENDENCY_FAILURE_RUN"`) {
		t.Fatalf("curl submit with after: %d %s", status, body)
	}
}

func TestSubmitAfterRefusesBadInput(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	dep := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "dep"})
	for _, tc := range []struct {
		name    string
		req     *jobwatchv1.SubmitJobRequest
		code    connect.Code
		message string
	}{
		{"an unknown job", &jobwatchv1.SubmitJobRequest{Kind: "k", After: []string{dep.GetId(), missingJobID}}, connect.CodeNotFound,
			"after: job " + missingJobID + " not found"},
		{"a bad id", &jobwatchv1.SubmitJobRequest{Kind: "k", After: []string{"a b"}}, connect.CodeInvalidArgument, "after[0]"},
		{"with hold", &jobwatchv1.SubmitJobRequest{Kind: "k", After: []string{dep.GetId()}, Hold: true}, connect.CodeInvalidArgument, "hold"},
		{"a policy that is none", &jobwatchv1.SubmitJobRequest{Kind: "k", After: []string{dep.GetId()}, OnDependencyFailure: 9},
			connect.CodeInvalidArgument, "on_dependency_failure"},
		{"a policy without after", &jobwatchv1.SubmitJobRequest{Kind: "k", OnDependencyFailure: jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN},
			connect.CodeInvalidArgument, "on_dependency_failure: applies only to a job with after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.SubmitJob(ctxTimeout(t, callBound), tc.req)
			wantCode(t, err, tc.code)
			if ce := (*connect.Error)(nil); errors.As(err, &ce) && !strings.Contains(ce.Message(), tc.message) {
				t.Errorf("message %q does not say %q", ce.Message(), tc.message)
			}
		})
	}
	list, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Kind: "k"})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("refused submits stored %d jobs (%v)", len(list.GetJobs()), err)
	}
}

// The release is part of the transaction that ends the dependency: once
// a completion is acknowledged, a kill -9 cannot take the release back,
// and the released job runs after the restart.
func TestAReleaseSurvivesKillingTheServer(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("this is the child")
	}
	path := filepath.Join(t.TempDir(), "jobwatch.db")
	child := startCrashChild(t, path)
	c := child.clients(t)
	const pairs = 20
	var after []string
	for range pairs {
		dep := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "crash-dep"})
		after = append(after, submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "crash-after", After: []string{dep.GetId()}}).GetId())
	}
	// Complete every dependency, from several workers at once, and kill
	// the server the moment the last completion is acknowledged.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				resp, err := c.workers.ClaimJob(ctxTimeout(t, callBound), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"crash-dep"}})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if resp.GetJob() == nil {
					return
				}
				if _, err := c.workers.CompleteJob(ctxTimeout(t, callBound), &jobwatchv1.CompleteJobRequest{
					JobId: resp.GetJob().GetId(), LeaseId: resp.GetLeaseId()}); err != nil {
					t.Errorf("complete: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	child.kill()

	child = startCrashChild(t, path)
	c = child.clients(t)
	for _, id := range after {
		resp, err := c.jobs.GetJob(ctxTimeout(t, callBound), &jobwatchv1.GetJobRequest{JobId: id})
		if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("job %s after the restart: %v, %v; want QUEUED, released by its dependency's acknowledged end",
				id, resp.GetJob().GetState(), err)
		}
	}
}
