package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// The page asks the server who its token is (GetServerInfo's caller) and
// sets every button by it before any is clicked: an admin token is
// offered everything; a client token its tenant's jobs but no queues, and
// the queue panel says pausing takes an admin token; a worker token none
// of it, each refusal naming the role. A new token is asked about again.
// Nothing here is clicked, so no refusal comes from a call the server
// turned down.
func TestThePageOffersWhatItsTokenMayDoBeforeAnyClick(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-access-admin-token"
		clientToken = "jw_e2e-access-acme-client-token"
		workerToken = "jw_e2e-access-worker-token"
	)
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, clientToken: {"client", "acme"}, workerToken: {"worker", ""}})
	addr := freeAddr(t)
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	failed, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}
	claim(t, ctx, srv.engine, "billing.invoice").fail("LedgerError", "ledger closed")

	// One browser, a tab per token: a tab keeps its token in its own
	// sessionStorage. The browser starts with the first tab's first step
	// (the admin's); the other tabs open in it.
	browser := newTab(t, ctx)
	openWith := func(t *testing.T, tab context.Context, token string) *page {
		p := &page{t: t, ctx: tab}
		p.do("open the page on tenant acme", chromedp.Navigate("http://"+addr+"/?tenant=acme"))
		p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)
		useTokenOn(p, token)
		return p
	}
	// shown is a JS expression: how the button of action inside scope
	// shows, "hidden", "enabled" or "disabled: <the reason beside it>".
	shown := func(scope, action string) string {
		return fmt.Sprintf(`(() => {
			const b = document.querySelector(%q);
			if (b === null || b.closest(".action").hidden) return "hidden";
			return b.disabled ? "disabled: " + b.closest(".action").querySelector(".reason").textContent : "enabled";
		})()`, scope+fmt.Sprintf(` button[data-action=%q]`, action))
	}
	is := func(scope, action, want string) string { return fmt.Sprintf("%s === %q", shown(scope, action), want) }

	t.Run("an admin token is offered every action", func(t *testing.T) {
		p := openWith(t, browser, adminToken)
		p.waitFor("the failed job", exists(row(failed.ID)+`[data-state="failed"]`))
		p.do("open its detail", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, row(failed.ID))))
		p.waitFor("retry and delete enabled", is("#detail", "retry", "enabled")+" && "+is("#detail", "delete", "enabled"))
		p.waitFor("retry all failed enabled", is("#jobs-actions", "retry-failed", "enabled"))
		p.waitFor("pause enabled on the default queue", is(`tr[data-queue="default"]`, "pause", "enabled"))
	})

	t.Run("an admin token on a page that names no tenant says which one it shows", func(t *testing.T) {
		tab, closeTab := chromedp.NewContext(browser)
		defer closeTab()
		p := &page{t: t, ctx: tab}
		p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
		p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)
		useTokenOn(p, adminToken)
		p.waitFor("the tenant field naming the default tenant", `document.getElementById("status").dataset.status === "live" && `+
			`document.getElementById("tenant").value === "default"`)
	})

	t.Run("a client token acts on its tenant's jobs, and is told pausing takes an admin token", func(t *testing.T) {
		tab, closeTab := chromedp.NewContext(browser)
		defer closeTab()
		p := openWith(t, tab, clientToken)
		p.waitFor("the failed job", exists(row(failed.ID)+`[data-state="failed"]`))
		p.do("open its detail", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, row(failed.ID))))
		p.waitFor("retry and delete enabled", is("#detail", "retry", "enabled")+" && "+is("#detail", "delete", "enabled"))
		p.waitFor("retry all failed enabled", is("#jobs-actions", "retry-failed", "enabled"))
		// The queue panel, which takes an admin token, shows no queue
		// and so no Pause button, nor an empty table: it says why, in the
		// page's words.
		p.waitFor("why there is no pause", textHas("#queues-note", "seeing and pausing queues takes an admin token; this is a client token")+
			` && document.querySelector('button[data-action="pause"]') === null && document.querySelector("table.queues").getClientRects().length === 0`)
	})

	t.Run("a worker token is offered none of it, and a new token is asked about again", func(t *testing.T) {
		tab, closeTab := chromedp.NewContext(browser)
		defer closeTab()
		p := openWith(t, tab, workerToken)
		p.waitFor("retry all failed disabled, naming the role", is("#jobs-actions", "retry-failed", "disabled: a worker token may not retry jobs"))
		p.waitFor("the feed refused, saying so", `document.getElementById("status").dataset.status === "denied" && `+
			`document.getElementById("banner").textContent.includes("a worker token may not call WatchJobs") && `+
			`!document.getElementById("banner").textContent.includes("/jobwatch.v1.")`)

		useTokenOn(p, clientToken)
		p.waitFor("the failed job", exists(row(failed.ID)+`[data-state="failed"]`))
		p.waitFor("retry all failed enabled for the client token", is("#jobs-actions", "retry-failed", "enabled"))
		p.do("open its detail", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, row(failed.ID))))
		p.waitFor("retry and delete enabled", is("#detail", "retry", "enabled")+" && "+is("#detail", "delete", "enabled"))
	})
}

// useTokenOn enters token in the page's token field, as a person would.
func useTokenOn(p *page, token string) {
	p.t.Helper()
	p.do("enter a token", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`{document.getElementById("token").value = %q; document.getElementById("token-form").requestSubmit();}`, token)))
}
