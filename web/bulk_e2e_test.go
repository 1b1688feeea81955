package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

// Retry all failed asks with the exact number of jobs where the page
// knows it (a batch it has counted; a view it has read to its end), and
// with the honest "shown here, and any older ones" where it does not.
func TestRetryAllFailedSaysTheExactCountWhereThePageKnowsIt(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t))
	defer srv.shutdown(t)

	// Three failed jobs older than the batch's 50 newest, and one failed
	// job that is no batch's.
	const thumbs = "thumbs-2026-12-04"
	submitBatch(t, ctx, base, thumbs, "thumbs.render", 80)
	for range 3 {
		runOver(t, ctx, base, "thumbs.render", false)
	}
	submit(t, ctx, srv.engine, "mail.send", `{}`)
	claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")

	p := &page{t: t, ctx: newTab(t, ctx)}
	ask := func() {
		p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
	}

	t.Run("the whole tenant, more than the list holds: shown here, and any older ones", func(t *testing.T) {
		p.t = t
		p.do("open the page", chromedp.Navigate(base+"/"))
		p.waitFor("the list and an older page", rowCount(50)+` && !document.getElementById("jobs-older").hidden`)
		ask()
		p.waitFor("the honest count", textHas("#jobs-confirm .question", "Retry every failed job of tenant “default”? 1 shown here, and any older ones."))
		p.click("keep", "#jobs-confirm .confirm-no")
	})

	t.Run("the failed jobs read to their end: the exact count", func(t *testing.T) {
		p.t = t
		p.do("show failed jobs", chromedp.Evaluate[chromedp.Void](`(() => {
			const s = document.getElementById("state-filter");
			s.value = "failed";
			s.dispatchEvent(new Event("change"));
		})()`))
		p.waitFor("the four failed jobs", rowCount(4)+` && document.getElementById("jobs-older").hidden`)
		ask()
		p.waitFor("the exact count", textHas("#jobs-confirm .question", "Retry every failed job of tenant “default”? That is 4 jobs."))
		p.click("keep", "#jobs-confirm .confirm-no")
	})

	t.Run("a counted batch whose failed jobs are all older than the list: the exact count", func(t *testing.T) {
		p.t = t
		p.do("open the batch", chromedp.Navigate(base+"/?batch="+thumbs))
		p.waitFor("the batch counted", textIs(batchLine, thumbs+": 80 jobs · 3 ended (3 failed) · 77 to go")+" && "+rowCount(50)+
			` && !document.querySelector("li.job[data-state=failed]")`)
		ask()
		p.waitFor("the exact count, from the batch's bar", textHas("#jobs-confirm .question", "Retry every failed job of batch “"+thumbs+"” of tenant “default”? That is 3 jobs."))
		p.click("say yes", "#jobs-confirm .confirm-yes")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 3 of 3 failed jobs"))
		p.waitFor("none failed now", textIs(batchLine, thumbs+": 80 jobs · 0 ended · 80 to go"))
	})
}
