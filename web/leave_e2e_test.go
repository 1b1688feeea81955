package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A page left for another (an address typed, a job's own link followed)
// lets go of its streams at once: Chromium keeps a page it left, frozen,
// in its back/forward cache, and one that kept its streams there held one
// of the six HTTP/1.1 connections the browser opens to a server, so that
// after a few pages the next one waited for a connection for as long as
// the server's streams last. A page brought back (Back) takes its streams
// up again where they stopped: the feed from its token, the log after its
// last line, with nothing twice and nothing missing.
func TestAPageLeftLetsGoOfItsStreamsAndTakesThemUpWhenBack(t *testing.T) {
	ctx, base, srv := startLive(t, 4*time.Minute)

	job := submit(t, ctx, srv.engine, "build.compile", `{"target":"all"}`)
	w := claimOverConnect(t, ctx, base, "build.compile")
	w.numbered(3)

	p := &page{t: t, ctx: newTab(t, ctx)}
	live := `document.getElementById("status").dataset.status === "live"`
	logLive := fmt.Sprintf(`document.querySelector(%q)?.dataset.jobId === %q`, logPane, job.ID) + " && " + exists(logPane+`[data-status="live"]`)

	t.Run("pages opened one after another each hold only their own stream", func(t *testing.T) {
		p.t = t
		for i := 1; i <= 7; i++ {
			p.do("open the page", chromedp.Navigate(fmt.Sprintf("%s/?x=%d", base, i)))
			p.waitFor(fmt.Sprintf("page %d live", i), live+fmt.Sprintf(` && new URL(location.href).searchParams.get("x") === "%d"`, i))
			waitOpenWatches(t, base, 1)
		}
	})

	t.Run("following a job's own link again and again keeps one feed and one log open", func(t *testing.T) {
		p.t = t
		p.do("open the running job", chromedp.Navigate(base+"/?job="+job.ID))
		for i := 1; i <= 6; i++ {
			p.waitFor("its log live", logLive)
			logShowsEveryLine(p, w)
			waitOpenWatches(t, base, 2)
			p.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.left = true`))
			p.click("follow the job's own link", "#detail a.job-self-link")
			p.waitAcross("a new page", `window.left === undefined`)
		}
		p.waitFor("its log live", logLive)
		waitOpenWatches(t, base, 2)
	})

	t.Run("a page brought back takes its streams up where they stopped", func(t *testing.T) {
		p.t = t
		p.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the job's page"`))
		p.waitFor("one row", rowCount(1))
		p.do("open another page", chromedp.Navigate(base+"/?x=back"))
		p.waitAcross("the other page live", live+` && window.pageID === undefined`)
		waitOpenWatches(t, base, 1)

		// While the job's page is away: its log grows, and a job comes.
		w.numbered(4)
		other := submit(t, ctx, srv.engine, "mail.send", `{}`)

		p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
		// From here on every wait is waitAcross: a chromedp.Poll sent to a
		// page restored from the cache never answers.
		p.waitAcross("the same page, from the cache", `window.pageID === "the job's page"`)
		p.waitAcross("its log live again, with every line once", logLive+" && "+logIs(w))
		p.waitAcross("the job that came meanwhile, and no row twice", exists(row(other.ID))+" && "+exists(row(job.ID))+" && "+rowCount(2)+" && "+live)
		waitOpenWatches(t, base, 2)
		w.numbered(2)
		p.waitAcross("the lines appended after, once", logIs(w))
	})
}

// waitAcross is waitFor for what shows only once a navigation under way
// (a link clicked, Back) is over. It asks in short calls of its own,
// each bounded: a call may land in the document the navigation leaves,
// which the browser may freeze in its back/forward cache, where an
// answer never comes.
func (p *page) waitAcross(what, js string) {
	p.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ask, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		var ok bool
		ok, err = chromedp.Run(ask, chromedp.Evaluate[bool](js))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	shown, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	p.t.Fatalf("the page never showed %s (last error: %v)\npage text:\n%s", what, err, shown)
}

// logIs is a JS condition: the log pane shows exactly the lines w
// appended, each once, numbered 1, 2, 3… in order.
func logIs(w *logWorker) string {
	want := make([]string, len(w.want))
	for i, text := range w.want {
		want[i] = strconv.Itoa(i+1) + " " + text
	}
	j, _ := json.Marshal(want)
	return fmt.Sprintf(`JSON.stringify([...document.querySelectorAll("#detail .log-line")].map(r => r.dataset.seq + " " + r.textContent)) === %s`, strconv.Quote(string(j)))
}
