package web_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// rowCount is a JS condition: the list shows exactly n rows.
func rowCount(n int) string {
	return fmt.Sprintf(`document.querySelectorAll("li.job").length === %d`, n)
}

// detailShows is a JS condition: the details show job id, in state.
func detailShows(id, state string) string {
	return fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q && document.getElementById("detail").dataset.state === %q && !document.getElementById("detail").hidden`, id, state)
}

// A failed job older than the 50 newest is out of the list, and an
// operator on call still reaches it: the state menu asks the server for
// the failed jobs (ListJobs with states), however old; "Show older jobs"
// reads the next page; ?job=ID opens one job by its id, in the list or
// not, and the details' id is that link; the "Job id" box opens one too.
func TestAnOldFailedJobCanBeReached(t *testing.T) {
	ctx, base, srv := startLive(t, 3*time.Minute)

	old := submit(t, ctx, srv.engine, "report.export", `{"month":"2026-10"}`)
	claim(t, ctx, srv.engine, "report.export").fail("TimeoutError", "warehouse did not answer in 30s")
	oldDone := submit(t, ctx, srv.engine, "report.print", `{}`)
	claim(t, ctx, srv.engine, "report.print").complete(`{}`)
	var newest string
	for i := range 60 {
		newest = submit(t, ctx, srv.engine, "mail.send", fmt.Sprintf(`{"n":%d}`, i)).ID
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the 50 newest jobs, and not the old failed one", exists(row(newest))+" && "+rowCount(50)+" && "+absent(row(old.ID)))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))

	t.Run("the state menu lists the failed jobs however old, from the server", func(t *testing.T) {
		p.t = t
		p.showState("failed")
		p.waitFor("the old failed job, alone", exists(row(old.ID)+`[data-state="failed"]`)+" && "+rowCount(1)+" && "+textIs("#jobs-count", "1 failed shown"))
		p.waitFor("the filter in the address", `new URL(location.href).searchParams.get("state") === "failed"`)
		p.waitFor("no older page", `document.getElementById("jobs-older").hidden`)
		// A job that fails now joins the list live; one retried leaves it.
		w := claim(t, ctx, srv.engine, "mail.send")
		w.fail("SMTPError", "relay refused")
		p.waitFor("the job that failed now", exists(row(w.job.ID)+`[data-state="failed"]`)+" && "+rowCount(2))
		if _, err := srv.engine.Retry(ctx, w.job.ID); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the retried job gone from the failed list", absent(row(w.job.ID))+" && "+rowCount(1))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
	})

	t.Run("Back shows every job again, and older pages come on request", func(t *testing.T) {
		p.t = t
		p.do("go back", chromedp.Evaluate[chromedp.Void](`history.back()`))
		p.waitFor("every state again", `document.getElementById("state-filter").value === "all" && !new URL(location.href).searchParams.has("state")`+
			" && "+exists(row(newest))+" && "+absent(row(old.ID)))
		p.click("show older jobs", "#jobs-older:not([hidden])")
		p.waitFor("the old jobs, after the newer ones", exists(row(old.ID)+`[data-state="failed"]`)+" && "+exists(row(oldDone.ID))+
			` && [...document.querySelectorAll("li.job")].at(-1).dataset.jobId === `+strconv.Quote(old.ID)+
			` && document.getElementById("jobs-older").hidden`)
	})

	t.Run("?job=ID opens a job that is not in the list, and its id is that link", func(t *testing.T) {
		p.t = t
		p.do("open a link to the old job", chromedp.Navigate(base+"/?job="+old.ID))
		p.waitFor("its details, from GetJob", detailShows(old.ID, "failed")+" && "+textHas("#detail .error-box", "warehouse did not answer in 30s"))
		p.waitFor("its id a link to it", fmt.Sprintf(`document.querySelector("#detail a.job-self-link").textContent === %q && document.querySelector("#detail a.job-self-link").href === %q`,
			old.ID, base+"/?job="+old.ID))
		p.waitFor("the retry button offered", `!document.querySelector('#detail button[data-action="retry"]').disabled`)
	})

	t.Run("the Job id box opens any job by its id", func(t *testing.T) {
		p.t = t
		p.do("type an id and open it", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			document.getElementById("open-job").value = %q;
			document.getElementById("open-form").requestSubmit();
		})()`, " "+oldDone.ID+" ")))
		p.waitFor("its details", detailShows(oldDone.ID, "succeeded"))
		p.waitFor("the address names it, and not the link's job", fmt.Sprintf(`location.hash === %q && !new URL(location.href).searchParams.has("job")`, "#job="+oldDone.ID))
	})

	t.Run("an id that opens nothing says so, and the job shown before goes", func(t *testing.T) {
		p.t = t
		p.do("type an id no job has", chromedp.Evaluate[chromedp.Void](`(() => {
			document.getElementById("open-job").value = "j_06h44nosuchjob00000000000";
			document.getElementById("open-form").requestSubmit();
		})()`))
		// The server's message names the job: the page says its id once.
		p.waitFor("why, beside the box and in the toast, and no details", textIs("#open-note", "No job j_06h44nosuchjob00000000000 to show: job not found")+
			" && "+textIs("#error", "Job j_06h44nosuchjob00000000000: job not found")+
			` && document.getElementById("detail").hidden`)
		p.do("open one that is there", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			document.getElementById("open-job").value = %q;
			document.getElementById("open-form").requestSubmit();
		})()`, old.ID)))
		p.waitFor("its details, the note gone", detailShows(old.ID, "failed")+` && document.getElementById("open-note").textContent === ""`)
	})
}
