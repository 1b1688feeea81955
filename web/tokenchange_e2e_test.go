package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// tokensOf is a tokens file of lines "role tenant" by token ("" tenant:
// none).
func tokensOf(t *testing.T, byToken map[string][2]string) *auth.Tokens {
	t.Helper()
	file := "tokens:\n"
	for token, who := range byToken {
		file += fmt.Sprintf("  - sha256: %s\n    role: %s\n", auth.Digest(token), who[0])
		if who[1] != "" {
			file += fmt.Sprintf("    tenant: %s\n", who[1])
		}
	}
	tokens, err := auth.ParseTokens("tokens.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// submitTo submits a job of kind to tenant and returns its id.
func submitTo(t *testing.T, ctx context.Context, srv *liveServer, tenant, kind string) string {
	t.Helper()
	j, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: tenant, Kind: kind})
	if err != nil {
		t.Fatalf("submit %s: %v", kind, err)
	}
	return j.ID
}

// A new token closes the job details the last one opened, and the stream
// of their log: an admin's page switched to a client token of another
// tenant used to keep the admin's job open, its log lines still arriving.
func TestANewTokenClosesTheLastTokensDetailsAndTheirLog(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-close-admin-token"
		globexToken = "jw_e2e-close-globex-client-token"
	)
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, globexToken: {"client", "globex"}})
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)

	job := submitTo(t, ctx, srv, "default", "build.compile")
	w := claimOverConnectAs(t, ctx, base, "build.compile", adminToken)
	if w.jobID != job {
		t.Fatalf("claimed %s, want %s", w.jobID, job)
	}
	w.numbered(3)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open a link to the running job", chromedp.Navigate(base+"/?job="+job))
	p.waitFor("the token field, asked for", `!document.getElementById("token-form").hidden`)
	useTokenOn(p, adminToken)
	p.waitFor("the job's details and its log, live", detailShows(job, "running")+" && "+exists(logPane+`[data-status="live"]`))
	logShowsEveryLine(p, w)
	waitOpenWatchesAs(t, base, adminToken, 2)

	useTokenOn(p, globexToken)
	p.waitFor("the details closed, the address naming no job", `document.getElementById("detail").hidden && location.hash === "" && !new URL(location.href).searchParams.has("job")`)
	p.waitFor("globex's feed live", `document.getElementById("status").dataset.status === "live" && document.getElementById("tenant").value === "globex"`)
	// The feed's stream alone: the log's is closed.
	waitOpenWatchesAs(t, base, adminToken, 1)
}

// After the server refuses the page's token (a reload that dropped it)
// and takes it back (restored, reloaded, and Use clicked with the same
// token), the job's log resumes with the feed, after the last line it
// showed: the lines appended meanwhile appear, none twice. It used to
// stay at "the server wants a token: the token is no longer known".
func TestTheLogResumesWithTheFeedWhenARefusedTokenIsTakenBack(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		adminToken  = "jw_e2e-back-admin-token"
		clientToken = "jw_e2e-back-acme-client-token"
	)
	all := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}, clientToken: {"client", "acme"}})
	withoutClient := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}})
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = all })
	defer srv.shutdown(t)

	job := submitTo(t, ctx, srv, "acme", "build.compile")
	w := claimOverConnectAs(t, ctx, base, "build.compile", adminToken)
	w.numbered(3)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open a link to the running job", chromedp.Navigate(base+"/?job="+job))
	p.waitFor("the token field, asked for", `!document.getElementById("token-form").hidden`)
	useTokenOn(p, clientToken)
	p.waitFor("the job's details and its log, live", detailShows(job, "running")+" && "+exists(logPane+`[data-status="live"]`))
	logShowsEveryLine(p, w)

	srv.server.SetTokens(withoutClient)
	p.waitFor("the feed and the log refused", `document.getElementById("status").dataset.status === "unauthenticated" && `+
		exists(logPane+`[data-status="stopped"]`)+" && "+textIs("#detail .log-status", "the server wants a token: the token is no longer known"))
	w.numbered(4) // while the page may not read them

	srv.server.SetTokens(all)
	useTokenOn(p, clientToken)
	p.waitFor("the feed and the log live again", `document.getElementById("status").dataset.status === "live" && `+
		exists(logPane+`[data-status="live"]`)+" && "+detailShows(job, "running"))
	p.waitFor("every line once, those appended meanwhile too", logIs(w))
	w.numbered(2)
	p.waitFor("and those appended after", logIs(w))
	waitOpenWatchesAs(t, base, adminToken, 2)
}
