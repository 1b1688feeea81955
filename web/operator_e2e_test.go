package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

const (
	listJobs  = "/jobwatch.v1.JobService/ListJobs"
	watchJobs = "/jobwatch.v1.JobService/WatchJobs"
)

// recordCalls makes the page keep the path of every call it sends, in
// window.jobwatchCalls, from its first load on. Call it before the page
// is opened.
func recordCalls(p *page) {
	p.t.Helper()
	script := `(() => {
		window.jobwatchCalls = [];
		const send = window.fetch.bind(window);
		window.fetch = (input, init) => {
			window.jobwatchCalls.push(new URL(String(input instanceof Request ? input.url : input)).pathname);
			return send(input, init);
		};
	})()`
	if _, err := chromedp.Call(p.ctx, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
		p.t.Fatalf("record the page's calls: %v", err)
	}
}

// setTenantOn types name in the Tenant field and presses Enter, as an
// operator would.
func setTenantOn(p *page, name string) {
	p.t.Helper()
	p.do("type tenant "+name, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`{const i = document.getElementById("tenant"); i.value = %q; document.getElementById("tenant-form").requestSubmit();}`, name)))
}

// An operator may act only on what the page shows live. An admin typed
// "*" in the Tenant field: ListJobs listed every tenant's jobs, WatchJobs
// refused "*", and the list stayed on screen, frozen, with Retry all
// failed enabled; confirming it retried every tenant's failed jobs. Now
// the page refuses "*" (it cannot watch it) and any name the server's
// rule refuses before sending anything, says why, shows no list, and
// offers no bulk action, until a tenant it can watch is entered.
func TestATenantThePageCannotWatchIsRefusedBeforeAnyCall(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const adminToken = "jw_e2e-star-admin-token"
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}})
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	failed := map[string]string{}
	for _, tenant := range []string{"acme", "globex"} {
		j, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: tenant, Kind: "mail.send"})
		if err != nil {
			t.Fatal(err)
		}
		claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
		failed[tenant] = j.ID
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	recordCalls(p)
	p.do("open the page on tenant acme", chromedp.Navigate(base+"/?tenant=acme"))
	useTokenOn(p, adminToken)
	retryFailed := `document.querySelector('#jobs-actions button[data-action="retry-failed"]')`
	p.waitFor("acme's failed job, live, retry all failed offered", exists(row(failed["acme"])+`[data-state="failed"]`)+
		` && document.getElementById("status").dataset.status === "live" && !`+retryFailed+`.disabled`)
	waitOpenWatchesAs(t, base, adminToken, 1)

	for _, tc := range []struct{ tenant, reason string }{
		{"*", "the page shows one tenant at a time, live: “*” (every tenant) cannot be watched"},
		{"acme corp", "tenant: may only contain ASCII letters, digits and . _ - : / @"},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			p.t = t
			p.do("forget the calls so far", chromedp.Evaluate[chromedp.Void](`window.jobwatchCalls = []`))
			setTenantOn(p, tc.tenant)
			p.waitFor("the page's refusal, naming the rule, and no list", `document.getElementById("status").dataset.status === "refused"`+
				` && `+textHas("#banner-text", fmt.Sprintf("The page does not ask for tenant “%s”: %s", tc.tenant, tc.reason))+
				` && document.querySelectorAll("li.job").length === 0`+` && `+textIs("#jobs-empty", "Nothing shown: see the message above."))
			p.waitFor("retry all failed disabled, saying why", retryFailed+`.disabled && `+
				textIs("#jobs-actions .reason", "the list is not live: see the message above"))
			waitOpenWatchesAs(t, base, adminToken, 0)
			sent, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`window.jobwatchCalls.filter((c) => c.endsWith("Jobs"))`))
			if err != nil || len(sent) > 0 {
				t.Errorf("for tenant %q the page sent %v (%v), want no call about its jobs", tc.tenant, sent, err)
			}
		})
	}

	p.t = t
	setTenantOn(p, "acme")
	p.waitFor("acme's failed job again, live, retry all failed offered", exists(row(failed["acme"])+`[data-state="failed"]`)+
		` && document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden && !`+retryFailed+`.disabled`)
	if j, err := srv.engine.Get(ctx, failed["globex"]); err != nil || j.State != jobtype.Failed {
		t.Fatalf("globex's failed job: %v, %v; want it still FAILED", j.State, err)
	}
}
