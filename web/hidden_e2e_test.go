package web_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// hideTab puts the page out of sight (hidden) or in sight again, as
// another tab brought to the front would: headless Chromium shows every
// tab, so the document's visibilityState is set by hand, and the
// visibilitychange the page listens to sent.
func (p *page) hideTab(hidden bool) {
	p.t.Helper()
	state := "visible"
	if hidden {
		state = "hidden"
	}
	p.do("make the tab "+state, chromedp.Evaluate[chromedp.Void](`(() => {
		Object.defineProperty(document, "visibilityState", { configurable: true, get: () => "`+state+`" });
		Object.defineProperty(document, "hidden", { configurable: true, get: () => `+strconv.FormatBool(hidden)+` });
		document.dispatchEvent(new Event("visibilitychange"));
	})()`))
}

// A tab out of sight for 5 s lets go of its stream, and then says so:
// "paused while out of sight", not "live", which would promise changes
// that no stream brings. Shown again, it catches up (the job that came
// meanwhile) and is live again. An outside tester found a hidden tab
// that had let go of its streams still reading "● live".
func TestAHiddenTabSaysItIsPausedAndCatchesUpWhenShown(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	first := submit(t, ctx, srv.engine, "mail.send", `{}`)

	p := &page{t: t, ctx: newTab(t, ctx)}
	live := `document.getElementById("status").dataset.status === "live"`
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the job, live", exists(row(first.ID))+" && "+live+" && "+textIs("#status", "live"))
	waitOpenWatches(t, base, 1)

	p.hideTab(true)
	p.waitFor("the tab saying it is paused", `document.getElementById("status").dataset.status === "paused"`+" && "+textIs("#status", "paused while out of sight")+
		` && document.getElementById("status").title.includes("catches up")`)
	waitOpenWatches(t, base, 0)
	later := submit(t, ctx, srv.engine, "mail.send", `{}`)

	p.hideTab(false)
	p.waitFor("the job that came meanwhile, live again", exists(row(later.ID))+" && "+live+" && "+textIs("#status", "live")+
		` && document.getElementById("status").title === ""`)
	waitOpenWatches(t, base, 1)
}
