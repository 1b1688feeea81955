package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A page left open while jobs queue up faster than workers take them
// stays bounded: it keeps at most 1,000 of the jobs that have not ended
// (those running first, then the newest), says so above the list with
// the ways to see others, and answers a click at once. How long the
// click took and how many elements the page holds are logged
// (JOBWATCH_UNENDED_JOBS sets how many jobs; timings are never pass or
// fail).
func TestJobsQueuingUpKeepTheListBounded(t *testing.T) {
	const bound = 1000
	n := jobsFromEnv(t, "JOBWATCH_UNENDED_JOBS", 3000, bound+500)
	ctx, base, srv := startLive(t, 8*time.Minute)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)

	// The oldest job is of a kind of its own, for a worker to claim once
	// thousands of newer ones wait.
	oldest := submit(t, ctx, srv.engine, "report.export", `{}`)
	newest := ""
	for left := n; left > 0; left -= 1000 {
		for _, j := range submitBatch(t, ctx, base, "", "thumbs.render", min(left, 1000)) {
			// Ids sort as the list does: by creation, then at random.
			newest = max(newest, j.GetId())
		}
	}

	p.waitFor("the newest job on top, the list at its bound, and why", fmt.Sprintf(
		`document.querySelector("li.job")?.dataset.jobId === %q && %s && %s && %s`,
		newest, rowCount(bound), textHas("#jobs-capped", "it shows 1,000 of them"), textHas("#jobs-capped", "jobwatch list")))
	p.waitFor("only queued rows", `[...document.querySelectorAll("li.job")].every((r) => r.dataset.state === "queued")`)

	t.Run("a running job stays on the list, however many wait", func(t *testing.T) {
		p.t = t
		w := claim(t, ctx, srv.engine, "report.export")
		if w.job.ID != oldest.ID {
			t.Fatalf("claimed %s, want %s", w.job.ID, oldest.ID)
		}
		w.progress(30, "exporting")
		p.waitFor("the oldest job running, at the end of the list", exists(row(oldest.ID)+`[data-state="running"]`)+
			` && [...document.querySelectorAll("li.job")].at(-1).dataset.jobId === `+strconv.Quote(oldest.ID)+" && "+rowCount(bound))
	})

	t.Run("the header counts the rows shown, and the tenant's jobs in all from the queues", func(t *testing.T) {
		p.t = t
		p.waitFor("the rows shown and the backlog", textIs("#jobs-count",
			fmt.Sprintf("1,000 most recent shown · the tenant has %s queued and 1 running", thousands(n))))
	})

	t.Run("the page answers a click on a row", func(t *testing.T) {
		p.t = t
		p.do("click a row", chromedp.Evaluate[chromedp.Void](`(() => {
			const r = document.querySelectorAll("li.job")[500];
			window.clicked = r.dataset.jobId;
			window.clickAt = performance.now();
			r.click();
			requestAnimationFrame(() => setTimeout(() => (window.clickTook = performance.now() - window.clickAt)));
		})()`))
		p.waitFor("its details", `document.getElementById("detail").dataset.jobId === window.clicked && window.clickTook !== undefined`)
		stats, err := chromedp.Run(p.ctx, chromedp.Evaluate[map[string]float64](`({
			took: window.clickTook,
			nodes: document.getElementsByTagName("*").length,
			heapMB: (performance.memory?.usedJSHeapSize ?? 0) / 1e6,
		})`))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d jobs queued: the click drew its details within %.0f ms; the page holds %.0f elements, %.1f MB of JS heap",
			n+1, stats["took"], stats["nodes"], stats["heapMB"])
	})
}

// thousands writes n as the page does, with commas: 100,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
