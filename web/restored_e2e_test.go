package web_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

// A server restarted on another database (an empty one, one restored
// from a backup) no longer has the jobs the page shows, and never names
// them as deleted: its stream starts over with the jobs it has. The page
// keeps only those, as a reload would, and the details of a job it no
// longer has say so, without the buttons that would fail on it.
func TestAfterARestartOnAnotherDatabaseThePageShowsOnlyWhatTheServerHas(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	srv := startServer(t, addr, testdb.New(t))
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()

	gone := submit(t, ctx, srv.engine, "mail.send", `{"to":"a"}`)
	alsoGone := submit(t, ctx, srv.engine, "mail.send", `{"to":"b"}`)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("both jobs", exists(row(gone.ID))+" && "+exists(row(alsoGone.ID)))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))
	p.click("open a job's details", row(gone.ID))
	p.waitFor("its details, queued, with Cancel offered", detailShows(gone.ID, "queued")+
		` && !document.querySelector('#detail button[data-action="cancel"]').disabled`)

	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	srv = startServer(t, addr, testdb.New(t))
	fresh := submit(t, ctx, srv.engine, "report.export", `{}`)

	p.waitFor("the new server's job, alone", exists(row(fresh.ID))+" && "+rowCount(1))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the details saying the server has no such job, without buttons", `(() => {
		const d = document.getElementById("detail");
		return d.dataset.jobId === `+strconv.Quote(gone.ID)+` && d.dataset.state === "deleted" &&
			d.querySelector(".deleted-note").textContent.includes("The server has no such job") &&
			d.querySelector(".detail-body").hidden &&
			d.querySelector('button[data-action="cancel"]').offsetParent === null;
	})()`)
	p.waitFor("one job counted", textIs("#jobs-count", "1 recent"))
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
}
