package web_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/structpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/jobtype"
)

// submitBatch submits n jobs of kind labelled batch in one SubmitJobs
// call, as a client of the server would, and returns them in order.
func submitBatch(t *testing.T, ctx context.Context, base, batch, kind string, n int) []*jobwatchv1.Job {
	t.Helper()
	client := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	reqs := make([]*jobwatchv1.SubmitJobRequest, n)
	for i := range reqs {
		payload, err := structpb.NewValue(map[string]any{"image": i})
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: kind, Batch: batch, Payload: payload}
	}
	res, err := client.SubmitJobs(ctx, &jobwatchv1.SubmitJobsRequest{Jobs: reqs})
	if err != nil {
		t.Fatalf("submit %d jobs of batch %s: %v", n, batch, err)
	}
	if len(res.GetJobs()) != n {
		t.Fatalf("SubmitJobs returned %d jobs, want %d", len(res.GetJobs()), n)
	}
	return res.GetJobs()
}

// runOver claims the next job of kind over the worker API and completes
// it (ok) or fails it; it returns the job's id.
func runOver(t *testing.T, ctx context.Context, base, kind string, ok bool) string {
	t.Helper()
	w := claimOverConnect(t, ctx, base, kind)
	var err error
	if ok {
		_, err = w.client.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: w.jobID, LeaseId: w.lease})
	} else {
		_, err = w.client.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: w.jobID, LeaseId: w.lease,
			Error: &jobwatchv1.JobError{Type: "DecodeError", Message: "not a JPEG"}})
	}
	if err != nil {
		t.Fatalf("end job %s: %v", w.jobID, err)
	}
	return w.jobID
}

// batchInURL is a JS condition: the page's address filters to batch
// ("" for none).
func batchInURL(batch string) string {
	return fmt.Sprintf(`(new URL(location.href).searchParams.get("batch") ?? "") === %q`, batch)
}

// onlyBatchRows is a JS condition: the list shows n rows, each a job of
// batch, with its label.
func onlyBatchRows(batch string, n int) string {
	return fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("li.job")];
		return rows.length === %d && rows.every(r => r.querySelector(".batch-label")?.textContent === %q);
	})()`, n, batch)
}

const batchLine = "#batch-bar .batch-summary"

// A batch on the page, against the real server: a batch submitted with
// SubmitJobs, some of it already run, is opened from a job's batch label;
// the list then shows only its jobs, on one stream, and a line tells the
// batch's progress, counted in full although the stream starts with the
// 50 newest jobs only. Workers ending jobs and a client adding to the
// batch change it live; a reload opens the same view; clearing the filter
// brings the other jobs back, and the detail leads to the batch again.
func TestThePageShowsABatchAndItsProgressLive(t *testing.T) {
	ctx, base, srv := startLive(t, 4*time.Minute)

	const thumbs = "thumbs-2026-12-02"
	batch := submitBatch(t, ctx, base, thumbs, "thumbs.render", 120)
	// Three of the oldest run before the page opens: the stream's first
	// 50 jobs (the newest) do not include them.
	early := []string{runOver(t, ctx, base, "thumbs.render", true), runOver(t, ctx, base, "thumbs.render", true), runOver(t, ctx, base, "thumbs.render", false)}
	if early[0] != batch[0].GetId() {
		t.Fatalf("the first job claimed is %s, want the batch's oldest %s", early[0], batch[0].GetId())
	}
	avatars := submitBatch(t, ctx, base, "avatars-2026-12-02", "avatars.render", 2)
	mail := submit(t, ctx, srv.engine, "mail.send", `{"list":"weekly"}`)
	newest := batch[len(batch)-1].GetId()

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("every kind of job, the batch's with its label", exists(row(mail.ID))+" && "+exists(row(avatars[0].GetId()))+" && "+
		textIs(row(newest)+" .batch-label", thumbs)+` && document.querySelector(`+strconv.Quote(row(mail.ID)+" .batch-label")+`).hidden`)
	p.waitFor("no batch line", `document.getElementById("batch-bar").hidden`)
	p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as first loaded"`))

	t.Run("a job's batch label filters the list to the batch and tells its progress", func(t *testing.T) {
		p.t = t
		p.click("click the newest job's batch label", row(newest)+" .batch-label")
		p.waitFor("the batch in the address", batchInURL(thumbs))
		p.waitFor("the 50 newest jobs of the batch, and no other", onlyBatchRows(thumbs, 50)+" && "+absent(row(mail.ID))+" && "+absent(row(avatars[0].GetId())))
		p.waitFor("the whole batch counted, with the jobs that ended before the page opened",
			textIs(batchLine, thumbs+": 120 jobs · 3 ended (2 succeeded, 1 failed) · 117 to go"))
		p.waitFor("no detail opened by the click", `document.getElementById("detail").hidden`)
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
		waitOpenWatches(t, base, 1)
	})

	t.Run("jobs ending and jobs added change the line live", func(t *testing.T) {
		p.t = t
		ok1 := runOver(t, ctx, base, "thumbs.render", true)
		runOver(t, ctx, base, "thumbs.render", true)
		failed := runOver(t, ctx, base, "thumbs.render", false)
		running := claimOverConnect(t, ctx, base, "thumbs.render")
		p.waitFor("three more ended", textIs(batchLine, thumbs+": 120 jobs · 6 ended (4 succeeded, 2 failed) · 114 to go"))
		p.waitFor("the jobs that changed in the list", exists(row(ok1)+`[data-state="succeeded"]`)+" && "+exists(row(failed)+`[data-state="failed"]`)+" && "+
			exists(row(running.jobID)+`[data-state="running"]`))
		more := submitBatch(t, ctx, base, thumbs, "thumbs.render", 5)
		p.waitFor("the jobs added to the batch counted", textIs(batchLine, thumbs+": 125 jobs · 6 ended (4 succeeded, 2 failed) · 119 to go"))
		p.waitFor("and listed", exists(row(more[4].GetId())+`[data-state="queued"]`))
		if _, err := running.client.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: running.jobID, LeaseId: running.lease}); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the running one ended", textIs(batchLine, thumbs+": 125 jobs · 7 ended (5 succeeded, 2 failed) · 118 to go"))
		p.waitFor("the bar: 5 of 125 succeeded, 2 failed", `(() => {
			const part = (s) => document.querySelector('#batch-bar .batch-part[data-state="' + s + '"]')?.style.width;
			return parseFloat(part("succeeded")) === 4 && parseFloat(part("failed")) === 1.6;
		})()`)
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as first loaded"`)
		waitOpenWatches(t, base, 1)
	})

	t.Run("a reload opens the same batch", func(t *testing.T) {
		p.t = t
		p.do("reload", chromedp.Reload())
		p.waitFor("a new page", `window.pageID === undefined`)
		p.waitFor("the batch again, counted", batchInURL(thumbs)+" && "+textIs(batchLine, thumbs+": 125 jobs · 7 ended (5 succeeded, 2 failed) · 118 to go"))
		p.waitFor("only its jobs", onlyBatchRows(thumbs, 50)+" && "+absent(row(mail.ID)))
		p.do("mark this page", chromedp.Evaluate[chromedp.Void](`window.pageID = "the page as reloaded"`))
	})

	t.Run("clearing the filter shows every job again, and the detail leads back to the batch", func(t *testing.T) {
		p.t = t
		p.click("open the newest job's detail", row(newest))
		p.waitFor("its batch among its facts, with no link to the batch already shown",
			textIs("#detail .batch-fact .batch-name", thumbs)+` && document.querySelector("#detail .show-batch").hidden`)
		p.click("show all jobs", "#batch-bar .batch-clear")
		p.waitFor("no batch in the address, and no batch line", batchInURL("")+` && document.getElementById("batch-bar").hidden`)
		p.waitFor("the other jobs again", exists(row(mail.ID))+" && "+exists(row(avatars[1].GetId()))+" && "+exists(row(newest)))
		p.waitFor("the detail still open, now with its link to the batch",
			fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, newest)+` && !document.querySelector("#detail .show-batch").hidden`)

		p.click("show this batch, from the detail", "#detail .show-batch")
		p.waitFor("the batch again", batchInURL(thumbs)+" && "+textIs(batchLine, thumbs+": 125 jobs · 7 ended (5 succeeded, 2 failed) · 118 to go")+" && "+absent(row(mail.ID)))
		p.do("go back", chromedp.NavigateBack())
		p.waitFor("every job again, on Back", batchInURL("")+` && document.getElementById("batch-bar").hidden && `+exists(row(mail.ID)))
		p.waitFor("the same page, never reloaded", `window.pageID === "the page as reloaded"`)
		// The detail follows its job's log on a stream of its own: closed,
		// the feed's is the only one left, whatever the filters before.
		p.click("close the detail", `#detail button[aria-label="Close details"]`)
		waitOpenWatches(t, base, 1)
	})

	p.t = t
	p.click("show the batch for the picture", row(newest)+" .batch-label")
	p.waitFor("the batch", textHas(batchLine, "125 jobs"))
	p.do("move the pointer away", chromedp.MouseEvent(chromedp.MouseMoved, 1, 880))
	if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(artifactPath(t, "web-e2e-batch.png"), png, 0o644)
	}
}

// A batch label as long as the server takes (128 unbroken characters) is
// cut short in its row, whole in the detail and the batch line, and none
// of them widens the page, on a wide window and on a phone's.
func TestALongBatchLabelStaysInsideTheLayout(t *testing.T) {
	ctx, base, _ := startLive(t, 2*time.Minute)

	long := "renders/2026-12-02:" + strings.Repeat("x", jobtype.MaxNameBytes-len("renders/2026-12-02:"))
	job := submitBatch(t, ctx, base, long, "thumbs.render", 1)[0]
	runOver(t, ctx, base, "thumbs.render", true)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the batch and the job", chromedp.Navigate(base+"/?batch="+long+"#job="+job.GetId()))
	p.waitFor("the batch line", textIs(batchLine, long+": 1 job · 1 ended (1 succeeded) · 0 to go"))
	p.waitFor("the job's row and detail", exists(row(job.GetId())+`[data-state="succeeded"]`)+" && "+textIs("#detail .batch-fact .batch-name", long))

	// fits: the row's label cut short inside its row, with the whole name
	// as its tooltip, and the kind (and, where the window has room, the
	// id) whole beside it; the batch line and its button, the detail and
	// its close button within the window; nothing wider than the window.
	fits := func(room bool) string {
		return fmt.Sprintf(`(() => {
		const inside = (el) => {
			const r = el.getBoundingClientRect();
			return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth;
		};
		const onScreen = (el) => {
			el.scrollIntoView({block: "center"});
			const r = el.getBoundingClientRect();
			const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
			return inside(el) && (hit === el || el.contains(hit));
		};
		const row = document.querySelector(%q);
		const label = row.querySelector(".batch-label");
		const whole = (el) => el.scrollWidth <= el.clientWidth;
		const lr = label.getBoundingClientRect(), rr = row.getBoundingClientRect();
		return lr.right <= rr.right && !whole(label) && label.title.includes(%q) &&
			(!%t || (whole(row.querySelector(".kind-name")) && whole(row.querySelector(".job-id")))) &&
			inside(row) && inside(document.getElementById("batch-bar")) && onScreen(document.querySelector("#batch-bar .batch-clear")) &&
			inside(document.getElementById("detail")) && inside(document.querySelector("#detail .batch-name")) &&
			onScreen(document.querySelector('#detail button[aria-label="Close details"]')) &&
			document.documentElement.scrollWidth <= window.innerWidth;
	})()`, row(job.GetId()), long, room)
	}
	for _, size := range []struct {
		name          string
		width, height int64
		room          bool
	}{{"a wide window", 1360, 900, true}, {"a phone", 390, 844, false}} {
		t.Run(size.name, func(t *testing.T) {
			p.t = t
			p.do("size the window", chromedp.EmulateViewport(size.width, size.height))
			p.waitFor("everything within the window, the label cut short in its row", fits(size.room))
			if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
				os.WriteFile(artifactPath(t, "web-e2e-batch-long-"+strconv.FormatInt(size.width, 10)+".png"), png, 0o644)
			}
		})
	}

	// A link with a name no batch can have: the server's reason, and a
	// way back to every job.
	t.Run("a batch name the server refuses", func(t *testing.T) {
		p.t = t
		p.do("size the window", chromedp.EmulateViewport(1360, 900))
		p.do("open a link to a batch named with spaces", chromedp.Navigate(base+"/?batch=not+a+name"))
		p.waitFor("the server's reason, in the banner and the batch line", `document.getElementById("status").dataset.status === "refused"`+" && "+
			textHas("#banner-text", "The server will not watch batch “not a name”")+" && "+textHas("#banner-text", "batch: may only contain")+" && "+
			textHas(batchLine, "not a name: cannot count the jobs: batch: may only contain"))
		p.click("show all jobs", "#batch-bar .batch-clear")
		p.waitFor("every job, live", `document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`+" && "+exists(row(job.GetId())))
	})
}

// Beside a kind as long as the server takes, a batch label keeps room
// enough to be told apart (it was cut to "bat…" on a wide window), and
// the kind is cut instead, both inside the row.
func TestABatchLabelBesideALongKindStaysReadable(t *testing.T) {
	ctx, base, _ := startLive(t, 2*time.Minute)
	longKind := "reports.render-" + strings.Repeat("k", jobtype.MaxNameBytes-len("reports.render-"))
	job := submitBatch(t, ctx, base, "nightly-2026-12-05", longKind, 1)[0]

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("size the window", chromedp.EmulateViewport(1360, 900))
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the label readable beside the kind cut short", fmt.Sprintf(`(() => {
		const row = document.querySelector(%q);
		if (row === null) return false;
		const label = row.querySelector(".batch-label"), kind = row.querySelector(".kind-name");
		const lr = label.getBoundingClientRect(), rr = row.getBoundingClientRect();
		return label.getClientRects().length > 0 && lr.width >= 70 && lr.right <= rr.right && kind.scrollWidth > kind.clientWidth;
	})()`, row(job.GetId())))
}
