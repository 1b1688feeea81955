package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A job deleted on one page leaves every other page open on its tenant
// at once, through their streams (WatchJobsResponse.deleted_job_ids),
// with no reload: its row, its count among the failed, and its details,
// which say it was deleted instead of showing what it was; a question
// the other page was asking about it is taken back.
func TestAJobDeletedOnOnePageLeavesTheOthersLive(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)

	doomed := submit(t, ctx, srv.engine, "report.export", `{"format":"csv"}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")
	kept := submit(t, ctx, srv.engine, "mail.send", `{}`)

	// Two tabs of one browser, each with its own stream. The browser
	// starts with the first tab's first step; the second tab opens in it.
	one := &page{t: t, ctx: newTab(t, ctx)}
	one.do("open page one", chromedp.Navigate(base+"/"))
	tab, closeTab := chromedp.NewContext(one.ctx)
	defer closeTab()
	two := &page{t: t, ctx: tab}
	two.do("open page two", chromedp.Navigate(base+"/"))
	for _, p := range []*page{one, two} {
		p.waitFor("the failed job and the queued one", exists(row(doomed.ID)+`[data-state="failed"]`)+" && "+exists(row(kept.ID)))
		p.waitFor("the failed job counted", `!document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled`)
	}
	two.do("mark page two", chromedp.Evaluate[chromedp.Void](`window.pageID = "page two as first loaded"`))
	two.click("open the job's detail on page two", row(doomed.ID))
	two.waitFor("its detail, with its error", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, doomed.ID)+
		" && "+textHas("#detail .error-box", "warehouse did not answer"))
	two.click("ask to retry it on page two", `#detail button[data-action="retry"]`)
	two.waitFor("the question", textHas("#detail .question", "Retry job "+doomed.ID))

	one.click("open the job's detail on page one", row(doomed.ID))
	one.click("click delete on page one", `#detail button[data-action="delete"]`)
	one.waitFor("the question", `(() => { const b = document.querySelector("#detail .confirm-yes"); return b !== null && b.offsetParent !== null && !b.disabled; })()`)
	one.click("say yes", "#detail .confirm-yes")
	one.waitFor("what it did", textHas("#detail .outcome", "Deleted job "+doomed.ID))

	two.waitFor("the row gone from page two, the other job still there", absent(row(doomed.ID))+" && "+exists(row(kept.ID)))
	two.waitFor("one job counted", textHas("#jobs-count", "1 most recent shown"))
	two.waitFor("no failed job left to retry, and why", `(() => {
		const b = document.querySelector('#jobs-actions button[data-action="retry-failed"]');
		return b.disabled && b.closest(".action").textContent.includes("no failed job in this view");
	})()`)
	two.waitFor("the detail saying it was deleted, its stale state and buttons gone", `(() => {
		const d = document.getElementById("detail");
		return d.dataset.state === "deleted" &&
			d.querySelector(".deleted-note").textContent.includes("This job was deleted") &&
			d.querySelector(".detail-body").hidden &&
			d.querySelector(".confirm-ask").hidden &&
			d.querySelector('button[data-action="retry"]').offsetParent === null;
	})()`)
	two.waitFor("page two never reloaded", `window.pageID === "page two as first loaded"`)
}

// absent is a JS condition: no element matches selector. ("!" before
// exists would negate the element, not the comparison: always true.)
func absent(selector string) string {
	return fmt.Sprintf(`document.querySelector(%s) === null`, strconv.Quote(selector))
}
