package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
)

// Clients name queues, so there may be more than the queue panel can
// draw: ListQueues answers the 500 most pressing and counts the rest, and
// the panel draws those 500 and says how many it does not show. An
// outside probe's 50,000 queues once made the panel draw 200,000 rows,
// and the page stopped answering.
func TestTheQueuePanelDrawsTheMostPressingQueuesAndSaysHowManyMore(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)
	var reqs []jobs.SubmitRequest
	for i := range 520 {
		reqs = append(reqs, jobs.SubmitRequest{Kind: "k", Queue: fmt.Sprintf("q%03d", i)})
	}
	for range 1500 {
		reqs = append(reqs, jobs.SubmitRequest{Kind: "k", Queue: "busiest"})
	}
	for len(reqs) > 0 {
		n := min(len(reqs), 1000)
		if _, err := srv.engine.SubmitMany(ctx, reqs[:n]); err != nil {
			t.Fatal(err)
		}
		reqs = reqs[n:]
	}
	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	// 520 queues, busiest and default: 22 left out.
	p.waitFor("500 queues drawn, the busiest among them, and the note counting the rest",
		`document.querySelectorAll("tr[data-queue]").length === 500 && `+
			exists(`tr[data-queue="busiest"]`)+` && `+
			textIs(`tr[data-queue="busiest"] .queued`, "1,500")+` && `+
			textHas("#queues-note", "22 more queues are not shown: these are the 500 most pressing"))
}
