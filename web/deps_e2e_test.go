package web_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

// submitOver submits req as a client of the server would.
func submitOver(t *testing.T, ctx context.Context, base string, req *jobwatchv1.SubmitJobRequest) *jobwatchv1.Job {
	t.Helper()
	res, err := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base).SubmitJob(ctx, req)
	if err != nil {
		t.Fatalf("submit %s: %v", req.GetKind(), err)
	}
	return res.GetJob()
}

// factIs is a JS condition: the detail's fact named name reads want.
func factIs(name, want string) string {
	return fmt.Sprintf(`(() => {
		const dt = [...document.querySelectorAll("#detail .facts dt")].find(d => d.textContent === %q);
		return dt?.nextElementSibling?.textContent === %q;
	})()`, name, want)
}

// dependency is the selector of the detail's entry for the job id runs
// after.
func dependency(id string) string {
	return fmt.Sprintf(`#detail .deps-fact li.dep[data-job-id=%q]`, id)
}

// Dependencies on the page, against the real server: a job submitted
// after another shows as WAITING, in a colour of its own, in the list and
// the detail, which links to the job it runs after and says what a
// failure would do; the batch's line counts it as waiting. When a worker
// completes the first job the second moves to QUEUED live, through the
// page's one stream. A job whose dependency fails shows as cancelled with
// the error that names the dependency.
func TestThePageShowsAJobWaitingForAnotherAndItsRelease(t *testing.T) {
	ctx, base, _ := startLive(t, 3*time.Minute)

	const nightly = "nightly-2026-12-02"
	a := submitOver(t, ctx, base, &jobwatchv1.SubmitJobRequest{Kind: "export.orders", Batch: nightly})
	b := submitOver(t, ctx, base, &jobwatchv1.SubmitJobRequest{Kind: "report.build", Batch: nightly, After: []string{a.GetId()}})
	if b.GetState() != jobwatchv1.JobState_JOB_STATE_WAITING {
		t.Fatalf("the job after another was submitted %s, want WAITING", b.GetState())
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the job after the other, waiting, with how many it runs after",
		exists(row(b.GetId())+`[data-state="waiting"]`)+" && "+textIs(row(b.GetId())+" .badge", "waiting")+" && "+
			textIs(row(b.GetId())+" .step", "after 1 job")+" && "+exists(row(a.GetId())+`[data-state="queued"]`))
	p.waitFor("the waiting badge in a colour of its own", fmt.Sprintf(`(() => {
		const colour = (sel) => getComputedStyle(document.querySelector(sel)).color;
		return colour(%q) !== colour(%q);
	})()`, row(b.GetId())+" .badge", row(a.GetId())+" .badge"))
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))

	t.Run("the detail names the job it runs after, and what a failure would do", func(t *testing.T) {
		p.t = t
		p.click("open the waiting job's detail", row(b.GetId()))
		p.waitFor("its state", `document.getElementById("detail").dataset.state === "waiting"`+" && "+textIs("#detail .detail-line .badge", "waiting"))
		p.waitFor("the job it runs after, a link with its state and kind",
			textIs(dependency(a.GetId())+" a.dep-link", a.GetId())+" && "+
				fmt.Sprintf(`document.querySelector(%q).getAttribute("href") === %q`, dependency(a.GetId())+" a.dep-link", "#job="+a.GetId())+" && "+
				textIs(dependency(a.GetId())+" .badge", "queued")+" && "+textIs(dependency(a.GetId())+" .dep-kind", "export.orders"))
		p.waitFor("the policy", factIs("On a failed dependency", "cancel"))
		if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(artifactPath(t, "web-e2e-deps-waiting.png"), png, 0o644)
		}
	})

	t.Run("the batch's line counts it as waiting", func(t *testing.T) {
		p.t = t
		p.click("show the batch", row(b.GetId())+" .batch-label")
		p.waitFor("the batch counted", textIs(batchLine, nightly+": 2 jobs · 0 ended · 2 to go (1 waiting)"))
	})

	t.Run("the dependency's success moves it to QUEUED live", func(t *testing.T) {
		p.t = t
		if done := runOver(t, ctx, base, "export.orders", true); done != a.GetId() {
			t.Fatalf("ran %s, want the dependency %s", done, a.GetId())
		}
		p.waitFor("the job queued, in its row and its detail", exists(row(b.GetId())+`[data-state="queued"]`)+" && "+
			`document.getElementById("detail").dataset.state === "queued"`+" && "+textIs(row(b.GetId())+" .step", ""))
		p.waitFor("the job it ran after, succeeded", exists(dependency(a.GetId())+`[data-state="succeeded"]`)+" && "+textIs(dependency(a.GetId())+" .badge", "succeeded"))
		p.waitFor("the batch's line", textIs(batchLine, nightly+": 2 jobs · 1 ended (1 succeeded) · 1 to go"))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
		p.click("open the job it ran after, from the link", dependency(a.GetId())+" a.dep-link")
		p.waitFor("its detail", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, a.GetId())+" && "+
			`document.getElementById("detail").dataset.state === "succeeded" && location.hash === `+strconv.Quote("#job="+a.GetId()))
		p.click("show all jobs", "#batch-bar .batch-clear")
	})

	t.Run("a failed dependency cancels it, and the error says why", func(t *testing.T) {
		p.t = t
		first := submitOver(t, ctx, base, &jobwatchv1.SubmitJobRequest{Kind: "export.invoices"})
		doomed := submitOver(t, ctx, base, &jobwatchv1.SubmitJobRequest{Kind: "report.invoices", After: []string{first.GetId()},
			OnDependencyFailure: jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL})
		anyway := submitOver(t, ctx, base, &jobwatchv1.SubmitJobRequest{Kind: "cleanup", After: []string{first.GetId()},
			OnDependencyFailure: jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN})
		p.waitFor("both waiting", exists(row(doomed.GetId())+`[data-state="waiting"]`)+" && "+exists(row(anyway.GetId())+`[data-state="waiting"]`))
		p.click("open the one that runs anyway", row(anyway.GetId()))
		p.waitFor("its policy", factIs("On a failed dependency", "run"))
		p.click("open the one a failure cancels", row(doomed.GetId()))
		p.waitFor("its policy", factIs("On a failed dependency", "cancel"))

		runOver(t, ctx, base, "export.invoices", false)
		p.waitFor("it cancelled, the error type in its row", exists(row(doomed.GetId())+`[data-state="cancelled"]`)+" && "+
			textIs(row(doomed.GetId())+" .step", "DependencyFailed"))
		p.waitFor("the error in its detail, naming the dependency", `document.getElementById("detail").dataset.state === "cancelled"`+" && "+
			textIs("#detail .error-type", "DependencyFailed")+" && "+
			textIs("#detail .error-message", "job "+first.GetId()+", which it runs after, ended FAILED")+" && "+
			exists(dependency(first.GetId())+`[data-state="failed"]`))
		p.waitFor("the other queued, to run anyway", exists(row(anyway.GetId())+`[data-state="queued"]`))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
	})

	p.t = t
	p.do("move the pointer away", chromedp.MouseEvent(chromedp.MouseMoved, 1, 880))
	if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(artifactPath(t, "web-e2e-deps.png"), png, 0o644)
	}
}
