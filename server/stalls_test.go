package server_test

import (
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// A client that grants no HTTP/2 window and sends call after call, each
// answered with a few bytes, made the server hold each call until
// --send-timeout: an outside probe held 32,000 on 8 connections, without
// a token, and the server's memory grew by 740 MB (about 35 KiB a call,
// whatever the answer's size). A write blocked for two seconds past a
// connection's or the server's bound of such writes is cut at once, and
// a client that reads is answered meanwhile.
func TestAnswersAClientDoesNotTakeAreHeldUpToABound(t *testing.T) {
	const calls = 40
	for _, tt := range []struct {
		name   string
		config server.Config
		conns  int
		held   int // the bound: stalled writes kept until --send-timeout
	}{
		{"on one connection", server.Config{StalledSendsPerConn: 8}, 1, 8},
		{"across the server", server.Config{MaxPendingSendBytes: 12 * 40 << 10}, 4, 12},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.config.SendTimeout = time.Hour
			ts := startServer(t, serverOptions{config: tt.config})
			var raws []*rawH2
			for range tt.conns {
				raw := dialRawH2(t, addrOf(ts.url))
				for range calls {
					raw.open("/jobwatch.v1.JobService/GetServerInfo", "application/json", []byte("{}"))
				}
				raws = append(raws, raw)
			}
			cut := tt.conns*calls - tt.held
			ts.waitForMetric("answers cut for stalling", time.Minute, func(v float64) bool { return v >= float64(cut) },
				"jobwatch_sends_cut_total", "reason", "stalled")
			if got := ts.metric("jobwatch_sends_in_progress"); got != float64(tt.held) {
				t.Errorf("writes blocked once the others were cut = %v, want the bound, %d", got, tt.held)
			}
			if got := ts.metric("jobwatch_sends_cut_total", "reason", "stalled"); got != float64(cut) {
				t.Errorf("jobwatch_sends_cut_total{reason=\"stalled\"} = %v, want %d", got, cut)
			}
			// A client that reads is answered while the bound is full.
			c := ts.h2c()
			if _, err := c.jobs.GetServerInfo(ctxTimeout(t, 10*time.Second), &jobwatchv1.GetServerInfoRequest{}); err != nil {
				t.Fatalf("GetServerInfo of a client that reads, beside the stalled ones: %v", err)
			}
			for _, raw := range raws {
				raw.conn.Close()
			}
			ts.waitForGauge("jobwatch_sends_in_progress", 0)
		})
	}
}

// A client on a slow link reads answers queued behind each other: each
// waits longer than two seconds, yet the connection is read. An outside
// probe's 1,500 answers of 40 KB through a proxy of 5 MB/s had 420 to
// 1,123 of them cut as stalled. A connection on which some answer goes
// through every so often has none cut.
func TestAnswersQueuedOnAConnectionThatIsReadSlowlyAreNotCut(t *testing.T) {
	const calls = 40
	ts := startServer(t, serverOptions{config: server.Config{StalledSendsPerConn: 8, SendTimeout: time.Hour}})
	raw := dialRawH2(t, addrOf(ts.url))
	var ids []uint32
	for range calls {
		ids = append(ids, raw.open("/jobwatch.v1.JobService/GetServerInfo", "application/json", []byte("{}")))
	}
	// One answer let through every 100 ms: 4 s for them all, where two
	// seconds would find 8 of them stalled.
	for _, id := range ids {
		raw.grant(id, 4096)
		time.Sleep(100 * time.Millisecond)
	}
	ts.waitForMetric("every answer sent", time.Minute, func(v float64) bool { return v == 0 }, "jobwatch_sends_in_progress")
	if got := raw.answered.Load(); got != calls {
		t.Errorf("%d of %d answers reached the client", got, calls)
	}
	if got := ts.metric("jobwatch_sends_cut_total", "reason", "stalled"); got != 0 {
		t.Errorf("jobwatch_sends_cut_total{reason=\"stalled\"} = %v for a connection read slowly, want 0", got)
	}
}
