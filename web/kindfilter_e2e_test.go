package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobtype"
)

// kindInURL is a JS condition: the page's address narrows the list to
// kind ("" for none).
func kindInURL(kind string) string {
	return fmt.Sprintf(`(new URL(location.href).searchParams.get("kind") ?? "") === %q`, kind)
}

// kindChipShows is a JS condition: beside Show, the list says it is
// narrowed to kind ("" for none: nothing is said).
func kindChipShows(kind string) string {
	if kind == "" {
		return `document.getElementById("kind-filter").hidden`
	}
	return `!document.getElementById("kind-filter").hidden && ` + textIs("#kind-filter-name", kind)
}

// An operator narrows the list to one kind, as to a queue: an address
// with ?kind= lists that kind's jobs only, asked of the server with
// ListJobs' kind; jobs of the kind submitted afterwards join live and
// another kind's do not; Retry all failed retries that kind's failed jobs
// only; a job's details link to the list of its kind; clearing the
// filter shows every kind's jobs again, and Back returns to it. A kind no
// job has shows an empty list that names it, and the kinds of the newest
// jobs, and a name the server refuses shows its refusal.
func TestTheListNarrowedToAKindShowsItsJobsLive(t *testing.T) {
	ctx, base, srv := startLive(t, 4*time.Minute)

	mailFailed := submit(t, ctx, srv.engine, "mail.send", `{}`)
	claim(t, ctx, srv.engine, "mail.send").fail("SMTPError", "relay refused")
	renderFailed := submit(t, ctx, srv.engine, "thumbs.render", `{}`)
	claim(t, ctx, srv.engine, "thumbs.render").fail("DecodeError", "not a JPEG")
	mail := submit(t, ctx, srv.engine, "mail.send", `{}`)
	render := submit(t, ctx, srv.engine, "thumbs.render", `{}`)
	// Newer than these, more jobs of a third kind than the stream and
	// ListJobs start with (50): the page finds mail.send's and
	// thumbs.render's jobs only by asking the server for the kind's.
	submitBatch(t, ctx, base, "", "bulk.import", 60)

	var joined, other jobtype.Job
	p := &page{t: t, ctx: newTab(t, ctx)}
	live := `document.getElementById("status").dataset.status === "live"`

	t.Run("the address lists the kind's jobs only, and says so beside Show", func(t *testing.T) {
		p.t = t
		p.do("open the list of kind mail.send", chromedp.Navigate(base+"/?kind=mail.send"))
		p.waitFor("mail.send's two jobs and no other, live", onlyRows(mailFailed.ID, mail.ID)+" && "+live)
		p.waitFor("the filter beside Show, and the count of the rows", kindChipShows("mail.send")+" && "+queueChipShows("")+" && "+textIs("#jobs-count", "2 most recent shown"))
	})

	t.Run("a job of the kind joins live, one of another kind does not", func(t *testing.T) {
		p.t = t
		p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "narrowed to mail.send"`))
		other = submit(t, ctx, srv.engine, "thumbs.render", `{}`)
		joined = submit(t, ctx, srv.engine, "mail.send", `{}`)
		// The stream brings changes in order: once mail.send's job is in,
		// thumbs.render's, submitted before it, has been passed over.
		p.waitFor("mail.send's new job in the list", exists(row(joined.ID)+`[data-state="queued"]`))
		p.waitFor("thumbs.render's new job not", absent(row(other.ID))+" && "+onlyRows(mailFailed.ID, mail.ID, joined.ID))
		p.waitFor("the same page, never reloaded", `window.pageID === "narrowed to mail.send"`)
	})

	t.Run("retry all failed asks about the kind and retries its failed jobs only", func(t *testing.T) {
		p.t = t
		p.click("click retry all failed", `#jobs-actions button[data-action="retry-failed"]`)
		p.waitFor("the question names the kind", textHas("#jobs-confirm .question", "Retry every failed job of kind “mail.send” of the default tenant?")+
			" || "+textHas("#jobs-confirm .question", "Retry every failed job of kind “mail.send” of tenant “default”?"))
		p.click("say yes", "#jobs-confirm .confirm-yes")
		p.waitFor("what it did", textHas("#jobs-confirm .outcome", "Retried 1 of 1 failed jobs of kind “mail.send”"))
		p.waitFor("mail.send's failed job queued again", exists(row(mailFailed.ID)+`[data-state="queued"]`))
		if j, err := srv.engine.Get(ctx, renderFailed.ID); err != nil || j.State != jobtype.Failed {
			t.Fatalf("thumbs.render's failed job: %v, %v; want it still FAILED", j.State, err)
		}
	})

	t.Run("a reload keeps the kind, and the state filter narrows it further", func(t *testing.T) {
		p.t = t
		p.do("reload", chromedp.Reload())
		p.waitFor("mail.send's jobs again", onlyRows(mailFailed.ID, mail.ID, joined.ID))
		p.waitFor("the filter after the reload", kindChipShows("mail.send")+" && "+kindInURL("mail.send")+" && "+live)
		p.showState("failed")
		p.waitFor("no failed job of kind mail.send, said so, and no older jobs offered", rowCount(0)+" && "+
			textIs("#jobs-empty", "No failed jobs of kind “mail.send” for this tenant.")+" && "+kindInURL("mail.send")+" && "+olderOffered(false))
		p.showState("all")
		p.waitFor("mail.send's jobs once more", onlyRows(mailFailed.ID, mail.ID, joined.ID))
	})

	t.Run("clearing the filter shows every kind's jobs, and a job's details lead to its kind's list", func(t *testing.T) {
		p.t = t
		p.click("clear the kind filter", "#kind-filter-clear")
		p.waitFor("every kind's newest jobs, the other kind's too", exists(row(joined.ID))+" && "+exists(row(other.ID))+" && "+kindChipShows("")+" && "+kindInURL(""))
		p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "before the kind link"`))
		p.click("open thumbs.render's job", row(other.ID))
		link := "#detail .show-kind"
		p.waitFor("its details, with a link to its kind's list", fmt.Sprintf(`(() => {
			const a = document.querySelector(%q);
			return document.getElementById("detail").dataset.jobId === %q && a !== null && !a.hidden &&
				new URL(a.href).searchParams.get("kind") === "thumbs.render";
		})()`, link, other.ID))
		p.click("show its kind", link)
		p.waitFor("thumbs.render's jobs and no other, in the address and beside Show",
			kindInURL("thumbs.render")+" && "+kindChipShows("thumbs.render")+" && "+onlyRows(renderFailed.ID, render.ID, other.ID))
		p.waitFor("no link to the kind shown already", `document.querySelector("#detail .show-kind").hidden`)
		p.waitFor("the same page, never reloaded", `window.pageID === "before the kind link"`)
		p.do("go back", chromedp.NavigateBack())
		p.waitFor("every kind's jobs again", kindInURL("")+" && "+kindChipShows("")+" && "+exists(row(joined.ID))+" && "+exists(row(other.ID)))
	})

	t.Run("a kind no job has shows an empty list that names it, and the kinds there are", func(t *testing.T) {
		p.t = t
		// In another case than the jobs': kinds are matched exactly.
		p.do("open a kind no job has", chromedp.Navigate(base+"/?kind=Mail.Send"))
		// The newest 50 jobs, which the stream starts with: the two
		// submitted while the page was open, and bulk.import's.
		p.waitFor("an empty list naming the kind and the kinds there are, and no older jobs offered", rowCount(0)+" && "+live+" && "+
			textIs("#jobs-empty", "No jobs of kind “Mail.Send” for this tenant. "+
				"Kinds are matched exactly, case and all; the newest jobs are of kinds “bulk.import”, “mail.send” and “thumbs.render”.")+
			" && "+olderOffered(false)+" && "+kindChipShows("Mail.Send"))
	})

	t.Run("a name the server refuses shows its refusal, no list and no action", func(t *testing.T) {
		p.t = t
		p.do("open a malformed kind", chromedp.Navigate(base+"/?kind=mail%20send"))
		p.waitFor("the server's refusal, as the page shows others", `document.getElementById("status").dataset.status === "refused" && `+
			textHas("#banner-text", "The server will not list kind “mail send” of ")+" && "+
			textHas("#banner-text", ": kind: may only contain ASCII letters, digits and . _ - : / @. Show all kinds.")+
			" && "+textIs("#jobs-empty", "Nothing shown: see the message above.")+" && "+rowCount(0))
		p.waitFor("retry all failed disabled, saying why", `document.querySelector('#jobs-actions button[data-action="retry-failed"]').disabled && `+
			textIs("#jobs-actions .reason", "the list is not live: see the message above"))
		p.click("clear the kind filter", "#kind-filter-clear")
		p.waitFor("every kind's newest jobs, live, the banner gone", exists(row(joined.ID))+" && "+exists(row(other.ID))+" && "+live+` && document.getElementById("banner").hidden`)
	})
}
