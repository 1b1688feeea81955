package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// An address that names a state the page does not know (?state=bogus, a
// typo in a shared link) lists every job, and says so above the list,
// with the states there are, rather than pass for a filter; a state
// picked under Show, or Back to the address without it, takes the note
// away. It was ignored without a word.
func TestAnUnknownStateInTheAddressIsSaid(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	queued := submit(t, ctx, srv.engine, "mail.send", `{}`)
	failed := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")

	p := &page{t: t, ctx: newTab(t, ctx)}
	note := `document.getElementById("state-note")`
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("both jobs, and no note", rowCount(2)+" && "+note+".hidden")

	p.do("open an address with a state the page does not know", chromedp.Navigate(base+"/?state=bogus"))
	p.waitFor("every job, and the note with the states there are", rowCount(2)+" && "+exists(row(queued.ID))+" && "+exists(row(failed.ID))+
		" && !"+note+".hidden && "+textIs("#state-note",
		"The address asks for state “bogus”, which is no state: the list shows all jobs. "+
			"The states are all, failed, running, waiting, queued, pending, succeeded, cancelled or lost (or pick one under Show)."))

	p.showState("failed")
	p.waitFor("the failed job alone, and no note", rowCount(1)+" && "+exists(row(failed.ID))+" && "+note+".hidden")
	p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
	p.waitFor("the note again, over every job", rowCount(2)+" && !"+note+".hidden")
	// The page the first address opened, a document of its own: every
	// wait is waitAcross (a page restored from the back/forward cache
	// never answers a chromedp.Poll).
	p.do("go back again", chromedp.Evaluate[chromedp.Void](`history.back()`))
	p.waitAcross("no note, as the address names no state", `new URL(location.href).search === ""`+" && "+note+".hidden && "+rowCount(2))
}
