package web_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// An operator paging far back through a tenant's jobs keeps a page that
// answers: the list holds at most 2,000 rows, letting the newest go as
// older pages come (Show newer jobs, above the list, brings the view's
// start back); each second only the rows in sight refresh their ages,
// each in its own text node; and the rows kept stay live, while a job
// let go stays off the list when it changes. The count above the list
// says how many rows it shows, after every page: the most recent ones
// only while it shows the view's first page (it said "2,000 most recent
// shown" of the oldest 2,000). How long each Show older
// jobs took and what a second of ages rewrote are logged
// (JOBWATCH_PAGING_JOBS sets how many jobs; timings are never pass or
// fail).
func TestPagingFarBackKeepsTheListBounded(t *testing.T) {
	const bound = 2000
	n := jobsFromEnv(t, "JOBWATCH_PAGING_JOBS", 2600, bound+250)
	ctx, base, srv := startLive(t, 8*time.Minute)

	// The oldest job is of a kind of its own, for a worker to claim later.
	oldest := submit(t, ctx, srv.engine, "report.export", `{}`)
	for left := n; left > 0; left -= 1000 {
		submitBatch(t, ctx, base, "", "thumbs.render", min(left, 1000))
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the 50 newest jobs and a way to older ones", rowCount(50)+` && !document.getElementById("jobs-older").hidden`+" && "+countSays("50 most recent shown"))
	newest, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector("li.job").dataset.jobId`))
	if err != nil {
		t.Fatal(err)
	}

	older := `document.getElementById("jobs-older")`
	rows := `document.querySelectorAll("li.job").length`
	for clicks := 0; ; clicks++ {
		hidden, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](older+`.hidden`))
		if err != nil {
			t.Fatal(err)
		}
		if hidden {
			break
		}
		if clicks > n/200+5 {
			t.Fatalf("Show older jobs still offered after %d clicks", clicks)
		}
		// The time from the click to the page read, put in the list and
		// drawn (the button enabled again, then a frame), as the page
		// measures it.
		p.waitFor("show older jobs clicked", `(() => {
			const b = document.getElementById("jobs-older");
			if (b.hidden || b.disabled) return false;
			window.clickTook = undefined;
			const at = performance.now();
			const done = new MutationObserver(() => {
				if (!b.hidden && b.disabled) return;
				done.disconnect();
				requestAnimationFrame(() => setTimeout(() => (window.clickTook = performance.now() - at)));
			});
			done.observe(b, { attributes: true });
			b.click();
			return true;
		})()`)
		p.waitFor("the page read and drawn", `window.clickTook !== undefined`)
		took, err := chromedp.Run(p.ctx, chromedp.Evaluate[float64](`window.clickTook`))
		if err != nil {
			t.Fatal(err)
		}
		shown, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](rows))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Show older jobs #%d: %d rows, read and drawn within %.0f ms", clicks+1, shown, took)
		if shown > bound {
			t.Errorf("%d rows after Show older jobs #%d, want at most %d", shown, clicks+1, bound)
		}
		count, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.getElementById("jobs-count").textContent.split(" · ")[0]`))
		if err != nil {
			t.Fatal(err)
		}
		if want := commas(shown) + " jobs shown"; count != want {
			t.Errorf("the count says %q after Show older jobs #%d, want %q (the rows listed)", count, clicks+1, want)
		}
	}
	t.Run("each second only the rows in sight refresh their ages, in place", func(t *testing.T) {
		p.t = t
		// Counts what changes in the rows' ages: a text rewritten in
		// place, or a node replaced (which no age should take).
		p.do("watch the ages", chromedp.Evaluate[chromedp.Void](`(() => {
			window.ages = { texts: 0, replaced: 0, ticks: 0, rows: document.querySelectorAll("li.job").length };
			const first = [...document.querySelectorAll("li.job")].find((r) => {
				const b = r.getBoundingClientRect();
				return b.bottom > 0 && b.top < innerHeight;
			});
			window.firstInSight = first.dataset.jobId;
			new MutationObserver((ms) => {
				for (const m of ms) {
					const age = (m.target.nodeType === Node.TEXT_NODE ? m.target.parentElement : m.target)?.closest(".age");
					if (!age) continue;
					if (m.type === "characterData") window.ages.texts++;
					else window.ages.replaced++;
					if (age.parentElement === first) window.ages.ticks++;
				}
			}).observe(document.getElementById("jobs"), { subtree: true, characterData: true, childList: true });
		})()`))
		p.waitFor("three ticks of the first row in sight", `window.ages.ticks >= 3`)
		ages, err := chromedp.Run(p.ctx, chromedp.Evaluate[map[string]int](`window.ages`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ages over %d ticks: %d texts rewritten, %d nodes replaced (the list holds %d rows)", ages["ticks"], ages["texts"], ages["replaced"], ages["rows"])
		if ages["replaced"] != 0 {
			t.Errorf("%d age nodes replaced, want each age's text rewritten in place", ages["replaced"])
		}
		// The viewport holds a few dozen rows; a quarter of the bound per
		// tick is far more than it could, and far less than all of them.
		if per := ages["texts"] / ages["ticks"]; per > bound/4 {
			t.Errorf("%d ages rewritten a tick, want only those of the rows in sight", per)
		}
		// The last row, out of sight until now, refreshes as it comes in.
		p.do("scroll to the last row", chromedp.Evaluate[chromedp.Void](`(() => {
			const last = [...document.querySelectorAll("li.job")].at(-1);
			window.lastAge = last.querySelector(".age").textContent;
			last.scrollIntoView();
		})()`))
		p.waitFor("the last row's age moving once in sight",
			`[...document.querySelectorAll("li.job")].at(-1).querySelector(".age").textContent !== window.lastAge`)
	})

	p.t = t
	p.waitFor("the oldest 2,000 jobs, the newest let go, and a way back to them",
		rowCount(bound)+" && "+absent(row(newest))+
			` && [...document.querySelectorAll("li.job")].at(-1).dataset.jobId === `+strconv.Quote(oldest.ID)+
			` && !document.getElementById("jobs-newer").closest("p").hidden && `+countSays("2,000 jobs shown"))

	t.Run("the rows kept stay live, and a job let go stays off the list", func(t *testing.T) {
		p.t = t
		if _, err := srv.engine.Cancel(ctx, newest); err != nil {
			t.Fatal(err)
		}
		// The stream brings changes in order: once the oldest job shows
		// running, the newest one's cancel has come too.
		w := claim(t, ctx, srv.engine, "report.export")
		if w.job.ID != oldest.ID {
			t.Fatalf("claimed %s, want the oldest job %s", w.job.ID, oldest.ID)
		}
		p.waitFor("the oldest job running, at the end of the list", exists(row(oldest.ID)+`[data-state="running"]`)+
			` && [...document.querySelectorAll("li.job")].at(-1).dataset.jobId === `+strconv.Quote(oldest.ID))
		p.waitFor("the newest job still off the list", absent(row(newest))+" && "+rowCount(bound))
	})

	t.Run("Show newer jobs shows the view's start again, as it is now", func(t *testing.T) {
		p.t = t
		p.click("show newer jobs", "p:not([hidden]) > #jobs-newer")
		p.waitFor("the newest job, cancelled, on top, the list short again", fmt.Sprintf(
			`document.querySelector("li.job")?.dataset.jobId === %q && document.querySelector("li.job").dataset.state === "cancelled"`+
				` && %s < 100 && document.getElementById("jobs-newer").closest("p").hidden && !%s.hidden`, newest, rows, older)+
			" && "+countSays(`${document.querySelectorAll("li.job").length} most recent shown`))
	})
}

// countSays is a JS condition: the count above the list says of its rows
// what (a JS template literal's text), before what it says of the
// tenant's jobs in all (" · the tenant has …").
func countSays(what string) string {
	return `document.getElementById("jobs-count").textContent.split(" · ")[0] === ` + "`" + what + "`"
}

// jobsFromEnv is how many jobs a test that measures the page makes: the
// number in the environment variable name, if set (at least least), else
// n.
func jobsFromEnv(t *testing.T, name string, n, least int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return n
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number of at least %d", name, s, least)
	}
	return n
}
