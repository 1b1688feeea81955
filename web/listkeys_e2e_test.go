package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The job list is one Tab stop however many rows it has (a roving
// tabindex): Tab from the Open button reaches the newest row, Arrow
// Down and Up, End and Home move between rows, Enter opens the row
// focused and Escape brings the keyboard back to it, and one Tab from
// any row leaves the list for the queue panel; Shift+Tab comes back to
// the row last on. Keys are pressed as a person would press them.
func TestTheJobListIsOneTabStopWalkedWithArrowKeys(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	const jobs = 30
	for range jobs {
		submit(t, ctx, srv.engine, "mail.send", `{}`)
	}
	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("every job's row", fmt.Sprintf(`document.querySelectorAll("#jobs > li.job").length === %d`, jobs))
	p.waitFor("the queue panel's Pause", exists(`table.queues button[data-action="pause"]`))

	press := func(what string, keys ...string) {
		for _, key := range keys {
			p.do("press "+what, chromedp.KeyEvent(key))
		}
	}
	// onRow is a JS condition: the keyboard is on the k-th row, counted
	// from 0 at the top, and it is the list's only Tab stop.
	onRow := func(k int) string {
		return fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll("#jobs > li.job")];
			const k = %d < 0 ? rows.length + %d : %d;
			return document.activeElement === rows[k] &&
				rows.filter((r) => r.tabIndex === 0).length === 1 && rows[k].tabIndex === 0 &&
				document.querySelectorAll("#jobs [tabindex='0'], #jobs a[href]:not([tabindex='-1'])").length === 1;
		})()`, k, k, k)
	}
	rowID := func(k int) string {
		id, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelectorAll("#jobs > li.job")[%d].dataset.jobId`, k)))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	p.waitFor("the keyboard on Open", `(() => { const b = document.querySelector("#open-form button"); b.focus(); return document.activeElement === b; })()`)
	press("Tab", kb.Tab)
	p.waitFor("the keyboard on the newest row", onRow(0))
	press("Arrow Down twice", kb.ArrowDown, kb.ArrowDown)
	p.waitFor("the keyboard on the third row", onRow(2))
	press("Arrow Up", kb.ArrowUp)
	p.waitFor("the keyboard on the second row", onRow(1))
	press("End", kb.End)
	p.waitFor("the keyboard on the oldest row, scrolled into view", onRow(-1)+` && (() => {
		const r = document.activeElement.getBoundingClientRect();
		return r.top >= 0 && r.bottom <= window.innerHeight;
	})()`)
	press("Arrow Down at the bottom", kb.ArrowDown)
	p.waitFor("the keyboard still on the oldest row", onRow(-1))
	press("Home", kb.Home)
	p.waitFor("the keyboard on the newest row", onRow(0))
	press("Arrow Up at the top", kb.ArrowUp)
	p.waitFor("the keyboard still on the newest row", onRow(0))

	press("Arrow Down three times", kb.ArrowDown, kb.ArrowDown, kb.ArrowDown)
	p.waitFor("the keyboard on the fourth row", onRow(3))
	fourth := rowID(3)
	press("Enter", kb.Enter)
	p.waitFor("the fourth row's job in the details, the keyboard in them", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q && !document.getElementById("detail").hidden`, fourth)+
		` && document.activeElement.closest("#detail") !== null`)
	press("Escape", kb.Escape)
	p.waitFor("the details closed, the keyboard back on the fourth row", `document.getElementById("detail").hidden && `+onRow(3))

	press("Tab", kb.Tab)
	p.waitFor("one Tab past the list, in the queue panel (the default queue's tenants)", `document.activeElement.closest("table.queues") !== null && document.activeElement.closest('tr[data-queue="default"]') !== null`)
	p.do("press Shift+Tab", chromedp.KeyEvent(kb.Tab, chromedp.KeyModifiers(chromedp.ModifierShift)))
	p.waitFor("back on the fourth row", onRow(3))
}
