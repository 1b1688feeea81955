package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// submitToQueue submits a job of kind to queue, as a client naming the queue
// would.
func submitToQueue(t *testing.T, ctx context.Context, e *jobs.Engine, queue, kind string) jobtype.Job {
	t.Helper()
	j, err := e.Submit(ctx, jobs.SubmitRequest{Kind: kind, Queue: queue, Payload: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("submit %s to queue %s: %v", kind, queue, err)
	}
	return j
}

// queueInURL is a JS condition: the page's address narrows the list to
// queue ("" for none).
func queueInURL(queue string) string {
	return fmt.Sprintf(`(new URL(location.href).searchParams.get("queue") ?? "") === %q`, queue)
}

// onlyRows is a JS condition: the list shows exactly the jobs ids, in
// any order.
func onlyRows(ids ...string) string {
	js, _ := json.Marshal(ids)
	return fmt.Sprintf(`(() => {
		const want = new Set(%s);
		const rows = [...document.querySelectorAll("li.job")].map((r) => r.dataset.jobId);
		return rows.length === want.size && rows.every((id) => want.has(id));
	})()`, js)
}

// queueChipShows is a JS condition: beside Show, the list says it is
// narrowed to queue ("" for none: nothing is said).
func queueChipShows(queue string) string {
	if queue == "" {
		return `document.getElementById("queue-filter").hidden`
	}
	return `!document.getElementById("queue-filter").hidden && ` + textIs("#queue-filter-name", queue)
}

// An operator narrows the list to one queue: an address with ?queue=
// lists that queue's jobs only, asked of the server with ListJobs'
// queue; jobs submitted to it afterwards join live and another queue's
// do not; Retry all failed retries that queue's failed jobs only; a
// queue's name in the queue panel is a link to its list; clearing the
// filter shows every queue's jobs again, and Back returns to it. A name
// the server refuses, or no queue at all, shows an empty list that says
// why.
func TestTheListNarrowedToAQueueShowsItsJobsLive(t *testing.T) {
	ctx, base, srv := startLive(t, 4*time.Minute)

	mailFailed := submitToQueue(t, ctx, srv.engine, "mail", "mail.send")
	claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
	renderFailed := submitToQueue(t, ctx, srv.engine, "render", "thumbs.render")
	claim(t, ctx, srv.engine, "thumbs.render").fail("DecodeError", "not a JPEG")
	mail := submitToQueue(t, ctx, srv.engine, "mail", "mail.send")
	render := submitToQueue(t, ctx, srv.engine, "render", "thumbs.render")
	// Newer than these, more jobs of a third queue than the stream and
	// ListJobs start with (50): the page finds mail's and render's jobs
	// only by asking the server for the queue's, not among those it holds.
	for range 60 {
		submitToQueue(t, ctx, srv.engine, "bulk", "bulk.import")
	}

	// Submitted while the page is open: joined to mail, other to render.
	var joined, other jobtype.Job

	p := &page{t: t, ctx: newTab(t, ctx)}
	live := `document.getElementById("status").dataset.status === "live"`

	t.Run("the address lists the queue's jobs only, and says so beside Show", func(t *testing.T) {
		p.t = t
		p.do("open the list of queue mail", chromedp.Navigate(base+"/?queue=mail"))
		p.waitFor("mail's two jobs and no other, live", onlyRows(mailFailed.ID, mail.ID)+" && "+live)
		p.waitFor("the filter beside Show", queueChipShows("mail"))
	})

	t.Run("a job submitted to the queue joins live, one to another queue does not", func(t *testing.T) {
		p.t = t
		p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "narrowed to mail"`))
		other = submitToQueue(t, ctx, srv.engine, "render", "thumbs.render")
		joined = submitToQueue(t, ctx, srv.engine, "mail", "mail.send")
		// The stream brings changes in order: once mail's job is in,
		// render's, submitted before it, has come and been passed over.
		p.waitFor("mail's new job in the list", exists(row(joined.ID)+`[data-state="queued"]`))
		p.waitFor("render's new job not", absent(row(other.ID))+" && "+onlyRows(mailFailed.ID, mail.ID, joined.ID))
		p.waitFor("the same page, never reloaded", `window.pageID === "narrowed to mail"`)
	})

	t.Run("retry all failed asks about the queue and retries its failed jobs only", func(t *testing.T) {
		p.t = t
		p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
		p.waitFor("the question names the queue", textHas("#jobs-confirm .question", "Retry every failed job of queue “mail” of the default tenant?")+
			" || "+textHas("#jobs-confirm .question", "Retry every failed job of queue “mail” of tenant “default”?"))
		p.click("say yes", "#jobs-confirm .confirm-yes")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 1 of 1 failed jobs of queue “mail”"))
		p.waitFor("mail's failed job queued again", exists(row(mailFailed.ID)+`[data-state="queued"]`))
		if j, err := srv.engine.Get(ctx, renderFailed.ID); err != nil || j.State != jobtype.Failed {
			t.Fatalf("render's failed job: %v, %v; want it still FAILED", j.State, err)
		}
	})

	t.Run("a reload keeps the queue, and the state filter narrows it further", func(t *testing.T) {
		p.t = t
		p.do("reload", chromedp.Reload())
		p.waitFor("mail's jobs again", onlyRows(mailFailed.ID, mail.ID, joined.ID))
		p.waitFor("the filter after the reload", queueChipShows("mail")+" && "+queueInURL("mail")+" && "+live)
		p.showState("failed")
		p.waitFor("no failed job in queue mail, said so", `document.querySelectorAll("li.job").length === 0 && `+
			textIs("#jobs-empty", "No failed jobs in queue “mail”.")+" && "+queueInURL("mail"))
		p.showState("all")
	})

	t.Run("a queue's name in the queue panel leads to its list", func(t *testing.T) {
		p.t = t
		link := `#queues tr[data-queue="render"] a.queue-link`
		p.waitFor("render's name, a link to its list", fmt.Sprintf(`(() => {
			const a = document.querySelector(%q);
			return a !== null && new URL(a.href).searchParams.get("queue") === "render" && new URL(a.href).hash === "";
		})()`, link))
		p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "before the queue link"`))
		p.click("click render's name", link)
		p.waitFor("render in the address", queueInURL("render"))
		p.waitFor("render's jobs and no other", onlyRows(renderFailed.ID, render.ID, other.ID))
		p.waitFor("the filter beside Show", queueChipShows("render"))
		p.waitFor("the same page, never reloaded", `window.pageID === "before the queue link"`)
	})

	t.Run("clearing the filter shows every queue's jobs, and Back returns to the queue", func(t *testing.T) {
		p.t = t
		p.click("clear the queue filter", "#queue-filter-clear")
		p.waitFor("every queue's newest jobs, mail's and render's too", exists(row(joined.ID))+" && "+exists(row(other.ID))+" && "+queueChipShows(""))
		p.waitFor("no filter shown or in the address", queueChipShows("")+" && "+queueInURL(""))
		p.do("go back", chromedp.NavigateBack())
		p.waitFor("render's list again", queueInURL("render")+" && "+queueChipShows("render")+" && "+onlyRows(renderFailed.ID, render.ID, other.ID))
	})

	t.Run("a queue with no jobs shows an empty list that names it", func(t *testing.T) {
		p.t = t
		p.do("open a queue no job is in", chromedp.Navigate(base+"/?queue=nonesuch"))
		p.waitFor("an empty list naming the queue", `document.querySelectorAll("li.job").length === 0 && `+live+" && "+
			textHas("#jobs-empty", "No jobs in queue “nonesuch”."))
		p.waitFor("and that the queue panel shows no such queue", textIs("#jobs-empty", "No jobs in queue “nonesuch”. The queue panel shows no queue of that name."))
	})

	t.Run("a name the server refuses shows its refusal, no list and no action", func(t *testing.T) {
		p.t = t
		p.do("open a malformed queue", chromedp.Navigate(base+"/?queue=mail%20out"))
		p.waitFor("the server's refusal, as the page shows others", `document.getElementById("status").dataset.status === "refused" && `+
			// Of "the default tenant", or of "tenant “default”" where the
			// stream named it before ListJobs' refusal came.
			textHas("#banner-text", "The server will not list queue “mail out” of ")+" && "+
			textHas("#banner-text", ": queue: may only contain ASCII letters, digits and . _ - : / @. Show all queues, or pick one in the queue panel.")+
			" && "+textIs("#jobs-empty", "Nothing shown: see the message above.")+` && document.querySelectorAll("li.job").length === 0`)
		p.waitFor("retry all failed disabled, saying why", `document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled && `+
			textIs("#jobs-actions .reason", "the list is not live: see the message above"))
		p.click("clear the queue filter", "#queue-filter-clear")
		p.waitFor("every queue's newest jobs, live, the banner gone", exists(row(joined.ID))+" && "+exists(row(other.ID))+" && "+live+` && document.getElementById("banner").hidden`)
	})
}
