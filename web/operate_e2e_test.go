package web_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// The operator's buttons act through the real server and what they did
// reaches the page through its one stream: no reload, ever (window.pageID
// set at the start survives to the end). Each asks in the page first, and
// only "yes" acts.
func TestOperatorButtonsActAndThePageFollowsLive(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)

	export := submit(t, ctx, srv.engine, "report.export", `{"format":"csv"}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the failed job", exists(row(export.ID)+`[data-state="failed"]`))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))
	button := func(action string) string { return fmt.Sprintf(`button[data-action=%q]`, action) }
	confirmYes := func(scope string) {
		p.waitFor("the question", `(() => { const b = document.querySelector(`+fmt.Sprintf("%q", scope+" .confirm-yes")+`); return b !== null && b.offsetParent !== null && !b.disabled; })()`)
		p.click("say yes", scope+" .confirm-yes")
	}

	t.Run("retry a failed job: it runs again and finishes, with no reload", func(t *testing.T) {
		p.t = t
		p.click("open its detail", row(export.ID))
		p.waitFor("retry offered, delete too, cancel not", `(() => {
			const d = document.getElementById("detail");
			const shown = (a) => { const b = d.querySelector('button[data-action="' + a + '"]'); return b.closest(".action").hidden ? "hidden" : b.disabled ? "disabled" : "enabled"; };
			return shown("retry") === "enabled" && shown("delete") === "enabled" && shown("cancel") === "hidden";
		})()`)
		p.click("click retry", "#detail "+button("retry"))
		p.waitFor("a question, and nothing done yet", textHas("#detail .question", "Retry job "+export.ID)+" && "+exists(row(export.ID)+`[data-state="failed"]`))
		confirmYes("#detail")
		p.waitFor("what it did", textHas("#detail .outcome", "Retried"))
		p.waitFor("the job queued again, in the list and the detail", exists(row(export.ID)+`[data-state="queued"]`)+` && document.getElementById("detail").dataset.state === "queued"`)
		p.waitFor("no retry while it has not ended, and why delete must wait", `(() => {
			const d = document.getElementById("detail");
			return d.querySelector('button[data-action="retry"]').closest(".action").hidden &&
				d.querySelector('button[data-action="delete"]').disabled &&
				d.querySelector('button[data-action="delete"]').closest(".action").textContent.includes("cancel it first");
		})()`)

		w := claim(t, ctx, srv.engine, "report.export")
		p.waitFor("it running again", exists(row(export.ID)+`[data-state="running"]`))
		w.progress(50, "writing rows")
		p.waitFor("its progress", textIs("#detail .percent", "50%"))
		w.complete(`{"rows": 120}`)
		p.waitFor("it succeeded", exists(row(export.ID)+`[data-state="succeeded"]`)+` && document.getElementById("detail").dataset.state === "succeeded"`)
		// The outcome says how the new run ended, where the keyboard is.
		p.waitFor("how the new run ended", textIs("#detail .outcome", "Retried job "+export.ID+": its new run succeeded.")+
			` && !document.querySelector("#detail .outcome").hidden`)
		p.waitFor("its result", textHas("#detail .result", `"rows": 120`))
		p.waitFor("the retry on its timeline, between the failure and the success", `(() => {
			const labels = [...document.querySelectorAll("#detail .timeline-label")].map(e => e.textContent);
			const failed = labels.indexOf("failed"), retried = labels.findIndex(l => l.startsWith("retried")), succeeded = labels.findLastIndex(l => l.startsWith("succeeded"));
			return failed >= 0 && failed < retried && retried < succeeded;
		})()`)
		p.waitFor("the first run's error kept in its history", textHas("#detail .timeline", "TimeoutError: warehouse did not answer in 30s"))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
	})

	t.Run("start a held job: it is queued, and says so", func(t *testing.T) {
		p.t = t
		held, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.export", Hold: true})
		if err != nil {
			t.Fatal(err)
		}
		p.waitFor("the held job", exists(row(held.ID)+`[data-state="pending"]`))
		p.click("open its detail", row(held.ID))
		p.waitFor("start offered, cancel too, retry not", `(() => {
			const d = document.getElementById("detail");
			const shown = (a) => { const b = d.querySelector('button[data-action="' + a + '"]'); return b.closest(".action").hidden ? "hidden" : b.disabled ? "disabled" : "enabled"; };
			return d.dataset.jobId === `+fmt.Sprintf("%q", held.ID)+` && shown("start") === "enabled" && shown("cancel") === "enabled" && shown("retry") === "hidden";
		})()`)
		p.click("click start", "#detail "+button("start"))
		p.waitFor("a question, and nothing done yet", textHas("#detail .question", "Start job "+held.ID)+" && "+exists(row(held.ID)+`[data-state="pending"]`))
		confirmYes("#detail")
		p.waitFor("what it did", textIs("#detail .outcome", "Started job "+held.ID+": it is queued."))
		p.waitFor("the job queued, in the list and the detail, and no Start", exists(row(held.ID)+`[data-state="queued"]`)+
			` && document.getElementById("detail").dataset.state === "queued" && document.querySelector('#detail button[data-action="start"]').closest(".action").hidden`)
		got, err := srv.engine.Get(ctx, held.ID)
		if err != nil || got.State != jobtype.Queued {
			t.Fatalf("the job on the server = %s, %v; want queued", got.State, err)
		}
		if _, err := srv.engine.Cancel(ctx, held.ID); err != nil {
			t.Fatal(err)
		}
		p.click("back to the failed job", row(export.ID))
	})

	t.Run("delete an ended job: it leaves the list and the server", func(t *testing.T) {
		p.t = t
		p.click("click delete", "#detail "+button("delete"))
		p.click("change my mind", "#detail .confirm-no")
		p.waitFor("nothing done", exists(row(export.ID))+` && document.querySelector("#detail .confirm-ask").hidden`)
		p.click("click delete again", "#detail "+button("delete"))
		confirmYes("#detail")
		p.waitFor("what it did", textHas("#detail .outcome", "Deleted job "+export.ID))
		p.waitFor("the row gone", absent(row(export.ID)))
		if _, err := srv.engine.Get(ctx, export.ID); !errors.Is(err, jobtype.ErrNotFound) {
			t.Fatalf("the deleted job on the server: %v, want not found", err)
		}
	})

	t.Run("cancel a queued job", func(t *testing.T) {
		p.t = t
		queued := submit(t, ctx, srv.engine, "index.rebuild", `{}`)
		p.waitFor("its row", exists(row(queued.ID)+`[data-state="queued"]`))
		p.click("open its detail", row(queued.ID))
		p.waitFor("cancel offered", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q && !document.querySelector('#detail button[data-action="cancel"]').closest(".action").hidden`, queued.ID))
		p.click("click cancel", "#detail "+button("cancel"))
		confirmYes("#detail")
		p.waitFor("it cancelled", exists(row(queued.ID)+`[data-state="cancelled"]`)+" && "+textHas("#detail .outcome", "Cancelled job"))
	})

	t.Run("retry a job whose unique key another job holds: the page names that job", func(t *testing.T) {
		p.t = t
		first, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.nightly", UniqueKey: "nightly 2024-06-01"})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		if _, err := srv.engine.Cancel(ctx, first.ID); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		second, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.nightly", UniqueKey: "nightly 2024-06-01"})
		if err != nil {
			t.Fatalf("submit the second: %v", err)
		}
		p.waitFor("both rows", exists(row(first.ID)+`[data-state="cancelled"]`)+" && "+exists(row(second.ID)+`[data-state="queued"]`))
		p.click("open the cancelled one", row(first.ID))
		p.waitFor("retry offered", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q && !document.querySelector('#detail button[data-action="retry"]').closest(".action").hidden`, first.ID))
		p.click("click retry", "#detail "+button("retry"))
		confirmYes("#detail")
		p.waitFor("the refusal, naming the job that holds the key and what to do",
			textHas("#detail .outcome", "Retry: job "+second.ID+` holds the unique key “nightly 2024-06-01” and has not ended: retry this job once that one has ended`)+
				` && document.querySelector("#detail .outcome").dataset.failed === "true"`)
		p.waitFor("nothing changed", exists(row(first.ID)+`[data-state="cancelled"]`)+" && "+exists(row(second.ID)+`[data-state="queued"]`))
		if got, err := srv.engine.Get(ctx, first.ID); err != nil || got.State != jobtype.Cancelled {
			t.Fatalf("the job retried over a held key: %+v, %v; want it still cancelled", got.State, err)
		}
	})

	t.Run("retry all failed in this view", func(t *testing.T) {
		p.t = t
		var failed []string
		for range 2 {
			j := submit(t, ctx, srv.engine, "mail.send", `{}`)
			claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
			failed = append(failed, j.ID)
		}
		for _, id := range failed {
			p.waitFor("the failed job", exists(row(id)+`[data-state="failed"]`))
		}
		p.waitFor("the button enabled", `!document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled`)
		p.click("click retry all failed", "#jobs-actions "+button("retry-failed"))
		p.waitFor("a question that says how many, exactly", textHas("#jobs-confirm .question", "That is 2 jobs."))
		confirmYes("#jobs-confirm")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 2 of 2 failed jobs"))
		for _, id := range failed {
			p.waitFor("the job queued again", exists(row(id)+`[data-state="queued"]`))
		}
		p.waitFor("nothing left to retry, and why", `(() => {
			const b = document.querySelector('#jobs-actions button[data-action="retry-failed"]');
			return b.disabled && b.closest(".action").textContent.includes("no failed job in this view");
		})()`)
	})

	t.Run("retry all failed in a batch's view retries that batch's only", func(t *testing.T) {
		p.t = t
		inBatch, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "thumb.render", Batch: "album-7"})
		if err != nil {
			t.Fatal(err)
		}
		claim(t, ctx, srv.engine, "thumb.render").fail("DecodeError", "not a JPEG")
		outside := submit(t, ctx, srv.engine, "thumb.other", `{}`)
		claim(t, ctx, srv.engine, "thumb.other").fail("DecodeError", "not a PNG")
		p.waitFor("both failed", exists(row(inBatch.ID)+`[data-state="failed"]`)+" && "+exists(row(outside.ID)+`[data-state="failed"]`))
		p.click("show the batch", row(inBatch.ID)+" .batch-label")
		p.waitFor("the batch's view", absent(row(outside.ID))+" && "+exists(row(inBatch.ID)))
		p.waitFor("the button enabled", `!document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled`)
		p.click("click retry all failed", "#jobs-actions "+button("retry-failed"))
		p.waitFor("a question naming the batch", textHas("#jobs-confirm .question", "Retry every failed job of batch “album-7”"))
		confirmYes("#jobs-confirm")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 1 of 1 failed jobs of batch “album-7”"))
		p.waitFor("the batch's job queued again", exists(row(inBatch.ID)+`[data-state="queued"]`))
		if got, err := srv.engine.Get(ctx, outside.ID); err != nil || got.State != jobtype.Failed {
			t.Fatalf("the failed job outside the batch: %v, %v; want it still FAILED", got.State, err)
		}
		p.click("show all jobs again", "#batch-bar .batch-clear")
		p.waitFor("every job again", exists(row(outside.ID)))
		if _, err := srv.engine.Cancel(ctx, inBatch.ID); err != nil { // out of the later subtests' way
			t.Fatal(err)
		}
	})

	t.Run("pause and resume a queue", func(t *testing.T) {
		p.t = t
		queue := `tr[data-queue="default"]`
		p.waitFor("the default queue with a pause button", exists(queue+` button[data-action="pause"]`)+` && `+exists(queue+`[data-paused="false"]`))
		p.click("click pause", queue+" "+button("pause"))
		p.waitFor("a question", textHas("#queues-confirm .question", "Pause queue default?"))
		confirmYes("#queues-confirm")
		p.waitFor("what it did", textHas("#queues-confirm .outcome", "Paused queue default"))
		p.waitFor("the row paused, saying since when", exists(queue+`[data-paused="true"]`)+" && "+textHas(queue+" .queue-status", "paused since "))
		// A paused queue hands out nothing: a claim comes back empty.
		short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
		j, err := srv.engine.Claim(short, jobs.ClaimRequest{WorkerID: "e2e-worker", Kinds: []string{"mail.send"}}, time.Now().Add(300*time.Millisecond))
		stop()
		if err == nil && j.ID != "" {
			t.Fatalf("claimed %s from a paused queue", j.ID)
		}
		p.waitFor("resume offered", `!document.querySelector(`+fmt.Sprintf("%q", queue+` button[data-action="resume"]`)+`).closest(".action").hidden`)
		p.click("click resume", queue+" "+button("resume"))
		confirmYes("#queues-confirm")
		p.waitFor("the row running again", exists(queue+`[data-paused="false"]`)+" && "+textHas("#queues-confirm .outcome", "Resumed queue default"))
		w := claim(t, ctx, srv.engine, "mail.send")
		p.waitFor("a job handed out again, live", exists(row(w.job.ID)+`[data-state="running"]`))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
	})
}

// click clicks the element selector names, in one step inside the page
// (a querySelector and its click() together), as soon as it is there and
// enabled: the page re-renders its panels as changes and polls arrive,
// and a click that looked the node up first and clicked it after could
// find it replaced in between.
func (p *page) click(what, selector string) {
	p.t.Helper()
	p.waitFor(what, fmt.Sprintf(`(() => {
		const e = document.querySelector(%s);
		if (!e || e.disabled) return false;
		e.click();
		return true;
	})()`, strconv.Quote(selector)))
}

// A question whose answer is moot goes: the Retry asked about a failed
// job that someone else retried meanwhile is taken back as the job runs
// again (it stayed, and "yes" was refused: "it is queued"), and the
// keyboard goes to something that is there.
func TestAQuestionMadeMootElsewhereIsTakenBack(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	failed := submit(t, ctx, srv.engine, "report.export", `{}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open a link to the failed job", chromedp.Navigate(base+"/?job="+failed.ID))
	p.waitFor("its details", detailShows(failed.ID, "failed"))
	p.click("click retry", `#detail button[data-action="retry"]`)
	p.waitFor("the question", textHas("#detail .question", "Retry job "+failed.ID)+` && !document.querySelector("#detail .question").closest("[hidden]")`)
	if _, err := srv.engine.Retry(ctx, failed.ID); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the question taken back as the job is queued again, nothing refused", detailShows(failed.ID, "queued")+
		` && document.querySelector("#detail .question").closest("[hidden]") !== null`+
		` && (document.querySelector("#detail .outcome") === null || document.querySelector("#detail .outcome").hidden)`+
		` && document.activeElement !== null && document.activeElement.getClientRects().length > 0`)
}
