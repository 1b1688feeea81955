package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/server"
)

// TestFiguresAnswersForClientsThatDoNotRead measures (and logs) what the
// issue measured: the server's heap and the process's RSS while answers are
// held for HTTP/2 streams whose window stays zero, with the default send
// budget: 1,000 ListJobs of full jobs (pages of about 1 MB), and 2,000
// WaitJob calls woken by one 250 KB result.
//
// It runs only when asked for, with JOBWATCH_FIGURES=1:
//
//	JOBWATCH_FIGURES=1 go test ./server -count=1 -v -run TestFiguresAnswersForClientsThatDoNotRead
func TestFiguresAnswersForClientsThatDoNotRead(t *testing.T) {
	figuresOnly(t)
	for _, bc := range []struct {
		name   string
		calls  int
		list   bool
		budget int
	}{
		{"1000 full ListJobs, default budget", 1000, true, 0},
		{"1000 full ListJobs, 64 MiB", 1000, true, 64 << 20},
		{"2000 WaitJob woken by a 250 KB result, default budget", 2000, false, 0},
		{"2000 WaitJob woken by a 250 KB result, 64 MiB", 2000, false, 64 << 20},
	} {
		t.Run(bc.name, func(tb *testing.T) {
			{
				ts := startServer(tb, serverOptions{config: server.Config{Keepalive: -1, MaxParkedCalls: 5000, MaxStreamsPerConn: 5000, MaxParkedCallsPerConn: 4000,
					MaxPendingSendBytes: bc.budget}})
				c := ts.h2c()
				pad := strings.Repeat("x", bigPayloadChars)
				var job *jobwatchv1.Job
				var lease *jobwatchv1.ClaimJobResponse
				if bc.list {
					for i := range 12 {
						submit(tb, c, &jobwatchv1.SubmitJobRequest{Kind: "big", Payload: mustValue(tb, map[string]any{"n": i, "pad": pad})})
					}
				} else {
					job = submit(tb, c, &jobwatchv1.SubmitJobRequest{Kind: "fan"})
					lease = claim(tb, c, "fan")
				}
				runtime.GC()
				before := heapInUse()
				resetPeakRSS()
				peak := watchPeakHeap()
				raw := dialRawH2(tb, addrOf(ts.url))
				if bc.list {
					body, _ := json.Marshal(map[string]any{"pageSize": jobs.MaxPageSize, "view": "JOB_VIEW_FULL"})
					for range bc.calls {
						raw.open(listJobsUnaryPath, "application/json", body)
					}
				} else {
					body, _ := json.Marshal(map[string]any{"jobId": job.GetId()})
					for range bc.calls {
						raw.open(waitJobUnaryPath, "application/json", body)
					}
					ts.waitForGauge("jobwatch_parked_waits", float64(bc.calls))
					complete(tb, c, lease, mustValue(tb, pad))
				}
				// Let every call reach its end: blocked, waiting or refused.
				time.Sleep(8 * time.Second)
				start := time.Now()
				_, err := c.jobs.ListJobs(ctxTimeout(tb, 30*time.Second), &jobwatchv1.ListJobsRequest{PageSize: 1})
				short := time.Since(start)
				heap := peak()
				tb.Logf("%s, budget %d MiB: heap %d MB before, peak %d MB; RSS peak %d MB; a small ListJobs meanwhile took %v (err %v)",
					bc.name, server.SendBudgetLimit(ts.srv)>>20, before/1e6, heap/1e6, peakRSS()/1e6, short, err)
				runtime.KeepAlive(raw)
				ts.stop()
			}
		})
	}
}

// TestFiguresWaitersWokenWithGzip: 2,000 gRPC waiters on one h2c
// connection accepting gzip, or not, woken by one 250 KB result; it logs
// when the last of them had its answer, after CompleteJob began. The
// client reads the frames without inflating them, so the time is the
// server's.
//
//	JOBWATCH_FIGURES=1 go test ./server -count=1 -v -run TestFiguresWaitersWokenWithGzip
func TestFiguresWaitersWokenWithGzip(t *testing.T) {
	figuresOnly(t)
	result := hexText(bigPayloadChars)
	for _, v := range []struct {
		encoding string
		budget   int
	}{{"identity", 0}, {"gzip", 0}, {"identity", 1 << 40}, {"gzip", 1 << 40}} {
		name := fmt.Sprintf("%s, budget %d MiB", v.encoding, v.budget>>20)
		t.Run(name, func(tb *testing.T) {
			const waiters = 2000
			ts := startServer(tb, serverOptions{config: server.Config{Keepalive: -1, MaxParkedCalls: 5000, MaxStreamsPerConn: 5000, MaxParkedCallsPerConn: 4000,
				MaxPendingSendBytes: v.budget}})
			c := ts.h2c()
			job := submit(tb, c, &jobwatchv1.SubmitJobRequest{Kind: "fan"})
			lease := claim(tb, c, "fan")
			req, _ := proto.Marshal(&jobwatchv1.WaitJobRequest{JobId: job.GetId()})
			readers := dialReadingH2(tb, addrOf(ts.url), 1<<20)
			for range waiters {
				readers.open(waitJobUnaryPath, "application/grpc", envelop(req), "te", "trailers", "grpc-accept-encoding", v.encoding)
			}
			ts.waitForGauge("jobwatch_parked_waits", waiters)
			runtime.GC()
			resetPeakRSS()
			peakHeap := watchPeakHeap()
			start := time.Now()
			done := make(chan time.Duration, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId(), Result: mustValue(tb, result)})
				if err != nil {
					tb.Errorf("CompleteJob: %v", err)
				}
				done <- time.Since(start)
			}()
			failed, bytes := 0, 0
			for _, r := range readers.wait(waiters, 2*time.Minute) {
				bytes += r.bytes
				if !r.ok {
					failed++
				}
			}
			last := time.Since(start)
			tb.Logf("%d gRPC waiters, %s: the last answer %v after CompleteJob began (which took %v); %d failed; %d KB sent each; heap peak %d MB, RSS peak %d MB; shared compressions %d",
				waiters, name, last, <-done, failed, bytes/waiters/1000, peakHeap()/1e6, peakRSS()/1e6, server.SharedCompressions(ts.srv))
			ts.stop()
		})
	}
}

func figuresOnly(t *testing.T) {
	if os.Getenv("JOBWATCH_FIGURES") == "" {
		t.Skip("measures figures for the docs; set JOBWATCH_FIGURES=1 to run it")
	}
}
