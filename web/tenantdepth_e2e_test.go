package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
)

// The queue panel shows each queue's busiest tenants under it, for a
// person who opens them: the button says how many tenants have work in
// the queue, the table lists the busiest ten, busiest first, with their
// counts and oldest wait, and says how many it left out. It follows the
// server's polls (a tenant that becomes the busiest moves to the top)
// and stays open across them.
func TestTheQueuePanelShowsEachQueuesBusiestTenants(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	srv := startServer(t, addr, testdb.New(t))
	defer srv.shutdown(t)

	submitAs := func(tenant, kind string, n int, ago time.Duration) {
		t.Helper()
		for range n {
			req := jobs.SubmitRequest{Tenant: tenant, Kind: kind, Queue: "reports"}
			if ago > 0 {
				req.RunAt = time.Now().Add(-ago)
			}
			if _, err := srv.engine.Submit(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	// acme 3 queued, one ready two hours ago; globex 1 queued and 1
	// running; t01 to t11 one each, t01 the longest waiting: 13 tenants.
	submitAs("acme", "report.build", 1, 2*time.Hour)
	submitAs("acme", "report.build", 2, 0)
	submitAs("globex", "report.build", 1, 0)
	submitAs("globex", "report.urgent", 1, 0)
	claim(t, ctx, srv.engine, "report.urgent")
	for i := 1; i <= 11; i++ {
		submitAs(fmt.Sprintf("t%02d", i), "report.build", 1, time.Duration(20-i)*time.Minute)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	const queue = `tr[data-queue="reports"]`
	const tenants = `tr[data-tenants-of="reports"]`
	p.waitFor("the queue's button saying how many tenants have work in it, and its tenants closed",
		textIs(queue+" .tenants-toggle", "13 tenants")+` && document.querySelector(`+fmt.Sprintf("%q", tenants)+`).hidden`)
	// The default tenant, where the page opens, has no jobs: the list
	// names the tenants that have.
	p.waitFor("the empty list naming the busiest tenants", textIs("#jobs-empty",
		"No jobs for this tenant yet. Tenants with jobs in the queues: acme, globex, t01, t02, t03, and more. Type one in the Tenant field to see its jobs."))
	p.click("open the queue's tenants", queue+" .tenants-toggle")
	// rows is a JS expression: the tenants' rows as "tenant queued running".
	rows := `[...document.querySelectorAll(` + fmt.Sprintf("%q", tenants+" tbody tr") + `)].map(r => [...r.cells].slice(0, 3).map(c => c.textContent).join(" "))`
	p.waitFor("the busiest ten, busiest first, and how many are left out", fmt.Sprintf(`(() => {
		const r = %s;
		return !document.querySelector(%q).hidden && r.length === 10 &&
			r[0] === "acme 3 0" && r[1] === "globex 1 1" && r[2] === "t01 1 0" && r[9] === "t08 1 0";
	})()`, rows, tenants)+" && "+textIs(tenants+" .tenants-left-out", "and 3 more tenants"))
	p.waitFor("acme's oldest wait, two hours", textIs(tenants+` tr[data-tenant="acme"] .oldest`, "2h 0m"))
	p.waitFor("the button says it is open", `document.querySelector(`+fmt.Sprintf("%q", queue+" .tenants-toggle")+`).getAttribute("aria-expanded") === "true"`)

	// globex becomes the busiest: the next poll moves it to the top, and
	// the table stays open.
	submitAs("globex", "report.build", 5, 0)
	p.waitFor("globex first, with its new count, still open", fmt.Sprintf(`(() => {
		const r = %s;
		return !document.querySelector(%q).hidden && r[0] === "globex 6 1" && r[1] === "acme 3 0";
	})()`, rows, tenants))

	p.click("close the queue's tenants", queue+" .tenants-toggle")
	p.waitFor("the tenants closed", `document.querySelector(`+fmt.Sprintf("%q", tenants)+`).hidden`)
}
