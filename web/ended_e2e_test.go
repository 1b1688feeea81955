package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The list keeps every job that has not ended and the newest 200 that
// have, as the docs say ("adds any that change, up to 200 ended ones"):
// with more jobs waiting than that, the jobs that end stay in sight,
// newest first, where they used to leave the list at once (a thousand
// queued jobs left room for none); and the older ones are reached with
// Show older jobs, which reads past the jobs already shown.
func TestEndedJobsStayInSightHoweverManyWait(t *testing.T) {
	ctx, base, srv := startLive(t, 4*time.Minute)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the empty list, live", `document.getElementById("status").dataset.status === "live" && `+
		textIs("#jobs-empty", "No jobs for this tenant yet."))

	// 250 jobs no worker runs, then 230 newer ones that fail.
	submitBatch(t, ctx, base, "", "thumbs.render", 250)
	failedJobs(t, ctx, srv, base, "report.export", 230)

	count := func(state string) string {
		return fmt.Sprintf(`document.querySelectorAll('li.job[data-state=%q]').length`, state)
	}
	older := `document.getElementById("jobs-older")`
	p.waitFor("every queued job and the 200 newest failed ones, above them, and a way to older ones",
		count("queued")+` === 250 && `+count("failed")+` === 200 && `+rowCount(450)+
			` && [...document.querySelectorAll("li.job")].slice(0, 200).every(r => r.dataset.state === "failed") && !`+older+`.hidden`)

	// Each click reads on until it shows more (pages of jobs shown
	// already, the view read again from its start, are passed over),
	// until the view's last page: the 30 older failed jobs come, below
	// the newer ones, and none twice.
	for clicks := 0; ; clicks++ {
		hidden, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](older+`.hidden`))
		if err != nil {
			t.Fatal(err)
		}
		if hidden {
			break
		}
		if clicks == 5 {
			t.Fatal("Show older jobs still offered after 5 clicks")
		}
		before, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](count("failed")))
		if err != nil {
			t.Fatal(err)
		}
		p.click("show older jobs", "#jobs-older:not([hidden]):not([disabled])")
		p.waitFor("the page read", older+`.hidden || !`+older+`.disabled`)
		if clicks == 0 {
			p.waitFor("more failed jobs at the first click", fmt.Sprintf(`%s > %d`, count("failed"), before))
		}
	}
	p.waitFor("all 230 failed jobs above the queued ones, none twice", count("failed")+` === 230 && `+rowCount(480)+
		` && [...document.querySelectorAll("li.job")].slice(0, 230).every(r => r.dataset.state === "failed")`+
		` && new Set([...document.querySelectorAll("li.job")].map(r => r.dataset.jobId)).size === 480 && `+textIs("#jobs-older-note", ""))
}
