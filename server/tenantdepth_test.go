package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// submitFor submits n jobs of tenant to queue through the engine, ready
// since ago before now (0: now).
func submitFor(t *testing.T, e *jobs.Engine, tenant, kind, queue string, n int, ago time.Duration) {
	t.Helper()
	for range n {
		req := jobs.SubmitRequest{Tenant: tenant, Kind: kind, Queue: queue}
		if ago > 0 {
			req.RunAt = time.Now().Add(-ago)
		}
		if _, err := e.Submit(context.Background(), req); err != nil {
			t.Fatalf("submit for %s: %v", tenant, err)
		}
	}
}

// tenantsOf is the queue's tenants in the answer as "tenant queued/running",
// and its tenants_left_out.
func tenantsOf(t *testing.T, resp *jobwatchv1.ListQueuesResponse, queue string) ([]string, int32) {
	t.Helper()
	for _, q := range resp.GetQueues() {
		if q.GetName() != queue {
			continue
		}
		var out []string
		for _, d := range q.GetTenants() {
			out = append(out, fmt.Sprintf("%s %d/%d", d.GetTenant(), d.GetQueued(), d.GetRunning()))
		}
		return out, q.GetTenantsLeftOut()
	}
	t.Fatalf("ListQueues has no row for %s: %v", queue, resp.GetQueues())
	return nil, 0
}

func TestListQueuesShowsEachQueuesBusiestTenantsBusiestFirst(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	e := ts.engine
	// reports: acme 4 queued; globex 3 queued and 1 running, so as busy
	// as acme but with its oldest job waiting longer; initech 2 queued,
	// one due tomorrow; hooli 1 scheduled for tomorrow, nothing waiting;
	// umbrella 1 ready now. mail: acme alone.
	submitFor(t, e, "acme", "report.build", "reports", 4, time.Minute)
	submitFor(t, e, "globex", "report.build", "reports", 3, time.Hour)
	submitFor(t, e, "globex", "report.urgent", "reports", 1, 0)
	claim(t, c, "report.urgent")
	submitFor(t, e, "initech", "report.build", "reports", 1, 2*time.Minute)
	tomorrow := time.Now().Add(24 * time.Hour)
	for _, tenant := range []string{"initech", "hooli"} {
		if _, err := e.Submit(context.Background(), jobs.SubmitRequest{Tenant: tenant, Kind: "report.build", Queue: "reports", RunAt: tomorrow}); err != nil {
			t.Fatal(err)
		}
	}
	submitFor(t, e, "umbrella", "report.build", "reports", 1, 0)
	submitFor(t, e, "acme", "mail.send", "mail", 2, 0)

	start := time.Now()
	resp, err := c.queues.ListQueues(ctxTimeout(t, 10*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listedBy := time.Since(start)
	got, leftOut := tenantsOf(t, resp, "reports")
	want := []string{"globex 3/1", "acme 4/0", "initech 2/0", "umbrella 1/0", "hooli 1/0"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") || leftOut != 0 {
		t.Errorf("reports' tenants = %v (%d left out), want %v (0 left out): most queued plus running first, then the longest wait, nothing waiting last", got, leftOut, want)
	}
	if got, _ := tenantsOf(t, resp, "mail"); strings.Join(got, ", ") != "acme 2/0" {
		t.Errorf("mail's tenants = %v, want acme alone", got)
	}
	if got, leftOut := tenantsOf(t, resp, "default"); len(got) != 0 || leftOut != 0 {
		t.Errorf("the idle default queue's tenants = %v (%d left out), want none", got, leftOut)
	}
	// Each tenant's oldest wait is its own: globex's an hour, hooli's
	// unset (its job is due tomorrow).
	for _, q := range resp.GetQueues() {
		if q.GetName() != "reports" {
			continue
		}
		for _, d := range q.GetTenants() {
			age := d.GetOldestQueuedAge()
			switch d.GetTenant() {
			case "globex":
				if age == nil || age.AsDuration() < time.Hour || age.AsDuration() > time.Hour+listedBy+time.Minute {
					t.Errorf("globex's oldest_queued_age = %v, want about an hour", age.AsDuration())
				}
			case "hooli":
				if age != nil {
					t.Errorf("hooli's oldest_queued_age = %v, want unset: its one job is due tomorrow", age.AsDuration())
				}
			}
		}
	}
}

func TestListQueuesBoundsTheTenantsOfEachQueue(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := ts.h2c()
	// 105 tenants with one job each, tenant-000 the longest waiting.
	const tenants = 105
	for i := range tenants {
		submitFor(t, ts.engine, fmt.Sprintf("tenant-%03d", i), "report.build", "reports", 1, time.Duration(tenants-i)*time.Second)
	}
	for _, tc := range []struct {
		name     string
		perQueue int32
		listed   int
	}{
		{"0 asks for the default, 10", 0, 10},
		{"3 lists 3", 3, 3},
		{"more than 100 lists 100", 1000, 100},
		{"below 0 is refused, as other negative counts are", -5, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.queues.ListQueues(ctxTimeout(t, 10*time.Second), &jobwatchv1.ListQueuesRequest{TenantsPerQueue: tc.perQueue})
			if tc.listed < 0 {
				wantCode(t, err, connect.CodeInvalidArgument)
				if ce := (*connect.Error)(nil); !errors.As(err, &ce) || ce.Message() != "tenants_per_queue: must not be negative (0 means the default, 10; more than 100 means 100), got -5" {
					t.Errorf("refusal %v; want it to name the field and the range", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, leftOut := tenantsOf(t, resp, "reports")
			if len(got) != tc.listed || int(leftOut) != tenants-tc.listed {
				t.Fatalf("%d tenants listed, %d left out; want %d and %d", len(got), leftOut, tc.listed, tenants-tc.listed)
			}
			for i, row := range got {
				if want := fmt.Sprintf("tenant-%03d 1/0", i); row != want {
					t.Errorf("tenant %d = %q, want %q: with equal counts the longest waiting first", i, row, want)
				}
			}
		})
	}
}

// ListQueues takes an admin token, so only an admin sees any tenant's
// depth; a client token, whose tenant shares the queue, is refused the
// whole call and learns nothing of the others.
func TestOnlyAnAdminTokenSeesTheTenantsOfAQueue(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: testTokens(t)}})
	submitFor(t, ts.engine, "acme", "report.build", "reports", 2, 0)
	submitFor(t, ts.engine, "globex", "report.build", "reports", 1, 0)
	p := authProtocols[1]

	resp, err := ts.clientsWithToken(p, adminToken).queues.ListQueues(ctxTimeout(t, 10*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatalf("ListQueues as an admin: %v", err)
	}
	if got, _ := tenantsOf(t, resp, "reports"); strings.Join(got, ", ") != "acme 2/0, globex 1/0" {
		t.Errorf("an admin sees reports' tenants as %v, want acme 2/0, globex 1/0", got)
	}
	for _, tok := range []string{acmeToken, workerToken} {
		_, err := ts.clientsWithToken(p, tok).queues.ListQueues(ctxTimeout(t, 10*time.Second), &jobwatchv1.ListQueuesRequest{})
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("ListQueues with %s: %v, want permission_denied", tok, err)
		}
	}
}

// startMetricsServer is the server with metrics as given, on the
// backend under test, reached through its handler.
func startMetricsServer(t *testing.T, metrics *server.Metrics) (*jobs.Engine, string) {
	t.Helper()
	st := testdb.OpenT(t, testdb.New(t))
	engine := jobs.New(st, jobs.Config{Metrics: metrics})
	srv := server.New(engine, server.Config{Metrics: metrics, Registry: prometheus.NewRegistry()})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return engine, hs.URL
}

// tenantSeries is every jobwatch_queue_tenant_jobs line of a scrape.
func tenantSeries(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "jobwatch_queue_tenant_jobs{") {
			out = append(out, line)
		}
	}
	return out
}

func TestPerTenantMetricsOnlyWhenAskedAndFollowTheJobs(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		engine, url := startMetricsServer(t, server.NewMetrics())
		submitFor(t, engine, "acme", "mail.send", "mail", 1, 0)
		if got := tenantSeries(t, url); len(got) != 0 {
			t.Errorf("a default server has per-tenant series: %q", got)
		}
	})

	t.Run("on: a queue's queued and running jobs by tenant, as they change", func(t *testing.T) {
		engine, url := startMetricsServer(t, server.NewMetricsWith(server.MetricsOptions{PerTenant: true}))
		submitFor(t, engine, "acme", "mail.send", "mail", 2, 0)
		submitFor(t, engine, "acme", "mail.urgent", "mail", 1, 0)
		submitFor(t, engine, "globex", "report.build", "reports", 1, 0)
		want := func(t *testing.T, what string, series ...string) {
			t.Helper()
			// A scrape after a change reads again; the change is this
			// engine's own, so the first scrape after it shows it.
			got := tenantSeries(t, url)
			if strings.Join(got, "\n") != strings.Join(series, "\n") {
				t.Errorf("%s: the per-tenant series are\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(series, "\n"))
			}
		}
		want(t, "submitted",
			`jobwatch_queue_tenant_jobs{queue="mail",state="queued",tenant="acme"} 3`,
			`jobwatch_queue_tenant_jobs{queue="mail",state="running",tenant="acme"} 0`,
			`jobwatch_queue_tenant_jobs{queue="reports",state="queued",tenant="globex"} 1`,
			`jobwatch_queue_tenant_jobs{queue="reports",state="running",tenant="globex"} 0`)

		j, err := engine.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"mail.urgent"}}, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want(t, "one of acme's claimed",
			`jobwatch_queue_tenant_jobs{queue="mail",state="queued",tenant="acme"} 2`,
			`jobwatch_queue_tenant_jobs{queue="mail",state="running",tenant="acme"} 1`,
			`jobwatch_queue_tenant_jobs{queue="reports",state="queued",tenant="globex"} 1`,
			`jobwatch_queue_tenant_jobs{queue="reports",state="running",tenant="globex"} 0`)
		if _, err := engine.Complete(context.Background(), j.ID, j.LeaseID, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		g, err := engine.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Kinds: []string{"report.build"}}, time.Now().Add(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Cancel(context.Background(), g.ID); err != nil {
			t.Fatal(err)
		}
		want(t, "globex's one job ended: its series are gone",
			`jobwatch_queue_tenant_jobs{queue="mail",state="queued",tenant="acme"} 2`,
			`jobwatch_queue_tenant_jobs{queue="mail",state="running",tenant="acme"} 0`)
	})
}
