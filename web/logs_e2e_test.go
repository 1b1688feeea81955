package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/server"
)

// logWorker runs one job as a remote worker does, over Connect: it
// claims the job and appends lines to its log, keeping in want every
// line's text in the order the server numbers them.
type logWorker struct {
	t      *testing.T
	ctx    context.Context
	client jobwatchv1connect.WorkerServiceClient
	jobID  string
	lease  string
	want   []string
}

func claimOverConnect(t *testing.T, ctx context.Context, base, kind string) *logWorker {
	t.Helper()
	return claimOverConnectAs(t, ctx, base, kind, "")
}

// claimOverConnectAs is claimOverConnect with a worker token ("" for
// none), for a server with tokens.
func claimOverConnectAs(t *testing.T, ctx context.Context, base, kind, token string) *logWorker {
	t.Helper()
	httpClient := http.DefaultClient
	if token != "" {
		httpClient = &http.Client{Transport: bearerTransport{token: token, next: http.DefaultTransport}}
	}
	client := jobwatchv1connect.NewWorkerServiceClient(httpClient, base)
	res, err := client.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "e2e-logger", Kinds: []string{kind}})
	if err != nil || res.GetJob() == nil {
		t.Fatalf("claim %s: %v (job %v)", kind, err, res.GetJob())
	}
	return &logWorker{t: t, ctx: ctx, client: client, jobID: res.GetJob().GetId(), lease: res.GetLeaseId()}
}

// bearerTransport sends each request with its token, as a worker does.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// log appends texts on stream in one call, after a heartbeat that keeps
// the lease through the test's restarts.
func (w *logWorker) log(stream jobwatchv1.LogStream, texts ...string) {
	w.t.Helper()
	if _, err := w.client.Heartbeat(w.ctx, &jobwatchv1.HeartbeatRequest{JobId: w.jobID, LeaseId: w.lease}); err != nil {
		w.t.Fatalf("heartbeat: %v", err)
	}
	lines := make([]*jobwatchv1.AppendLogLine, len(texts))
	for i, text := range texts {
		lines[i] = &jobwatchv1.AppendLogLine{Text: text, Stream: stream}
	}
	res, err := w.client.AppendJobLogs(w.ctx, &jobwatchv1.AppendJobLogsRequest{JobId: w.jobID, LeaseId: w.lease, Lines: lines})
	if err != nil {
		w.t.Fatalf("append job logs: %v", err)
	}
	w.want = append(w.want, texts...)
	if res.GetLastSeq() != int64(len(w.want)) {
		w.t.Fatalf("the last seq is %d, want %d", res.GetLastSeq(), len(w.want))
	}
}

// numbered appends n stdout lines "line 1", "line 2"… numbered after
// every line so far.
func (w *logWorker) numbered(n int) {
	w.t.Helper()
	texts := make([]string, n)
	for i := range texts {
		texts[i] = fmt.Sprintf("line %d", len(w.want)+i+1)
	}
	w.log(jobwatchv1.LogStream_LOG_STREAM_STDOUT, texts...)
}

const logPane = "#detail .log-pane"

// logShowsEveryLine waits until the pane shows as many lines as the
// worker appended, the last one last, then checks that they are exactly
// the worker's, each once, numbered 1, 2, 3… in order.
func logShowsEveryLine(p *page, w *logWorker) {
	p.t.Helper()
	last := w.want[len(w.want)-1]
	p.waitFor(fmt.Sprintf("all %d lines", len(w.want)), fmt.Sprintf(`(() => {
		const rows = document.querySelectorAll("#detail .log-line");
		return rows.length >= %d && rows[rows.length - 1].textContent === %s;
	})()`, len(w.want), strconv.Quote(last)))
	got, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#detail .log-line")].map(r => r.dataset.seq + " " + r.textContent)`))
	if err != nil {
		p.t.Fatal(err)
	}
	want := make([]string, len(w.want))
	for i, text := range w.want {
		want[i] = strconv.Itoa(i+1) + " " + text
	}
	g, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(g) != string(wj) {
		p.t.Fatalf("the log pane shows\n%s\nwant\n%s", g, wj)
	}
}

// atBottom is a JS condition: the log pane is scrolled to its end.
const atBottom = `(() => { const s = document.querySelector("#detail .log"); return s.scrollHeight > s.clientHeight && s.scrollHeight - s.scrollTop - s.clientHeight <= 4; })()`

// The job detail's log pane, against the real server: lines a worker
// appends over Connect appear at the bottom; a reader who scrolled up is
// left where they are and told how many lines came; the log stream that
// the server ends at its (here short) lifetime, and the one a server
// restart breaks, resume after the last line shown, with no line twice
// and none missing; colour codes show as colour, never as escapes.
func TestTheLogPaneFollowsAJobsLogLiveAcrossReconnects(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	dbPath := testdb.New(t)
	addr := freeAddr(t)
	base := "http://" + addr
	// Every stream ends after 1.5 s, as a load balancer's rotation would
	// end it, and the page resumes it.
	shortStreams := func(c *server.Config) { c.StreamLifetime = 1500 * time.Millisecond }
	srv := startServer(t, addr, dbPath, shortStreams)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()

	job := submit(t, ctx, srv.engine, "build.compile", `{"target":"all"}`)
	w := claimOverConnect(t, ctx, base, "build.compile")
	if w.jobID != job.ID {
		t.Fatalf("claimed %s, want %s", w.jobID, job.ID)
	}

	p := &page{t: t, ctx: newTab(t, ctx)}
	p.do("open the page on the running job", chromedp.Navigate(base+"/#job="+job.ID))
	p.waitFor("the job's detail", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, job.ID))
	p.waitFor("its log pane, live and empty", exists(logPane+`[data-status="live"]`)+" && "+textIs("#detail .log-empty", "No lines yet."))

	t.Run("appended lines appear at the bottom, which the pane keeps to", func(t *testing.T) {
		p.t = t
		w.numbered(60)
		logShowsEveryLine(p, w)
		p.waitFor("the pane scrolled to its last line", atBottom)
		w.numbered(20)
		logShowsEveryLine(p, w)
		p.waitFor("the pane still at its end", atBottom+" && "+exists(logPane+`[data-following="true"]`)+` && document.querySelector("#detail .log-jump").hidden`)
	})

	t.Run("colour codes show as a coloured span, stderr is marked, no escape shows", func(t *testing.T) {
		p.t = t
		w.log(jobwatchv1.LogStream_LOG_STREAM_STDERR, "\x1b[31mFAILED\x1b[0m: 3 tests \x1b[1mbroken\x1b[0m\x1b[K")
		w.want[len(w.want)-1] = "FAILED: 3 tests broken" // as the page shows it
		logShowsEveryLine(p, w)
		p.waitFor("the red word in the terminal's red, on a line marked stderr", `(() => {
			const rows = document.querySelectorAll("#detail .log-line");
			const row = rows[rows.length - 1];
			const red = row.querySelector("span.ansi-red");
			const probe = document.createElement("span");
			probe.style.color = "var(--ansi-red)";
			document.body.append(probe);
			const want = getComputedStyle(probe).color;
			probe.remove();
			return row.classList.contains("log-stderr") && red !== null && red.textContent === "FAILED" &&
				getComputedStyle(red).color === want && want !== getComputedStyle(row).color &&
				row.querySelector("span.ansi-bold")?.textContent === "broken";
		})()`)
		p.waitFor("no escape character anywhere in the pane", `!/[\x00-\x08\x0b-\x1f\x7f]/.test(document.querySelector("#detail .log").textContent)`)
	})

	t.Run("a reader who scrolled up stays put and is told how many lines came", func(t *testing.T) {
		p.t = t
		p.do("focus the log and press Home", chromedp.Evaluate[chromedp.Void](`document.querySelector("#detail .log").focus()`), chromedp.KeyEvent(kb.Home))
		p.waitFor("the pane at its top, no longer following", `document.querySelector("#detail .log").scrollTop === 0`+" && "+exists(logPane+`[data-following="false"]`))
		p.waitFor("a button to follow again", textIs("#detail .log-jump", "Follow ↓")+` && !document.querySelector("#detail .log-jump").hidden`)
		w.numbered(10)
		logShowsEveryLine(p, w)
		p.waitFor("the count of new lines on the button", textIs("#detail .log-jump", "10 new lines ↓"))
		p.waitFor("the pane where the reader left it", `document.querySelector("#detail .log").scrollTop === 0`)
		if png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot()); err == nil {
			os.WriteFile(artifactPath(t, "web-e2e-logs-scrolled.png"), png, 0o644)
		}
		p.click("click the button", "#detail .log-jump")
		p.waitFor("the pane at its end, following again", atBottom+" && "+exists(logPane+`[data-following="true"]`)+` && document.querySelector("#detail .log-jump").hidden`)
		w.numbered(5)
		logShowsEveryLine(p, w)
		p.waitFor("the newest line in view", atBottom)
	})

	t.Run("streams the server ends at their lifetime resume with no line twice or missing", func(t *testing.T) {
		p.t = t
		dialled := func() int {
			n, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.querySelector("#detail .log-pane").dataset.streams`))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := strconv.Atoi(n)
			return v
		}
		// Append on each of four streams in turn: each is dialled after the
		// last seq its predecessor brought.
		for range 4 {
			before := dialled()
			p.waitFor("the next stream", fmt.Sprintf(`Number(document.querySelector("#detail .log-pane").dataset.streams) > %d`, before))
			w.numbered(3)
			logShowsEveryLine(p, w)
		}
	})

	t.Run("after a server restart the pane resumes and shows what was appended meanwhile, once", func(t *testing.T) {
		p.t = t
		srv.shutdown(t)
		srv = nil
		p.waitFor("the pane reconnecting", exists(logPane+`[data-status="reconnecting"]`))
		srv = startServer(t, addr, dbPath, shortStreams)
		// Appended while the page may still wait to retry: the resumed
		// stream must bring them.
		w.numbered(7)
		logShowsEveryLine(p, w)
		p.waitFor("the pane live again", exists(logPane+`[data-status="live"]`))
		w.numbered(2)
		logShowsEveryLine(p, w)
		p.waitFor("the newest line in view", atBottom)
	})

	t.Run("after a restore from an older copy the pane shows the server's log, from its start", func(t *testing.T) {
		if !testdb.IsSQLite(dbPath) {
			// The pane's code is the same whatever the server's
			// database; the copy is made and restored here as an
			// operator does a SQLite file's.
			t.Skip("a restore of an older copy is made of a SQLite file")
		}
		p.t = t
		backup := backUp(t, ctx, dbPath)
		kept := len(w.want)
		w.numbered(30) // lines the backup does not hold
		logShowsEveryLine(p, w)
		srv.shutdown(t)
		srv = nil
		p.waitFor("the pane reconnecting", exists(logPane+`[data-status="reconnecting"]`))
		restore(t, backup, dbPath)
		srv = startServer(t, addr, dbPath, shortStreams)
		w.want = w.want[:kept]
		p.waitFor("the pane live again", exists(logPane+`[data-status="live"]`))
		logShowsEveryLine(p, w)
		w.numbered(4)
		logShowsEveryLine(p, w)
		p.waitFor("the newest line in view", atBottom)
	})

	t.Run("once the job ends the pane says so", func(t *testing.T) {
		p.t = t
		w.log(jobwatchv1.LogStream_LOG_STREAM_UNSPECIFIED, "compiled 412 files")
		if _, err := w.client.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: w.jobID, LeaseId: w.lease}); err != nil {
			t.Fatalf("complete: %v", err)
		}
		p.waitFor("the pane says the job ended", exists(logPane+`[data-status="ended"]`)+" && "+textIs("#detail .log-status", "the job has ended"))
		logShowsEveryLine(p, w)
		// A handler's line is plain: neither stderr nor stdout.
		p.waitFor("the handler's line plain", `document.querySelector("#detail .log-line:last-child").classList.contains("log-handler")`)
	})

	t.Run("a failed job retried from the page logs its next attempt below the first", func(t *testing.T) {
		p.t = t
		flaky := submit(t, ctx, srv.engine, "build.flaky", `{}`)
		first := claimOverConnect(t, ctx, base, "build.flaky")
		p.click("open its detail", row(flaky.ID))
		p.waitFor("its log pane", fmt.Sprintf(`document.querySelector(%q)?.dataset.jobId === %q`, logPane, flaky.ID)+" && "+exists(logPane+`[data-status="live"]`))
		first.numbered(3)
		logShowsEveryLine(p, first)
		if _, err := first.client.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: first.jobID, LeaseId: first.lease,
			Error: &jobwatchv1.JobError{Type: "LinkError", Message: "undefined: main"}}); err != nil {
			t.Fatalf("fail: %v", err)
		}
		p.waitFor("the pane says the job ended", exists(logPane+`[data-status="ended"]`))
		p.click("click retry", `#detail button[data-action="retry"]`)
		p.click("say yes", "#detail .confirm-yes")
		second := claimOverConnect(t, ctx, base, "build.flaky")
		second.want = first.want
		second.numbered(2)
		p.waitFor("the second attempt's lines below a marker", fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll("#detail .log > div")];
			return rows.map(r => r.textContent).join("|") === %q;
		})()`, "line 1|line 2|line 3|attempt 2|line 4|line 5"))
		logShowsEveryLine(p, second)
	})

	p.t = t
	if png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)); err == nil {
		os.WriteFile(artifactPath(t, "web-e2e-logs.png"), png, 0o644)
	}
}
