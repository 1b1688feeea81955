package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// An operator on the keyboard alone never loses their place: each
// in-page question takes the keyboard, and Keep, Escape or the action's
// end gives it back to the button that asked (or to the outcome, when
// that button is gone or disabled), never to the top of the page.
// Escape in a job's details takes back the question first and closes
// the details only when pressed again. Keys are pressed as a person
// would press them; where the keyboard is comes from
// document.activeElement.
func TestQuestionsGiveTheKeyboardBack(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)

	var failed []string
	for range 2 {
		j := submit(t, ctx, srv.engine, "mail.send", `{}`)
		claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
		failed = append(failed, j.ID)
	}
	running := submit(t, ctx, srv.engine, "report.slow", `{}`)
	claim(t, ctx, srv.engine, "report.slow")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	for _, id := range failed {
		p.waitFor("the failed job", exists(row(id)+`[data-state="failed"]`))
	}
	p.waitFor("the running job", exists(row(running.ID)+`[data-state="running"]`))

	press := func(what, key string) { p.do("press "+what, chromedp.KeyEvent(key)) }
	focus := func(what, selector string) {
		p.waitFor(what, fmt.Sprintf(`(() => {
			const e = document.querySelector(%s);
			if (!e || e.disabled || e.closest("[hidden]")) return false;
			e.focus();
			return document.activeElement === e;
		})()`, strconv.Quote(selector)))
	}
	// keyboardOn is a JS condition: the keyboard is on the element selector names.
	keyboardOn := func(selector string) string {
		return fmt.Sprintf(`document.activeElement !== null && document.activeElement === document.querySelector(%s)`, strconv.Quote(selector))
	}
	asking := func(scope string) string {
		return fmt.Sprintf(`!document.querySelector(%s).hidden`, strconv.Quote(scope+" .confirm-ask"))
	}
	notAsking := func(scope string) string { return "!(" + asking(scope) + ")" }
	retryFailed := `#jobs-actions button[data-action="retry-failed"]`
	pause := `tr[data-queue="default"] button[data-action="pause"]`
	resume := `tr[data-queue="default"] button[data-action="resume"]`
	cancelJob := `#detail button[data-action="cancel"]`
	deleteJob := `#detail button[data-action="delete"]`

	t.Run("Keep and Escape give the keyboard back to Retry all failed, and its outcome keeps it near", func(t *testing.T) {
		p.t = t
		focus("Retry all failed, enabled", retryFailed)
		press("Enter", kb.Enter)
		p.waitFor("the question, holding the keyboard", asking("#jobs-confirm")+" && "+keyboardOn("#jobs-confirm .confirm-yes"))
		press("Tab", kb.Tab)
		p.waitFor("the keyboard on Keep", keyboardOn("#jobs-confirm .confirm-no"))
		press("Enter", kb.Enter)
		p.waitFor("no question, the keyboard back on the button", notAsking("#jobs-confirm")+" && "+keyboardOn(retryFailed))

		press("Enter", kb.Enter)
		p.waitFor("the question again", asking("#jobs-confirm")+" && "+keyboardOn("#jobs-confirm .confirm-yes"))
		press("Escape", kb.Escape)
		p.waitFor("no question, the keyboard back on the button", notAsking("#jobs-confirm")+" && "+keyboardOn(retryFailed))

		press("Enter", kb.Enter)
		p.waitFor("the question again", keyboardOn("#jobs-confirm .confirm-yes"))
		press("Enter (yes)", kb.Enter)
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 2 of 2 failed jobs"))
		// Nothing is left to retry, so the button is disabled: the
		// keyboard is on the outcome, or on the reason beside the button.
		p.waitFor("the button disabled, the keyboard beside it", `document.querySelector(`+strconv.Quote(retryFailed)+`).disabled && (`+
			keyboardOn("#jobs-actions .reason")+" || "+keyboardOn("#jobs-confirm .outcome")+")")
	})

	t.Run("Escape withdraws the queue panel's question; Pause's outcome takes the keyboard as Pause goes", func(t *testing.T) {
		p.t = t
		focus("Pause on the default queue", pause)
		press("Enter", kb.Enter)
		p.waitFor("the question, holding the keyboard", textHas("#queues-confirm .question", "Pause queue default?")+" && "+keyboardOn("#queues-confirm .confirm-yes"))
		press("Escape", kb.Escape)
		p.waitFor("no question, the keyboard back on Pause", notAsking("#queues-confirm")+" && "+keyboardOn(pause))
		p.waitFor("the queue not paused", exists(`tr[data-queue="default"][data-paused="false"]`))

		press("Enter", kb.Enter)
		p.waitFor("the question again", keyboardOn("#queues-confirm .confirm-yes"))
		press("Enter (yes)", kb.Enter)
		p.waitFor("paused, Pause gone, the keyboard on the outcome", textHas("#queues-confirm .outcome", "Paused queue default")+" && "+
			exists(`tr[data-queue="default"][data-paused="true"]`)+" && "+keyboardOn("#queues-confirm .outcome"))

		focus("Resume", resume)
		// A poll of the queues that comes in while the keyboard is on
		// Resume (a job submitted to the paused queue changes its count)
		// leaves it there: the row is updated in place, not moved.
		submit(t, ctx, srv.engine, "mail.send", `{}`)
		p.waitFor("the queue's new count, the keyboard still on Resume", textHas(`tr[data-queue="default"] td.queued`, "3")+" && "+keyboardOn(resume))
		press("Enter", kb.Enter)
		p.waitFor("the question", keyboardOn("#queues-confirm .confirm-yes"))
		press("Tab", kb.Tab)
		press("Enter (Keep)", kb.Enter)
		p.waitFor("no question, the keyboard back on Resume", notAsking("#queues-confirm")+" && "+keyboardOn(resume))
		press("Enter", kb.Enter)
		p.waitFor("the question again", keyboardOn("#queues-confirm .confirm-yes"))
		press("Enter (yes)", kb.Enter)
		p.waitFor("resumed, the keyboard on the outcome", textHas("#queues-confirm .outcome", "Resumed queue default")+" && "+keyboardOn("#queues-confirm .outcome"))
	})

	t.Run("in a job's details Escape takes back the question first, and closes the details only when pressed again", func(t *testing.T) {
		p.t = t
		p.click("open the running job's details", row(running.ID))
		p.waitFor("its details", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, running.ID))
		focus("Cancel job", cancelJob)
		press("Enter", kb.Enter)
		p.waitFor("the question, holding the keyboard", textHas("#detail .question", "Cancel job "+running.ID)+" && "+keyboardOn("#detail .confirm-yes"))
		press("Escape", kb.Escape)
		p.waitFor("the question gone, the details open, the keyboard back on Cancel job",
			notAsking("#detail")+` && !document.getElementById("detail").hidden && `+keyboardOn(cancelJob))
		press("Escape again", kb.Escape)
		p.waitFor("the details closed, the keyboard on the job's row", `document.getElementById("detail").hidden && `+keyboardOn(row(running.ID)))

		// Details a click opened, the row keeping the keyboard: Escape
		// closes them too, and the address no longer names the job.
		p.click("open the running job's details again", row(running.ID))
		p.waitFor("its details, the keyboard on its row", `!document.getElementById("detail").hidden && location.hash.includes("job=") && `+keyboardOn(row(running.ID)))
		press("Escape on the row", kb.Escape)
		p.waitFor("the details closed, the address without the job", `document.getElementById("detail").hidden && !location.hash.includes("job=") && `+keyboardOn(row(running.ID)))

		press("Enter on the row", kb.Enter)
		p.waitFor("its details again", `!document.getElementById("detail").hidden`)
		focus("Cancel job", cancelJob)
		press("Enter", kb.Enter)
		p.waitFor("the question", keyboardOn("#detail .confirm-yes"))
		press("Tab", kb.Tab)
		press("Enter (Keep)", kb.Enter)
		p.waitFor("no question, the keyboard back on Cancel job", notAsking("#detail")+" && "+keyboardOn(cancelJob))
		press("Enter", kb.Enter)
		p.waitFor("the question again", keyboardOn("#detail .confirm-yes"))
		press("Enter (yes)", kb.Enter)
		p.waitFor("cancelled, Cancel job gone, the keyboard on the outcome", textHas("#detail .outcome", "Cancelled job "+running.ID)+" && "+
			`document.querySelector(`+strconv.Quote(cancelJob)+`).closest(".action").hidden && `+keyboardOn("#detail .outcome"))

		// A delete cannot be undone: its question holds the keyboard on
		// Keep, so Enter pressed twice deletes nothing.
		focus("Delete, now enabled", deleteJob)
		press("Enter", kb.Enter)
		p.waitFor("the question, the keyboard on Keep", textHas("#detail .question", "Delete job "+running.ID)+" && "+keyboardOn("#detail .confirm-no"))
		press("Enter (Keep)", kb.Enter)
		p.waitFor("no question, the keyboard back on Delete", notAsking("#detail")+" && "+keyboardOn(deleteJob))
		p.waitFor("the job kept", exists(row(running.ID)+`[data-state="cancelled"]`))
	})
}

// At 375 px, a phone's width, a disabled button keeps its label on one
// line beside its reason, which wraps instead: "Delete", not "Delet / e".
func TestButtonLabelsNeverWrapOnANarrowScreen(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	running := submit(t, ctx, srv.engine, "report.slow", `{}`)
	claim(t, ctx, srv.engine, "report.slow")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("size the window as a phone", chromedp.EmulateViewport(375, 812))
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the running job", exists(row(running.ID)+`[data-state="running"]`))
	p.click("open its details", row(running.ID))
	p.waitFor("Delete disabled, and why", `(() => {
		const b = document.querySelector('#detail button[data-action="delete"]');
		return b !== null && b.disabled && b.closest(".action").textContent.includes("cancel it first: only an ended job can be deleted");
	})()`)
	p.click("ask to cancel it, so the question's buttons show too", `#detail button[data-action="cancel"]`)
	p.waitFor("the question", `!document.querySelector("#detail .confirm-ask").hidden`)
	// Each button shown: how many lines its label takes (the text's line
	// boxes, whatever the font's height), and whether it reaches past the
	// window's edge.
	type shownButton struct {
		Label string `json:"label"`
		Lines int    `json:"lines"`
		Past  bool   `json:"past"`
	}
	buttons, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]shownButton](`[...document.querySelectorAll("#detail .action button, #detail .confirm-ask button")]
		.filter((b) => !b.closest("[hidden]"))
		.map((b) => {
			const r = document.createRange();
			r.selectNodeContents(b);
			const lines = new Set([...r.getClientRects()].map((rect) => Math.round(rect.top))).size;
			return { label: b.textContent, lines, past: b.getBoundingClientRect().right > window.innerWidth };
		})`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, b := range buttons {
		seen[b.Label] = true
		if b.Lines != 1 || b.Past {
			t.Errorf("at 375 px the button %q takes %d lines (want 1), past the window's edge: %v", b.Label, b.Lines, b.Past)
		}
	}
	for _, label := range []string{"Delete", "Cancel job", "Keep"} {
		if !seen[label] {
			t.Errorf("no button %q shown at 375 px: %+v", label, buttons)
		}
	}
}

// A job opened with Enter takes the keyboard to its details' title (the
// details are elsewhere on the page), so a few Tabs reach its Retry
// button, not the rest of the list; Escape brings it back to the row. A
// click leaves the keyboard where it was.
func TestAJobOpenedFromTheKeyboardTakesTheKeyboardToItsDetails(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	failed := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")
	for range 30 {
		submit(t, ctx, srv.engine, "mail.send", `{}`)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the failed job, at the bottom of the list", exists(row(failed.ID)+`[data-state="failed"]`)+" && "+rowCount(31))
	keyboardOn := func(selector string) string {
		return fmt.Sprintf(`document.activeElement !== null && document.activeElement === document.querySelector(%s)`, strconv.Quote(selector))
	}
	p.waitFor("the keyboard on the failed job's row", fmt.Sprintf(`(() => { const r = document.querySelector(%q); r.focus(); return document.activeElement === r; })()`, row(failed.ID)))
	p.do("press Enter", chromedp.KeyEvent(kb.Enter))
	p.waitFor("its details, the keyboard on their title", detailShows(failed.ID, "failed")+" && "+keyboardOn("#detail-title"))

	retry := `#detail button[data-action="retry"]`
	tabs := 0
	for ; tabs < 8; tabs++ {
		on, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](keyboardOn(retry)))
		if err != nil {
			t.Fatal(err)
		}
		if on {
			break
		}
		p.do("press Tab", chromedp.KeyEvent(kb.Tab))
	}
	p.waitFor("Retry reached within 8 Tabs", keyboardOn(retry))
	t.Logf("Retry reached in %d Tabs from the details' title", tabs)

	p.do("press Escape", chromedp.KeyEvent(kb.Escape))
	p.waitFor("the details closed, the keyboard back on the row", `document.getElementById("detail").hidden && `+keyboardOn(row(failed.ID)))

	p.click("open it with a click", row(failed.ID))
	p.waitFor("its details, the keyboard not taken", detailShows(failed.ID, "failed")+` && document.activeElement !== document.getElementById("detail-title")`)
}
