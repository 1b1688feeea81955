package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A job's history trimmed to its bound (20 entries) says, between the
// submission and the first entry kept, that earlier attempts are not
// kept: the timeline went from "submitted" straight to a retry.
func TestATrimmedHistorySaysEarlierAttemptsAreNotKept(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	job, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "sync.flaky", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Each round is two entries: the failed run, and the retry.
	const rounds = jobtype.MaxHistory/2 + 2
	for i := range rounds {
		claim(t, ctx, srv.engine, "sync.flaky").fail("SyncError", fmt.Sprintf("run %d", i+1))
		if i < rounds-1 {
			if _, err := srv.engine.Retry(ctx, job.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open a link to the job", chromedp.Navigate(base+"/?job="+job.ID))
	p.waitFor("its details", detailShows(job.ID, "failed"))
	// 23 entries, the last 20 kept: the first is the retry after run 2,
	// whose own end is not kept either.
	p.waitFor("the timeline: submitted, then that runs 1 and 2 are not kept, then the retry after run 2", `(() => {
		const labels = [...document.querySelectorAll("#detail .timeline-label")].map((e) => e.textContent);
		return labels[0] === "submitted" &&
			labels[1] === "… 2 earlier attempts not kept (a job keeps the last 20 entries of its history)" &&
			labels[2] === "ended, to be tried again (attempt 2)" &&
			labels[3] === "started (attempt 3)" &&
			document.querySelectorAll("#detail .timeline li.timeline-gap time").length === 0;
	})()`)
}
