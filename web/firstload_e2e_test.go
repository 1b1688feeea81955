package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

const getJob = "/jobwatch.v1.JobService/GetJob"

// A fresh browser with no token, on a server that needs one, sends no
// call the server would refuse for want of it: the first load called
// ListJobs before GetServerInfo had said a token was needed, and the
// console showed the 401. Now it asks for the token, and nothing else,
// and once one is entered shows the jobs. So for a link to a job: its
// GetJob, sent at once, was refused, and a toast and a note said so
// beside the banner, the toast staying up for seconds after the token was
// entered; now the job is asked for once there is a token.
func TestAFreshPageOnAServerWithTokensAsksForOneBeforeAnyOtherCall(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const adminToken = "jw_e2e-fresh-admin-token"
	tokens := tokensOf(t, map[string][2]string{adminToken: {"admin", ""}})
	addr := freeAddr(t)
	base := "http://" + addr
	srv := startServer(t, addr, testdb.New(t), func(c *server.Config) { c.Tokens = tokens })
	defer srv.shutdown(t)
	job, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Kind: "billing.invoice"})
	if err != nil {
		t.Fatal(err)
	}

	tab := newTab(t, ctx)
	// Every message of the console from the first load on: the browser's
	// own (a failed call's "401 (Unauthorized)") and the page's. The tab
	// opens first, with the Log domain on, so that the listener's context,
	// cancelled to stop it, is not the one the tab lives as long as.
	if _, err := chromedp.Call(tab, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("listen to the browser's log: %v", err)
	}
	listening, stopListening := context.WithCancel(tab)
	defer stopListening()
	messages := chromedp.Console(listening)
	var complaints []string
	heard := make(chan struct{})
	go func() {
		defer close(heard)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				complaints = append(complaints, m.String())
			}
		}
	}()
	p := &page{t: t, ctx: tab}
	p.do("open a link to the job in a fresh browser", chromedp.Navigate(base+"/?job="+job.ID))
	p.waitFor("the token asked for, the page saying why it shows nothing", `!document.getElementById("token-form").hidden`+
		` && document.getElementById("status").dataset.status === "unauthenticated"`+
		` && `+textHas("#banner-text", "The server wants a token")+` && `+textIs("#jobs-empty", "Nothing shown: see the message above.")+
		` && `+textIs("#queues-note", "seeing and pausing queues takes an admin token: enter one"))
	p.waitFor("no toast and no note beside the banner", `document.getElementById("error").hidden && `+textIs("#open-note", ""))
	for _, procedure := range []string{listJobs, watchJobs, listQueues, listSchedules, getJob} {
		if n := requestsOf(t, base, adminToken, procedure); n != 0 {
			t.Errorf("the page without a token called %s %v times, want none", procedure, n)
		}
	}
	stopListening()
	<-heard
	if len(complaints) > 0 {
		t.Errorf("the console on a fresh load:\n%s\nwant nothing", strings.Join(complaints, "\n"))
	}

	useTokenOn(p, adminToken)
	p.waitFor("the job, live, its details open, no error shown", exists(row(job.ID))+` && document.getElementById("status").dataset.status === "live" && document.getElementById("banner").hidden`+
		` && `+detailShows(job.ID, "queued")+` && document.getElementById("error").hidden`)
}
