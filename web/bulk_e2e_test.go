package web_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Retry all failed asks with the exact number of jobs where the page
// knows it (a batch it has counted; a view it has read to its end), and
// with the honest "shown here, and any older ones" where it does not.
func TestRetryAllFailedSaysTheExactCountWhereThePageKnowsIt(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)

	// Three failed jobs older than the batch's 50 newest, and one failed
	// job that is no batch's.
	const thumbs = "thumbs-2026-12-04"
	submitBatch(t, ctx, base, thumbs, "thumbs.render", 80)
	for range 3 {
		runOver(t, ctx, base, "thumbs.render", false)
	}
	submit(t, ctx, srv.engine, "mail.send", `{}`)
	claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")

	p := &page{t: t, ctx: newTab(t, ctx)}
	ask := func() {
		p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
	}

	t.Run("the whole tenant, more than the list holds: shown here, and any older ones", func(t *testing.T) {
		p.t = t
		p.do("open the page", chromedp.Navigate(base+"/"))
		p.waitFor("the list and an older page", rowCount(50)+` && !document.getElementById("jobs-older").hidden`)
		ask()
		p.waitFor("the honest count", textHas("#jobs-confirm .question", "Retry every failed job of tenant “default”? 1 shown here, and any older ones."))
		p.click("keep", "#jobs-confirm .confirm-no")
	})

	t.Run("the failed jobs read to their end: the exact count", func(t *testing.T) {
		p.t = t
		p.showState("failed")
		p.waitFor("the four failed jobs", rowCount(4)+` && document.getElementById("jobs-older").hidden`)
		ask()
		p.waitFor("the exact count", textHas("#jobs-confirm .question", "Retry every failed job of tenant “default”? That is 4 jobs."))
		p.click("keep", "#jobs-confirm .confirm-no")
	})

	t.Run("a counted batch whose failed jobs are all older than the list: the exact count", func(t *testing.T) {
		p.t = t
		p.do("open the batch", chromedp.Navigate(base+"/?batch="+thumbs))
		p.waitFor("the batch counted", textIs(batchLine, thumbs+": 80 jobs · 3 ended (3 failed) · 77 to go")+" && "+rowCount(50)+
			` && !document.querySelector("li.job[data-state=failed]")`)
		ask()
		p.waitFor("the exact count, from the batch's bar", textHas("#jobs-confirm .question", "Retry every failed job of batch “"+thumbs+"” of tenant “default”? That is 3 jobs."))
		p.click("say yes", "#jobs-confirm .confirm-yes")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 3 of 3 failed jobs"))
		p.waitFor("none failed now", textIs(batchLine, thumbs+": 80 jobs · 0 ended · 80 to go"))
	})
}

// failedJobs submits n jobs of kind and fails each, as a fleet of
// workers would.
func failedJobs(t *testing.T, ctx context.Context, srv *liveServer, base, kind string, n int) {
	t.Helper()
	for left := n; left > 0; left -= 1000 {
		submitBatch(t, ctx, base, "", kind, min(left, 1000))
	}
	for range n {
		w, err := srv.engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "e2e-worker", Kinds: []string{kind}}, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatalf("claim %s: %v", kind, err)
		}
		if _, err := srv.engine.Fail(ctx, w.ID, w.LeaseID, jobtype.JobError{Type: "SMTPError", Message: "relay refused"}, false); err != nil {
			t.Fatalf("fail: %v", err)
		}
	}
}

// pageCost is what the page's main thread spent, from Chromium's own
// counters, and its longest task: a bulk action must not freeze it.
type pageCost struct {
	script, task, layout float64 // seconds
	longest              float64 // milliseconds
	long                 int     // tasks over 50 ms
}

func measure(p *page) pageCost {
	p.t.Helper()
	var c pageCost
	res, err := chromedp.Call(p.ctx, performance.GetMetrics, cdp.Empty{})
	if err == nil {
		for _, m := range res.Metrics {
			switch m.Name {
			case "ScriptDuration":
				c.script = m.Value
			case "TaskDuration":
				c.task = m.Value
			case "LayoutDuration":
				c.layout = m.Value
			}
		}
	}
	if err != nil {
		p.t.Fatalf("performance metrics: %v", err)
	}
	long, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]float64](`window.longTasks ?? []`))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, d := range long {
		c.long++
		c.longest = max(c.longest, d)
	}
	return c
}

// A bulk action on thousands of jobs says how far it has got while its
// pages run ("1,000 of 1,500 done", the total from the question's exact
// count), and the page keeps up with the thousands of changes the stream
// then brings, drawing them at most once a frame. What the main thread
// spent is logged (JOBWATCH_BULK_JOBS sets how many jobs; timings are
// never pass or fail).
func TestABulkRetrySaysHowFarItHasGot(t *testing.T) {
	n := 1500
	if s := os.Getenv("JOBWATCH_BULK_JOBS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx, base, srv := startLive(t, 5*time.Minute)
	failedJobs(t, ctx, srv, base, "mail.send", n)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the failed jobs", chromedp.Navigate(base+"/?state=failed"))
	p.waitFor("every failed job listed, page after page", `(() => {
		const more = document.getElementById("jobs-older");
		if (!more.hidden && !more.disabled) more.click();
		return more.hidden && `+rowCount(n)+`;
	})()`)
	p.do("record long tasks and what the question says", chromedp.Evaluate[chromedp.Void](`(() => {
		window.longTasks = [];
		new PerformanceObserver((l) => { for (const e of l.getEntries()) window.longTasks.push(e.duration); }).observe({ type: "longtask" });
		window.said = [];
		window.offeredWhileRunning = 0;
		const confirm = document.getElementById("jobs-confirm");
		const button = document.querySelector('#jobs-actions button[data-action="retry-failed"]');
		const look = () => {
			const o = confirm.querySelector(".outcome");
			if (o && !o.hidden && window.said.at(-1) !== o.textContent) window.said.push(o.textContent);
		};
		new MutationObserver(look).observe(confirm, { subtree: true, childList: true, characterData: true, attributes: true });
		// What a user sees: the button and the outcome as each frame
		// draws them. (Between two microtasks as the retry ends, the button
		// is enabled a moment before the outcome says it is done; no frame
		// draws that, but a MutationObserver saw it, on a loaded machine
		// whose list still showed failed jobs then.)
		const frame = () => {
			const o = confirm.querySelector(".outcome");
			if (o && o.dataset.running === "true" && !button.disabled) window.offeredWhileRunning++;
			requestAnimationFrame(frame);
		};
		requestAnimationFrame(frame);
	})()`))
	if _, err := chromedp.Call(p.ctx, performance.Enable, performance.EnableParams{}); err != nil {
		t.Fatalf("watch the page's main thread: %v", err)
	}
	before := measure(p)
	p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
	total := strconv.FormatInt(int64(n), 10)
	if n >= 1000 {
		total = total[:len(total)-3] + "," + total[len(total)-3:]
	}
	p.waitFor("the exact count", textHas("#jobs-confirm .question", "That is "+total+" jobs."))
	began := time.Now()
	p.click("say yes", "#jobs-confirm .confirm-yes")
	p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried "+total+" of "+total+" failed jobs"))
	acted := time.Since(began)
	p.waitFor("no failed job left in the list", rowCount(0)+` && document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled`)
	settled := time.Since(began)
	after := measure(p)
	t.Logf("%d jobs: retried in %v, list settled in %v; main thread: script %.2fs, tasks %.2fs, layout %.2fs; %d tasks over 50 ms, the longest %.0f ms",
		n, acted.Round(time.Millisecond), settled.Round(time.Millisecond), after.script-before.script, after.task-before.task, after.layout-before.layout, after.long, after.longest)

	said, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`window.said`))
	if err != nil {
		t.Fatal(err)
	}
	if n > 1000 && !slices.Contains(said, "Retrying… 1,000 of "+total+" done.") {
		t.Errorf("while the pages ran, the page said %q; want it to say 1,000 of %s done", said, total)
	}
	offered, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`window.offeredWhileRunning`))
	if err != nil {
		t.Fatal(err)
	}
	if offered > 0 {
		t.Errorf("Retry all failed was offered %d times while the retry ran; want it disabled until it ends", offered)
	}
}

// Retry all failed that a tenant's max_queued stops says so in the
// page's words: how many of the failed jobs it matched it retried, that
// the tenant is at its max_queued, and when to retry again; not the
// server's words for a program ("this page retried 0 of the 183 jobs it
// matched … page_token "…" goes on past them"), where "this page" read
// as the web page.
func TestRetryAllFailedStoppedByATenantsQuotaSaysSoInThePagesWords(t *testing.T) {
	ctx, base, srv := startLiveWithRules(t, 3*time.Minute, jobtype.Rules{Tenants: map[string]jobtype.TenantRules{"globex": {MaxQueued: 100}}})
	const failed, queued = 183, 95
	for range failed {
		if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "globex", Kind: "mail.send"}); err != nil {
			t.Fatal(err)
		}
		w, err := srv.engine.Claim(ctx, jobs.ClaimRequest{WorkerID: "e2e-worker", Kinds: []string{"mail.send"}}, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.engine.Fail(ctx, w.ID, w.LeaseID, jobtype.JobError{Type: "SMTPError", Message: "relay refused"}, false); err != nil {
			t.Fatal(err)
		}
	}
	for range queued {
		if _, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "globex", Kind: "report.export"}); err != nil {
			t.Fatal(err)
		}
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the tenant's failed jobs", chromedp.Navigate(base+"/?tenant=globex&state=failed"))
	p.waitFor("every failed job listed", `(() => {
		const more = document.getElementById("jobs-older");
		if (!more.hidden && !more.disabled) more.click();
		return more.hidden && `+rowCount(failed)+`;
	})()`)
	p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
	p.waitFor("the exact count", textHas("#jobs-confirm .question", "That is 183 jobs."))
	p.click("say yes", "#jobs-confirm .confirm-yes")
	// The room for 5 more took 5 of them; the quota held back the rest.
	want := "Retried 5 of 183 failed jobs: tenant “globex” is at its max_queued (100 jobs not yet running). Retry again once some of its jobs have started."
	p.waitFor("what it did, and why it stopped, as a failure", textIs("#jobs-confirm .outcome", want)+
		` && document.querySelector("#jobs-confirm .outcome").dataset.failed === "true"`)
	p.waitFor("the five retried gone from the failed jobs", rowCount(failed-5))
}
