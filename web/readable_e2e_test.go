package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A job whose every text is as long and unbroken as the server takes (a
// kind of 128 characters, a 600-character URL in its step and payload, a
// 4,000-character error message) wraps inside the detail panel: the panel
// stays within the window and its close button on screen, on a wide window
// and on a phone's.
func TestLongUnbrokenTextWrapsInsideTheDetail(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	addr := freeAddr(t)
	srv := startServer(t, addr, testdb.New(t))
	defer srv.shutdown(t)

	kind := strings.Repeat("k", jobtype.MaxNameBytes)
	url := "https://reports.example.com/" + strings.Repeat("a", 600-len("https://reports.example.com/"))
	message := strings.Repeat("E", 4000)
	job := submit(t, ctx, srv.engine, kind, fmt.Sprintf(`{"source":%q}`, url))
	w := claim(t, ctx, srv.engine, kind)
	w.progress(40, url)
	w.fail("UpstreamError", message)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("the failed job", exists(row(job.ID)+`[data-state="failed"]`))
	p.do("open its detail", chromedp.Click(chromedp.CSS(row(job.ID))))
	p.waitFor("the whole error message", textIs("#detail .error-message", message))
	p.waitFor("the URL in the payload", textHas("#detail .payload", url))

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
			p.do("open it again", chromedp.Click(chromedp.CSS(row(job.ID))))
			p.waitFor("the detail again", textIs("#detail .error-message", message))
		})
	}
}
