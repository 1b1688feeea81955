package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
)

type watchStream = connect.ServerStreamForClient[jobwatchv1.WatchJobResponse]

func watch(t *testing.T, ctx context.Context, c clients, id string, after int64) *watchStream {
	t.Helper()
	stream, err := c.jobs.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: id, AfterVersion: after})
	if err != nil {
		t.Fatalf("WatchJob: %v", err)
	}
	return stream
}

// next receives one message; it fails the test if the stream ended.
func next(t *testing.T, s *watchStream) *jobwatchv1.WatchJobResponse {
	t.Helper()
	if !s.Receive() {
		t.Fatalf("stream ended (err %v), want a message", s.Err())
	}
	return s.Msg()
}

// nextJob receives the next snapshot, skipping keepalives.
func nextJob(t *testing.T, s *watchStream) *jobwatchv1.Job {
	t.Helper()
	for {
		if msg := next(t, s); msg.GetJob() != nil {
			return msg.GetJob()
		}
	}
}

// wantEndOK asserts that the stream ends now, with OK.
func wantEndOK(t *testing.T, s *watchStream) {
	t.Helper()
	for s.Receive() {
		if s.Msg().GetJob() != nil {
			t.Fatalf("got snapshot %v, want the stream to end", s.Msg().GetJob())
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream ended with %v, want OK", err)
	}
}

func TestWatchJobSendsTheCurrentSnapshotThenEachChangeAndEndsAfterTheTerminalOne(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "import"})
	s := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), 0)

	first := nextJob(t, s)
	if first.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || first.GetVersion() != job.GetVersion() {
		t.Fatalf("first snapshot = %v, want the current QUEUED one", first)
	}
	lease := claim(t, c, "import")
	if got := nextJob(t, s); got.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || got.GetVersion() <= first.GetVersion() {
		t.Fatalf("after claim got %v, want RUNNING at a higher version", got)
	}
	if _, err := c.workers.Heartbeat(ctxTimeout(t, 5*time.Second), &jobwatchv1.HeartbeatRequest{
		JobId: job.GetId(), LeaseId: lease.GetLeaseId(), Percent: 45, Step: "batch 5 of 11",
	}); err != nil {
		t.Fatal(err)
	}
	if got := nextJob(t, s); got.GetPercent() != 45 || got.GetStep() != "batch 5 of 11" {
		t.Fatalf("after heartbeat got %v, want 45%% at batch 5 of 11", got)
	}
	done := complete(t, c, lease, mustValue(t, "imported"))
	if got := nextJob(t, s); got.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || got.GetVersion() != done.GetVersion() {
		t.Fatalf("after complete got %v, want SUCCEEDED at version %d", got, done.GetVersion())
	}
	wantEndOK(t, s)
}

func TestWatchJobRules(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1, StreamLifetime: time.Minute}})
	c := ts.h2c()
	done := finishedJob(t, c, "finished", mustValue(t, 1))

	tests := []struct {
		name      string
		id        string
		after     int64
		wantCode  connect.Code // 0: OK
		wantFirst int64        // version of the first snapshot; 0: none, the stream ends
	}{
		{"watch of an ended job sends its final snapshot and ends", done.GetId(), 0, 0, done.GetVersion()},
		{"watch of an ended job whose final version was seen ends at once", done.GetId(), done.GetVersion(), 0, 0},
		{"watch with an after_version ahead of the server gets the current snapshot", done.GetId(), done.GetVersion() + 100, 0, done.GetVersion()},
		{"watch of an unknown job is not_found", "j_doesnotexist", 0, connect.CodeNotFound, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := watch(t, ctxTimeout(t, 10*time.Second), c, tt.id, tt.after)
			if tt.wantCode != 0 {
				if s.Receive() {
					t.Fatalf("got %v, want %v", s.Msg(), tt.wantCode)
				}
				wantCode(t, s.Err(), tt.wantCode)
				return
			}
			if tt.wantFirst != 0 {
				if got := nextJob(t, s); got.GetVersion() != tt.wantFirst {
					t.Fatalf("first snapshot at version %d, want %d", got.GetVersion(), tt.wantFirst)
				}
			}
			wantEndOK(t, s)
		})
	}
}

func TestWatchJobSendsKeepalivesWhileNothingChanges(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: 50 * time.Millisecond}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "idle"})
	ctx, disconnect := context.WithCancel(context.Background())
	defer disconnect()
	s := watch(t, ctx, c, job.GetId(), 0)
	nextJob(t, s)
	for range 2 {
		if msg := next(t, s); msg.GetJob() != nil {
			t.Fatalf("got %v, want a keepalive with no job", msg.GetJob())
		}
	}
	disconnect()
	ts.waitForGauge("jobwatch_open_watches", 0) // a client that leaves frees the watch
}

func TestWatchJobEndsOKAtTheStreamLifetime(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{StreamLifetime: 300 * time.Millisecond, Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "idle"})
	start := time.Now()
	s := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), 0)
	nextJob(t, s)
	wantEndOK(t, s)
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("stream ended after %v, want the 300ms lifetime", took)
	}
}

func TestWatchJobResumesAfterADisconnectWithTheLatestVersion(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "resume"})

	ctx, disconnect := context.WithCancel(context.Background())
	s := watch(t, ctx, c, job.GetId(), 0)
	seen := nextJob(t, s).GetVersion()
	disconnect()
	ts.waitForGauge("jobwatch_open_watches", 0)

	// Two changes while nobody watches; the resumed stream skips to the
	// latest one (latest-value semantics), then follows on.
	lease := claim(t, c, "resume")
	hb, err := c.workers.Heartbeat(ctxTimeout(t, 5*time.Second), &jobwatchv1.HeartbeatRequest{
		JobId: job.GetId(), LeaseId: lease.GetLeaseId(), Percent: 60,
	})
	if err != nil || hb.GetCancelled() {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}
	s = watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), seen)
	got := nextJob(t, s)
	if got.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || got.GetPercent() != 60 || got.GetVersion() != seen+2 {
		t.Fatalf("resumed with %v, want RUNNING at 60%% and version %d", got, seen+2)
	}

	// A watcher that saw the latest version gets nothing until a change.
	quiet := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), got.GetVersion())
	ts.waitForGauge("jobwatch_open_watches", 2)
	done := complete(t, c, lease, nil)
	for _, stream := range []*watchStream{s, quiet} {
		if got := nextJob(t, stream); got.GetVersion() != done.GetVersion() {
			t.Fatalf("got version %d, want the terminal %d", got.GetVersion(), done.GetVersion())
		}
		wantEndOK(t, stream)
	}
}

func TestWatchJobResumesAcrossAServerRestart(t *testing.T) {
	dbPath := t.TempDir() + "/jobwatch.db"
	first := startServer(t, serverOptions{dbPath: dbPath, config: server.Config{Keepalive: -1}})
	c := first.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "restart"})
	lease := claim(t, c, "restart")
	s := watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), 0)
	seen := nextJob(t, s)
	if seen.GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("snapshot %v, want RUNNING", seen)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	wantEndOK(t, s) // shutdown ends streams with OK, so clients resume

	second := startServer(t, serverOptions{dbPath: dbPath, config: server.Config{Keepalive: -1}})
	c = second.h2c()
	s = watch(t, ctxTimeout(t, 10*time.Second), c, job.GetId(), seen.GetVersion())
	second.waitForGauge("jobwatch_open_watches", 1)
	// The lease survives the restart: the worker carries on.
	done := complete(t, c, lease, mustValue(t, "after restart"))
	got := nextJob(t, s)
	if got.GetVersion() != done.GetVersion() || got.GetResult().GetStringValue() != "after restart" {
		t.Fatalf("resumed with %v, want the terminal version %d", got, done.GetVersion())
	}
	wantEndOK(t, s)
}

func TestWatchJobsStreamsATenantsJobsAsTheyChange(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	old := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "page", Tenant: "acme"})
	submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "page", Tenant: "someone-else"})

	ctx, disconnect := context.WithTimeout(context.Background(), 10*time.Second)
	defer func() {
		disconnect()
		ts.waitForGauge("jobwatch_open_watches", 0)
	}()
	stream, err := c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no first batch: %v", stream.Err())
	}
	first := stream.Msg()
	if len(first.GetJobs()) != 1 || first.GetJobs()[0].GetId() != old.GetId() || first.GetResumeToken() == "" {
		t.Fatalf("first batch = %v, want acme's one job and a resume token", first)
	}

	added := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "page", Tenant: "acme"})
	for stream.Receive() {
		for _, j := range stream.Msg().GetJobs() {
			if j.GetTenant() != "acme" {
				t.Fatalf("stream of acme sent %v", j)
			}
			if j.GetId() == added.GetId() {
				return
			}
		}
	}
	t.Fatalf("stream ended (%v) before the new job arrived", stream.Err())
}

// TestATenantsStreamsShareTheBatchesOfABurst opens WatchJobs streams of
// one tenant over two wire formats, then submits 120 jobs of the tenant
// at once. Every stream gets every job once, as ListJobs reads it, and a
// token that ends the window; the batches that the streams send alike
// are encoded once for many of them (every stream would encode three of
// its own otherwise).
func TestATenantsStreamsShareTheBatchesOfABurst(t *testing.T) {
	ts := startServer(t, serverOptions{config: server.Config{Keepalive: -1}})
	c := ts.h2c()
	const each, burst = 8, 120
	ctx, disconnect := context.WithTimeout(context.Background(), time.Minute)
	defer func() {
		disconnect()
		ts.waitForGauge("jobwatch_open_watches", 0)
	}()
	var streams []*connect.ServerStreamForClient[jobwatchv1.WatchJobsResponse]
	for _, pc := range []clients{c, ts.clients(ts.http1Client(), connect.WithProtoJSON())} {
		for range each {
			s, err := pc.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{Tenant: "acme"})
			if err != nil {
				t.Fatal(err)
			}
			if !s.Receive() || s.Msg().GetResumeToken() == "" {
				t.Fatalf("no first batch with a token: %v", s.Err())
			}
			streams = append(streams, s)
		}
	}
	before := server.SharedEncodes(ts.srv)

	reqs := make([]*jobwatchv1.SubmitJobRequest, burst)
	for i := range reqs {
		reqs[i] = &jobwatchv1.SubmitJobRequest{Kind: "burst", Tenant: "acme", Payload: mustValue(t, map[string]any{"n": i})}
	}
	if _, err := c.jobs.SubmitJobs(ctx, &jobwatchv1.SubmitJobsRequest{Jobs: reqs}); err != nil {
		t.Fatal(err)
	}
	listed, err := c.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "acme", PageSize: burst})
	if err != nil || len(listed.GetJobs()) != burst {
		t.Fatalf("ListJobs = %d jobs, %v; want %d", len(listed.GetJobs()), err, burst)
	}
	want := map[string]*jobwatchv1.Job{}
	for _, j := range listed.GetJobs() {
		want[j.GetId()] = j
	}
	for i, s := range streams {
		seen := map[string]bool{}
		token := ""
		for len(seen) < burst || token == "" {
			if !s.Receive() {
				t.Fatalf("stream %d ended after %d jobs: %v", i, len(seen), s.Err())
			}
			for _, j := range s.Msg().GetJobs() {
				if seen[j.GetId()] {
					t.Fatalf("stream %d sent %s twice", i, j.GetId())
				}
				seen[j.GetId()] = true
				if !proto.Equal(j, want[j.GetId()]) {
					t.Fatalf("stream %d sent\n%v\nListJobs reads\n%v", i, j, want[j.GetId()])
				}
			}
			token = s.Msg().GetResumeToken()
			if len(seen) < burst {
				token = ""
			}
		}
	}
	got := server.SharedEncodes(ts.srv)
	for _, f := range []string{"proto", "json"} {
		if n := got[f] - before[f]; n < 3 || n >= each*3 {
			t.Errorf("%s: the burst's batches were encoded %d times for %d streams; want them shared (at least 3, fewer than %d)", f, n, each, each*3)
		}
	}
}

// A WatchJobs resumed with a token this server's database cannot resume
// from (here one another database issued: a server moved to a new file,
// or a token from before a restore) starts over with the most recent
// jobs, and says so on its first response, so that a client drops what
// it held rather than keeping versions the server no longer has. A
// stream resumed from a token of its own database does not say so.
func TestWatchJobsSaysItStartedOverFromATokenItCannotResumeFrom(t *testing.T) {
	before := startServer(t, serverOptions{})
	submit(t, before.h2c(), &jobwatchv1.SubmitJobRequest{Kind: "w"})
	elsewhere := firstToken(t, before.h2c())

	ts := startServer(t, serverOptions{})
	for _, c := range []clients{ts.h2c(), ts.clients(ts.h2cClient(), connect.WithProtoJSON())} {
		have := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w"})
		ctx, cancel := context.WithTimeout(context.Background(), callBound)
		stream, err := c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{ResumeToken: elsewhere})
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() {
			t.Fatalf("WatchJobs ended: %v", stream.Err())
		}
		first := stream.Msg()
		if !first.GetStartedOver() || !slices.Contains(jobIDs(first.GetJobs()), have.GetId()) {
			t.Fatalf("WatchJobs resumed from another database's token began with started_over %v and %v; want true and the job %s", first.GetStartedOver(), jobIDs(first.GetJobs()), have.GetId())
		}
		later := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w"})
		for stream.Receive() && !slices.Contains(jobIDs(stream.Msg().GetJobs()), later.GetId()) {
			if stream.Msg().GetStartedOver() {
				t.Fatal("a second response said started_over")
			}
		}
		if stream.Msg() == nil || stream.Msg().GetStartedOver() {
			t.Fatalf("the response with the job submitted after: %v, %v; want it, without started_over", stream.Msg(), stream.Err())
		}
		cancel()

		own := firstToken(t, c)
		next := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "w"})
		if got := firstResponse(t, c, own, nil); got.GetStartedOver() || !slices.Contains(jobIDs(got.GetJobs()), next.GetId()) {
			t.Fatalf("WatchJobs resumed from this database's own token began with started_over %v and %v; want false and the job %s", got.GetStartedOver(), jobIDs(got.GetJobs()), next.GetId())
		}
	}
}

// firstToken is the resume token of the first WatchJobs response that
// carries one, for a fresh stream.
func firstToken(t *testing.T, c clients) string {
	t.Helper()
	return firstResponse(t, c, "", func(m *jobwatchv1.WatchJobsResponse) bool { return m.GetResumeToken() != "" }).GetResumeToken()
}

// firstResponse is the first response of a WatchJobs resumed from token
// ("": a fresh stream) that want accepts (nil: the first of all).
func firstResponse(t *testing.T, c clients, token string, want func(*jobwatchv1.WatchJobsResponse) bool) *jobwatchv1.WatchJobsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	stream, err := c.jobs.WatchJobs(ctx, &jobwatchv1.WatchJobsRequest{ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if want == nil || want(stream.Msg()) {
			return stream.Msg()
		}
	}
	t.Fatalf("WatchJobs ended: %v", stream.Err())
	return nil
}
