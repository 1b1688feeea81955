package web_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// With a tokens file the page asks for a token (GetServerInfo says one is
// needed), says plainly when the server refuses one, keeps the accepted
// token in sessionStorage only, sends it on every call and on the stream,
// and shows the token's tenant's jobs; the queue panel, which needs an
// admin token, says why it shows nothing.
func TestPageAsksForATokenAndSendsItEverywhere(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const clientToken = "jw_e2e-acme-client-token"
	tokens, err := auth.ParseTokens("tokens.yaml", []byte(fmt.Sprintf(
		"tokens:\n  - sha256: %s\n    tenant: acme\n    role: client\n", auth.Digest(clientToken))))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := startServer(t, addr, filepath.Join(t.TempDir(), "jobwatch.db"), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	acme, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "globex", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on tenant acme", chromedp.Navigate("http://"+addr+"/?tenant=acme"))
	p.waitFor("the token field, asked for", `!document.getElementById("token-form").hidden`)
	p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)

	useToken := func(token string) {
		p.do("enter a token", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`{document.getElementById("token").value = %q; document.getElementById("token-form").requestSubmit();}`, token)))
	}
	useToken("jw_not-a-token-the-server-knows")
	p.waitFor("a clear refusal", `document.getElementById("status").dataset.status === "unauthenticated"`+" && "+
		`!document.getElementById("banner").hidden && document.getElementById("banner").textContent.includes("does not take this token: the token is not known") && `+
		`document.getElementById("status").textContent === "token refused" && `+
		`document.getElementById("jobs-empty").textContent.startsWith("Nothing shown")`)
	p.waitFor("the refused token not echoed", `!document.body.innerText.includes("jw_not-a-token")`)

	useToken(clientToken)
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("acme's job, and only acme's", exists(row(acme.ID))+" && "+absent(row(other.ID)))
	p.waitFor("the token in sessionStorage, not localStorage",
		fmt.Sprintf(`sessionStorage.getItem("jobwatch.token") === %q && !Object.values(localStorage).includes(%q)`, clientToken, clientToken))

	// A change reaches the page on the stream opened with the token.
	if _, err := srv.engine.Cancel(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the cancel, live", exists(row(acme.ID)+`[data-state="cancelled"]`))
	// The detail's GetJob carries the token too.
	p.do("open the detail", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.querySelector(%q).click()`, row(acme.ID))))
	p.waitFor("the detail", textHas("#detail", acme.ID))
	p.waitFor("the queue panel saying it needs an admin token", textHas("#queues-note", "admin"))

	// A link to a job opened in a new tab, before its token is entered,
	// opens the job once it is, without a reload (it used to stay on "No
	// job … to show: a bearer token is required").
	q := &page{t: t, ctx: newTab(t, ctx)}
	q.do("open a link to acme's job in a new tab", chromedp.Navigate("http://"+addr+"/#job="+acme.ID))
	q.waitFor("the token field, asked for", `!document.getElementById("token-form").hidden`)
	q.do("enter the token", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`{document.getElementById("token").value = %q; document.getElementById("token-form").requestSubmit();}`, clientToken)))
	q.waitFor("the linked job's detail", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q && !document.getElementById("detail").hidden`, acme.ID)+
		" && "+textHas("#detail", "billing.invoice")+` && document.getElementById("open-note").textContent === ""`)
}

// A client token entered on a page opened with no tenant named opens the
// token's own tenant at once: the page asks for the caller's own tenant,
// which the server reads as the token's, so it never asks for the token a
// second time. A page opened on another tenant says the token may not use
// it and shows the token's own instead.
func TestAClientTokenOpensItsOwnTenant(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const clientToken = "jw_e2e-acme-own-tenant-token"
	tokens, err := auth.ParseTokens("tokens.yaml", []byte(fmt.Sprintf(
		"tokens:\n  - sha256: %s\n    tenant: acme\n    role: client\n", auth.Digest(clientToken))))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := startServer(t, addr, filepath.Join(t.TempDir(), "jobwatch.db"), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	acme, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "billing.invoice"}) // the default tenant
	if err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)
	// Every status the page shows from now on.
	p.do("record the statuses", chromedp.Evaluate[chromedp.Void](`{
		window.statuses = [];
		const el = document.getElementById("status");
		new MutationObserver(() => window.statuses.push(el.dataset.status)).observe(el, {attributes: true, attributeFilter: ["data-status"]});
	}`))
	p.do("enter the client token", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`{document.getElementById("token").value = %q; document.getElementById("token-form").requestSubmit();}`, clientToken)))
	p.waitFor("acme's job, and only acme's", exists(row(acme.ID))+" && "+absent(row(other.ID)))
	p.waitFor("the live status, the banner gone", `document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`)
	p.waitFor("the tenant named", `document.getElementById("tenant").value === "acme"`)
	p.waitFor("never asked again", `window.statuses.length > 0 && !window.statuses.includes("unauthenticated") && !window.statuses.includes("denied")`)

	// A client token may retry its tenant's jobs; pausing a queue is for
	// admins, and the queue panel, which it may not read, offers none.
	if _, err := srv.engine.Cancel(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the cancel, live", exists(row(acme.ID)+`[data-state="cancelled"]`))
	p.do("open the detail", chromedp.Click(chromedp.CSS(row(acme.ID))))
	p.waitFor("retry offered", `!document.querySelector('#detail button[data-action="retry"]').disabled`)
	p.do("click retry", chromedp.Click(chromedp.CSS(`#detail button[data-action="retry"]`)))
	p.do("say yes", chromedp.Click(chromedp.CSS("#detail .confirm-yes")))
	p.waitFor("the job queued again", exists(row(acme.ID)+`[data-state="queued"]`)+" && "+textHas("#detail .outcome", "Retried"))
	p.waitFor("no pause for a client token, and why", textHas("#queues-note", "admin")+` && document.querySelector('button[data-action="pause"]') === null`)

	// A link to another tenant, opened in the same tab (the token is kept
	// for the tab): the token's own tenant, and why.
	p.do("open the page on tenant default", chromedp.Navigate("http://"+addr+"/?tenant=default"))
	p.waitFor("acme's job", exists(row(acme.ID))+" && "+absent(row(other.ID)))
	p.waitFor("live, saying the token may not use the default tenant", `document.getElementById("status").dataset.status === "live" && `+
		`!document.getElementById("banner").hidden && document.getElementById("banner").textContent.includes("may not use tenant “default”")`)
	p.waitFor("the tenant named", `document.getElementById("tenant").value === "acme"`)

	// A tenant typed and refused is not remembered for the tab: the page
	// opened again asks for the token's own, and says nothing refused.
	p.do("type another tenant", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("acme's job", exists(row(acme.ID)))
	p.do("ask for tenant globex, typed in the field", chromedp.Evaluate[chromedp.Void](
		`{const f = document.getElementById("tenant"); f.focus(); f.value = "globex"; document.getElementById("tenant-form").requestSubmit();}`))
	p.waitFor("the refusal of globex", `document.getElementById("banner").textContent.includes("may not use tenant “globex”")`)
	p.waitFor("the field naming the tenant shown, though it has the keyboard", `document.getElementById("tenant").value === "acme"`)
	p.do("open the page again", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("acme's job, and no refusal", exists(row(acme.ID))+` && document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`+
		` && sessionStorage.getItem("jobwatch.tenant") === null`)
}

// A tenant typed in one tab stays that tab's: a new tab with no tenant in
// its address opens on the caller's own, so a client token of another
// tenant shows its tenant with no refusal, and the new tab never names
// the tenant the other tab's user typed.
func TestATenantTypedInOneTabStaysOutOfANewTab(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-tabs-admin-token"
		globexToken = "jw_e2e-tabs-globex-client-token"
	)
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, globexToken: {"client", "globex"}})
	addr := freeAddr(t)
	srv := startServer(t, addr, filepath.Join(t.TempDir(), "jobwatch.db"), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	acme, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}
	globex, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "globex", Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}

	browser := newTab(t, ctx)
	admin := &page{t: t, ctx: browser}
	admin.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	admin.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated"`)
	useTokenOn(admin, adminToken)
	admin.do("type tenant acme", chromedp.Evaluate[chromedp.Void](
		`{document.getElementById("tenant").value = "acme"; document.getElementById("tenant-form").requestSubmit();}`))
	admin.waitFor("acme's job", exists(row(acme.ID))+" && "+absent(row(globex.ID)))

	tab, closeTab := chromedp.NewContext(browser)
	defer closeTab()
	p := &page{t: t, ctx: tab}
	p.do("open the page in a new tab", chromedp.Navigate("http://"+addr+"/"))
	// Everything the tab shows from now on, the tenant field included.
	p.do("watch for the other tab's tenant", chromedp.Evaluate[chromedp.Void](`{
		window.named = [];
		const look = () => {
			const field = document.getElementById("tenant").value;
			if (document.body.innerText.includes("acme") || field === "acme") window.named.push(document.body.innerText + " | field: " + field);
		};
		look();
		new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
		setInterval(look, 20);
	}`))
	p.waitFor("the feed waiting for a token", `document.getElementById("status").dataset.status === "unauthenticated" && !document.getElementById("banner").hidden`)
	useTokenOn(p, globexToken)
	p.waitFor("globex's job, and only globex's", exists(row(globex.ID))+" && "+absent(row(acme.ID)))
	p.waitFor("live, with no refusal", `document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`)
	p.waitFor("the tenant named", `document.getElementById("tenant").value === "globex"`)
	named, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`window.named`))
	if err != nil {
		t.Fatal(err)
	}
	if len(named) > 0 {
		t.Errorf("the new tab named the tenant the other tab's user typed:\n%s", named[0])
	}

	admin.do("reload the first tab", chromedp.Reload())
	admin.waitFor("acme still shown there", `document.getElementById("tenant").value === "acme" && `+exists(row(acme.ID)))
}
