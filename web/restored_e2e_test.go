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
	first := testdb.New(t)
	srv := startServer(t, addr, first)
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
	p.waitFor("one job counted", textHas("#jobs-count", "1 most recent shown"))
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)

	// Back on the first database (the operator fixes the --db they got
	// wrong): its jobs were never deleted, so they show again, and one
	// opened by its id shows its details.
	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	srv = startServer(t, addr, first)
	p.waitFor("the first database's jobs again, and not the other's", exists(row(gone.ID))+" && "+exists(row(alsoGone.ID))+" && !"+exists(row(fresh.ID))+" && "+rowCount(2))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the details of the job shown, queued again", detailShows(gone.ID, "queued"))
	p.do("open the other job by its id", chromedp.Evaluate[chromedp.Void](`(() => {
		document.getElementById("open-job").value = `+strconv.Quote(alsoGone.ID)+`;
		document.getElementById("open-form").requestSubmit();
	})()`))
	p.waitFor("its details, queued, with Cancel offered", detailShows(alsoGone.ID, "queued")+
		` && !document.querySelector('#detail button[data-action="cancel"]').disabled`)
	p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
}
