package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// A parked call counts against its token's tenant when the token names
// one (a client's), else against the tenant the call names or its job's;
// a claim against its worker token's first tenant, else "". The tokens
// themselves come from package auth; here they are put in the context as
// its middleware would.
func TestAParkedCallCountsAgainstItsTokensTenantFirst(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "jobwatch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	engine := jobs.New(st, jobs.Config{})
	s := New(engine, Config{MaxParkedCalls: 100, MaxParkedCallsPerTenant: 1, Registry: prometheus.NewRegistry()})
	ctx := context.Background()
	acmeJob, err := engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	as := func(p auth.Principal) context.Context { return auth.WithPrincipal(ctx, p) }
	betaClient := as(auth.Principal{Role: auth.RoleClient, Tenant: "beta"})
	admin := as(auth.Principal{Role: auth.RoleAdmin})

	refusedFor := func(what string, refused error, who string) {
		t.Helper()
		if refused == nil || !strings.Contains(refused.Error(), who) {
			t.Errorf("%s: %v, want refused for %s", what, refused, who)
		}
	}
	parked := func(what string, _ func(), refused error) {
		t.Helper()
		if refused != nil {
			t.Errorf("%s: %v, want parked", what, refused)
		}
	}

	release, refused := s.parkWait(betaClient, acmeJob.ID)
	parked("a beta client's wait on an acme job (counted for beta)", release, refused)
	_, refused = s.parkWait(betaClient, acmeJob.ID)
	refusedFor("a second beta client's wait", refused, `"beta"`)
	release, refused = s.parkWait(admin, acmeJob.ID)
	parked("an admin's wait on the acme job (counted for acme)", release, refused)
	_, refused = s.parkWait(ctx, acmeJob.ID)
	refusedFor("a wait without a token on the acme job", refused, `"acme"`)
	_, _, refused = s.parkWatch(ctx, namedTenant("acme"))
	refusedFor("a watch of tenant acme's feed", refused, `"acme"`)
	_, done, refused := s.parkWatch(ctx, namedTenant(""))
	parked("a watch of the default tenant's feed", done, refused)
	_, _, refused = s.parkWatch(ctx, namedTenant(jobtype.DefaultTenant))
	refusedFor("a second watch of the default tenant's feed", refused, `"`+jobtype.DefaultTenant+`"`)

	release, refused = s.parkClaim(as(auth.Principal{Role: auth.RoleWorker, Tenants: []string{"gamma", "acme"}}))
	parked("a claim of a worker of gamma and acme (counted for gamma)", release, refused)
	_, refused = s.parkClaim(as(auth.Principal{Role: auth.RoleWorker, Tenants: []string{"gamma"}}))
	refusedFor("a second claim of a gamma worker", refused, `"gamma"`)
	release, refused = s.parkClaim(as(auth.Principal{Role: auth.RoleWorker}))
	parked("a claim of a worker bound to no tenant", release, refused)
	_, refused = s.parkClaim(ctx)
	refusedFor("a claim without a token", refused, "bound to no tenant")

	// A job that cannot be read counts against the total alone; the
	// wait itself answers not_found.
	for range 3 {
		release, refused = s.parkWait(ctx, "j_missing")
		parked("a wait on a missing job", release, refused)
	}
	if got, want := s.parked.n.Load(), int64(8); got != want {
		t.Errorf("%d calls parked in all, want %d", got, want)
	}
}
