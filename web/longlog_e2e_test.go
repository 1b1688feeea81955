package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// topLine is a JS expression: the seq of the first log line in view in
// the log pane, as the reader sees it.
const topLine = `(() => {
	const s = document.querySelector("#detail .log");
	const top = s.getBoundingClientRect().top;
	const r = [...s.querySelectorAll(".log-line")].find((r) => r.getBoundingClientRect().bottom > top + 1);
	return r ? r.dataset.seq : "";
})()`

// A reader scrolled up in a long live log keeps their place: as a job
// writes 12,000 lines in batches of 1,000 (more than the 5,000 the pane
// keeps), the line they read stays at the top of the pane and nothing
// above it goes, while the button counts what came; following again
// shows the newest 5,000, and the note above says how many earlier lines
// it no longer shows and how to read the whole log.
func TestALogReaderScrolledUpKeepsTheirPlaceWhileTheLogOutgrowsThePane(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)
	job := submit(t, ctx, srv.engine, "build.chatty", `{}`)
	w := claimOverConnect(t, ctx, base, "build.chatty")
	if w.jobID != job.ID {
		t.Fatalf("claimed %s, want %s", w.jobID, job.ID)
	}
	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the running job", chromedp.Navigate(base+"/#job="+job.ID))
	p.waitFor("its log pane, live", exists(logPane+`[data-status="live"]`))
	lastShown := func(seq int) string {
		return fmt.Sprintf(`document.querySelector("#detail .log-line:last-child")?.dataset.seq === "%d"`, seq)
	}
	w.numbered(1000)
	w.numbered(1000)
	p.waitFor("2,000 lines, the pane at its end", lastShown(2000)+" && "+atBottom)

	p.do("scroll so that line 1001 is the first in view", chromedp.Evaluate[chromedp.Void](`(() => {
		const s = document.querySelector("#detail .log");
		const r = s.querySelector('.log-line[data-seq="1001"]');
		s.scrollTop += r.getBoundingClientRect().top - s.getBoundingClientRect().top;
	})()`))
	p.waitFor("the pane no longer following, line 1001 first in view", exists(logPane+`[data-following="false"]`)+" && "+topLine+` === "1001"`)

	for total := 3000; total <= 12000; total += 1000 {
		w.numbered(1000)
		count := fmt.Sprintf("%s new lines ↓", commas(total-2000))
		p.waitFor("the button counting "+count, textIs("#detail .log-jump", count))
		state, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`[`+topLine+`,
			document.querySelector("#detail .log-line").dataset.seq,
			String(document.querySelector("#detail .log-trimmed").hidden)].join(" ")`))
		if err != nil {
			t.Fatal(err)
		}
		if want := "1001 1 true"; state != want {
			t.Fatalf("after %d lines the line first in view, the first line kept and whether the note is hidden are %q, want %q", total, state, want)
		}
	}

	p.click("follow again", "#detail .log-jump")
	p.waitFor("the newest 5,000 lines, the pane at its end", lastShown(12000)+" && "+atBottom+" && "+exists(logPane+`[data-following="true"]`)+
		` && document.querySelectorAll("#detail .log-line").length === 5000 && document.querySelector("#detail .log-line").dataset.seq === "7001"`)
	note := "Showing the last 5,000 lines; 7,000 earlier lines are not shown here. The whole log: jobwatch logs " + job.ID + ", or the API's GetJobLogs."
	p.waitFor("the note with the way to the whole log", textIs("#detail .log-trimmed", note)+` && !document.querySelector("#detail .log-trimmed").hidden`)

	// Scrolled up again with the pane full, lines wait; scrolling back to
	// the end (End, not the button) shows them.
	p.do("focus the log and press Home", chromedp.Evaluate[chromedp.Void](`document.querySelector("#detail .log").focus()`), chromedp.KeyEvent(kb.Home))
	p.waitFor("the pane at its top, not following", exists(logPane+`[data-following="false"]`)+" && "+topLine+` === "7001"`)
	w.numbered(1000)
	p.waitFor("the button counting 1,000 new lines", textIs("#detail .log-jump", "1,000 new lines ↓"))
	p.waitFor("line 7001 still first in view", topLine+` === "7001"`)
	p.do("press End", chromedp.KeyEvent(kb.End))
	p.waitFor("the newest line in view, following", lastShown(13000)+" && "+atBottom+" && "+exists(logPane+`[data-following="true"]`)+
		` && document.querySelector("#detail .log-line").dataset.seq === "8001"`)
	p.waitFor("the note counting 8,000 earlier lines", textHas("#detail .log-trimmed", "8,000 earlier lines are not shown here."))
}

// commas writes n as the page does ("12,000").
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
