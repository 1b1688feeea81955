package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
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
