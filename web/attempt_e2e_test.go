package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// While a job runs again after a failed attempt, the details label the
// error they show as that previous attempt's, in quiet colours, so it is
// not taken for the run now; once the job fails for good it is its
// error again, in red. Its details say when it runs only while it waits
// for that time: a running job's "Runs at" was a time already past.
func TestAPreviousAttemptsErrorIsLabelledAsSuch(t *testing.T) {
	ctx, base, srv, job := jobFailedOnce(t, time.Millisecond)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the job", chromedp.Navigate(base+"/?job="+job.ID))
	box := "#detail .error-box"
	// quiet: the error's type in the muted colour of its message, not
	// in the failure's red; loud: in red.
	colours := `(() => {
		const colour = (sel) => getComputedStyle(document.querySelector("#detail .error-box " + sel)).color;
		return colour(".error-type") === colour(".error-message");
	})()`
	quiet := colours + ` && document.querySelector("#detail .error-box").dataset.previous === "true"`
	loud := "!" + colours + ` && document.querySelector("#detail .error-box").dataset.previous === "false"`

	p.waitFor("queued again, the first attempt's error labelled as such", detailShows(job.ID, "queued")+" && "+
		textIs(box+" h3", "Error of the previous attempt (attempt 1)")+" && "+textHas(box, "warehouse did not answer in 30s")+" && "+quiet)

	second := claim(t, ctx, srv.engine, "report.export")
	second.progress(20, "reading the warehouse")
	p.waitFor("attempt 2 running, the error still the previous attempt's, no time to run at", detailShows(job.ID, "running")+" && "+
		textIs("#detail .attempts", "attempt 2 of 2")+" && "+textIs(box+" h3", "Error of the previous attempt (attempt 1)")+" && "+quiet+" && "+
		`![...document.querySelectorAll("#detail .facts dt")].some(d => d.textContent === "Runs at")`)

	second.fail("SchemaError", "column rows is gone")
	p.waitFor("failed for good, its own error", detailShows(job.ID, "failed")+" && "+textIs(box+" h3", "Error")+" && "+
		textHas(box, "column rows is gone")+" && "+loud)
}

// A job an operator cancelled shows the error it carried as from before
// the cancel, quietly: the cancel gives none. A job cancelled because a
// job it runs after did not succeed shows that as its error.
func TestAnErrorFromBeforeAnOperatorsCancelIsLabelledAsSuch(t *testing.T) {
	ctx, base, srv, job := jobFailedOnce(t, time.Hour)
	if _, err := srv.engine.Cancel(jobs.WithActor(ctx, "admin token ops"), job.ID); err != nil {
		t.Fatal(err)
	}
	head, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.export", Queue: "flaky", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	next, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.send", After: []string{head.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.engine.Cancel(jobs.WithActor(ctx, "admin token ops"), head.ID); err != nil {
		t.Fatal(err)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	box := "#detail .error-box"
	p.do("open the page on the job an operator cancelled", chromedp.Navigate(base+"/?job="+job.ID))
	p.waitFor("its attempt's error labelled as from before the cancel", detailShows(job.ID, "cancelled")+" && "+
		textIs(box+" h3", "Last error, before it was cancelled")+" && "+textHas(box, "warehouse did not answer in 30s")+" && "+
		`document.querySelector("#detail .error-box").dataset.previous === "true"`)
	p.do("open the page on the job cancelled for its dependency", chromedp.Navigate(base+"/?job="+next.ID))
	p.waitFor("the dependency's failure as its error", detailShows(next.ID, "cancelled")+" && "+
		textIs(box+" h3", "Error")+" && "+textHas(box, "DependencyFailed")+" && "+
		`document.querySelector("#detail .error-box").dataset.previous === "false"`)
}

// jobFailedOnce starts a live server whose queue "flaky" gives a job two
// attempts, the second after backoff, and a job there whose first attempt
// failed as retryable ("warehouse did not answer in 30s").
func jobFailedOnce(t *testing.T, backoff time.Duration) (context.Context, string, *liveServer, jobtype.Job) {
	t.Helper()
	ctx, base, srv := startLiveWithRules(t, 2*time.Minute, jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"flaky": {MaxAttempts: 2, InitialBackoff: backoff, MaxBackoff: backoff},
	}})
	job, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.export", Queue: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	first := claim(t, ctx, srv.engine, "report.export")
	if _, err := srv.engine.Fail(ctx, first.job.ID, first.job.LeaseID, jobtype.JobError{Type: "TimeoutError", Message: "warehouse did not answer in 30s"}, true); err != nil {
		t.Fatal(err)
	}
	return ctx, base, srv, job
}
