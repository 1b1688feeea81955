package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// leavesOnClaim makes the worker named leaving go away at the worst
// moment: right after the store committed its claim and before the
// handler could answer. It cancels the worker's call and waits until the
// server has seen the request end, so the test does not depend on timing.
type leavesOnClaim struct {
	store.Store
	leaving string
	once    sync.Once
	leave   func()      // cancels the leaving worker's call
	left    chan string // what the request context said, once ended
}

func (s *leavesOnClaim) ClaimJobs(ctx context.Context, f store.ClaimFilter, claim store.Claim) ([]store.Claimed, error) {
	claimed, err := s.Store.ClaimJobs(ctx, f, claim)
	if err == nil && claim.WorkerID == s.leaving {
		s.once.Do(func() {
			s.leave()
			select {
			case <-ctx.Done():
				s.left <- ctx.Err().Error()
			case <-time.After(10 * time.Second):
				s.left <- "the request did not end within 10s of its client cancelling it"
			}
		})
	}
	return claimed, err
}

func TestAClaimWhoseWorkerLeavesAsItIsGrantedGivesTheJobBack(t *testing.T) {
	for _, proto := range []string{"h2c", "http1"} {
		t.Run("over "+proto, func(t *testing.T) {
			leaveCtx, leave := context.WithCancel(context.Background())
			defer leave()
			st := &leavesOnClaim{leaving: "leaving", leave: leave, left: make(chan string, 1)}
			ts := startServer(t, serverOptions{wrapStore: func(inner store.Store) store.Store {
				st.Store = inner
				return st
			}})
			c := ts.h2c()
			if proto == "http1" {
				c = ts.clients(ts.http1Client())
			}

			claimed := make(chan error, 1)
			go func() {
				_, err := c.workers.ClaimJob(leaveCtx, &jobwatchv1.ClaimJobRequest{WorkerId: "leaving", Kinds: []string{"sync"}})
				claimed <- err
			}()
			ts.waitForGauge("jobwatch_parked_claims", 1)
			job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "sync"})

			select {
			case why := <-st.left:
				if why != context.Canceled.Error() {
					t.Fatalf("the claim's request: %s", why)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the leaving worker's claim never committed")
			}
			if err := <-claimed; connect.CodeOf(err) != connect.CodeCanceled {
				t.Fatalf("the leaving worker's claim: %v, want canceled", err)
			}

			// The job is QUEUED again, never left RUNNING under the lease
			// nobody received.
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
				if err != nil {
					t.Fatal(err)
				}
				j := got.GetJob()
				if j.GetState() == jobwatchv1.JobState_JOB_STATE_QUEUED {
					if j.GetAttempt() != 0 || j.GetWorkerId() != "" {
						t.Errorf("given back with attempt %d, worker %q; want attempt 0 and no worker", j.GetAttempt(), j.GetWorkerId())
					}
					break
				}
				if j.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || time.Now().After(deadline) {
					t.Fatalf("job %s with worker %q; want it queued again", j.GetState(), j.GetWorkerId())
				}
				time.Sleep(5 * time.Millisecond)
			}

			// Another worker claims it as its first attempt and can finish it.
			lease := claim(t, c, "sync")
			if lease.GetJob().GetId() != job.GetId() || lease.GetJob().GetAttempt() != 1 || lease.GetJob().GetWorkerId() != "worker-1" {
				t.Fatalf("second claim: %v; want job %s, attempt 1, worker-1", lease.GetJob(), job.GetId())
			}
			if done := complete(t, c, lease, mustValue(t, "ok")); done.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Errorf("completed job is %s, want succeeded", done.GetState())
			}
			if logs := ts.logs.String(); !strings.Contains(logs, "claim given back") {
				t.Errorf("the log does not say the claim was given back:\n%s", logs)
			}
		})
	}
}

// ReleaseJob gives back a job its worker claimed and will not run: QUEUED
// at once, in its place, the attempt not counted, and the next claim
// takes it as its first attempt. Sent again (its answer lost), or for a
// lease that no longer holds, it is failed_precondition and changes
// nothing; an unknown job is not_found.
func TestReleaseJobGivesTheJobBackAsIfNeverClaimed(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "sync"})
	lease := claim(t, c, "sync")
	resp, err := c.workers.ReleaseJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ReleaseJobRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if j := resp.GetJob(); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || j.GetAttempt() != 0 || j.GetWorkerId() != "" {
		t.Fatalf("released: %v attempt %d worker %q; want QUEUED, attempt 0, no worker", j.GetState(), j.GetAttempt(), j.GetWorkerId())
	}
	again, err := c.workers.ReleaseJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ReleaseJobRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId()})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("released again: %v, %v; want failed_precondition", again, err)
	}
	if _, err := c.workers.ReleaseJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ReleaseJobRequest{JobId: "j_00000000000000000000000000", LeaseId: lease.GetLeaseId()}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("release of an unknown job: %v; want not_found", err)
	}
	next := claim(t, c, "sync")
	if next.GetJob().GetId() != job.GetId() || next.GetJob().GetAttempt() != 1 {
		t.Fatalf("the next claim: %v; want job %s at attempt 1", next.GetJob(), job.GetId())
	}
	if logs := ts.logs.String(); !strings.Contains(logs, "claim given back by its worker") {
		t.Errorf("the log does not say the claim was given back:\n%s", logs)
	}
}

// StopClaiming answers a worker's parked claim at once, with no job, and
// leaves another worker's parked; a worker id no claim could name is
// invalid_argument.
func TestStopClaimingAnswersTheWorkersParkedClaims(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	type answer struct {
		resp *jobwatchv1.ClaimJobResponse
		err  error
	}
	claims := map[string]chan answer{}
	for _, w := range []string{"stopping", "staying"} {
		ch := make(chan answer, 1)
		claims[w] = ch
		go func() {
			resp, err := c.workers.ClaimJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: w, Kinds: []string{"sync"}})
			ch <- answer{resp, err}
		}()
	}
	ts.waitForGauge("jobwatch_parked_claims", 2)
	if _, err := c.workers.StopClaiming(ctxTimeout(t, 5*time.Second), &jobwatchv1.StopClaimingRequest{WorkerId: "stopping"}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-claims["stopping"]:
		if a.err != nil || a.resp.GetJob() != nil || len(a.resp.GetClaims()) != 0 {
			t.Fatalf("the stopping worker's claim: %v, %v; want OK with no job", a.resp, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stopping worker's claim stayed parked")
	}
	ts.waitForGauge("jobwatch_parked_claims", 1) // the other worker's
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "sync"})
	if a := <-claims["staying"]; a.err != nil || a.resp.GetJob().GetId() != job.GetId() {
		t.Fatalf("the other worker's claim: %v, %v; want job %s", a.resp, a.err, job.GetId())
	}
	if _, err := c.workers.StopClaiming(ctxTimeout(t, 5*time.Second), &jobwatchv1.StopClaimingRequest{}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("StopClaiming without a worker id: %v; want invalid_argument", err)
	}
}

// A worker id is no secret (every job shows who runs it): StopClaiming
// sent with another token, even a worker's of another tenant, leaves the
// worker's parked claim parked and its next claims taking jobs; with the
// token the claim was sent with, it answers the claim.
func TestStopClaimingReachesOnlyTheClaimsOfItsToken(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	p := authProtocols[1]
	victim := ts.clientsWithToken(p, workerToken)
	other := ts.clientsWithToken(p, acmeWorker)
	admin := ts.clientsWithToken(p, adminToken)
	type answer struct {
		resp *jobwatchv1.ClaimJobResponse
		err  error
	}
	claim := func() chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := victim.workers.ClaimJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "victim", Kinds: []string{"sync"}})
			ch <- answer{resp, err}
		}()
		return ch
	}
	parked := claim()
	ts.waitForGauge("jobwatch_parked_claims", 1)
	for _, c := range []clients{other, admin} {
		if _, err := c.workers.StopClaiming(ctxTimeout(t, 5*time.Second), &jobwatchv1.StopClaimingRequest{WorkerId: "victim"}); err != nil {
			t.Fatalf("StopClaiming with another token: %v; want OK (it reaches nothing)", err)
		}
	}
	job := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "sync"})
	if a := <-parked; a.err != nil || a.resp.GetJob().GetId() != job.GetId() {
		t.Fatalf("the worker's claim after a stop sent with other tokens: %v, %v; want job %s", a.resp.GetJob(), a.err, job.GetId())
	}

	parked = claim()
	ts.waitForGauge("jobwatch_parked_claims", 1)
	if _, err := victim.workers.StopClaiming(ctxTimeout(t, 5*time.Second), &jobwatchv1.StopClaimingRequest{WorkerId: "victim"}); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-parked:
		if a.err != nil || a.resp.GetJob() != nil {
			t.Fatalf("the worker's claim after its own stop: %v, %v; want OK with no job", a.resp, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's claim stayed parked after a stop sent with its own token")
	}
}
