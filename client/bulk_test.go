package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// An admin's bulk retry of every tenant is not held back by one tenant
// at its max_queued, even when that tenant's jobs fill the newest page:
// RetryJobs goes on page after page and retries the other tenants' older
// jobs, then says which tenant it left, as ErrQuotaExceeded.
func TestABulkRetryGoesOnPastATenantAtItsQuota(t *testing.T) {
	s := startServer(t, serverOptions{})
	c := fastClient(t, s.URL)
	ctx := context.Background()
	const kind = "bulk.pages"
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
	if r, err := c.CancelJobs(ctx, &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{kind}}, nil); err != nil || r.Changed != 1003 {
		t.Fatalf("cancel them all: %+v, %v", r, err)
	}
	if _, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "bulk.elsewhere"}); err != nil {
		t.Fatal(err)
	}
	// globex at its max_queued from now on.
	if err := s.Engine.SetRules(jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"globex": {MaxQueued: 1}}}); err != nil {
		t.Fatal(err)
	}
	pages := 0
	r, err := c.RetryJobs(ctx, &jobwatchv1.JobFilter{Tenant: "*", Kinds: []string{kind}}, func(client.BulkResult) { pages++ })
	if r != (client.BulkResult{Matched: 1003, Changed: 3}) || pages != 1 {
		t.Errorf("RetryJobs did %+v over %d pages before the last; want 1003 matched, 3 changed, 1", r, pages)
	}
	if q, ok := client.Quota(err); !errors.Is(err, client.ErrQuotaExceeded) || !ok || q.GetTenant() != "globex" {
		t.Errorf("RetryJobs: %v; want ErrQuotaExceeded naming globex", err)
	}
	acme, err := c.JobService().ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "acme", Kind: kind,
		States: []jobwatchv1.JobState{jobwatchv1.JobState_JOB_STATE_QUEUED}})
	if err != nil || len(acme.GetJobs()) != 3 {
		t.Errorf("acme's jobs queued after the retry: %d, %v; want all 3", len(acme.GetJobs()), err)
	}
}
