package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// Without tokens a caller names the tenant of its WatchJobs, so
// jobwatch_parked_calls_tenant_refused_total names at most
// maxRefusedTenantLabels such tenants, and counts the refusals of the
// others as tenant="(other)"; a tenant a token names (bounded by the
// tokens file) keeps its own series past them.
func TestTenantRefusalsNameABoundedSetOfTenants(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "jobwatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	s := New(jobs.New(st, jobs.Config{}), Config{MaxParkedCalls: 1000, MaxParkedCallsPerTenant: 1, Registry: reg})
	ctx := context.Background()

	const named = maxRefusedTenantLabels + 30
	for i := range named {
		tenant := fmt.Sprintf("t%d", i)
		_, done, err := s.parkWatch(ctx, namedTenant(tenant))
		if err != nil {
			t.Fatalf("the first watch of %s: %v", tenant, err)
		}
		defer done()
		if _, _, err := s.parkWatch(ctx, namedTenant(tenant)); err == nil {
			t.Fatalf("a second watch of %s parked past --max-parked-calls-per-tenant 1", tenant)
		}
	}
	client := auth.WithPrincipal(ctx, auth.Principal{Role: auth.RoleClient, Tenant: "late"})
	_, done, err := s.parkWatch(client, namedTenant("ignored"))
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, _, err := s.parkWatch(client, namedTenant("ignored")); err == nil {
		t.Fatal("a client token's second watch parked past its tenant's limit")
	}

	refused := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "jobwatch_parked_calls_tenant_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" {
					refused[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if got, want := len(refused), maxRefusedTenantLabels+2; got != want {
		t.Errorf("%d tenant series, want %d (the first %d named, %q and the token's)", got, want, maxRefusedTenantLabels, otherTenantsLabel)
	}
	if got := refused["t0"]; got != 1 {
		t.Errorf("tenant t0 refused %v times, want 1", got)
	}
	if got, want := refused[otherTenantsLabel], float64(named-maxRefusedTenantLabels); got != want {
		t.Errorf("tenant=%q counts %v refusals, want %v", otherTenantsLabel, got, want)
	}
	if _, ok := refused[fmt.Sprintf("t%d", named-1)]; ok {
		t.Errorf("tenant t%d, past the first %d, has a series of its own", named-1, maxRefusedTenantLabels)
	}
	if got := refused["late"]; got != 1 {
		t.Errorf("the client token's tenant refused %v times, want 1 under its own name", got)
	}
}
