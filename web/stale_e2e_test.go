package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

// An action's outcome goes once what it says no longer holds: a retried
// job's "Its new run shows here as it happens." gives way to how that
// run ended once it has;
// "Paused queue default: …" once the queue was resumed elsewhere; "the
// server cannot be reached; nothing was retried" once the server answers
// again.
func TestAnOutcomeGoesOnceItNoLongerHolds(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	addr := freeAddr(t)
	dbPath := testdb.New(t)
	srv := startServer(t, addr, dbPath)
	defer func() { srv.shutdown(t) }()

	export := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the failed job", chromedp.Navigate("http://"+addr+"/?job="+export.ID))
	p.waitFor("its details", detailShows(export.ID, "failed"))
	yes := func(scope string) {
		p.waitFor("the question", `(() => { const b = document.querySelector("`+scope+` .confirm-yes"); return b !== null && b.offsetParent !== null && !b.disabled; })()`)
		p.click("say yes", scope+" .confirm-yes")
	}
	shown := func(selector string) string { return `!document.querySelector("` + selector + `").hidden` }
	gone := func(selector string) string { return `document.querySelector("` + selector + `").hidden` }

	t.Run("a retry's note says how the new run ended once it has", func(t *testing.T) {
		p.t = t
		p.click("retry", `#detail button[data-action="retry"]`)
		yes("#detail")
		p.waitFor("the note", textHas("#detail .outcome", "Its new run shows here as it happens.")+" && "+shown("#detail .outcome"))
		w := claim(t, ctx, srv.engine, "report.export")
		p.waitFor("the note kept while the new run runs", detailShows(export.ID, "running")+" && "+shown("#detail .outcome"))
		w.complete(`{"rows": 3}`)
		p.waitFor("the run ended, the note saying how", detailShows(export.ID, "succeeded")+" && "+shown("#detail .outcome")+" && "+
			textIs("#detail .outcome", "Retried job "+export.ID+": its new run succeeded."))
	})

	t.Run("Paused goes once the queue is resumed elsewhere", func(t *testing.T) {
		p.t = t
		p.click("pause the default queue", `tr[data-queue="default"] button[data-action="pause"]`)
		yes("#queues-confirm")
		p.waitFor("what it did", textHas("#queues-confirm .outcome", "Paused queue default: it hands out no jobs until resumed.")+" && "+shown("#queues-confirm .outcome"))
		if _, err := srv.engine.Resume(ctx, "default", "jobwatch resume"); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the queue running, the note gone", `document.querySelector('tr[data-queue="default"]').dataset.paused === "false" && `+gone("#queues-confirm .outcome"))
	})

	t.Run("the server cannot be reached goes once it answers again", func(t *testing.T) {
		p.t = t
		failed := submit(t, ctx, srv.engine, "mail.send", `{}`)
		claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
		p.waitFor("the failed job", exists(row(failed.ID)+`[data-state="failed"]`))
		srv.shutdown(t)
		p.click("retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
		yes("#jobs-confirm")
		p.waitFor("the failure", textHas("#jobs-confirm .outcome", "the server cannot be reached; nothing was retried")+" && "+shown("#jobs-confirm .outcome"))
		srv = startServer(t, addr, dbPath)
		p.waitFor("the page live again, the failure gone", `document.getElementById("status").dataset.status === "live" && `+gone("#jobs-confirm .outcome"))
	})
}
