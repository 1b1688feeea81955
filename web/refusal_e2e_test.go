package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
)

// A refusal on a job's details goes once it no longer holds. Retry of a
// job whose unique key another job holds says so, naming that job; it
// stayed, minutes after that job was cancelled, saying it "has not
// ended". Now it goes when that job ends (or this job changes), and
// Retry then goes through.
func TestARefusalOnTheDetailsGoesOnceItNoLongerHolds(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	first, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.nightly", UniqueKey: "y"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.engine.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	second, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.nightly", UniqueKey: "y"})
	if err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open a link to the cancelled job", chromedp.Navigate(base+"/?job="+first.ID))
	p.waitFor("its details, and the job holding the key in the list", detailShows(first.ID, "cancelled")+" && "+exists(row(second.ID)+`[data-state="queued"]`))
	retry := func() {
		p.click("click retry", `#detail button[data-action="retry"]`)
		p.click("say yes", "#detail .confirm-yes")
	}
	retry()
	outcome := `document.querySelector("#detail .outcome")`
	p.waitFor("the refusal, naming the job that holds the key", textHas("#detail .outcome", "Retry: job "+second.ID+" holds the unique key “y” and has not ended")+
		` && !`+outcome+`.hidden`)

	if _, err := srv.engine.Cancel(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the refusal gone as that job ends", exists(row(second.ID)+`[data-state="cancelled"]`)+` && `+outcome+`.hidden`+
		` && !document.getElementById("detail").innerText.includes("has not ended")`)
	retry()
	p.waitFor("the retry, now allowed", textHas("#detail .outcome", "Retried")+" && "+exists(row(first.ID)+`[data-state="queued"]`))
}
