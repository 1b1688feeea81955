package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// olderOffered is a JS condition: Show older jobs is offered (or, with
// false, not), and no read of older jobs is on its way.
func olderOffered(offered bool) string {
	cond := `!document.getElementById("jobs-older").hidden`
	if !offered {
		cond = `document.getElementById("jobs-older").hidden`
	}
	return cond + ` && !document.getElementById("jobs-older").disabled && document.getElementById("jobs-older-note").textContent === ""`
}

// A list filtered to a state whose jobs have all left it says, in the
// filter's words, that there are none, and offers Show older jobs no
// more: once Retry all failed has retried the 60 failed jobs of a list
// of 50, the server's token for the 10 older ones (given while they were
// failed) no longer means there are any, and the page reads on past the
// empty list, as a click would, to find out. Before, the empty list said
// "No failed jobs for this tenant." beside Show older jobs.
func TestAFilteredListItsJobsLeftOffersNoOlderJobs(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)
	failedJobs(t, ctx, srv, base, "mail.send", 60)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the failed jobs", chromedp.Navigate(base+"/?state=failed"))
	p.waitFor("the 50 newest failed jobs, and older ones offered", rowCount(50)+" && "+olderOffered(true)+" && "+textIs("#jobs-count", "50 failed shown"))

	p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
	p.click("say yes", "#jobs-confirm .confirm-yes")
	p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 60 of 60 failed jobs"))
	p.waitFor("an empty list that says there are none, and no older jobs offered",
		rowCount(0)+" && "+textIs("#jobs-empty", "No failed jobs for this tenant.")+` && !document.getElementById("jobs-empty").hidden && `+
			olderOffered(false)+" && "+textIs("#jobs-count", ""))
}

// The failed jobs a filtered list showed, the book's bound on ended jobs
// let go (200 jobs of other states ended after them: the stream brings
// every state's), leave no empty list beside Show older jobs: the page
// reads the view again, and they are listed, as the server still has
// them. Before, the list said "No failed jobs for this tenant." beside
// Show older jobs, though there were three.
func TestFilteredRowsLetGoAreReadAgainRatherThanLeaveAnEmptyList(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)
	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the failed jobs", chromedp.Navigate(base+"/?state=failed"))
	p.waitFor("no failed job, said so, live", rowCount(0)+" && "+textIs("#jobs-empty", "No failed jobs for this tenant.")+" && "+olderOffered(false)+
		` && document.getElementById("status").dataset.status === "live"`)

	failedJobs(t, ctx, srv, base, "mail.send", 3)
	p.waitFor("the three failed jobs, brought by the stream", rowCount(3)+" && "+textIs("#jobs-count", "3 failed shown"))
	p.do("count the rows let go", chromedp.Evaluate[chromedp.Void](`(() => {
		window.rowsGone = 0;
		new MutationObserver((ms) => {
			for (const m of ms) window.rowsGone += [...m.removedNodes].filter((n) => n.matches?.("li.job")).length;
		}).observe(document.getElementById("jobs"), { childList: true });
	})()`))
	for _, j := range submitBatch(t, ctx, base, "", "thumbs.render", 210) {
		if _, err := srv.engine.Cancel(ctx, j.GetId()); err != nil {
			t.Fatal(err)
		}
	}
	p.waitFor("the three let go, then listed again, and no older jobs offered",
		`window.rowsGone >= 3 && `+rowCount(3)+" && "+textIs("#jobs-count", "3 failed shown")+` && document.getElementById("jobs-empty").hidden && `+olderOffered(false))
}
