package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/jobwatch/jobwatch/internal/ci"
	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/web"
)

const chromiumPath = "/usr/bin/chromium"

// requireChromium skips where Chromium is missing, except in CI, which
// installs it and must not pass without running the page.
func requireChromium(t *testing.T) {
	t.Helper()
	_, err := os.Stat(chromiumPath)
	ci.Require(t, err, "the page's end-to-end test needs Chromium (apt-get install chromium)")
}

// liveServer is the real jobwatch server on a SQLite file: what
// `jobwatch demo` runs, with the test as its worker.
type liveServer struct {
	engine *jobs.Engine
	server *server.Server
	store  store.Store
	stop   context.CancelFunc
	served chan error
}

func startServer(t *testing.T, addr, dbPath string, configure ...func(*server.Config)) *liveServer {
	t.Helper()
	return startServerWithRules(t, addr, dbPath, jobtype.Rules{}, configure...)
}

// startLive starts, for a test of the page in Chromium, a live server on
// a new database, shut down when the test ends, and returns the context
// the test's calls and browser run in (within at most), the server's
// URL, and the server.
func startLive(t *testing.T, within time.Duration) (context.Context, string, *liveServer) {
	t.Helper()
	return startLiveWithRules(t, within, jobtype.Rules{})
}

// startLiveWithRules is startLive with the queues' and tenants' rules of
// a configuration file.
func startLiveWithRules(t *testing.T, within time.Duration, rules jobtype.Rules) (context.Context, string, *liveServer) {
	t.Helper()
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	addr := freeAddr(t)
	srv := startServerWithRules(t, addr, testdb.New(t), rules)
	t.Cleanup(func() { srv.shutdown(t) })
	return ctx, "http://" + addr, srv
}

// startServerWithRules is startServer with the queues' and tenants' rules
// of a configuration file.
func startServerWithRules(t *testing.T, addr, dbPath string, rules jobtype.Rules, configure ...func(*server.Config)) *liveServer {
	t.Helper()
	st, err := testdb.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Depth samples 100ms apart, so that a few sweeps draw a sparkline.
	engine := jobs.New(st, jobs.Config{Logger: logger, DepthInterval: 100 * time.Millisecond, Rules: rules})
	cfg := server.Config{
		Page:      web.Handler(),
		DemoKinds: []string{"demo.sleep", "demo.fail"},
		Logger:    logger,
		// Short, so a test never waits on a parked call at shutdown.
		ShutdownGrace: 2 * time.Second,
	}
	for _, f := range configure {
		f(&cfg)
	}
	srv := server.New(engine, cfg)
	var ln net.Listener
	// The address was just freed by the previous server; the kernel may
	// take a moment to let it go.
	for i := 0; ; i++ {
		ln, err = net.Listen("tcp", addr)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &liveServer{engine: engine, server: srv, store: st, stop: cancel, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ctx, ln) }()
	return s
}

// shutdown stops the server as SIGTERM would and closes its database.
func (s *liveServer) shutdown(t *testing.T) {
	t.Helper()
	s.stop()
	if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve: %v", err)
	}
	if err := s.store.Close(); err != nil {
		t.Errorf("close store: %v", err)
	}
}

// worker drives one job through the engine the way a remote worker's
// ClaimJob/Heartbeat/CompleteJob/FailJob calls would.
type worker struct {
	t   *testing.T
	ctx context.Context
	e   *jobs.Engine
	job jobtype.Job
}

func claim(t *testing.T, ctx context.Context, e *jobs.Engine, kind string) *worker {
	t.Helper()
	j, err := e.Claim(ctx, jobs.ClaimRequest{WorkerID: "e2e-worker", Kinds: []string{kind}}, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatalf("claim %s: %v", kind, err)
	}
	return &worker{t: t, ctx: ctx, e: e, job: j}
}

func (w *worker) progress(percent int32, step string) {
	w.t.Helper()
	if _, err := w.e.Heartbeat(w.ctx, w.job.ID, w.job.LeaseID, percent, step); err != nil {
		w.t.Fatalf("heartbeat: %v", err)
	}
}

func (w *worker) complete(result string) {
	w.t.Helper()
	if _, err := w.e.Complete(w.ctx, w.job.ID, w.job.LeaseID, json.RawMessage(result)); err != nil {
		w.t.Fatalf("complete: %v", err)
	}
}

func (w *worker) fail(typ, msg string) {
	w.t.Helper()
	if _, err := w.e.Fail(w.ctx, w.job.ID, w.job.LeaseID, jobtype.JobError{Type: typ, Message: msg}, false); err != nil {
		w.t.Fatalf("fail: %v", err)
	}
}

func submit(t *testing.T, ctx context.Context, e *jobs.Engine, kind, payload string) jobtype.Job {
	t.Helper()
	j, err := e.Submit(ctx, jobs.SubmitRequest{Kind: kind, Payload: json.RawMessage(payload)})
	if err != nil {
		t.Fatalf("submit %s: %v", kind, err)
	}
	return j
}

// page wraps the browser tab with assertions that wait for the page to
// show something, as a person watching it would.
type page struct {
	t   *testing.T
	ctx context.Context
}

// waitFor polls a JavaScript condition until it holds, for at most 45 s:
// a generous bound for a page on a loaded 2-core machine.
func (p *page) waitFor(what, js string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(45*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		shown, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		p.t.Fatalf("the page never showed %s: %v\npage text:\n%s", what, err, shown)
	}
}

// answerFirst makes the page's calls of every other RPC but
// GetServerInfo wait, before they are sent, until the answer to its first
// call of method is in: an order of answers a busy server gives now and
// then, every time. (A page without a token sends its other calls only
// once GetServerInfo has said the server needs none.) Call it before the
// page is opened.
func (p *page) answerFirst(method string) {
	p.t.Helper()
	script := `(() => {
		const method = ` + strconv.Quote("/"+method) + `;
		const send = window.fetch.bind(window);
		let answered;
		const answer = new Promise((resolve) => (answered = resolve));
		window.fetch = async (input, init) => {
			const url = String(input instanceof Request ? input.url : input);
			if (url.endsWith(method)) {
				return send(input, init).finally(answered);
			}
			if (url.endsWith("/GetServerInfo")) {
				return send(input, init);
			}
			await answer;
			return send(input, init);
		};
	})()`
	if _, err := chromedp.Call(p.ctx, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
		p.t.Fatalf("hold the page's calls until %s answers: %v", method, err)
	}
}

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// showState picks state in the page's Show menu, as a person would.
func (p *page) showState(state string) {
	p.t.Helper()
	p.do("show the "+state+" jobs", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const s = document.getElementById("state-filter");
		s.value = %q;
		s.dispatchEvent(new Event("change"));
	})()`, state)))
}

// freeAddr is a loopback address no listener holds right now, for a
// server the test starts on it.
func freeAddr(t *testing.T) string {
	t.Helper()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	return probe.Addr().String()
}

func row(id string) string { return fmt.Sprintf(`li.job[data-job-id=%q]`, id) }

// textIs is a JS condition: the element's text is exactly want.
func textIs(selector, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? null) === %s`, strconv.Quote(selector), strconv.Quote(want))
}

func textHas(selector, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? "").includes(%s)`, strconv.Quote(selector), strconv.Quote(want))
}

func exists(selector string) string {
	return fmt.Sprintf(`document.querySelector(%s) !== null`, strconv.Quote(selector))
}

// artifactPath is where a screenshot is kept: $JOBWATCH_ARTIFACTS (CI
// keeps that folder) or web/testdata/out (gitignored).
func artifactPath(t *testing.T, name string) string {
	dir := os.Getenv("JOBWATCH_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("testdata", "out")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// newTab starts headless Chromium and opens a tab in it, both closed when
// the test ends.
func newTab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{},
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	return tabCtx
}

func TestPageFollowsJobsLiveAndRecoversFromAServerRestart(t *testing.T) {
	requireChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dbPath := testdb.New(t)
	addr := freeAddr(t)
	srv := startServer(t, addr, dbPath)
	defer func() {
		if srv != nil {
			srv.shutdown(t)
		}
	}()

	p := &page{t: t, ctx: newTab(t, ctx)}

	// A job from before the page opened is in the stream's first batch.
	resize := submit(t, ctx, srv.engine, "images.resize", `{"album":"summer-2026","images":11}`)

	p.do("open the page", chromedp.Navigate("http://"+addr+"/"))
	p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
	p.waitFor("the job submitted before the page opened", exists(row(resize.ID)+`[data-state="queued"]`))

	t.Run("the demo button submits a job that appears once, queued", func(t *testing.T) {
		p.t = t
		p.waitFor("the demo button", `!document.getElementById("demo-form").hidden`)
		p.do("submit a demo job", chromedp.Click(chromedp.ID("demo-submit")))
		p.waitFor("a demo.sleep job", `[...document.querySelectorAll("li.job .kind-name")].some(e => e.textContent === "demo.sleep")`)
		p.waitFor("its detail", `document.getElementById("detail").dataset.state === "queued"`)
		// The job came both from SubmitJob's answer and from the stream.
		p.waitFor("exactly two rows", `document.querySelectorAll("li.job").length === 2`)
	})

	t.Run("progress moves with percent and step text, then the result shows", func(t *testing.T) {
		p.t = t
		w := claim(t, ctx, srv.engine, "images.resize")
		p.waitFor("the job running", exists(row(resize.ID)+`[data-state="running"]`))
		w.progress(45, "batch 5 of 11")
		p.waitFor("45 %", textIs(row(resize.ID)+" .percent", "45%"))
		p.waitFor("the step text", textIs(row(resize.ID)+" .step", "batch 5 of 11"))
		p.waitFor("the bar at 45 %", fmt.Sprintf(`document.querySelector(%q).style.width === "45%%"`, row(resize.ID)+" .fill"))
		w.progress(82, "batch 9 of 11")
		p.waitFor("82 %", textIs(row(resize.ID)+" .percent", "82%"))
		p.waitFor("the next step text", textIs(row(resize.ID)+" .step", "batch 9 of 11"))
		w.complete(`{"resized":11,"bytes_saved":48213390}`)
		p.waitFor("the job succeeded", exists(row(resize.ID)+`[data-state="succeeded"]`))
		p.waitFor("100 % on success", textIs(row(resize.ID)+" .percent", "100%"))

		p.do("open its detail", chromedp.Click(chromedp.CSS(row(resize.ID))))
		p.waitFor("the detail of the job", fmt.Sprintf(`document.getElementById("detail").dataset.jobId === %q`, resize.ID))
		p.waitFor("the result", textHas("#detail .result", `"resized": 11`))
		p.waitFor("the payload", textHas("#detail .payload", `"album": "summer-2026"`))
		p.waitFor("the attempt", textIs("#detail .attempts", "attempt 1 of 1"))
		p.waitFor("the timeline to its end", `[...document.querySelectorAll("#detail .timeline-label")].map(e => e.textContent).join(",") === "submitted,started,succeeded"`)
	})

	t.Run("a failure shows its error type in the list and the detail", func(t *testing.T) {
		p.t = t
		export := submit(t, ctx, srv.engine, "report.export", `{"format":"csv"}`)
		w := claim(t, ctx, srv.engine, "report.export")
		w.progress(30, "reading rows")
		p.waitFor("the export running", textIs(row(export.ID)+" .percent", "30%"))
		w.fail("TimeoutError", "warehouse did not answer in 30s")
		p.waitFor("the job failed", exists(row(export.ID)+`[data-state="failed"]`))
		p.waitFor("the error type in the list", textIs(row(export.ID)+" .step", "TimeoutError"))
		p.do("open its detail", chromedp.Click(chromedp.CSS(row(export.ID))))
		p.waitFor("the error type in the detail", textIs("#detail .error-type", "TimeoutError"))
		p.waitFor("the error message in the detail", textIs("#detail .error-message", "warehouse did not answer in 30s"))
	})

	t.Run("after a server restart the page says it is reconnecting, then catches up", func(t *testing.T) {
		p.t = t
		// Remember the rows on screen: resuming must update these very
		// elements, never clear the list and build it again (a flicker).
		p.waitFor("three rows before the restart", `(window.rowsBefore = [...document.querySelectorAll("li.job")]).length === 3`)
		srv.shutdown(t)
		srv = nil
		p.waitFor("the reconnecting banner", `!document.getElementById("banner").hidden && document.getElementById("banner").textContent.startsWith("Reconnecting…")`)
		p.waitFor("the reconnecting status", `document.getElementById("status").dataset.status === "reconnecting"`)
		p.waitFor("the last known jobs still listed", `window.rowsBefore.every(el => el.isConnected)`)
		if png, err := chromedp.Run(p.ctx, chromedp.CaptureScreenshot()); err == nil {
			os.WriteFile(artifactPath(t, "web-e2e-reconnecting.png"), png, 0o644)
		}

		srv = startServer(t, addr, dbPath)
		// A change made on the new server while the page may still be
		// waiting to retry: the resumed stream must bring it.
		w := claim(t, ctx, srv.engine, "demo.sleep")
		w.progress(60, "sleeping 3 of 5")
		demoRow := row(w.job.ID)
		p.waitFor("the change made after the restart", textIs(demoRow+" .percent", "60%"))
		p.waitFor("its step text", textIs(demoRow+" .step", "sleeping 3 of 5"))
		p.waitFor("the banner gone", `document.getElementById("banner").hidden`)
		p.waitFor("the live status again", `document.getElementById("status").dataset.status === "live"`)
		p.waitFor("no duplicate rows", `document.querySelectorAll("li.job").length === 3 && new Set([...document.querySelectorAll("li.job")].map(e => e.dataset.jobId)).size === 3`)
		p.waitFor("the same rows, updated in place", `window.rowsBefore.every(el => el.isConnected)`)

		// Leave a calm, varied page for the screenshot: a queued job too,
		// and the failed job's detail open.
		submit(t, ctx, srv.engine, "mail.digest", `{"list":"weekly"}`)
		p.waitFor("four jobs", `document.querySelectorAll("li.job").length === 4`)
	})

	t.Run("the page follows every job on one stream", func(t *testing.T) {
		// Four jobs on screen, one WatchJobs stream open: a browser allows
		// only six HTTP/1.1 connections per origin.
		if got := openWatches(t, "http://"+addr); got != 1 {
			t.Errorf("open watches on the server = %v, want 1", got)
		}
	})

	t.Run("the queue panel counts what is queued and running", func(t *testing.T) {
		p.t = t
		p.waitFor("one queued", textIs(`tr[data-queue="default"] .queued`, "1"))
		p.waitFor("one running", textIs(`tr[data-queue="default"] .running`, "1"))
		p.waitFor("no stale error note", textIs("#queues-note", ""))
	})

	// The queue panel's rules, alerts and depths, from jobs of a tenant
	// of their own (the queue panel shows every tenant's queues; the job
	// list keeps showing the default tenant's four).
	opsJob := func(t *testing.T, queue, kind string) jobtype.Job {
		t.Helper()
		j, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "ops", Queue: queue, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	sweep := func(t *testing.T) {
		t.Helper()
		if err := srv.engine.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	queueRow := func(name string) string { return fmt.Sprintf(`tr[data-queue=%q]`, name) }

	t.Run("a serial queue with pools shows its mode and pool use", func(t *testing.T) {
		p.t = t
		if err := srv.engine.SetRules(jobtype.Rules{
			Pools: map[string]int{"db": 4},
			Queues: map[string]jobtype.QueueRules{
				"index":   {Serial: true, Uses: []string{"db"}},
				"reports": {MaxRunning: 8, MaxRunningPerTenant: 2, Uses: []string{"db"}},
				"deploys": {AlertAfter: time.Second},
			},
		}); err != nil {
			t.Fatal(err)
		}
		opsJob(t, "index", "git.reindex")
		claim(t, ctx, srv.engine, "git.reindex")
		opsJob(t, "index", "git.reindex")
		p.waitFor("index as serial", textIs(queueRow("index")+" .mode", "serial"))
		p.waitFor("index's pool use", textIs(queueRow("index")+" .pools", "db 1/4"))
		p.waitFor("index's counts", textIs(queueRow("index")+" .queued", "1")+" && "+textIs(queueRow("index")+" .running", "1"))
		p.waitFor("reports as bounded parallel, sharing the pool", textIs(queueRow("reports")+" .mode", "parallel · max 8, 2/tenant")+" && "+textIs(queueRow("reports")+" .pools", "db 1/4"))
		p.waitFor("an undeclared queue as parallel without pools", textIs(queueRow("default")+" .mode", "parallel")+" && "+textIs(queueRow("default")+" .pools", ""))
		// No schedules (and a server that cannot list them yet): no
		// section, and no error.
		p.waitFor("no schedules section, silently", `document.getElementById("schedules-panel").hidden`+" && "+textIs("#queues-note", "")+` && document.getElementById("error").hidden`)
	})

	t.Run("an alerting queue's row is red and says since when", func(t *testing.T) {
		p.t = t
		sweep(t) // deploys is empty: drained now
		opsJob(t, "deploys", "deploy.rollout")
		// alert_after is a second: sweep until the engine says so.
		var since time.Time
		deadline := time.Now().Add(20 * time.Second)
		for since.IsZero() {
			if time.Now().After(deadline) {
				t.Fatal("deploys did not alert within 20s")
			}
			time.Sleep(50 * time.Millisecond)
			sweep(t)
			stats, err := srv.engine.QueueStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range stats {
				if q.Name == "deploys" && q.Alerting {
					since = q.AlertingSince
				}
			}
		}
		row := queueRow("deploys")
		p.waitFor("deploys alerting", exists(row+`[data-alerting="true"]`))
		p.waitFor("since when, as the browser tells the time",
			fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").startsWith("alerting since " + new Date(%d).toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit"}) + ", ")`,
				row+" .queue-status", since.UnixMilli()))
		// Red: the status in the alert colour, and the bar on the row's edge.
		p.waitFor("the row in red", fmt.Sprintf(`(() => {
			const probe = document.createElement("span");
			probe.style.color = "var(--failed)";
			document.body.append(probe);
			const red = getComputedStyle(probe).color;
			probe.remove();
			const status = getComputedStyle(document.querySelector(%q));
			const edge = getComputedStyle(document.querySelector(%q));
			return status.backgroundColor === red && edge.boxShadow.includes(red) && edge.backgroundColor !== "rgba(0, 0, 0, 0)";
		})()`, row+" .queue-status", row+" td"))
		p.waitFor("a quiet queue not red", exists(queueRow("reports")+`[data-alerting="false"]`)+" && "+textIs(queueRow("reports")+" .queue-status", ""))
	})

	t.Run("the sparkline draws one point per depth sample", func(t *testing.T) {
		p.t = t
		// Sweeps further apart than the 100ms depth interval each take a
		// sample; deploys now holds its job, so the line rises.
		for range 5 {
			time.Sleep(150 * time.Millisecond)
			sweep(t)
		}
		stats, err := srv.engine.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		samples := 0
		for _, q := range stats {
			if q.Name == "deploys" {
				samples = len(q.DepthHistory) // the samples, and this read's now
			}
		}
		if samples < 7 {
			t.Fatalf("deploys has %d depth samples, want at least 7 (the sweeps above, and now)", samples)
		}
		spark := queueRow("deploys") + " svg.spark"
		p.waitFor(fmt.Sprintf("a sparkline of %d samples", samples), fmt.Sprintf(`(() => {
			const svg = document.querySelector(%q);
			if (svg === null || svg.dataset.samples !== %q) return false;
			const points = svg.querySelector("polyline").points;
			// Empty at the first sample (the bottom), one job at the last
			// (the top).
			return points.length === %d && points[0].y > points[points.length - 1].y;
		})()`, spark, strconv.Itoa(samples), samples))
	})

	t.Run("a schedule shows its run while it is unfinished, then when the next comes", func(t *testing.T) {
		p.t = t
		rules := srv.engine.Rules()
		rules.Schedules = []jobtype.Schedule{{Name: "nightly-digest", Kind: "digest.send", Queue: "reports", Tenant: "ops", Every: time.Hour}}
		if err := srv.engine.SetRules(rules); err != nil {
			t.Fatal(err)
		}
		sweep(t) // queues the schedule's first run
		row := `tr[data-schedule="nightly-digest"]`
		p.waitFor("the schedules section", `!document.getElementById("schedules-panel").hidden`)
		p.waitFor("the schedule's row", textIs(row+" .schedule-queue", "reports")+" && "+textIs(row+" .every", "1h"))
		run := claim(t, ctx, srv.engine, "digest.send")
		p.waitFor("the running run, linked", exists(row+` .next-run[data-kind="run"] a.job-link`)+
			fmt.Sprintf(` && (document.querySelector(%q)?.textContent ?? "").startsWith("running: %s")`, row+" .next-run", run.job.ID))
		run.complete(`{"sent": 3}`)
		p.waitFor("the next run an hour after the end", exists(row+` .next-run[data-kind="at"]`)+
			` && / in (1h|59m)/.test(document.querySelector(`+strconv.Quote(row+" .next-run")+`)?.textContent ?? "")`)
	})

	t.Run("switching the tenant shows that tenant's jobs only, still on one stream", func(t *testing.T) {
		p.t = t
		setTenant := func(name string) {
			p.do("type tenant "+name, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
				`{const i = document.getElementById("tenant"); i.value = %q; i.dispatchEvent(new Event("change"));}`, name)))
		}
		setTenant("acme")
		p.waitFor("an empty list", `document.querySelectorAll("li.job").length === 0 && !document.getElementById("jobs-empty").hidden`)
		p.waitFor("the live status", `document.getElementById("status").dataset.status === "live"`)
		acme, err := srv.engine.Submit(ctx, jobs.SubmitRequest{Tenant: "acme", Kind: "billing.invoice"})
		if err != nil {
			t.Fatal(err)
		}
		p.waitFor("acme's job alone", exists(row(acme.ID))+` && document.querySelectorAll("li.job").length === 1`)
		waitOpenWatches(t, "http://"+addr, 1)

		// A name the server refuses: say so once, do not retry.
		setTenant("acme corp")
		p.waitFor("the refusal", `document.getElementById("status").dataset.status === "refused" && document.getElementById("banner").textContent.includes("may only contain")`)
		waitOpenWatches(t, "http://"+addr, 0)

		setTenant("default")
		p.waitFor("the default tenant's four jobs again", `document.querySelectorAll("li.job").length === 4 && document.getElementById("banner").hidden`)
		waitOpenWatches(t, "http://"+addr, 1)

		// For the screenshot: the failed job's details.
		p.do("open the failed job", chromedp.Click(chromedp.CSS(`li.job[data-state="failed"]`)))
		p.waitFor("its details", textIs("#detail .error-type", "TimeoutError"))
	})

	// Move the pointer off the rows so no hover tint shows in the picture.
	p.t = t
	p.do("move the pointer away", chromedp.MouseEvent(chromedp.MouseMoved, 1, 880))

	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := artifactPath(t, "web-e2e.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)

	t.Run("the detail fetches the payload the feed leaves out, and the result when the job ends", func(t *testing.T) {
		p.t = t
		// The feed carries summaries; only the detail asks for the rest.
		marker := strings.Repeat("row;", 5000)
		ingest := submit(t, ctx, srv.engine, "ingest.csv", fmt.Sprintf(`{"rows":%q}`, marker))
		p.waitFor("the job's row", exists(row(ingest.ID)+`[data-state="queued"]`))
		p.do("open its detail", chromedp.Click(chromedp.CSS(row(ingest.ID))))
		p.waitFor("its payload", textHas("#detail .payload", marker))
		p.waitFor("no result yet", `document.querySelector("#detail .result-box").hidden`)
		w := claim(t, ctx, srv.engine, "ingest.csv")
		w.progress(50, "half way")
		p.waitFor("its progress in the detail", textIs("#detail .percent", "50%"))
		w.complete(`{"imported":5000}`)
		p.waitFor("the result once it ended", textHas("#detail .result", `"imported": 5000`))
		p.waitFor("the payload still shown", textHas("#detail .payload", marker))
	})

	t.Run("the detail shows a payload and result nested as deeply as the engine takes", func(t *testing.T) {
		p.t = t
		// MaxJSONDepth levels: an object, then arrays down to a string.
		nested := func(bottom string) string {
			n := jobtype.MaxJSONDepth - 1
			return `{"deep":` + strings.Repeat("[", n) + strconv.Quote(bottom) + strings.Repeat("]", n) + `}`
		}
		deep := submit(t, ctx, srv.engine, "tree.walk", nested("payload-bottom"))
		p.waitFor("the job's row", exists(row(deep.ID)+`[data-state="queued"]`))
		p.do("open its detail", chromedp.Click(chromedp.CSS(row(deep.ID))))
		p.waitFor("its payload, decoded", `document.querySelector("#detail .payload").dataset.loaded === "true"`)
		p.waitFor("the bottom of its payload", textHas("#detail .payload", "payload-bottom"))
		w := claim(t, ctx, srv.engine, "tree.walk")
		w.complete(nested("result-bottom"))
		p.waitFor("the bottom of its result", textHas("#detail .result", "result-bottom"))
		p.waitFor("no error", `document.getElementById("error").hidden`)
	})
}

// waitOpenWatches waits for the server's count of open streams to settle
// at want: a stream the page left closes when the server notices.
func waitOpenWatches(t *testing.T, base string, want float64) {
	t.Helper()
	waitOpenWatchesAs(t, base, "", want)
}

// waitOpenWatchesAs is waitOpenWatches on a server with tokens, reading
// /metrics with token (an admin or metrics one).
func waitOpenWatchesAs(t *testing.T, base, token string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := openWatchesAs(t, base, token)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open watches on the server = %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openWatches reads the server's gauge of open WatchJob and WatchJobs
// streams from /metrics.
func openWatches(t *testing.T, base string) float64 {
	t.Helper()
	return openWatchesAs(t, base, "")
}

// openWatchesAs is openWatches read with token ("" for none).
func openWatchesAs(t *testing.T, base, token string) float64 {
	t.Helper()
	body := metricsText(t, base, token)
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "jobwatch_open_watches "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no jobwatch_open_watches in /metrics:\n%s", body)
	return 0
}

// metricsText is the server's /metrics, read with token ("" for none).
func metricsText(t *testing.T, base, token string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("read /metrics: %v %s\n%s", err, res.Status, body)
	}
	return string(body)
}
