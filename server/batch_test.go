package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

func batchRequest(t *testing.T, kind, batch string, n int) *jobwatchv1.SubmitJobsRequest {
	req := &jobwatchv1.SubmitJobsRequest{}
	for i := range n {
		req.Jobs = append(req.Jobs, &jobwatchv1.SubmitJobRequest{Kind: kind, Batch: batch, Payload: mustValue(t, map[string]any{"i": i})})
	}
	return req
}

func jobIDs(jobs []*jobwatchv1.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.GetId()
	}
	return ids
}

// everyProtocol is the four protocols a Go client can speak, each over
// the HTTP version it takes.
var everyProtocol = []protocol{
	{"connect JSON over HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithProtoJSON()}},
	{"connect protobuf over h2c", (*testServer).h2cClient, nil},
	{"grpc over h2c", (*testServer).h2cClient, []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web over HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithGRPCWeb()}},
}

// SubmitJobs and WaitJobs over every protocol: a batch goes in in one
// call, in order, and one wait returns once all of it has ended.
func TestSubmitJobsThenWaitJobsOverEveryProtocol(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for i, p := range everyProtocol {
		t.Run(p.name, func(t *testing.T) {
			c := ts.clients(p.hc(ts), p.opts...)
			kind, batch := fmt.Sprintf("thumb-%d", i), fmt.Sprintf("thumbs-%d", i)
			resp, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), batchRequest(t, kind, batch, 20))
			if err != nil {
				t.Fatalf("SubmitJobs: %v", err)
			}
			for n, j := range resp.GetJobs() {
				if j.GetBatch() != batch || j.GetPayload().GetStructValue().GetFields()["i"].GetNumberValue() != float64(n) {
					t.Fatalf("job %d = %v, want the request's job %d in batch %s", n, j, n, batch)
				}
			}
			waited := make(chan *jobwatchv1.WaitJobsResponse, 1)
			go func() {
				resp, err := c.jobs.WaitJobs(context.Background(), &jobwatchv1.WaitJobsRequest{Batch: batch, View: jobwatchv1.JobView_JOB_VIEW_FULL})
				if err != nil {
					t.Errorf("WaitJobs: %v", err)
				}
				waited <- resp
			}()
			ts.waitForGauge("jobwatch_parked_waits", 1)
			for range resp.GetJobs() {
				complete(t, c, claim(t, c, kind), mustValue(t, "ok"))
			}
			select {
			case got := <-waited:
				if !slices.Equal(jobIDs(got.GetJobs()), jobIDs(resp.GetJobs())) || len(got.GetUnfinishedJobIds()) != 0 {
					t.Fatalf("WaitJobs = %v, unfinished %v; want every job of the batch in submission order", jobIDs(got.GetJobs()), got.GetUnfinishedJobIds())
				}
				if r := got.GetJobs()[0].GetResult().GetStringValue(); r != "ok" {
					t.Errorf("a full WaitJobs answered result %q", r)
				}
			case <-time.After(callBound):
				t.Fatal("WaitJobs did not return once the batch had ended")
			}
			ts.waitForGauge("jobwatch_parked_waits", 0)
		})
	}
}

func TestWaitJobsForAnyAndAtTheCallersDeadline(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	a := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "any-a"})
	b := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "any-b"})
	ids := []string{a.GetId(), b.GetId()}

	// At the caller's deadline: OK, nothing ended, both unfinished.
	start := time.Now()
	resp, err := c.jobs.WaitJobs(ctxTimeout(t, 2*time.Second), &jobwatchv1.WaitJobsRequest{JobIds: ids})
	if err != nil || len(resp.GetJobs()) != 0 || !slices.Equal(resp.GetUnfinishedJobIds(), ids) {
		t.Fatalf("WaitJobs at the deadline = %v, unfinished %v, %v; want OK with both unfinished", jobIDs(resp.GetJobs()), resp.GetUnfinishedJobIds(), err)
	}
	if time.Since(start) < time.Second {
		t.Errorf("WaitJobs returned after %v, before the caller's deadline less its margin", time.Since(start))
	}

	waited := make(chan *jobwatchv1.WaitJobsResponse, 1)
	go func() {
		resp, err := c.jobs.WaitJobs(context.Background(), &jobwatchv1.WaitJobsRequest{JobIds: ids, Mode: jobwatchv1.WaitMode_WAIT_MODE_ANY})
		if err != nil {
			t.Errorf("WaitJobs: %v", err)
		}
		waited <- resp
	}()
	ts.waitForGauge("jobwatch_parked_waits", 1)
	complete(t, c, claim(t, c, "any-b"), nil)
	select {
	case got := <-waited:
		if !slices.Equal(jobIDs(got.GetJobs()), []string{b.GetId()}) || !slices.Equal(got.GetUnfinishedJobIds(), []string{a.GetId()}) {
			t.Fatalf("WaitJobs for any = %v, unfinished %v", jobIDs(got.GetJobs()), got.GetUnfinishedJobIds())
		}
	case <-time.After(callBound):
		t.Fatal("WaitJobs for any did not return once one job had ended")
	}
}

func TestBatchesRefuseBadInputAndStoreNothing(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	held := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "nightly", UniqueKey: "nightly"})
	pending := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "held", Hold: true})
	tooMany := batchRequest(t, "refused", "refused", jobtype.MaxBatchJobs+1)
	for _, tc := range []struct {
		name    string
		req     *jobwatchv1.SubmitJobsRequest
		code    connect.Code
		message string
	}{
		{"too many jobs", tooMany, connect.CodeInvalidArgument, "jobs: must hold 1 to 1000 jobs, got 1001"},
		{"no job", &jobwatchv1.SubmitJobsRequest{}, connect.CodeInvalidArgument, "jobs: must hold 1 to 1000 jobs, got 0"},
		{"a bad kind", func() *jobwatchv1.SubmitJobsRequest {
			r := batchRequest(t, "refused", "refused", 3)
			r.Jobs[2].Kind = "no spaces please"
			return r
		}(), connect.CodeInvalidArgument, "jobs[2].kind"},
		{"wait", func() *jobwatchv1.SubmitJobsRequest {
			r := batchRequest(t, "refused", "refused", 3)
			r.Jobs[1].Wait = true
			return r
		}(), connect.CodeInvalidArgument, "jobs[1].wait: must be false in SubmitJobs: wait for the jobs with WaitJobs"},
		{"a bad batch", func() *jobwatchv1.SubmitJobsRequest {
			r := batchRequest(t, "refused", "refused", 3)
			r.Jobs[0].Batch = "has space"
			return r
		}(), connect.CodeInvalidArgument, "jobs[0].batch"},
		{"a unique key an active job holds", func() *jobwatchv1.SubmitJobsRequest {
			r := batchRequest(t, "refused", "refused", 3)
			r.Jobs[2].UniqueKey = "nightly"
			return r
		}(), connect.CodeAlreadyExists, "jobs[2]: job " + held.GetId() + " is already active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), tc.req)
			wantCode(t, err, tc.code)
			if ce := (*connect.Error)(nil); errors.As(err, &ce) && !strings.Contains(ce.Message(), tc.message) {
				t.Errorf("message %q does not say %q", ce.Message(), tc.message)
			}
			if tc.code == connect.CodeAlreadyExists {
				wantConflictWith(t, err, held.GetId(), "nightly")
			}
			list, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Batch: "refused"})
			if err != nil || len(list.GetJobs()) != 0 {
				t.Fatalf("the batch holds %d jobs after a refused SubmitJobs (%v), want none", len(list.GetJobs()), err)
			}
		})
	}

	for _, tc := range []struct {
		name    string
		req     *jobwatchv1.WaitJobsRequest
		code    connect.Code
		message string
	}{
		{"an unknown id", &jobwatchv1.WaitJobsRequest{JobIds: []string{held.GetId(), missingJobID}}, connect.CodeNotFound, missingJobID + ": job not found"},
		{"a held job", &jobwatchv1.WaitJobsRequest{JobIds: []string{pending.GetId()}}, connect.CodeFailedPrecondition, pending.GetId()},
		{"nothing to wait for", &jobwatchv1.WaitJobsRequest{}, connect.CodeInvalidArgument, "job_ids"},
		{"ids and a batch", &jobwatchv1.WaitJobsRequest{JobIds: []string{held.GetId()}, Batch: "b"}, connect.CodeInvalidArgument, "batch"},
		{"a batch nobody used", &jobwatchv1.WaitJobsRequest{Batch: "nobody"}, connect.CodeNotFound, `batch "nobody" holds no job of tenant "default": job not found`},
		{"a mode that is none", &jobwatchv1.WaitJobsRequest{JobIds: []string{held.GetId()}, Mode: 7}, connect.CodeInvalidArgument, "mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.WaitJobs(ctxTimeout(t, callBound), tc.req)
			wantCode(t, err, tc.code)
			if ce := (*connect.Error)(nil); errors.As(err, &ce) && !strings.Contains(ce.Message(), tc.message) {
				t.Errorf("message %q does not say %q", ce.Message(), tc.message)
			}
		})
	}
	// The server kept serving.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "after"})
}

// A client token submits and waits for its own tenant's jobs only:
// another tenant's job is not_found, as one that does not exist.
func TestWaitJobsKeepsToTheClientsTenant(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	p := authProtocols[0]
	acme, globex := ts.clientsWithToken(p, acmeToken), ts.clientsWithToken(p, globexToken)
	theirs := submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "k", Batch: "shared-name"})
	resp, err := acme.jobs.SubmitJobs(ctxTimeout(t, callBound), batchRequest(t, "k", "shared-name", 2))
	if err != nil {
		t.Fatal(err)
	}
	if tenant := resp.GetJobs()[0].GetTenant(); tenant != "acme" {
		t.Fatalf("a client's SubmitJobs made jobs of tenant %q", tenant)
	}
	_, err = acme.jobs.WaitJobs(ctxTimeout(t, callBound), &jobwatchv1.WaitJobsRequest{JobIds: []string{resp.GetJobs()[0].GetId(), theirs.GetId()}})
	wantCode(t, err, connect.CodeNotFound)
	_, missing := acme.jobs.WaitJobs(ctxTimeout(t, callBound), &jobwatchv1.WaitJobsRequest{JobIds: []string{missingJobID}})
	if err.Error() != strings.Replace(missing.Error(), missingJobID, theirs.GetId(), 1) {
		t.Errorf("another tenant's job: %v; a missing one: %v; want the same words", err, missing)
	}
	// The batch of that name is the caller's own: its two jobs.
	got, err := acme.jobs.WaitJobs(ctxTimeout(t, 2*time.Second), &jobwatchv1.WaitJobsRequest{Batch: "shared-name"})
	if err != nil || len(got.GetUnfinishedJobIds()) != 2 {
		t.Fatalf("WaitJobs of acme's batch = unfinished %v, %v; want acme's two jobs", got.GetUnfinishedJobIds(), err)
	}
	// Submitting for another tenant is refused as for SubmitJob.
	req := batchRequest(t, "k", "", 2)
	req.Jobs[1].Tenant = "globex"
	_, err = acme.jobs.SubmitJobs(ctxTimeout(t, callBound), req)
	wantCode(t, err, connect.CodePermissionDenied)
}

// WatchJobs and ListJobs with a batch keep that batch's jobs only.
func TestWatchJobsAndListJobsKeepOneBatch(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	if _, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), batchRequest(t, "w", "mine", 3)); err != nil {
		t.Fatal(err)
	}
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w", Batch: "other"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w"})
	list, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Batch: "mine"})
	if err != nil || len(list.GetJobs()) != 3 {
		t.Fatalf("ListJobs of batch mine = %d jobs, %v; want 3", len(list.GetJobs()), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	stream, err := c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Batch: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 3 && stream.Receive() {
		for _, j := range stream.Msg().GetJobs() {
			if j.GetBatch() != "mine" {
				t.Fatalf("WatchJobs of batch mine sent %s of batch %q", j.GetId(), j.GetBatch())
			}
			seen[j.GetId()] = true
		}
	}
	// A change to the batch comes; one outside it does not.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w", Batch: "other"})
	late := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w", Batch: "mine"})
	for stream.Receive() {
		js := stream.Msg().GetJobs()
		if len(js) == 0 {
			continue
		}
		if js[0].GetId() != late.GetId() || len(js) != 1 {
			t.Fatalf("WatchJobs of batch mine sent %v, want only %s", jobIDs(js), late.GetId())
		}
		break
	}
	// So does a deletion of one of the batch's jobs; one outside it does
	// not (it did: deletions reached every stream of the tenant).
	deleted := func(j *jobwatchv1.Job) {
		t.Helper()
		if _, err := c.jobs.CancelJob(ctxTimeout(t, callBound), &jobwatchv1.CancelJobRequest{JobId: j.GetId()}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.jobs.DeleteJob(ctxTimeout(t, callBound), &jobwatchv1.DeleteJobRequest{JobId: j.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	deleted(submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w", Batch: "other"}))
	deleted(late)
	for stream.Receive() {
		for _, j := range stream.Msg().GetJobs() {
			if j.GetId() != late.GetId() {
				t.Fatalf("WatchJobs of batch mine sent %s of batch %q", j.GetId(), j.GetBatch())
			}
		}
		if ids := stream.Msg().GetDeletedJobIds(); len(ids) > 0 {
			if !slices.Equal(ids, []string{late.GetId()}) {
				t.Fatalf("WatchJobs of batch mine announced the deletion of %v, want only %s", ids, late.GetId())
			}
			return
		}
	}
	t.Fatalf("WatchJobs ended: %v", stream.Err())
}

// A summary WaitJobs answer is put together from jobs encoded as each
// ended (some before the call, the rest while it was parked): over every
// protocol it reads exactly as the same jobs listed, in the order asked,
// at the caller's deadline (the unfinished ids after the ended jobs) and
// once every job has ended.
func TestWaitJobsAnswersBuiltWhileParkedReadAsListedOverEveryProtocol(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for i, p := range []protocol{
		{"connect JSON over HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect protobuf over h2c", (*testServer).h2cClient, nil},
		{"grpc over h2c", (*testServer).h2cClient, []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web JSON over HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithGRPCWeb(), connect.WithProtoJSON()}},
	} {
		t.Run(p.name, func(t *testing.T) {
			c := ts.clients(p.hc(ts), p.opts...)
			kind, batch := fmt.Sprintf("built-%d", i), fmt.Sprintf("built-%d", i)
			submitted, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), batchRequest(t, kind, batch, 12))
			if err != nil {
				t.Fatalf("SubmitJobs: %v", err)
			}
			ids := jobIDs(submitted.GetJobs())
			slices.Reverse(ids) // asked in another order than submitted
			for range 5 {
				complete(t, c, claim(t, c, kind), mustValue(t, "early"))
			}
			listed := func() map[string]*jobwatchv1.Job {
				resp, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Batch: batch})
				if err != nil {
					t.Fatalf("ListJobs: %v", err)
				}
				byID := map[string]*jobwatchv1.Job{}
				for _, j := range resp.GetJobs() {
					byID[j.GetId()] = j
				}
				return byID
			}
			check := func(got *jobwatchv1.WaitJobsResponse, ended int) {
				t.Helper()
				byID := listed()
				var wantEnded, wantUnfinished []string
				for _, id := range ids {
					if jobwatchv1.JobState_JOB_STATE_SUCCEEDED == byID[id].GetState() {
						wantEnded = append(wantEnded, id)
					} else {
						wantUnfinished = append(wantUnfinished, id)
					}
				}
				if len(wantEnded) != ended || !slices.Equal(jobIDs(got.GetJobs()), wantEnded) || !slices.Equal(got.GetUnfinishedJobIds(), wantUnfinished) {
					t.Fatalf("WaitJobs = %v, unfinished %v; want %v, unfinished %v", jobIDs(got.GetJobs()), got.GetUnfinishedJobIds(), wantEnded, wantUnfinished)
				}
				for _, j := range got.GetJobs() {
					if !proto.Equal(j, byID[j.GetId()]) {
						t.Fatalf("WaitJobs answered job\n%v\nListJobs lists it as\n%v", j, byID[j.GetId()])
					}
				}
			}

			// Parked until the caller's deadline: the five ended before
			// the call and two that end while it waits.
			waited := make(chan *jobwatchv1.WaitJobsResponse, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				resp, err := c.jobs.WaitJobs(ctx, &jobwatchv1.WaitJobsRequest{JobIds: ids})
				if err != nil {
					t.Errorf("WaitJobs to the deadline: %v", err)
				}
				waited <- resp
			}()
			ts.waitForGauge("jobwatch_parked_waits", 1)
			for range 2 {
				complete(t, c, claim(t, c, kind), mustValue(t, "while parked"))
			}
			check(<-waited, 7)

			// Parked until the last one ends.
			go func() {
				resp, err := c.jobs.WaitJobs(context.Background(), &jobwatchv1.WaitJobsRequest{JobIds: ids})
				if err != nil {
					t.Errorf("WaitJobs: %v", err)
				}
				waited <- resp
			}()
			ts.waitForGauge("jobwatch_parked_waits", 1)
			for range 5 {
				complete(t, c, claim(t, c, kind), mustValue(t, "last"))
			}
			select {
			case got := <-waited:
				check(got, 12)
			case <-time.After(callBound):
				t.Fatal("WaitJobs did not return once every job had ended")
			}
		})
	}
}

// compressions records whether the answer a client received for each
// procedure was compressed: by Content-Encoding in Connect's unary
// protocol; in gRPC and gRPC-Web, where Grpc-Encoding names what a
// message may be compressed with, by the first message's flag.
type compressions struct {
	next http.RoundTripper
	mu   sync.Mutex
	of   map[string]bool
}

func (c *compressions) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	compressed := resp.Header.Get("Content-Encoding") == "gzip"
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/grpc") {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		compressed = len(body) > 0 && body[0]&1 == 1
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	c.mu.Lock()
	c.of[path.Base(req.URL.Path)] = compressed
	c.mu.Unlock()
	return resp, nil
}

func (c *compressions) compressed(procedure string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.of[procedure]
}

// A WaitJobs answer is never compressed, over any protocol, though the
// clients accept gzip (connect-go's do by default) and another answer as
// large is compressed for them: gzip and gunzip of a large answer take
// longer than its bytes take to cross, between the last job's end and
// the caller's wake-up. A compressed WaitJobs request is still read.
func TestWaitJobsAnswersAreNotCompressed(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for i, p := range everyProtocol {
		t.Run(p.name, func(t *testing.T) {
			hc := p.hc(ts)
			rec := &compressions{next: hc.Transport, of: map[string]bool{}}
			c := ts.clients(&http.Client{Transport: rec}, append(slices.Clone(p.opts), connect.WithSendGzip())...)
			kind, batch := fmt.Sprintf("unzipped-%d", i), fmt.Sprintf("unzipped-%d", i)
			resp, err := c.jobs.SubmitJobs(ctxTimeout(t, callBound), batchRequest(t, kind, batch, 40))
			if err != nil {
				t.Fatalf("SubmitJobs: %v", err)
			}
			if _, err := c.jobs.CancelJobs(ctxTimeout(t, callBound), &jobwatchv1.CancelJobsRequest{Filter: &jobwatchv1.JobFilter{Kinds: []string{kind}}}); err != nil {
				t.Fatalf("CancelJobs: %v", err)
			}
			list, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Batch: batch, Kind: kind})
			if err != nil {
				t.Fatalf("ListJobs: %v", err)
			}
			if !rec.compressed("ListJobs") {
				t.Fatalf("ListJobs of %d jobs answered uncompressed: the client does not ask for gzip", len(list.GetJobs()))
			}
			got, err := c.jobs.WaitJobs(ctxTimeout(t, callBound), &jobwatchv1.WaitJobsRequest{Batch: batch})
			if err != nil {
				t.Fatalf("WaitJobs (its request compressed): %v", err)
			}
			if !slices.Equal(jobIDs(got.GetJobs()), jobIDs(resp.GetJobs())) {
				t.Fatalf("WaitJobs answered %v, want every job of the batch in submission order", jobIDs(got.GetJobs()))
			}
			if size := proto.Size(got); size < 2<<10 {
				t.Fatalf("the answer is %d bytes, too small to show whether it would be compressed", size)
			}
			if rec.compressed("WaitJobs") {
				t.Error("WaitJobs answered compressed")
			}
		})
	}
}
