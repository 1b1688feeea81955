package web_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// On a 375 px window, a phone's, a failed job's reason and a running
// job's step are read whole in the list (under the row, wrapping), not
// cut to "D…"; the queue and schedule tables stay inside their panels,
// and their badges and names are never broken inside a word.
func TestAPhoneReadsTheFailureReasonAndTheTablesFit(t *testing.T) {
	ctx, base, srv := startLiveWithRules(t, 2*time.Minute, jobtype.Rules{
		Queues: map[string]jobtype.QueueRules{"thumbnails-and-previews": {}},
		Schedules: []jobtype.Schedule{
			{Name: "nightly-digest", Kind: "digest.send", Queue: "reports", Every: time.Hour},
			{Name: "warehouse-export", Kind: "report.export", Queue: "reports", Cron: "30 2 * * 1-5", Timezone: "Europe/Amsterdam"},
		},
	})
	failed := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("DecodeErrorInTheWarehouseAdapter", "not a JPEG")
	running := submit(t, ctx, srv.engine, "thumbs.render", `{}`)
	claim(t, ctx, srv.engine, "thumbs.render").progress(40, "writing rows to the warehouse")
	// The hourly schedule's first run, succeeded: a badge in its row.
	if err := srv.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	claim(t, ctx, srv.engine, "digest.send").complete(`{}`)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("size the window as a phone", chromedp.EmulateViewport(375, 812))
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("both jobs, the schedules and queues", exists(row(failed.ID)+`[data-state="failed"]`)+" && "+exists(row(running.ID)+`[data-state="running"]`)+
		` && !document.getElementById("schedules-panel").hidden && document.querySelectorAll("#queues > tr[data-queue]").length >= 2`+
		` && `+textIs(`tr[data-schedule="nightly-digest"] .last-run .badge`, "succeeded"))

	// whole: the element's text is not cut (no ellipsis, nothing hidden),
	// and it spans most of its row.
	whole := func(selector, text string) string {
		return `(() => {
			const e = document.querySelector(` + strconv.Quote(selector) + `);
			const row = e.closest("li.job");
			return e.textContent === ` + strconv.Quote(text) + ` && e.scrollWidth <= e.clientWidth && e.getBoundingClientRect().right <= row.getBoundingClientRect().right &&
				e.closest(".progress").getBoundingClientRect().width > row.getBoundingClientRect().width * 0.8;
		})()`
	}
	p.waitFor("the failure's reason whole, under its row", whole(row(failed.ID)+" .step", "DecodeErrorInTheWarehouseAdapter"))
	p.waitFor("the step whole, under its row", whole(row(running.ID)+" .step", "writing rows to the warehouse"))
	p.waitFor("each table inside its panel, nothing wider than the window", `(() => {
		const inside = (table) => {
			const panel = table.closest(".panel");
			const pad = parseFloat(getComputedStyle(panel).paddingRight);
			return table.getBoundingClientRect().right <= panel.getBoundingClientRect().right - pad + 0.5 && table.scrollWidth <= table.clientWidth + 0.5;
		};
		return [...document.querySelectorAll("table.queues")].every(inside) && document.documentElement.scrollWidth <= window.innerWidth;
	})()`)
	// A badge ("succe|eded"), a queue's or a schedule's name ("report|s")
	// never breaks inside a word: a name may break after a hyphen.
	p.waitFor("no badge or name broken inside a word", `(() => {
		const whole = (el) => [...el.childNodes].filter((n) => n.nodeType === Node.TEXT_NODE).every((n) => {
			let at = 0;
			return n.textContent.split(/(?<=[\s-])/).every((word) => {
				const range = document.createRange();
				const text = word.trimEnd();
				range.setStart(n, at);
				range.setEnd(n, at + text.length);
				at += word.length;
				return text === "" || range.getClientRects().length === 1;
			});
		});
		const words = [...document.querySelectorAll("table.queues .badge, table.queues .name, .schedules .schedule-queue, .schedules .schedule-queue-under")].filter((el) => el.getClientRects().length > 0);
		return words.length >= 8 && words.every(whole);
	})()`)
	if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(artifactPath(t, "web-e2e-phone-375.png"), png, 0o644)
	}
}

// On a phone the details sit below the whole list: a link to a job
// (?job=ID) brings them into view once they show, as a click on a row
// does, and they stay in view as the list fills in above them. They
// used to show some 8,600 px down the page, out of sight. The job's row
// joins the list whichever answer comes first: when GetJob's came before
// the first page of jobs (the page did not know its tenant yet), the job
// was in the details and never in the list.
func TestALinkToAJobOnAPhoneShowsItsDetailsInView(t *testing.T) {
	for _, order := range []struct {
		name  string
		first string // the call answered before the others, if any
	}{{"as the server answers", ""}, {"GetJob answered first", "GetJob"}} {
		t.Run(order.name, func(t *testing.T) {
			ctx, base, srv := startLive(t, 2*time.Minute)
			old := submit(t, ctx, srv.engine, "report.export", `{}`)
			claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")
			for i := range 60 {
				submit(t, ctx, srv.engine, "mail.send", `{"n":`+strconv.Itoa(i)+`}`)
			}

			p := &page{t: t, ctx: newTab(t, ctx)}
			if order.first != "" {
				p.answerFirst(order.first)
			}
			p.do("size the window as a phone", chromedp.EmulateViewport(375, 812))
			p.do("open a link to the old job", chromedp.Navigate(base+"/?job="+old.ID))
			inView := `(() => {
				const r = document.getElementById("detail").getBoundingClientRect();
				return r.top >= -1 && r.top < window.innerHeight / 2;
			})()`
			// The 50 newest jobs, and the old one the link opened.
			p.waitFor("its details, in view, below the whole list", detailShows(old.ID, "failed")+" && "+rowCount(51)+" && "+exists(row(old.ID))+
				" && "+inView+` && document.getElementById("jobs").getBoundingClientRect().bottom < 0`)
		})
	}
}

// A queue named with the most characters the server takes, and no place
// to break (128 × "q"), wraps inside the queue and schedule tables on a
// phone, as text in the details does, so they fit the window: kept
// whole, it made the queue table 1,273 px wide and the page scroll
// sideways. Names of shorter words still break only between them, and
// the list narrowed to that queue fits too.
func TestALongQueueNameWrapsOnAPhone(t *testing.T) {
	long := strings.Repeat("q", 128)
	word := "notificationsout" // as long as a word is kept whole
	ctx, base, srv := startLiveWithRules(t, 2*time.Minute, jobtype.Rules{
		Queues:    map[string]jobtype.QueueRules{long: {}, word: {}, "thumbnails-and-previews": {}},
		Schedules: []jobtype.Schedule{{Name: "nightly-digest", Kind: "digest.send", Queue: long, Every: time.Hour}},
	})
	for _, q := range []string{long, word, "thumbnails-and-previews"} {
		if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "mail.send", Queue: q}); err != nil {
			t.Fatal(err)
		}
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("size the window as a phone", chromedp.EmulateViewport(375, 800))
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the queues and the schedule", fmt.Sprintf(`document.querySelector(%q) !== null && document.querySelectorAll("#queues > tr[data-queue]").length >= 3`, `tr[data-schedule="nightly-digest"]`)+
		` && !document.getElementById("schedules-panel").hidden`)

	fits := `(() => {
		const inside = (table) => {
			const panel = table.closest(".panel");
			const pad = parseFloat(getComputedStyle(panel).paddingRight);
			return table.getBoundingClientRect().right <= panel.getBoundingClientRect().right - pad + 0.5 && table.scrollWidth <= table.clientWidth + 0.5;
		};
		return [...document.querySelectorAll("table.queues")].every(inside) && document.documentElement.scrollWidth <= window.innerWidth;
	})()`
	// lines is how many lines the element's text takes.
	lines := func(selector string) string {
		return `(() => {
			const e = document.querySelector(` + strconv.Quote(selector) + `);
			const range = document.createRange();
			range.selectNodeContents(e);
			return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
		})()`
	}
	queueName := func(name string) string { return fmt.Sprintf(`tr[data-queue=%q] .name`, name) }
	p.waitFor("every table inside its panel, nothing wider than the window", fits)
	p.waitFor("the long name wrapped, whole", lines(queueName(long))+" > 2 && "+textIs(queueName(long), long))
	p.waitFor("the long queue under its schedule wrapped, whole", lines(`tr[data-schedule="nightly-digest"] .schedule-queue-under`)+" > 2 && "+
		textIs(`tr[data-schedule="nightly-digest"] .schedule-queue-under`, "queue "+long))
	p.waitFor("a name of a word no longer than a word is kept whole, on one line", lines(queueName(word))+" === 1")
	p.waitFor("a name of words broken only between them", fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		const text = e.firstChild;
		let at = 0;
		return text.textContent.split(/(?<=-)/).every((word) => {
			const range = document.createRange();
			range.setStart(text, at);
			range.setEnd(text, at + word.length);
			at += word.length;
			return range.getClientRects().length === 1;
		});
	})()`, queueName("thumbnails-and-previews")))

	p.click("open the long queue's jobs", queueName(long))
	p.waitFor("its job, the queue beside Show, and still nothing wider than the window",
		rowCount(1)+" && "+textIs("#queue-filter-name", long)+" && "+fits)
	// The count above the list names the queue: it wraps, and leaves Retry
	// all failed's reason room to be read.
	p.waitFor("the count naming the queue, and the button's reason readable beside or under it", textHas("#jobs-count", long)+" && "+
		textIs("#jobs-actions .reason", "no failed job in this view")+` && document.querySelector("#jobs-actions .reason").getBoundingClientRect().width > 100`)
	if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(artifactPath(t, "web-e2e-phone-long-queue.png"), png, 0o644)
	}
}
