package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// countingStore counts the counts over every job that reach the store.
type countingStore struct {
	store.Store
	counts atomic.Int64
}

func (s *countingStore) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	s.counts.Add(1)
	return s.Store.CountByState(ctx)
}

// scrape GETs /metrics at url with the Authorization values given and
// returns the status and body.
func scrape(t *testing.T, hc *http.Client, url string, authorization ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range authorization {
		req.Header.Add("Authorization", v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestMetricsScrapesShareOneCountOfTheJobs: however many scrapes come,
// the jobs are counted again only after one changed; every scrape shows
// the counts as of the last change.
func TestMetricsScrapesShareOneCountOfTheJobs(t *testing.T) {
	var st *countingStore
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store {
		st = &countingStore{Store: s}
		return st
	}})
	c := ts.h2c()
	for range 3 {
		submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered"})
	}
	hc := ts.http1Client()
	_, page := scrape(t, hc, ts.url)
	if !strings.Contains(page, `jobwatch_jobs{state="queued"} 3`) || !strings.Contains(page, "jobwatch_jobs_counted_timestamp_seconds ") {
		t.Fatalf("/metrics after 3 submits:\n%s", page)
	}
	before := st.counts.Load()

	const scrapers, each = 8, 10
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for range scrapers {
		wg.Go(func() {
			for range each {
				req, _ := http.NewRequest(http.MethodGet, ts.url+"/metrics", nil)
				resp, err := hc.Do(req)
				if err != nil {
					wrong.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(body), `jobwatch_jobs{state="queued"} 3`) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := st.counts.Load() - before; n != 0 || wrong.Load() != 0 {
		t.Errorf("%d scrapes with no job changing counted the jobs %d times (%d showed other counts); want 0", scrapers*each, n, wrong.Load())
	}

	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered"})
	if _, page := scrape(t, hc, ts.url); !strings.Contains(page, `jobwatch_jobs{state="queued"} 4`) {
		t.Errorf("the scrape after a submit does not show it:\n%s", page)
	}
	if n := st.counts.Load() - before; n != 1 {
		t.Errorf("a change and a scrape counted the jobs %d times, want 1", n)
	}
}

// metricsTokens: a client, a worker, an admin and a metrics token.
func metricsTokens(t *testing.T) *auth.Tokens {
	t.Helper()
	file := "tokens:\n" +
		"  - {sha256: " + auth.Digest(acmeToken) + ", role: client, tenant: acme}\n" +
		"  - {sha256: " + auth.Digest(workerToken) + ", role: worker}\n" +
		"  - {sha256: " + auth.Digest(adminToken) + ", role: admin}\n" +
		"  - {sha256: " + auth.Digest("scraper-token") + ", role: metrics}\n"
	tokens, err := auth.ParseTokens("tokens.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// TestMetricsTakeAMetricsOrAdminTokenWhenTokensAreOn: on the API's port
// of a server with tokens, /metrics answers a metrics or an admin token,
// 401 (with WWW-Authenticate) without one or with one not known or not
// read by the Authorization rule, and 403 to a client or worker token,
// over HTTP/1.1 and h2c alike; a metrics token calls no RPC.
func TestMetricsTakeAMetricsOrAdminTokenWhenTokensAreOn(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: metricsTokens(t)}})
	tests := []struct {
		name          string
		authorization []string
		status        int
		says          string
	}{
		{"no token", nil, http.StatusUnauthorized, "a bearer token is required (a metrics or admin token)"},
		{"an unknown token", []string{"Bearer " + unknownToken}, http.StatusUnauthorized, "the token is not known"},
		{"two Authorization headers", []string{"Bearer scraper-token", "Bearer scraper-token"}, http.StatusUnauthorized, "2 Authorization headers"},
		{"a client token", []string{"Bearer " + acmeToken}, http.StatusForbidden, "a client token may not read /metrics"},
		{"a worker token", []string{"Bearer " + workerToken}, http.StatusForbidden, "a worker token may not read /metrics"},
		{"a metrics token", []string{"Bearer scraper-token"}, http.StatusOK, `jobwatch_jobs{state="queued"}`},
		{"an admin token", []string{"Bearer " + adminToken}, http.StatusOK, `jobwatch_jobs{state="queued"}`},
	}
	for _, hc := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", ts.http1Client()}, {"h2c", ts.h2cClient()}} {
		for _, tt := range tests {
			status, body := scrape(t, hc.c, ts.url, tt.authorization...)
			if status != tt.status || !strings.Contains(body, tt.says) {
				t.Errorf("%s, %s: %d %.200s; want %d saying %q", hc.name, tt.name, status, body, tt.status, tt.says)
			}
			if status != http.StatusOK && strings.Contains(body, "jobwatch_") {
				t.Errorf("%s, %s: a refusal shows metrics", hc.name, tt.name)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, ts.url+"/metrics", nil)
	resp, err := ts.http1Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Errorf("a 401 says WWW-Authenticate %q, want a Bearer challenge", got)
	}
	metricsOnly := ts.clientsWithToken(authProtocols[0], "scraper-token")
	_, err = metricsOnly.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{})
	wantCode(t, err, connect.CodePermissionDenied)
}

// TestMoveMetricsServesThemOnlyOnTheirOwnListener: after MoveMetrics the
// API's port answers /metrics 404, token or not, and the moved handler
// serves them without a token, and nothing but /metrics.
func TestMoveMetricsServesThemOnlyOnTheirOwnListener(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Tokens: metricsTokens(t)}})
	own := httptest.NewServer(ts.srv.MoveMetrics(true))
	defer own.Close()
	hc := ts.http1Client()
	if status, body := scrape(t, hc, own.URL); status != http.StatusOK || !strings.Contains(body, `jobwatch_jobs{state="queued"}`) {
		t.Errorf("the metrics listener without a token: %d %.200s", status, body)
	}
	if status, body := scrape(t, hc, ts.url, "Bearer scraper-token"); status != http.StatusNotFound || strings.Contains(body, "jobwatch_") {
		t.Errorf("the API's port after MoveMetrics: %d %.200s; want 404", status, body)
	}
	resp, err := hc.Get(own.URL + "/jobwatch.v1.JobService/GetJob")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the metrics listener answers an RPC path with %d, want 404", resp.StatusCode)
	}
}

// With the Host check on, /metrics moved to a listener of its own
// refuses a Host that is not loopback or allowed, as the API's port does:
// a page on another site cannot read it through DNS rebinding.
func TestMovedMetricsCheckTheHostAsTheAPIPortDoes(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{}}) // the Host check is the default
	own := httptest.NewServer(ts.srv.MoveMetrics(false))
	defer own.Close()
	for host, want := range map[string]int{"evil.example": http.StatusForbidden, "localhost": http.StatusOK} {
		req, err := http.NewRequest(http.MethodGet, own.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := ts.http1Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
}

// With tokens the API's port checks no Host (AnyHost): its tokens guard
// it. /metrics moved to a loopback listener of its own asks for no token,
// so there the Host check stays; beyond loopback (a scraper names the
// address it dials) it answers every Host.
func TestMovedMetricsOnLoopbackCheckTheHostWhateverTheTokens(t *testing.T) {
	for _, tt := range []struct {
		loopback bool
		want     int
	}{{true, http.StatusForbidden}, {false, http.StatusOK}} {
		ts := startServer(t, serverOptions{config: server.Config{Tokens: metricsTokens(t), AnyHost: true}})
		own := httptest.NewServer(ts.srv.MoveMetrics(tt.loopback))
		req, err := http.NewRequest(http.MethodGet, own.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "evil.example"
		resp, err := ts.http1Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		own.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("a listener on loopback %v, Host evil.example: %d, want %d", tt.loopback, resp.StatusCode, tt.want)
		}
	}
}

// TestMetricsCostFigures prints what /metrics costs with many jobs
// (docs' figures). It is skipped unless JOBWATCH_METRICS_FIGURES is a
// number of jobs, such as 70000:
//
//	JOBWATCH_METRICS_FIGURES=70000 go test -run TestMetricsCostFigures -v ./server/
func TestMetricsCostFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("JOBWATCH_METRICS_FIGURES"))
	if n <= 0 {
		t.Skip("set JOBWATCH_METRICS_FIGURES to a number of jobs")
	}
	var st *countingStore
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store {
		st = &countingStore{Store: s}
		return st
	}})
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: "filler"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("filled %d jobs in %v", n, time.Since(start).Round(time.Millisecond))

	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const window = 3 * time.Second
	measure := func(name string, work func()) {
		counts0, cpu0, t0 := st.counts.Load(), cpu(), time.Now()
		var calls atomic.Int64
		deadline := t0.Add(window)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					work()
					calls.Add(1)
				}
			})
		}
		wg.Wait()
		wall := time.Since(t0)
		t.Logf("%-50s %6.0f calls/s (each %7.2f ms)  %5.2f cores  %4d counts over every job",
			name, float64(calls.Load())/wall.Seconds(), 4*wall.Seconds()*1000/float64(calls.Load()), (cpu()-cpu0).Seconds()/wall.Seconds(), st.counts.Load()-counts0)
	}
	hc := ts.http1Client()
	scrapeOnce := func() {
		resp, err := hc.Get(ts.url + "/metrics")
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	measure("a count per scrape (the old collector's cost)", func() { ts.engine.CountByState(ctx) })
	measure("4 scrapers, no job changing", scrapeOnce)
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ts.engine.Submit(ctx, jobs.SubmitRequest{Kind: "churn"})
		}
	})
	measure("4 scrapers, jobs submitted all the time", scrapeOnce)
	measure("a count per scrape, jobs submitted all the time", func() { ts.engine.CountByState(ctx) })
	close(stop)
	churn.Wait()
}

// hangingStore is a store whose reads for /metrics hang, once hang is
// set, until their caller gives up: a database that stopped answering
// (PostgreSQL frozen, a file system frozen).
type hangingStore struct {
	store.Store
	hang atomic.Bool
	read atomic.Int64 // reads answered
}

func (s *hangingStore) wait(ctx context.Context) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *hangingStore) CountByState(ctx context.Context) (map[jobtype.State]int64, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	defer s.read.Add(1) // once it is answered
	return s.Store.CountByState(ctx)
}

func (s *hangingStore) QueuePauses(ctx context.Context) ([]store.QueuePause, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	defer s.read.Add(1) // once it is answered
	return s.Store.QueuePauses(ctx)
}

func (s *hangingStore) RateWindows(ctx context.Context, now time.Time, rates map[string]jobtype.Rate) (map[string]store.RateWindow, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	defer s.read.Add(1) // once it is answered
	return s.Store.RateWindows(ctx, now, rates)
}

func (s *hangingStore) Schedules(ctx context.Context) ([]store.ScheduleState, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	defer s.read.Add(1) // once it is answered
	return s.Store.Schedules(ctx)
}

// startHangingServer is a server over a hangingStore whose rules give
// /metrics a queue with a rate ("metered") and a schedule ("nightly").
func startHangingServer(t *testing.T) (*testServer, *hangingStore) {
	var st *hangingStore
	ts := startServer(t, serverOptions{
		wrapStore: func(s store.Store) store.Store { st = &hangingStore{Store: s}; return st },
		engine: jobs.Config{Rules: jobtype.Rules{
			Queues:    map[string]jobtype.QueueRules{"metered": {Rate: jobtype.Rate{Limit: 5, Per: time.Minute}}},
			Schedules: []jobtype.Schedule{{Name: "nightly", Kind: "report", Every: time.Hour}},
		}},
	})
	return ts, st
}

// While the database does not answer, /metrics still answers, within a
// scraper's timeout (Prometheus' default is 10 s), with what its reads
// found last: the counts (with when they were counted), the paused
// queues, the rate windows and the schedules. A scrape that waited for
// each read's own bound took 10 s, and a scraper that gives up at its
// timeout would have had no series at all, jobwatch_store_reachable
// among them, when they matter most.
func TestMetricsAnswerWithTheLastReadsWhileTheDatabaseHangs(t *testing.T) {
	ts, st := startHangingServer(t)
	c := ts.h2c()
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered", Queue: "metered"})
	if _, err := c.queues.PauseQueue(ctxTimeout(t, callBound), &jobwatchv1.PauseQueueRequest{Queue: "metered"}); err != nil {
		t.Fatal(err)
	}
	hc := ts.http1Client()
	want := []string{
		`jobwatch_jobs{state="queued"} 1`,
		`jobwatch_queue_paused{queue="metered"} 1`,
		`jobwatch_queue_rate_limit{queue="metered"} 5`,
		`jobwatch_queue_rate_held{queue="metered"} 0`,
		`jobwatch_schedule_running{schedule="nightly"}`,
		"jobwatch_store_reachable ",
	}
	if _, page := scrape(t, hc, ts.url); !containsAll(page, want) {
		t.Fatalf("/metrics before the database hangs lacks one of %q:\n%s", want, page)
	}

	// A job submitted now makes the count stale, so the scrape reads
	// again, and that read hangs.
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "metered", Queue: "metered"})
	st.hang.Store(true)
	defer st.hang.Store(false)
	began := time.Now()
	status, page := scrape(t, hc, ts.url)
	took := time.Since(began)
	if status != http.StatusOK || !containsAll(page, want) {
		t.Fatalf("/metrics while the database hangs = %d, lacking one of %q:\n%s", status, want, page)
	}
	// A generous bound for a busy machine: the scrape waits 2 s.
	if took > 8*time.Second {
		t.Fatalf("/metrics while the database hangs took %v; want it to answer with the last reads after about 2 s", took)
	}
}

// A database that hangs before the first scrape still leaves /metrics
// its series: serve reads them once as it starts.
func TestMetricsReadAtStartStandWhenTheDatabaseHangsBeforeTheFirstScrape(t *testing.T) {
	ts, st := startHangingServer(t)
	// The four reads /metrics makes, each answered once at start.
	deadline := time.Now().Add(callBound)
	for st.read.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("serve made %d of the four reads /metrics makes; want them made at start", st.read.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	submit(t, ts.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "metered", Queue: "metered"}) // the count is stale
	st.hang.Store(true)
	defer st.hang.Store(false)
	want := []string{
		`jobwatch_jobs{state="queued"} 0`,
		"jobwatch_jobs_counted_timestamp_seconds ",
		`jobwatch_queue_paused{queue="metered"} 0`,
		`jobwatch_queue_rate_limit{queue="metered"} 5`,
		`jobwatch_schedule_running{schedule="nightly"}`,
	}
	if status, page := scrape(t, ts.http1Client(), ts.url); status != http.StatusOK || !containsAll(page, want) {
		t.Fatalf("/metrics of a database that hung before the first scrape = %d, lacking one of %q:\n%s", status, want, page)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
