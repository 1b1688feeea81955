package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

func tenantQuotas(maxQueued map[string]int) jobs.Config {
	r := jobtype.Rules{Tenants: map[string]jobtype.TenantRules{}}
	for name, n := range maxQueued {
		r.Tenants[name] = jobtype.TenantRules{MaxQueued: n}
	}
	return jobs.Config{Rules: r}
}

// wantExhausted fails unless err is resource_exhausted saying msg, and
// nothing more, with the tenant's numbers in a QuotaExceeded detail.
func wantExhausted(t *testing.T, err error, msg string, quota *jobwatchv1.QuotaExceeded) {
	t.Helper()
	wantCode(t, err, connect.CodeResourceExhausted)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Message() != msg {
		t.Fatalf("the refusal says %q, want %q", ce.Message(), msg)
	}
	if got := quotaOf(ce); !proto.Equal(got, quota) {
		t.Errorf("QuotaExceeded detail %v, want %v", got, quota)
	}
}

// quotaOf is the QuotaExceeded detail of ce, or nil.
func quotaOf(ce *connect.Error) *jobwatchv1.QuotaExceeded {
	return detailOf[*jobwatchv1.QuotaExceeded](ce)
}

// notYetRunning counts tenant's jobs not yet running, as listed.
func notYetRunning(t *testing.T, c clients, tenant string) int {
	t.Helper()
	resp, err := c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{Tenant: tenant, PageSize: 100,
		States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_PENDING, jobwatchv1.JobState_JOB_STATE_WAITING, jobwatchv1.JobState_JOB_STATE_QUEUED}})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetJobs())
}

// Over the wire, on the backend under test: a tenant's submissions up to
// its max_queued are taken, the next is resource_exhausted (HTTP 429 for
// curl) naming the bound and the count, a batch past it is refused whole,
// a retry counts, and a job that starts frees a place.
func TestSubmissionsPastMaxQueuedAreResourceExhausted(t *testing.T) {
	ts := startServer(t, serverOptions{engine: tenantQuotas(map[string]int{"acme": 2})})
	c := ts.h2c()
	const full = `tenant "acme" has 2 jobs not yet running, its max_queued is 2: wait for some to start or end`

	failed := failedJob(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.flaky", MaxAttempts: 1}, "disk full")
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.work"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.held", Hold: true})
	fullQuota := &jobwatchv1.QuotaExceeded{Tenant: "acme", MaxQueued: 2, Queued: 2, Adding: 1}
	_, err := c.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.work"})
	wantExhausted(t, err, full, fullQuota)

	// curl sees 429, the same words and the detail's type.
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"tenant":"acme","kind":"quota.work"}`))
	var answer struct {
		Code, Message string
		Details       []struct{ Type string }
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || status != http.StatusTooManyRequests ||
		answer.Code != "resource_exhausted" || answer.Message != full ||
		len(answer.Details) != 1 || answer.Details[0].Type != "jobwatch.v1.QuotaExceeded" {
		t.Errorf("curl: %d %s\nwant 429, resource_exhausted, %q and a jobwatch.v1.QuotaExceeded detail", status, body, full)
	}
	// Another tenant is not held back by acme's bound.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "quota.work"})

	// A retry makes a job QUEUED: it counts.
	_, err = c.jobs.RetryJob(ctxTimeout(t, callBound), &jobwatchv1.RetryJobRequest{JobId: failed.GetId()})
	wantExhausted(t, err, full, fullQuota)

	// One starts: one place, which a batch of two does not fit.
	claim(t, c, "quota.work")
	_, err = c.jobs.SubmitJobs(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobsRequest{Jobs: []*jobwatchv1.SubmitJobRequest{
		{Tenant: "acme", Kind: "quota.batch"}, {Tenant: "acme", Kind: "quota.batch"}}})
	wantExhausted(t, err, `tenant "acme" has 1 job not yet running, its max_queued is 2: 2 more would pass it; submit at most 1, or wait for some to start or end`,
		&jobwatchv1.QuotaExceeded{Tenant: "acme", MaxQueued: 2, Queued: 1, Adding: 2})
	if n := notYetRunning(t, c, "acme"); n != 1 {
		t.Fatalf("after the refused batch acme has %d jobs not yet running, want 1: nothing of the batch may be created", n)
	}
	resp, err := c.jobs.RetryJob(ctxTimeout(t, callBound), &jobwatchv1.RetryJobRequest{JobId: failed.GetId()})
	if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("the retry once a place is free: %v, %v", resp.GetJob(), err)
	}
	_, err = c.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.work"})
	wantExhausted(t, err, full, fullQuota)
}

// A client token's submissions count against the token's tenant, which
// the server puts on them, not against the tenant a request leaves out
// (default) or any other.
func TestAClientTokensTenantIsTheOneCounted(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}, engine: tenantQuotas(map[string]int{"acme": 1})})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	globex := ts.clientsWithToken(authProtocols[1], globexToken)

	submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "quota.token"})
	one := &jobwatchv1.QuotaExceeded{Tenant: "acme", MaxQueued: 1, Queued: 1, Adding: 1}
	_, err := acme.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "quota.token"})
	wantExhausted(t, err, `tenant "acme" has 1 job not yet running, its max_queued is 1: wait for some to start or end`, one)
	_, err = acme.jobs.SubmitJobs(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobsRequest{Jobs: []*jobwatchv1.SubmitJobRequest{{Kind: "quota.token"}}})
	wantExhausted(t, err, `tenant "acme" has 1 job not yet running, its max_queued is 1: wait for some to start or end`, one)
	for range 3 {
		submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "quota.token"})
	}
}

// A bulk retry that a tenant's max_queued stops partway keeps what it
// did, and says so: the refusal's message and its BulkStopped detail
// count the jobs the page retried before it, which are the ones queued.
func TestABulkRetryStoppedByAQuotaSaysWhatItDid(t *testing.T) {
	ts := startServer(t, serverOptions{engine: tenantQuotas(map[string]int{"acme": 2})})
	c := ts.h2c()
	for range 4 {
		failedJob(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.bulk", MaxAttempts: 1}, "disk full")
	}
	_, err := c.jobs.RetryJobs(ctxTimeout(t, callBound), &jobwatchv1.RetryJobsRequest{
		Filter: &jobwatchv1.JobFilter{Tenant: "acme", Kinds: []string{"quota.bulk"}}})
	wantCode(t, err, connect.CodeResourceExhausted)
	queued := notYetRunning(t, c, "acme")
	if queued == 0 {
		t.Fatal("no job was retried before the refusal: the quota had room for 2")
	}
	var ce *connect.Error
	errors.As(err, &ce)
	if want := fmt.Sprintf(`this page retried %d of the 4 jobs it matched, and left tenant "acme"'s as they are`, queued); !strings.Contains(ce.Message(), want) ||
		!strings.Contains(ce.Message(), "max_queued is 2") {
		t.Errorf("the refusal says %q; want the quota and %q", ce.Message(), want)
	}
	if stopped := bulkStoppedOf(ce); stopped.GetMatched() != 4 || stopped.GetChanged() != int64(queued) {
		t.Errorf("BulkStopped detail %v; want 4 matched, %d changed", stopped, queued)
	}
	if q := quotaOf(ce); q.GetTenant() != "acme" || q.GetMaxQueued() != 2 {
		t.Errorf("QuotaExceeded detail %v; want acme's max_queued of 2", q)
	}
}

// A page whose held jobs are the newest that match would be found first
// by the same call again, so the refusal gives the next page's token
// (in its BulkStopped detail and its message): following it retries the
// other tenants' older jobs, and the last page's answer has none.
func TestABulkRetryHeldBackByAQuotaGivesTheNextPage(t *testing.T) {
	ts := startServer(t, serverOptions{engine: tenantQuotas(map[string]int{"globex": 1})})
	c := ts.h2c()
	for _, tenant := range []string{"acme", "acme", "acme", "globex", "globex", "globex"} {
		j := submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: tenant, Kind: "quota.pages"})
		if _, err := c.jobs.CancelJob(ctxTimeout(t, callBound), &jobwatchv1.CancelJobRequest{JobId: j.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "quota.elsewhere"}) // globex at its max_queued
	filter := &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{"quota.pages"}}
	var token string
	for i, want := range []struct {
		matched, changed int64
		more             bool
	}{{2, 0, true}, {2, 1, true}, {2, 2, false}} {
		resp, err := c.jobs.RetryJobs(ctxTimeout(t, callBound), &jobwatchv1.RetryJobsRequest{Filter: filter, PageToken: token, PageSize: 2})
		if i == 2 {
			if err != nil || resp.GetMatched() != want.matched || resp.GetChanged() != want.changed || resp.GetNextPageToken() != "" {
				t.Fatalf("the last page: %v, %v; want %d matched, %d changed, no token", resp, err, want.matched, want.changed)
			}
			break
		}
		wantCode(t, err, connect.CodeResourceExhausted)
		var ce *connect.Error
		errors.As(err, &ce)
		stopped := bulkStoppedOf(ce)
		if stopped.GetMatched() != want.matched || stopped.GetChanged() != want.changed || stopped.GetNextPageToken() == "" {
			t.Fatalf("page %d: BulkStopped detail %v; want %d matched, %d changed and the next page's token", i+1, stopped, want.matched, want.changed)
		}
		if hint := fmt.Sprintf("page_token %q goes on past them", stopped.GetNextPageToken()); !strings.Contains(ce.Message(), hint) {
			t.Errorf("page %d says %q; want %q", i+1, ce.Message(), hint)
		}
		token = stopped.GetNextPageToken()
	}
	if n := notYetRunning(t, c, "acme"); n != 3 {
		t.Errorf("acme has %d jobs queued after the pages, want all 3", n)
	}
}

// bulkStoppedOf is the BulkStopped detail of ce, or nil.
func bulkStoppedOf(ce *connect.Error) *jobwatchv1.BulkStopped {
	return detailOf[*jobwatchv1.BulkStopped](ce)
}

// detailOf is ce's first error detail of type T, or T's zero value.
func detailOf[T any](ce *connect.Error) T {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if m, ok := v.(T); ok {
				return m
			}
		}
	}
	var none T
	return none
}

// An admin's bulk retry across tenants, one of them at its max_queued,
// retries every other tenant's jobs of the page and leaves that
// tenant's as they are, wherever its jobs sit in the page (here the
// newest, which the page lists first): one tenant at its quota does not
// hold back the others. The refusal names that tenant, and the same call
// again finds only its jobs.
func TestABulkRetryLeavesATenantAtItsQuotaAndRetriesTheOthers(t *testing.T) {
	ts := startServer(t, serverOptions{engine: tenantQuotas(map[string]int{"globex": 1})})
	c := ts.h2c()
	for range 20 {
		failedJob(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "quota.across"}, "disk full")
	}
	failedJob(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "quota.across"}, "disk full")
	submit(t, c, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "quota.elsewhere"}) // globex at its max_queued
	req := &jobwatchv1.RetryJobsRequest{Filter: &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{"quota.across"}}}
	_, err := c.jobs.RetryJobs(ctxTimeout(t, callBound), req)
	wantCode(t, err, connect.CodeResourceExhausted)
	var ce *connect.Error
	errors.As(err, &ce)
	if want := `this page retried 20 of the 21 jobs it matched, and left tenant "globex"'s as they are`; !strings.Contains(ce.Message(), want) ||
		!strings.Contains(ce.Message(), `tenant "globex" has 1 job not yet running, its max_queued is 1`) {
		t.Errorf("the refusal says %q; want globex's quota and %q", ce.Message(), want)
	}
	if stopped := bulkStoppedOf(ce); stopped.GetMatched() != 21 || stopped.GetChanged() != 20 {
		t.Errorf("BulkStopped detail %v; want 21 matched, 20 changed", stopped)
	}
	if n := notYetRunning(t, c, "acme"); n != 20 {
		t.Errorf("acme has %d jobs queued after the retry, want all 20", n)
	}
	_, err = c.jobs.RetryJobs(ctxTimeout(t, callBound), req)
	wantCode(t, err, connect.CodeResourceExhausted)
	errors.As(err, &ce)
	if stopped := bulkStoppedOf(ce); stopped.GetMatched() != 1 || stopped.GetChanged() != 0 {
		t.Errorf("the same call again: BulkStopped detail %v; want globex's 1 matched, 0 changed", stopped)
	}
}
