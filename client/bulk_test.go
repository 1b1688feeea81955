package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// An admin's bulk retry of every tenant is not held back by one tenant
// at its max_queued, even when that tenant's jobs fill the newest page:
// RetryJobs goes on page after page and retries the other tenants' older
// jobs, then says which tenant it left first, as ErrQuotaExceeded, in
// words of the whole call (no page token), also when the last page held
// back another tenant.
func TestABulkRetryGoesOnPastATenantAtItsQuota(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()
	const kind = "bulk.pages"
	oldest := []*jobwatchv1.SubmitJobRequest{{Tenant: "initech", Kind: kind}, {Tenant: "initech", Kind: kind}}
	if _, err := c.SubmitJobs(ctx, oldest); err != nil {
		t.Fatal(err)
	}
	older := make([]*jobwatchv1.SubmitJobRequest, 3)
	for i := range older {
		older[i] = &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: kind}
	}
	if _, err := c.SubmitJobs(ctx, older); err != nil {
		t.Fatal(err)
	}
	newest := make([]*jobwatchv1.SubmitJobRequest, client.MaxBatchJobs)
	for i := range newest {
		newest[i] = &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: kind}
	}
	if _, err := c.SubmitJobs(ctx, newest); err != nil {
		t.Fatal(err)
	}
	if r, err := c.CancelJobs(ctx, &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{kind}}, nil); err != nil || r.Changed != 1005 {
		t.Fatalf("cancel them all: %+v, %v", r, err)
	}
	for _, tenant := range []string{"globex", "initech"} {
		if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Tenant: tenant, Kind: "bulk.elsewhere"}); err != nil {
			t.Fatal(err)
		}
	}
	// globex and initech at their max_queued from now on.
	if err := s.Engine.SetRules(jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"globex": {MaxQueued: 1}, "initech": {MaxQueued: 1}}}); err != nil {
		t.Fatal(err)
	}
	pages := 0
	r, err := c.RetryJobs(ctx, &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{kind}}, func(client.BulkResult) { pages++ })
	if r != (client.BulkResult{Matched: 1005, Changed: 3}) || pages != 1 {
		t.Errorf("RetryJobs did %+v over %d pages before the last; want 1005 matched, 3 changed, 1", r, pages)
	}
	if q, ok := client.Quota(err); !errors.Is(err, client.ErrQuotaExceeded) || !ok || q.GetTenant() != "globex" ||
		!strings.HasPrefix(err.Error(), `tenant "globex" has 1 job not yet running, its max_queued is 1`) || strings.Contains(err.Error(), "page_token") {
		t.Errorf("RetryJobs: %v; want ErrQuotaExceeded naming globex, without a page token", err)
	}
	acme, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "acme", Kind: kind,
		States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_QUEUED}})
	if err != nil || len(acme.GetJobs()) != 3 {
		t.Errorf("acme's jobs queued after the retry: %d, %v; want all 3", len(acme.GetJobs()), err)
	}
}
