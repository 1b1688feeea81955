package server_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

const (
	listJobsUnaryPath = "/jobwatch.v1.JobService/ListJobs"
	waitJobUnaryPath  = "/jobwatch.v1.JobService/WaitJob"
	getJobUnaryPath   = "/jobwatch.v1.JobService/GetJob"
	// bigPayloadChars makes a job of about 250 KB, under the payload
	// limit.
	bigPayloadChars = 250_000
)

// A caller that reads gets its answer, however small the send budget: one
// 250 KB result woken to many HTTP/2 waiters that read as fast as the
// server sends, through a small window, and to watchers, is sent whole to
// every one of them, the budget making the encodings wait their turn
// instead of cutting the writes under way the longest. The 64 MiB budget
// cut 719-1,471 of 2,000 such waiters with RST_STREAM (internal); here a
// 2 MiB budget holds a few answers for 300 waiters.
func TestEveryWaiterThatReadsGetsALargeResultWithinASmallBudget(t *testing.T) {
	const (
		waiters  = 300
		watchers = 40
		budget   = 2 << 20
	)
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, MaxPendingSendBytes: budget, MaxParkedCalls: 1000}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "fan"})
	lease := claim(t, c, "fan")
	ctx := ctxTimeout(t, 2*time.Minute)

	readers := dialReadingH2(t, addrOf(ts.url), 16<<10)
	body, _ := json.Marshal(map[string]any{"jobId": job.GetId()})
	for range waiters {
		readers.open(waitJobUnaryPath, "application/json", body)
	}
	errs := make(chan error, watchers)
	var calls sync.WaitGroup
	connectClient := ts.clients(ts.h2cClient())
	for range watchers {
		s := watch(t, ctx, connectClient, job.GetId(), 0)
		nextJob(t, s) // the running job
		calls.Go(func() {
			defer s.Close()
			for s.Receive() {
				if j := s.Msg().GetJob(); j.GetState() == jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
					if len(j.GetResult().GetStringValue()) != bigPayloadChars {
						errs <- fmt.Errorf("WatchJob sent a result of %d chars", len(j.GetResult().GetStringValue()))
					}
					return
				}
			}
			errs <- fmt.Errorf("WatchJob ended before the result: %v", s.Err())
		})
	}
	ts.waitForGauge("jobwatch_parked_waits", waiters)
	complete(t, c, lease, mustValue(t, strings.Repeat("r", bigPayloadChars)))

	cut, short := 0, 0
	for _, r := range readers.wait(waiters, time.Minute) {
		switch {
		case !r.ok:
			cut++
		case r.bytes < bigPayloadChars:
			short++
		}
	}
	if cut > 0 || short > 0 {
		t.Errorf("of %d WaitJob callers that read, %d were reset and %d got less than the result", waiters, cut, short)
	}
	calls.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := ts.metric("jobwatch_sends_cut_total"); got != 0 {
		t.Errorf("jobwatch_sends_cut_total = %v, want 0: no reader here stops reading", got)
	}
	if got := ts.metric("jobwatch_requests_total", "procedure", waitJobUnaryPath, "code", "ok"); got != waiters {
		t.Errorf("requests_total{WaitJob, ok} = %v, want %d", got, waiters)
	}
	waitForBudgetEmpty(t, ts)
	limit, _, peak, waits, refused := server.SendBudget(ts.srv)
	t.Logf("send budget %d KiB: peak %d KiB held, %d calls waited for room, %d refused", limit>>10, peak>>10, waits, refused)
	if peak > limit {
		t.Errorf("the budget held %d bytes at its peak, over its limit of %d", peak, limit)
	}
}

// 100 full ListJobs on HTTP/2 streams whose window stays zero: each
// answer (a page of about 1 MB) is held until the send timeout. Admitted
// before they are built, only the budget's worth is ever built; the
// others wait, and are refused with resource_exhausted once nothing has
// been sent for a while. Meanwhile other callers are answered: small
// answers at once, and a large one is refused, not left hanging.
// Before the budget admitted answers, the 100 were all built at once
// (1,000 such calls peaked near 900 MB).
func TestListJobsOnZeroWindowStreamsBuildOnlyTheSendBudget(t *testing.T) {
	const (
		streams = 100
		budget  = 4 << 20
	)
	ts := startServer(t, serverOptions{config: server.Config{
		Keepalive: -1, MaxPendingSendBytes: budget, SendTimeout: time.Hour,
	}})
	c := ts.h2c()
	pad := strings.Repeat("x", bigPayloadChars)
	for i := range 12 {
		submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, map[string]any{"n": i, "pad": pad})})
	}
	small := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "small"})

	runtime.GC()
	before := heapInUse()
	peak := watchPeakHeap()
	raw := dialRawH2(t, addrOf(ts.url))
	body, _ := json.Marshal(map[string]any{"pageSize": jobs.MaxPageSize, "view": "JOB_VIEW_FULL"})
	for range streams {
		raw.open(listJobsUnaryPath, "application/json", body)
	}
	// The budget is full of answers nobody reads...
	ts.waitForMetric("blocked answers", 10*time.Second, func(v float64) bool { return v >= 1 }, "jobwatch_sends_in_progress")

	// ...and small calls are still answered at once.
	for range 5 {
		if _, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: small.GetId()}); err != nil {
			t.Fatalf("GetJob of a small job while the budget is full: %v", err)
		}
	}
	// A large answer waits while nothing is sent, then is refused.
	_, err := c.jobs.ListJobs(ctxTimeout(t, 30*time.Second), &jobwatchv1.ListJobsRequest{PageSize: jobs.MaxPageSize, View: jobwatchv1.JobView_JOB_VIEW_FULL})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-pending-send-bytes") {
		t.Errorf("a large ListJobs while the budget is held by clients that do not read: %v, want resource_exhausted naming --max-pending-send-bytes", err)
	}
	_, _, held, _, refused := server.SendBudget(ts.srv)
	max := peak()
	runtime.KeepAlive(raw)
	t.Logf("%d zero-window full ListJobs, budget %d MiB: heap %d MB before, peak %d MB; budget peak %d KiB, %d calls refused",
		streams, budget>>20, before>>20, max>>20, held>>10, refused)
	// Each admitted answer holds its jobs, their wire form and their
	// encoding (about three times the page); the calls waiting hold their
	// requests. 64 MB is far below what 100 built answers take.
	if grown := int64(max) - int64(before); grown > 3*budget+48<<20 {
		t.Errorf("the heap grew by %d MB while %d answers were held unsent, want at most %d MB (three times the %d MiB budget and 48 MB)",
			grown>>20, streams, (3*budget+48<<20)>>20, budget>>20)
	}
	if refused == 0 {
		t.Errorf("no call was refused for the budget")
	}
	// Once the client is gone, every answer gives its bytes back.
	raw.conn.Close()
	waitForBudgetEmpty(t, ts)
}

// 300 GetJob of a job of 250 KB on HTTP/2 streams whose window stays
// zero: each answer is built before it is admitted (its size is known
// only then), and waits for room holding it. Once the answers waiting
// hold as much as the budget, the next are refused at once, so the heap
// holds the budget admitted and as much waiting, not 300 answers (it
// held them all, and 3,000 such calls took 1.4 GB).
//
// With --tokens too: a call admitted with a token once gave its answer's
// bytes back as its handler returned, before connect wrote the answer,
// so nothing was ever held or refused and the heap grew by 2.5 GB for
// 9,000 such calls (an outside probe).
func TestGetJobOnZeroWindowStreamsHoldsTwiceTheSendBudgetAtMost(t *testing.T) {
	for _, tokens := range []bool{false, true} {
		t.Run(fmt.Sprintf("tokens=%v", tokens), func(t *testing.T) {
			getJobOnZeroWindowStreams(t, tokens)
		})
	}
}

func getJobOnZeroWindowStreams(t *testing.T, tokens bool) {
	const (
		streams = 300
		budget  = 4 << 20
	)
	cfg := server.Config{Keepalive: -1, MaxPendingSendBytes: budget, SendTimeout: time.Hour}
	if tokens {
		cfg.Tokens = testTokens(t)
	}
	ts := startServer(t, serverOptions{config: cfg})
	c := ts.h2c()
	if tokens {
		c = ts.clientsWithToken(authProtocols[1], acmeToken)
	}
	big := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, strings.Repeat("x", bigPayloadChars))})

	runtime.GC()
	before := heapInUse()
	peak := watchPeakHeap()
	raw := dialRawH2(t, addrOf(ts.url))
	if tokens {
		raw.header = [][2]string{{"authorization", "Bearer " + acmeToken}}
	}
	body, _ := json.Marshal(map[string]any{"jobId": big.GetId()})
	for range streams {
		raw.open(getJobUnaryPath, "application/json", body)
	}
	// Read from the budget itself, not /metrics, whose gathering reads
	// the store, slow while the 300 calls read it on a loaded machine.
	var peakHeld, refused int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, peakHeld, _, refused = server.SendBudget(ts.srv)
		if refused >= streams/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d answers refused within 30s, want at least half", refused, streams)
		}
	}
	max := peak()
	runtime.KeepAlive(raw)
	t.Logf("%d zero-window GetJob of %d KB, budget %d MiB: heap %d MB before, peak %d MB; budget peak %d KiB, %d calls refused",
		streams, bigPayloadChars/1000, budget>>20, before>>20, max>>20, peakHeld>>10, refused)
	// Each answer held is its job, its wire form and its encoding, in
	// the budget admitted and as much waiting.
	if grown := int64(max) - int64(before); grown > 6*budget+48<<20 {
		t.Errorf("the heap grew by %d MB while %d answers were held unsent, want at most %d MB",
			grown>>20, streams, (6*budget+48<<20)>>20)
	}
	raw.conn.Close()
	waitForBudgetEmpty(t, ts)
}

// One tenant's clients that do not read hold at most a quarter of the
// send budget: 300 GetJob of a 250 KB job of acme's on HTTP/2 streams
// whose window stays zero fill acme's share and are refused past it,
// while globex's large answers are admitted and sent as if acme were not
// there. Before tenants had shares, acme's answers held the whole budget
// and as much waiting, and globex's GetJob was refused at once.
func TestOneTenantThatDoesNotReadLeavesTheOthersTheirShareOfTheSendBudget(t *testing.T) {
	const (
		streams = 300
		budget  = 4 << 20
	)
	ts := startServer(t, serverOptions{config: server.Config{
		Keepalive: -1, MaxPendingSendBytes: budget, SendTimeout: time.Hour, Tokens: testTokens(t),
	}})
	acme := ts.clientsWithToken(authProtocols[1], acmeToken)
	globex := ts.clientsWithToken(authProtocols[1], globexToken)
	pad := mustValue(t, strings.Repeat("x", bigPayloadChars))
	acmeJob := submit(t, acme, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: pad})
	globexJob := submit(t, globex, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: pad})

	raw := dialRawH2(t, addrOf(ts.url))
	raw.header = [][2]string{{"authorization", "Bearer " + acmeToken}}
	body, _ := json.Marshal(map[string]any{"jobId": acmeJob.GetId()})
	for range streams {
		raw.open(getJobUnaryPath, "application/json", body)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, _, _, _, refused := server.SendBudget(ts.srv); refused >= streams/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d of acme's %d unread answers refused within 30s", streams/2, streams)
		}
	}
	if _, held, _, _, _ := server.SendBudget(ts.srv); held > budget/4 {
		t.Errorf("acme's unread answers hold %d bytes, more than its share of %d", held, budget/4)
	}
	for i := range 10 {
		got, err := globex.jobs.GetJob(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetJobRequest{JobId: globexJob.GetId()})
		if err != nil {
			t.Fatalf("globex's GetJob %d of a 250 KB job while acme's clients do not read: %v", i, err)
		}
		if n := len(got.GetJob().GetPayload().GetStringValue()); n != bigPayloadChars {
			t.Fatalf("globex's GetJob %d sent a payload of %d chars, want %d", i, n, bigPayloadChars)
		}
	}
	// acme's own next large answer is refused, naming its share.
	_, err := acme.jobs.GetJob(ctxTimeout(t, 30*time.Second), &jobwatchv1.GetJobRequest{JobId: acmeJob.GetId()})
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), `tenant "acme"`) {
		t.Errorf("acme's GetJob while its share is held: %v, want resource_exhausted naming tenant \"acme\"", err)
	}
	runtime.KeepAlive(raw)
	raw.conn.Close()
	waitForBudgetEmpty(t, ts)
}

// An answer cut because its client stopped reading is a failed call in
// jobwatch_requests_total (deadline_exceeded, never ok), and the cut is
// logged at warn, once for a burst of them.
func TestAnAnswerCutForAClientThatDoesNotReadCountsAsAFailure(t *testing.T) {
	const streams = 3
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, SendTimeout: 300 * time.Millisecond}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(t, strings.Repeat("x", bigPayloadChars))})

	raw := dialRawH2(t, addrOf(ts.url))
	body, _ := json.Marshal(map[string]any{"jobId": job.GetId()})
	for range streams {
		raw.open(getJobUnaryPath, "application/json", body)
	}
	raw.post(watchJobPath, map[string]any{"jobId": job.GetId()})
	raw.waitReset(streams+1, 30*time.Second)
	ts.waitForMetric("cut GetJob counted", 10*time.Second, func(v float64) bool { return v == streams },
		"jobwatch_requests_total", "procedure", getJobUnaryPath, "code", "deadline_exceeded")
	ts.waitForMetric("cut WatchJob counted", 10*time.Second, func(v float64) bool { return v == 1 },
		"jobwatch_requests_total", "procedure", watchJobPath, "code", "deadline_exceeded")
	if got := ts.metric("jobwatch_requests_total", "procedure", getJobUnaryPath, "code", "ok"); got != 0 {
		t.Errorf("requests_total{GetJob, ok} = %v, want 0: cut answers must not count as ok", got)
	}
	if got := ts.metric("jobwatch_sends_cut_total", "reason", "send_timeout"); got != streams+1 {
		t.Errorf("jobwatch_sends_cut_total{send_timeout} = %v, want %d", got, streams+1)
	}
	logs := ts.logs.String()
	if n := strings.Count(logs, "answer cut"); n != 1 {
		t.Errorf("%d warnings of cut answers, want 1 for the burst:\n%s", n, logs)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "reason=send_timeout") {
		t.Errorf("the cut is not logged at warn with its reason:\n%s", logs)
	}
}

// waitForBudgetEmpty waits until every admitted answer has given its
// bytes back to the send budget.
func waitForBudgetEmpty(t *testing.T, ts *testServer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, held, _, _, _ := server.SendBudget(ts.srv)
		if held == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the send budget still holds %d bytes after every answer was sent", held)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The send budget's use is on /metrics.
func TestTheSendBudgetIsOnMetrics(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{MaxPendingSendBytes: 1 << 20}})
	families, err := ts.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range families {
		found[f.GetName()] = true
	}
	for _, name := range []string{"jobwatch_send_budget_bytes", "jobwatch_send_budget_waits_total", "jobwatch_send_budget_refused_total"} {
		if !found[name] {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
