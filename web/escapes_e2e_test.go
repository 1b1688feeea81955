package web_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A worker's step text and error are shown as its log lines are: escape
// sequences and control characters go (the colours too), in the row,
// the details' progress, the ERROR section and the timeline, so none
// shows as garbage; an error message keeps its lines.
func TestEscapesInAStepOrAnErrorNeverShow(t *testing.T) {
	ctx, base, srv := startLiveWithRules(t, 2*time.Minute, jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"flaky": {MaxAttempts: 2, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
	}})
	job, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "report.export", Queue: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	first := claim(t, ctx, srv.engine, "report.export")
	if _, err := srv.engine.Fail(ctx, first.job.ID, first.job.LeaseID, jobtype.JobError{
		Type:    "\x1b[31mTimeoutError\x1b[0m",
		Message: "\x1b[1;31mwarehouse did not answer\x1b[0m \x1b[2J\x1b]0;title\x07",
	}, true); err != nil {
		t.Fatal(err)
	}
	second := claim(t, ctx, srv.engine, "report.export")
	second.progress(40, "\x1b[32mreading\x1b[0m 10%\rreading 40%\x1b[K")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the job", chromedp.Navigate(base+"/?job="+job.ID))
	p.waitFor("the step, plain, in its row and its details", textIs(row(job.ID)+" .step", "reading 40%")+" && "+
		textIs("#detail .progress .step", "reading 40%"))
	p.waitFor("the first attempt's error, plain, in the details and the timeline",
		textIs("#detail .error-box .error-type", "TimeoutError")+" && "+
			textIs("#detail .error-box .error-message", "warehouse did not answer ")+" && "+
			textHas("#detail .timeline", "TimeoutError: warehouse did not answer "))

	second.fail("\x1b[31mSchemaError\x1b[0m", "column \x1b[1mrows\x1b[0m is gone\r\n\tat export.go:12")
	p.waitFor("the last error, plain, in its row and the details, its lines kept", detailShows(job.ID, "failed")+" && "+
		textIs(row(job.ID)+" .step", "SchemaError")+" && "+
		textIs("#detail .error-box .error-type", "SchemaError")+" && "+
		textIs("#detail .error-box .error-message", "column rows is gone\n\tat export.go:12"))
	p.waitFor("no control character anywhere on the page", `!/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(document.body.textContent)`)
}

// A payload's and a result's characters that reorder a line (a
// right-to-left override makes "exe.png" of "invoice‮gnp.exe") show in
// the details as the escapes JSON writes them, as a step's or an error's
// are dropped: nothing on the page is spoofed.
func TestBidiOverridesInAPayloadOrAResultShowAsEscapes(t *testing.T) {
	ctx, base, srv := startLive(t, 2*time.Minute)
	job := submit(t, ctx, srv.engine, "files.scan", "{\"file\":\"invoice\u202egnp.exe\"}")
	w := claim(t, ctx, srv.engine, "files.scan")
	w.complete("{\"saved\":\"photo\u2067cod.exe\u2069\"}")

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the job", chromedp.Navigate(base+"/?job="+job.ID))
	p.waitFor("the payload and the result with their overrides as escapes",
		textHas("#detail .payload", `"invoice\u202egnp.exe"`)+" && "+textHas("#detail .result", `"photo\u2067cod.exe\u2069"`))
	p.waitFor("no reordering character anywhere in the details",
		`!/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]/.test(document.getElementById("detail").textContent)`)
}
