package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A job whose every text is as long and unbroken as the server takes (a
// kind of 128 characters, a 600-character URL in its step and payload, a
// 4,000-character error message) wraps inside the detail panel: the panel
// stays within the window and its close button on screen, on a wide window
// and on a phone's.
func TestLongUnbrokenTextWrapsInsideTheDetail(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)

	kind := strings.Repeat("k", jobtype.MaxNameBytes)
	url := "https://reports.example.com/" + strings.Repeat("a", 600-len("https://reports.example.com/"))
	message := strings.Repeat("E", 4000)
	job := submit(t, ctx, srv.engine, kind, fmt.Sprintf(`{"source":%q}`, url))
	w := claim(t, ctx, srv.engine, kind)
	w.progress(40, url)
	w.fail("UpstreamError", message)
	// Newer jobs above it, so that in one column (a phone) the detail
	// opens below a long list.
	for range 30 {
		submit(t, ctx, srv.engine, "filler", `{}`)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the failed job", exists(row(job.ID)+`[data-state="failed"]`))
	p.do("open its detail", chromedp.Click(chromedp.CSS(row(job.ID))))
	p.waitFor("the whole error message", textIs("#detail .error-message", message))
	p.waitFor("the URL in the payload", textHas("#detail .payload", url))
	// The error scrolls in a box of its own, and the timeline shows the
	// start of it, the rest on a click: the job's buttons stay near.
	p.waitFor("the error in a box that scrolls", `(() => {
		const box = document.querySelector("#detail .error-box p");
		return box.clientHeight <= 200 && box.scrollHeight > box.clientHeight;
	})()`)
	p.waitFor("the timeline's note of the error folded", `(() => {
		const note = document.querySelector("#detail .timeline details.timeline-note");
		return note !== null && !note.open && note.querySelector("summary").textContent.length < 300;
	})()`)

	// fits: the panel, its close button and its texts within the window,
	// and nothing on the page wider than the window.
	const fits = `(() => {
		const inside = (el) => {
			const r = el.getBoundingClientRect();
			return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth;
		};
		const panel = document.getElementById("detail");
		const close = panel.querySelector('button[aria-label="Close details"]');
		const r = close.getBoundingClientRect();
		const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return inside(panel) && inside(close) && (hit === close || close.contains(hit)) &&
			inside(panel.querySelector(".error-message")) && inside(panel.querySelector("#detail-title")) &&
			document.documentElement.scrollWidth <= window.innerWidth;
	})()`
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"a wide window", 1360, 900}, {"a phone", 390, 844}} {
		t.Run(size.name, func(t *testing.T) {
			p.t = t
			p.do("size the window", chromedp.EmulateViewport(size.width, size.height))
			p.do("scroll the close button into view", chromedp.Evaluate[chromedp.Void](
				`document.querySelector('#detail button[aria-label="Close details"]').scrollIntoView({block: "center"})`))
			p.waitFor("the detail within the window, its close button on screen", fits)
			p.do("close the detail", chromedp.Click(chromedp.CSS(`#detail button[aria-label="Close details"]`)))
			p.waitFor("the detail closed", `document.getElementById("detail").hidden`)
			p.do("scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
			p.do("open it again", chromedp.Click(chromedp.CSS(row(job.ID))))
			p.waitFor("the detail again", textIs("#detail .error-message", message))
			// Whether it sits beside the list or below it, the detail is
			// in view once its row is clicked.
			p.waitFor("the detail's top within the window", `(() => {
				const r = document.getElementById("detail").getBoundingClientRect();
				return r.top >= 0 && r.top < window.innerHeight;
			})()`)
		})
	}
}
