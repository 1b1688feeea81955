package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobtype"
)

// After an outage the page shows the view it showed before: every job it
// held that the server still has (far more than the stream's and the
// first page's 50 each), refreshed, and the jobs made meanwhile; only
// a job the server no longer has goes (here one deleted while the server
// was down, which no stream will name).
func TestAfterAnOutageThePageShowsTheViewItShowedBefore(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	dbPath := testdb.New(t)
	srv := startServer(t, addr, dbPath)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()
	base := "http://" + addr

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)

	// The oldest job ends, to be deleted while the server is down.
	vanishes := submit(t, ctx, srv.engine, "mail.send", `{}`)
	if _, err := srv.engine.Cancel(ctx, vanishes.ID); err != nil {
		t.Fatal(err)
	}
	const queued = 300
	submitBatch(t, ctx, base, "", "thumbs.render", queued)
	p.waitFor("every job", rowCount(queued+1))
	p.do("mark the rows", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`window.rowsBefore = [...document.querySelectorAll("li.job")].filter((r) => r.dataset.jobId !== %q)`, vanishes.ID)))

	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	st, err := testdb.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, deleted, err := st.DeleteJob(ctx, vanishes.ID); err != nil || !deleted {
		t.Fatalf("delete %s while the server is down: deleted %v, %v", vanishes.ID, deleted, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, addr, dbPath)
	made := submit(t, ctx, srv.engine, "report.export", `{}`)

	p.waitFor("the job the server no longer has gone, every other row still there, and the job made since",
		absent(row(vanishes.ID))+" && "+exists(row(made.ID))+" && "+rowCount(queued+1)+
			` && window.rowsBefore.every((r) => r.isConnected)`)
	p.waitFor("the live status, and no banner", `document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`)
}

// After an outage the list is the one the page showed, not more: it
// reads the view again down to the oldest job it had listed, and asks
// for each older job it held only because that job changed (a worker
// took an old job of the backlog) by its id, so the thousand queued
// jobs between them, which it never showed, stay out (an outside tester
// saw some 50 rows become 1,249 after a restart, under the cap's note).
// Each of those older jobs shows as the server has it now: one changed
// while the server was down shows that change, and one deleted meanwhile
// goes.
func TestAfterAnOutageTheOldJobsThePageHeldComeBackWithoutTheBacklogBetween(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	dbPath := testdb.New(t)
	srv := startServer(t, addr, dbPath)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()
	base := "http://" + addr

	// Two old jobs, then a backlog of more jobs than the page keeps of
	// those that have not ended, then the newest.
	running := submit(t, ctx, srv.engine, "report.export", `{}`)
	ended := submit(t, ctx, srv.engine, "report.print", `{}`)
	const backlog = 1100
	submitBatch(t, ctx, base, "", "thumbs.render", 1000)
	submitBatch(t, ctx, base, "", "thumbs.render", backlog-1000)
	submitBatch(t, ctx, base, "", "mail.send", 60)

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page", chromedp.Navigate(base+"/"))
	p.waitFor("the 50 newest jobs, live", rowCount(50)+` && document.getElementById("status").dataset.status === "live"`)

	// Workers take the two old jobs: they join the list as they change.
	w := claim(t, ctx, srv.engine, "report.export")
	if w.job.ID != running.ID {
		t.Fatalf("claimed %s, want %s", w.job.ID, running.ID)
	}
	w.progress(20, "reading rows")
	claim(t, ctx, srv.engine, "report.print").complete(`{}`)
	p.waitFor("the two old jobs joined the list", exists(row(running.ID)+`[data-state="running"]`)+" && "+exists(row(ended.ID)+`[data-state="succeeded"]`)+" && "+rowCount(52))
	p.do("mark the rows", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`window.rowsBefore = [...document.querySelectorAll("li.job")].filter((r) => r.dataset.jobId !== %q)`, ended.ID)))

	srv.shutdown(t)
	srv = nil
	p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
	// While the server is down, the running job reports progress (as
	// another replica would have taken it) and the ended one is deleted:
	// the fresh stream's 50 newest jobs bring neither.
	st, err := testdb.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateJob(ctx, running.ID, func(j *jobtype.Job) error {
		j.Percent, j.Step, j.UpdatedAt = 70, "writing the file", time.Now()
		return nil
	}); err != nil {
		t.Fatalf("update %s while the server is down: %v", running.ID, err)
	}
	if _, deleted, err := st.DeleteJob(ctx, ended.ID); err != nil || !deleted {
		t.Fatalf("delete %s while the server is down: deleted %v, %v", ended.ID, deleted, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, addr, dbPath)
	made := submit(t, ctx, srv.engine, "mail.digest", `{}`)

	p.waitFor("the same rows, the old running job as it is now, the deleted one gone, and the job made since",
		exists(row(made.ID))+" && "+absent(row(ended.ID))+" && "+textIs(row(running.ID)+" .step", "writing the file")+
			` && window.rowsBefore.every((r) => r.isConnected)`)
	p.waitFor("the live status, and no banner", `document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`)
	// The backlog between them never joined the list (the job that
	// changed while the server was down is the last the page reads
	// again), and the page does not say it keeps only some.
	stats, err := chromedp.Run(p.ctx, chromedp.Evaluate[map[string]any](`({
		rows: document.querySelectorAll("li.job").length,
		thumbs: [...document.querySelectorAll("li.job .kind-name")].filter((e) => e.textContent === "thumbs.render").length,
		capped: !document.getElementById("jobs-capped").hidden,
		count: document.getElementById("jobs-count").textContent,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if stats["rows"] != float64(52) || stats["thumbs"] != float64(0) || stats["capped"] != false {
		t.Fatalf("after the outage the list shows %v rows (%v of the backlog), capped %v, %q; want the 52 it showed, none of the backlog, not capped",
			stats["rows"], stats["thumbs"], stats["capped"], stats["count"])
	}
}
