package server_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// getJob is the job as GetJob answers c.
func getJob(t *testing.T, c clients, id string) *jobwatchv1.Job {
	t.Helper()
	resp, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return resp.GetJob()
}

// A bulk cancel walks the jobs its filter matches a page at a time: each
// page says how many it matched and changed, the pages together cancel
// every match once, and jobs outside the filter are left alone.
func TestCancelJobsCancelsWhatTheFilterMatchesPageByPage(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	done := finishedJob(t, c, "bulk.cancel", nil) // ended: cancel does not apply
	var want []string
	for range 5 {
		want = append(want, submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cancel", Queue: "reports"}).GetId())
	}
	otherQueue := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cancel", Queue: "mail"})
	otherTenant := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.cancel", Queue: "reports", Tenant: "globex"})

	filter := &jobwatchv1.JobFilter{Queues: []string{"reports", "default"}, Kinds: []string{"bulk.cancel"}}
	var matched, changed int64
	pages := 0
	for token := ""; ; {
		resp, err := c.jobs.CancelJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.CancelJobsRequest{Filter: filter, PageToken: token, PageSize: 2})
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		if resp.GetMatched() > 2 || resp.GetChanged() > resp.GetMatched() {
			t.Fatalf("page %d matched %d and changed %d, with pages of 2", pages, resp.GetMatched(), resp.GetChanged())
		}
		matched, changed = matched+resp.GetMatched(), changed+resp.GetChanged()
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		if pages == 1 {
			// The token names its filter: followed with another (it
			// would skip that one's newer jobs unseen), or by a delete,
			// it is refused and nothing changes.
			_, err := c.jobs.CancelJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.CancelJobsRequest{
				Filter: &jobwatchv1.JobFilter{Queues: []string{"mail"}}, PageToken: token})
			wantCode(t, err, connect.CodeInvalidArgument)
			_, err = c.jobs.DeleteJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.DeleteJobsRequest{Filter: filter, PageToken: token})
			wantCode(t, err, connect.CodeInvalidArgument)
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if matched != 5 || changed != 5 || pages != 3 {
		t.Fatalf("matched %d, changed %d in %d pages; want 5 and 5 in 3 pages of 2", matched, changed, pages)
	}
	for _, id := range want {
		if j := getJob(t, c, id); j.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
			t.Errorf("job %s is %v, want CANCELLED", id, j.GetState())
		}
	}
	for _, j := range []*jobwatchv1.Job{otherQueue, otherTenant, done} {
		if got := getJob(t, c, j.GetId()); got.GetState() != j.GetState() || got.GetVersion() != j.GetVersion() {
			t.Errorf("job %s outside the filter changed: %v, was %v", j.GetId(), got, j)
		}
	}

	// The same filter again matches nothing: the walk is done.
	resp, err := c.jobs.CancelJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.CancelJobsRequest{Filter: filter})
	if err != nil || resp.GetMatched() != 0 || resp.GetNextPageToken() != "" {
		t.Fatalf("again: %v, %v; want nothing matched", resp, err)
	}
}

// A filter that would match every job is refused unless it says all; a
// state the action does not apply to is refused naming it; both change
// nothing.
func TestBulkActionsRefuseFiltersThatSaySoLittleOrTooMuch(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	j := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.refused"})
	for _, tc := range []struct {
		name   string
		filter *jobwatchv1.JobFilter
		field  string
	}{
		{"no filter", nil, "filter"},
		{"only a tenant", &jobwatchv1.JobFilter{Tenant: "default"}, "filter"},
		{"a state cancel does not apply to", &jobwatchv1.JobFilter{States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_SUCCEEDED}}, "filter.states[0]"},
		{"a state that does not exist", &jobwatchv1.JobFilter{States: []jobwatchv1.JobState{42}}, "filter.states[0]"},
		{"a queue that is not a name", &jobwatchv1.JobFilter{Queues: []string{"a b"}}, "filter.queues"},
		{"a bad time", &jobwatchv1.JobFilter{Kinds: []string{"k"}, CreatedBefore: &timestamppb.Timestamp{Seconds: -1 << 62}}, "filter.created_before"},
		{"the zero time, which is no time", &jobwatchv1.JobFilter{CreatedBefore: timestamppb.New(time.Time{})}, "filter.created_before"},
		{"a tenant that is not a name", &jobwatchv1.JobFilter{Tenant: "a b", Kinds: []string{"k"}}, "filter.tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobsRequest{Filter: tc.filter})
			wantCode(t, err, connect.CodeInvalidArgument)
			var ce *connect.Error
			if !errors.As(err, &ce) || !strings.Contains(ce.Message(), tc.field) {
				t.Fatalf("the refusal %v does not name %s", err, tc.field)
			}
		})
	}
	if got := getJob(t, c, j.GetId()); got.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("a refused bulk cancel changed a job: %v", got)
	}
	// With all, it goes.
	resp, err := c.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobsRequest{Filter: &jobwatchv1.JobFilter{All: true}})
	if err != nil || resp.GetChanged() != 1 {
		t.Fatalf("cancel all: %v, %v; want the one job cancelled", resp, err)
	}
}

// A filter field the server does not know would, ignored, widen the
// jobs a bulk action changes ("kind" for kinds deleted every job of the
// states named): it is refused, over JSON with the field it may be a
// slip of, over the binary form by its number, and nothing changes.
func TestABulkFilterRefusesAFieldItDoesNotKnow(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	ended := finishedJob(t, c, "bulk.strict", nil)
	for _, tc := range []struct{ filter, want string }{
		{`{"states":["JOB_STATE_SUCCEEDED"],"kind":["nope"]}`, `filter.kind: no such field of a filter; did you mean "kinds"?`},
		{`{"states":["JOB_STATE_SUCCEEDED"],"Kind":["nope"]}`, `did you mean "kinds"?`},
		{`{"states":["JOB_STATE_SUCCEEDED"],"batches":["nope"]}`, `did you mean "batch"?`},
		{`{"states":["JOB_STATE_SUCCEEDED"],"aFieldFromTheFuture":"x"}`, "filter.aFieldFromTheFuture: no such field of a filter (a filter refuses what it does not know"},
	} {
		status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/DeleteJobs", "application/json", []byte(`{"filter":`+tc.filter+`}`))
		if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) || !strings.Contains(body, strings.ReplaceAll(tc.want, `"`, `\"`)) {
			t.Errorf("DeleteJobs with filter %s = %d %s; want invalid_argument saying %s", tc.filter, status, body, tc.want)
		}
	}
	f := &jobwatchv1.JobFilter{States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_SUCCEEDED}}
	f.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	_, err := c.jobs.DeleteJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.DeleteJobsRequest{Filter: f})
	wantCode(t, err, connect.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "filter field number 99: no such field of a filter") {
		t.Errorf("DeleteJobs with an unknown field in the binary filter = %v; want it named", err)
	}
	if got := getJob(t, c, ended.GetId()); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("a refused bulk delete changed a job: %v", got)
	}
	// Outside a filter, a field the server does not know is still
	// ignored, for newer clients.
	if status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/DeleteJobs", "application/json",
		[]byte(`{"filter":{"states":["JOB_STATE_SUCCEEDED"],"kinds":["bulk.strict"]},"aFieldFromTheFuture":1}`)); status != http.StatusOK || !strings.Contains(body, `"changed":"1"`) {
		t.Fatalf("DeleteJobs with an unknown field beside its filter = %d %s; want the one job deleted", status, body)
	}
}

// A client acts on its own tenant's jobs only; an admin may name a tenant
// or every tenant.
func TestBulkActionsStayInTheCallersTenant(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	admin := ts.clientsWithToken(authProtocols[0], adminToken)
	acme := ts.clientsWithToken(authProtocols[0], acmeToken)
	mine := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "bulk.tenant"})
	theirs := submit(t, admin, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "bulk.tenant"})
	filter := func(tenant string) *jobwatchv1.CancelJobsRequest {
		return &jobwatchv1.CancelJobsRequest{Filter: &jobwatchv1.JobFilter{Tenant: tenant, Kinds: []string{"bulk.tenant"}}}
	}
	for _, tenant := range []string{"globex", "*"} {
		_, err := acme.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), filter(tenant))
		wantCode(t, err, connect.CodePermissionDenied)
	}
	resp, err := acme.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), filter(""))
	if err != nil || resp.GetChanged() != 1 {
		t.Fatalf("acme's own cancel: %v, %v; want its one job", resp, err)
	}
	if got := getJob(t, admin, theirs.GetId()); got.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("acme's bulk cancel reached globex's job: %v", got)
	}
	if got := getJob(t, admin, mine.GetId()); got.GetState() != jobwatchv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("acme's job: %v, want CANCELLED", got)
	}
	resp, err = admin.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), filter("*"))
	if err != nil || resp.GetChanged() != 1 {
		t.Fatalf("the admin's cancel over every tenant: %v, %v; want globex's job", resp, err)
	}
}

// A bulk retry puts every failed job it matches back in its queue, with
// who did it in each job's history; a bulk delete then removes every
// ended one, after which each is not_found.
func TestRetryJobsAndDeleteJobsActOnEveryMatch(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	var failed []string
	for range 3 {
		submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.retry", Queue: "imports", MaxAttempts: 1})
		lease := claim(t, c, "bulk.retry")
		if _, err := c.workers.FailJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.FailJobRequest{JobId: lease.GetJob().GetId(),
			LeaseId: lease.GetLeaseId(), Error: &jobwatchv1.JobError{Type: "Upstream", Message: "503"}}); err != nil {
			t.Fatal(err)
		}
		failed = append(failed, lease.GetJob().GetId())
	}
	queued := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.other", Queue: "imports"})

	resp, err := c.jobs.RetryJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.RetryJobsRequest{
		Filter: &jobwatchv1.JobFilter{Queues: []string{"imports"}, States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_FAILED}}})
	if err != nil || resp.GetMatched() != 3 || resp.GetChanged() != 3 || resp.GetNextPageToken() != "" {
		t.Fatalf("retry the failed: %v, %v; want 3 matched and retried on one page", resp, err)
	}
	for _, id := range failed {
		j := getJob(t, c, id)
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("retried job %s is %v, want QUEUED", id, j.GetState())
		}
		h := j.GetAttempts()
		if len(h) == 0 || h[len(h)-1].GetBy() == "" || h[len(h)-1].GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("retried job %s has history %v; want the retry last, with who did it", id, h)
		}
	}
	// Retry does not apply to a SUCCEEDED job: refused, naming the state.
	_, err = c.jobs.RetryJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.RetryJobsRequest{
		Filter: &jobwatchv1.JobFilter{States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_SUCCEEDED}}})
	wantCode(t, err, connect.CodeInvalidArgument)

	// Cancel what is queued in imports, then delete every ended job of it.
	if _, err := c.jobs.CancelJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.CancelJobsRequest{
		Filter: &jobwatchv1.JobFilter{Queues: []string{"imports"}}}); err != nil {
		t.Fatal(err)
	}
	del, err := c.jobs.DeleteJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.DeleteJobsRequest{
		Filter: &jobwatchv1.JobFilter{Queues: []string{"imports"}}})
	if err != nil || del.GetMatched() != 4 || del.GetChanged() != 4 {
		t.Fatalf("delete the ended: %v, %v; want 4", del, err)
	}
	for _, id := range append(failed, queued.GetId()) {
		_, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: id})
		wantCode(t, err, connect.CodeNotFound)
	}
}

// A bulk action's filter may name a batch: it acts on that batch's jobs
// only, and a batch alone narrows enough.
func TestRetryJobsOfOneBatch(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	inBatch := failedJob(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.batch", Batch: "album-7"}, "not a JPEG")
	outside := failedJob(t, c, &jobwatchv1.SubmitJobRequest{Kind: "bulk.batch"}, "not a PNG")
	resp, err := c.jobs.RetryJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.RetryJobsRequest{Filter: &jobwatchv1.JobFilter{Batch: "album-7"}})
	if err != nil || resp.GetMatched() != 1 || resp.GetChanged() != 1 {
		t.Fatalf("retry of batch album-7: %v, %v; want its one failed job retried", resp, err)
	}
	if j := getJob(t, c, inBatch.GetId()); j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Errorf("the batch's job is %v, want QUEUED", j.GetState())
	}
	if j := getJob(t, c, outside.GetId()); j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED {
		t.Errorf("the job outside the batch is %v, want FAILED", j.GetState())
	}
	_, err = c.jobs.RetryJobs(ctxTimeout(t, 10*time.Second), &jobwatchv1.RetryJobsRequest{Filter: &jobwatchv1.JobFilter{Batch: "no spaces"}})
	wantCode(t, err, connect.CodeInvalidArgument)
}
