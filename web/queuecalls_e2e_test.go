package web_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

const (
	listQueues    = "/jobwatch.v1.QueueService/ListQueues"
	listSchedules = "/jobwatch.v1.QueueService/ListSchedules"
)

// The queues and schedules take an admin token, and the page asks for
// them only where its token may read them, as GetServerInfo says: never
// without a token on a server that needs one (it used to call both every
// 5 s for as long as the page was open, each refused), never with a
// client token (each load called both twice, four refusals); and without
// a token every action is offered disabled, saying a token is needed,
// not offered to fail with "a bearer token is required".
func TestThePageAsksForTheQueuesOnlyWithATokenThatMayReadThem(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-queuecalls-admin-token"
		clientToken = "jw_e2e-queuecalls-acme-client-token"
	)
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, clientToken: {"client", "acme"}})
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	failed, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}
	claim(t, ctx, srv.engine, "billing.invoice").fail("LedgerError", "ledger closed")

	queueCalls := func() float64 {
		return requestsOf(t, base, adminToken, listQueues) + requestsOf(t, base, adminToken, listSchedules)
	}
	retryFailed := `document.querySelector('#jobs-actions button[data-action="retry-failed"]')`
	p := &page{t: t, ctx: newTab(t, ctx)}

	t.Run("without a token nothing that needs one is asked for, and the actions say a token is needed", func(t *testing.T) {
		p.t = t
		p.do("open the page on tenant acme", chromedp.Navigate(base+"/?tenant=acme"))
		p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated" && !document.getElementById("token-form").hidden`)
		p.waitFor("retry all failed disabled, saying why", retryFailed+`.disabled && `+
			textIs("#jobs-actions .reason", "the server needs a token: enter one"))
		p.waitFor("the queue panel saying what it takes", textIs("#queues-note", "seeing and pausing queues takes an admin token: enter one"))
		if n := queueCalls(); n != 0 {
			t.Errorf("the page without a token called ListQueues or ListSchedules %v times, want none", n)
		}
	})

	t.Run("a client token is never refused the queues: the page does not ask", func(t *testing.T) {
		p.t = t
		useTokenOn(p, clientToken)
		clientShown := exists(row(failed.ID)+`[data-state="failed"]`) + ` && !` + retryFailed + `.disabled && ` +
			textIs("#queues-note", "seeing and pausing queues takes an admin token; this is a client token")
		p.waitFor("acme's failed job, retry all failed offered, and why no queues", clientShown)
		p.do("reload the page, its token kept", chromedp.Reload())
		p.waitFor("the same again", clientShown+` && document.getElementById("status").dataset.status === "live"`)
		if n := queueCalls(); n != 0 {
			t.Errorf("the page with a client token called ListQueues or ListSchedules %v times, want none", n)
		}
	})

	t.Run("a token the server does not know is never refused the queues: the page does not ask", func(t *testing.T) {
		p.t = t
		useTokenOn(p, "jw_e2e-queuecalls-token-nobody-issued")
		p.waitFor("the feed asking for a token, and why no queues", `document.getElementById("status").dataset.status === "unauthenticated" && `+
			textIs("#queues-note", "seeing and pausing queues takes an admin token; the server does not know this one"))
		if n := queueCalls(); n != 0 {
			t.Errorf("the page with an unknown token called ListQueues or ListSchedules %v times, want none", n)
		}
	})

	t.Run("an admin token is shown the queues", func(t *testing.T) {
		p.t = t
		useTokenOn(p, adminToken)
		p.waitFor("the default queue", exists(`tr[data-queue="default"]`)+` && `+textIs("#queues-note", ""))
		if n := queueCalls(); n == 0 {
			t.Error("the page with an admin token showed the queues without calling ListQueues: the count is wrong")
		}
	})
}

// requestsOf is how many calls of procedure the server has answered, by
// its jobwatch_requests_total, read with token (an admin or metrics one).
func requestsOf(t *testing.T, base, token, procedure string) float64 {
	t.Helper()
	body := metricsText(t, base, token)
	var n float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "jobwatch_requests_total{") || !strings.Contains(line, `procedure="`+procedure+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += v
	}
	return n
}

// A new token keeps nothing of what the last one could see: an admin's
// queues (their counts and busiest tenants) and schedules go when a
// client or worker token is entered, where they used to stay on screen,
// frozen; and come back with an admin token.
func TestANewTokenKeepsNoneOfTheLastTokensQueuesOrSchedules(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-forget-admin-token"
		clientToken = "jw_e2e-forget-acme-client-token"
		workerToken = "jw_e2e-forget-worker-token"
	)
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, clientToken: {"client", "acme"}, workerToken: {"worker", ""}})
	addr := freeAddr(t)
	rules := jobtype.Rules{Schedules: []jobtype.Schedule{{Name: "nightly-digest", Kind: "digest.send", Queue: "reports", Tenant: "ops", Every: time.Hour}}}
	srv := startServerWithRules(t, addr, testdb.New(t), rules, func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"}); err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on tenant acme", chromedp.Navigate("http://"+addr+"/?tenant=acme"))
	p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)
	adminSees := func() {
		p.t.Helper()
		useTokenOn(p, adminToken)
		p.waitFor("the queues, and the schedule", exists(`tr[data-queue="default"]`)+` && `+exists(`tr[data-schedule="nightly-digest"]`)+
			` && !document.getElementById("schedules-panel").hidden`)
		p.click("open the default queue's tenants", `tr[data-queue="default"] .tenants-toggle`)
		p.waitFor("acme among them", exists(`tr[data-tenants-of="default"]:not([hidden]) tr[data-tenant="acme"]`))
	}
	nothingOfTheAdmins := func(role string) string {
		return `document.querySelectorAll("#queues tr").length === 0 && document.querySelectorAll("#schedules tr").length === 0 && ` +
			`document.getElementById("schedules-panel").hidden && ` +
			textIs("#queues-note", "seeing and pausing queues takes an admin token; this is a "+role+" token")
	}

	t.Run("a client token after an admin's", func(t *testing.T) {
		p.t = t
		adminSees()
		useTokenOn(p, clientToken)
		p.waitFor("none of the admin's queues or schedules", nothingOfTheAdmins("client"))
	})

	t.Run("a worker token after an admin's", func(t *testing.T) {
		p.t = t
		adminSees()
		useTokenOn(p, workerToken)
		p.waitFor("none of the admin's queues or schedules", nothingOfTheAdmins("worker"))
	})
}
