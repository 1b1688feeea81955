package server_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

// TestOnePublishIsEncodedOncePerFormatForEveryCallItWakes parks waiters
// and watchers of one job over every protocol, then moves the job on
// twice (progress, then completion). Every call gets the same decoded
// job that GetJob answers, and each response shared by the calls one
// publish woke is encoded once per wire format (JSON, protobuf), however
// many calls send it; a later version is encoded again.
func TestOnePublishIsEncodedOncePerFormatForEveryCallItWakes(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	protocols := []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"connect JSON, HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithProtoJSON()}},
		{"connect protobuf, h2c", ts.h2cClient(), nil},
		{"gRPC, h2c", ts.h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"gRPC-Web, HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
		{"gRPC-Web JSON, h2c", ts.h2cClient(), []connect.ClientOption{connect.WithGRPCWeb(), connect.WithProtoJSON()}},
	}
	const waitersEach, watchersEach = 4, 2
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "fan", Payload: mustValue(t, map[string]any{"rows": []any{1, "two", true}})})
	lease := claim(t, c, "fan")
	ctx := ctxTimeout(t, 20*time.Second)

	type answer struct {
		protocol string
		job      *jobwatchv1.Job
	}
	var streams []*watchStream
	var names []string
	for _, p := range protocols {
		pc := ts.clients(p.hc, p.opts...)
		for range watchersEach {
			s := watch(t, ctx, pc, job.GetId(), 0)
			if got := nextJob(t, s); got.GetVersion() != lease.GetJob().GetVersion() {
				t.Fatalf("%s: watch began with v%d, want v%d", p.name, got.GetVersion(), lease.GetJob().GetVersion())
			}
			streams = append(streams, s)
			names = append(names, p.name)
		}
	}
	wantEveryWatcher := func(version int64) []answer {
		t.Helper()
		var got []answer
		for i, s := range streams {
			j := nextJob(t, s)
			if j.GetVersion() != version {
				t.Fatalf("%s: watch got v%d, want v%d", names[i], j.GetVersion(), version)
			}
			got = append(got, answer{names[i], j})
		}
		return got
	}
	wantSame := func(answers []answer) {
		t.Helper()
		resp, err := c.jobs.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: job.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range answers {
			if !proto.Equal(a.job, resp.GetJob()) {
				t.Fatalf("%s answered\n%v\nGetJob answers\n%v", a.protocol, a.job, resp.GetJob())
			}
		}
	}
	wantEncodes := func(json, binary int64) {
		t.Helper()
		got := server.SharedEncodes(ts.srv)
		if got["json"] != json || got["proto"] != binary {
			t.Fatalf("shared encodings = %v, want json %d, proto %d", got, json, binary)
		}
	}

	_, err := c.workers.Heartbeat(ctx, &jobwatchv1.HeartbeatRequest{JobId: job.GetId(), LeaseId: lease.GetLeaseId(), Percent: 40, Step: "batch 4 of 10"})
	if err != nil {
		t.Fatal(err)
	}
	progress := wantEveryWatcher(lease.GetJob().GetVersion() + 1)
	wantSame(progress)
	wantEncodes(1, 1) // one WatchJobResponse, in each format

	answers := make(chan answer, len(protocols)*waitersEach)
	var waiters sync.WaitGroup
	for _, p := range protocols {
		pc := ts.clients(p.hc, p.opts...)
		for range waitersEach {
			waiters.Add(1)
			go func() {
				defer waiters.Done()
				resp, err := pc.jobs.WaitJob(context.Background(), &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
				if err != nil {
					t.Errorf("%s: WaitJob: %v", p.name, err)
					return
				}
				answers <- answer{p.name, resp.GetJob()}
			}()
		}
	}
	ts.waitForGauge("jobwatch_parked_waits", float64(len(protocols)*waitersEach))
	wokenBefore := ts.metric(wokenWaits, "kind", "wait")
	done := complete(t, c, lease, mustValue(t, map[string]any{"ok": true, "rows": 3}))
	if done.GetVersion() <= lease.GetJob().GetVersion()+1 {
		t.Fatalf("completion is v%d, want a version after the progress", done.GetVersion())
	}
	ended := wantEveryWatcher(done.GetVersion())
	waiters.Wait()
	close(answers)
	for a := range answers {
		ended = append(ended, a)
	}
	if len(ended) != len(streams)+len(protocols)*waitersEach {
		t.Fatalf("%d answers, want %d", len(ended), len(streams)+len(protocols)*waitersEach)
	}
	wantSame(ended)
	// The progress's WatchJobResponse, then the completion's
	// WaitJobResponse and WatchJobResponse: once per format each. A wait
	// is counted parked as its call begins, before it reads its job: on
	// a loaded machine the waiters of one format once all read the job
	// after the completion had committed, and answered with what they
	// read, which no other call shares (a CI run beside another suite:
	// json 2). Then the completion woke fewer waits than were parked, and
	// only the bound holds.
	if woken := ts.metric(wokenWaits, "kind", "wait") - wokenBefore; woken == float64(len(protocols)*waitersEach) {
		wantEncodes(3, 3)
	} else if got := server.SharedEncodes(ts.srv); got["json"] > 3 || got["proto"] > 3 {
		t.Fatalf("shared encodings = %v, want at most json 3, proto 3", got)
	} else {
		t.Logf("the completion woke %v of %d waits (the others read the job ended); shared encodings %v", woken, len(protocols)*waitersEach, got)
	}
}

// wokenWaits counts (with kind="wait") the waits a publish has woken.
const wokenWaits = "jobwatch_wake_latency_seconds"
