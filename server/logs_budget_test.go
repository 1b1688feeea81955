package server_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	enginejobs "github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
)

const watchJobLogsPath = "/jobwatch.v1.JobService/WatchJobLogs"

// bigLogJob submits a job to a queue that keeps 8 MiB of log, claims it
// and appends lines lines of lineBytes each, and returns its lease.
func bigLogJob(t *testing.T, ts *testServer, c clients, lines, lineBytes int) *jobwatchv1.ClaimJobResponse {
	t.Helper()
	if err := ts.engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"big-logs": {MaxLogBytes: 8 << 20}}}); err != nil {
		t.Fatal(err)
	}
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "big-log", Queue: "big-logs"})
	lease := claim(t, c, "big-log")
	appendTexts(t, c, lease, lines, lineBytes, 0)
	return lease
}

// appendTexts appends n lines of lineBytes each, numbered from first,
// in calls under the request size limit.
func appendTexts(t *testing.T, c clients, lease *jobwatchv1.ClaimJobResponse, n, lineBytes, first int) {
	t.Helper()
	pad := strings.Repeat("x", lineBytes-8)
	perCall := max(1, (800<<10)/lineBytes)
	for i := 0; i < n; i += perCall {
		var texts []string
		for j := i; j < min(n, i+perCall); j++ {
			texts = append(texts, fmt.Sprintf("%08d", first+j)+pad)
		}
		appendLines(t, c, lease, texts...)
	}
}

// 200 WatchJobLogs streams of a job with 4 MB of log, on an HTTP/2
// connection whose window stays zero: a stream reads a page of the log
// only once the send budget has admitted what the page holds, so the
// streams that wait for room hold nothing, and are refused once nothing
// has been sent for a while; what the server holds is the budget. Each
// stream read its page (up to 1,000 lines) first and held it while its
// first 256 KiB message waited, uncounted: an outside probe saw 2,000
// such streams take the heap to 946 MB, nearly ten times its tenant's
// share of the budget, and here the heap kept 122 MB for 8 MiB (a peak
// of 283 MB).
func TestWatchJobLogsThatAreNotReadHoldTheSendBudgetAtMost(t *testing.T) {
	const (
		streams   = 200
		budget    = 8 << 20
		lines     = 1000
		lineBytes = 4 << 10
	)
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, MaxPendingSendBytes: budget, SendTimeout: time.Hour}})
	c := ts.h2c()
	lease := bigLogJob(t, ts, c, lines, lineBytes)

	runtime.GC()
	before := heapInUse()
	peak := watchPeakHeap()
	raw := dialRawH2(t, addrOf(ts.url))
	for range streams {
		raw.post(watchJobLogsPath, map[string]any{"jobId": lease.GetJob().GetId()})
	}
	// Every stream is either blocked on its first message, holding what
	// the budget admitted, or refused for want of room; far fewer than 30
	// fit in the budget. What the admitted streams hold is their pages
	// and one encoding each, counted in the budget; the others, their
	// call (a refused stream's error waits for the window too). A page (4
	// MB here) for each stream that fits would be 60 MB at least.
	checkHeldOnceRefused(t, ts, raw, budget, before, peak, streams, streams-30,
		fmt.Sprintf("%d zero-window WatchJobLogs of %d lines of %d KiB", streams, lines, lineBytes>>10))
}

// checkHeldOnceRefused waits until at least refusals of the n streams
// opened on raw were refused for want of room in the send budget, then
// checks that the heap holds at most twice the budget and 96 KiB a
// stream more than before it (peak is its peak since) and that the
// budget never held more than its limit; streams, in the log, says what
// the streams were. It closes raw and waits for the budget to empty.
func checkHeldOnceRefused(t *testing.T, ts *testServer, raw *rawH2, budget int64, before uint64, peak func() uint64, n, refusals int64, streams string) {
	t.Helper()
	var refused int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, _, _, _, refused = server.SendBudget(ts.srv); refused >= refusals {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d streams refused within 30s, want %d", refused, refusals)
		}
	}
	// The pages WatchJobs streams read are kept 2 s for the streams that
	// come later (bounded on their own, outside the budget): what is
	// held here is what the streams hold once they are let go.
	ts.waitForGaugeWithin("jobwatch_watch_shared_bytes", 0, 30*time.Second)
	runtime.GC()
	held := int64(heapInUse()) - int64(before)
	max := peak()
	_, _, peakHeld, _, _ := server.SendBudget(ts.srv)
	runtime.KeepAlive(raw)
	t.Logf("%s, budget %d MiB: heap %d MB before, %d MB held after, peak %d MB; budget peak %d KiB, %d refused",
		streams, budget>>20, before>>20, held>>20, max>>20, peakHeld>>10, refused)
	if bound := 2*budget + n*96<<10; held > bound {
		t.Errorf("the heap holds %d MB more with %d streams not read, want at most %d MB (twice the %d MiB budget and 96 KiB a stream)",
			held>>20, n, bound>>20, budget>>20)
	}
	if peakHeld > budget {
		t.Errorf("the budget held %d bytes at its peak, over its limit of %d", peakHeld, budget)
	}
	raw.conn.Close()
	waitForBudgetEmpty(t, ts)
}

// A watcher that reads gets every line of a log four times the budget's
// size, in order: the backlog a page at a time, within the budget; then
// an append too large to send as the engine's watch hands it, read again
// the same way; then small appends as they come, and the job's end.
func TestAWatcherOfALogLargerThanTheSendBudgetGetsEveryLine(t *testing.T) {
	const (
		budget    = 1 << 20
		lines     = 1000
		lineBytes = 4 << 10
	)
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, MaxPendingSendBytes: budget}})
	c := ts.h2c()
	lease := bigLogJob(t, ts, c, lines, lineBytes)
	stream, err := c.jobs.WatchJobLogs(ctxTimeout(t, time.Minute), &jobwatchv1.WatchJobLogsRequest{JobId: lease.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	next := int64(1)
	receive := func(until int64) {
		t.Helper()
		for next <= until && stream.Receive() {
			for _, l := range stream.Msg().GetLines() {
				if l.GetSeq() != next || !strings.HasPrefix(l.GetText(), fmt.Sprintf("%08d", next-1)) {
					t.Fatalf("line %d: seq %d text %.8q", next, l.GetSeq(), l.GetText())
				}
				next++
			}
			if stream.Msg().GetGap() != nil || stream.Msg().GetJobEnded() {
				t.Fatalf("before line %d: %v", next, stream.Msg())
			}
		}
		if next <= until {
			t.Fatalf("the stream ended before line %d: %v", next, stream.Err())
		}
	}
	receive(lines)
	appendTexts(t, c, lease, 200, lineBytes, lines) // 800 KB in one append
	receive(lines + 200)
	appendLines(t, c, lease, "00001200 small", "00001201 small")
	receive(lines + 202)
	complete(t, c, lease, nil)
	ended := false
	for stream.Receive() {
		if len(stream.Msg().GetLines()) > 0 {
			t.Fatalf("lines after the last: %v", stream.Msg())
		}
		ended = stream.Msg().GetJobEnded()
	}
	if err := stream.Err(); err != nil || !ended {
		t.Fatalf("the stream ended with %v, job_ended %v; want OK after job_ended", err, ended)
	}
	if _, _, peak, _, _ := server.SendBudget(ts.srv); peak > budget {
		t.Errorf("the budget held %d bytes at its peak, over its limit of %d", peak, budget)
	}
}

// 200 WatchJobs streams of a tenant, on an HTTP/2 connection whose window
// stays zero, woken by 1,200 jobs of 2 KiB: a stream reads the changed
// jobs a batch at a time (its page size, 50) and holds only the batch it
// cannot send, which the send budget admits or refuses as any answer.
// Each stream read a page of up to 500 jobs (1 MiB) and held it, and a
// copy of it, while its first batch waited: here the heap kept 128 MB
// (a peak of 259 MB) where it now keeps about 30, and an outside probe's
// 2,500 such streams of one tenant (read, but slower than 4,000
// submitted jobs came) took the server to 3.5 GB.
func TestWatchJobsThatAreNotReadHoldTheSendBudgetAtMost(t *testing.T) {
	const (
		streams  = 200
		budget   = 8 << 20
		jobs     = 1200
		perCall  = 400
		payloads = 2 << 10
	)
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, MaxPendingSendBytes: budget, SendTimeout: time.Hour}})
	c := ts.h2c()

	// The streams resume from now, so that the first batch each has to
	// send is the jobs submitted below (a new stream's first batch, the
	// tenant's recent jobs, would not be sent through a zero window).
	first, err := c.jobs.WatchJobs(ctxTimeout(t, time.Minute), &jobwatchv1.WatchJobsRequest{})
	if err != nil || !first.Receive() {
		t.Fatalf("WatchJobs: %v %v", err, first.Err())
	}
	token := first.Msg().GetResumeToken()
	first.Close()

	runtime.GC()
	before := heapInUse()
	peak := watchPeakHeap()
	raw := dialRawH2(t, addrOf(ts.url))
	for range streams {
		raw.post("/jobwatch.v1.JobService/WatchJobs", map[string]any{"view": "JOB_VIEW_FULL", "resumeToken": token})
	}
	// Each stream has its place among the parked calls: it is about to
	// follow the tenant's changes, or follows them.
	ts.waitForGauge("jobwatch_parked_calls", streams)
	// Submitted beside the API: its answers would wait for the budget
	// the streams hold, as any tenant's large answers do.
	payload := json.RawMessage(`"` + strings.Repeat("x", payloads) + `"`)
	for i := 0; i < jobs; i += perCall {
		var reqs []enginejobs.SubmitRequest
		for range perCall {
			reqs = append(reqs, enginejobs.SubmitRequest{Kind: "big", Payload: payload})
		}
		if _, err := ts.engine.SubmitMany(ctxTimeout(t, time.Minute), reqs); err != nil {
			t.Fatal(err)
		}
	}
	// Every stream is blocked on its first batch of jobs, holding what
	// the budget admitted or waiting for it with its batch built, or
	// refused for want of room: a batch of 50 of these jobs is about 115
	// KB, and the budget admits 8 MiB and as much again waiting, so fewer
	// than 80 hold one.
	checkHeldOnceRefused(t, ts, raw, budget, before, peak, streams, streams-80,
		fmt.Sprintf("%d zero-window WatchJobs woken by %d jobs of %d KiB", streams, jobs, payloads>>10))
}
