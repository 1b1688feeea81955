package benchfloor

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// serve runs a floor on loopback for the test and returns a Go client of
// it (h2c, like the bench's) and its base URL.
func serve(t *testing.T, cfg Config) (*client.Client, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(cfg).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()
	c := client.New(base)
	t.Cleanup(c.Close)
	return c, base
}

// metric reads one sample of the floor's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/metrics has no %s:\n%s", name, b)
	return ""
}

// TestAJobRunsAndItsWaitersAndWatchersSeeItEnd is the path the bench
// drives: submit, claim, a parked WaitJob and a WatchJob, complete.
func TestAJobRunsAndItsWaitersAndWatchersSeeItEnd(t *testing.T) {
	c, base := serve(t, Config{})
	ctx := context.Background()
	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if job.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || job.GetVersion() != 1 {
		t.Fatalf("submitted job = %v, want QUEUED at version 1", job)
	}
	claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	if claim.GetJob().GetId() != job.GetId() || claim.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING || claim.GetLeaseId() == "" {
		t.Fatalf("claim = %v, want the job RUNNING under a lease", claim)
	}

	waited := make(chan *jobwatchv1.Job, 1)
	go func() {
		resp, err := c.JobService().WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: job.GetId()})
		if err != nil {
			t.Error(err)
		}
		waited <- resp.GetJob()
	}()
	stream, err := c.JobService().WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: job.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("the watch's first snapshot = %v, %v; want RUNNING", stream.Msg(), stream.Err())
	}
	for deadline := time.Now().Add(10 * time.Second); metric(t, base, "jobwatch_parked_waits") != "1"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the WaitJob never parked")
		}
	}
	if got := metric(t, base, "jobwatch_open_watches"); got != "1" {
		t.Errorf("jobwatch_open_watches = %s, want 1", got)
	}

	// A stale lease changes nothing.
	_, err = c.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: "not-it"})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("complete under another lease: %v, want failed_precondition", err)
	}
	done, err := c.WorkerService().CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: job.GetId(), LeaseId: claim.GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	if done.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || done.GetJob().GetFinishedAt() == nil {
		t.Fatalf("completed job = %v, want SUCCEEDED with finished_at", done.GetJob())
	}
	select {
	case j := <-waited:
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetVersion() != done.GetJob().GetVersion() {
			t.Errorf("the waiter got %v, want the completed job", j)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if !stream.Receive() || stream.Msg().GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("the watch's next snapshot = %v, %v; want SUCCEEDED", stream.Msg(), stream.Err())
	}
	if stream.Receive() {
		t.Errorf("the watch went on after the terminal snapshot: %v", stream.Msg())
	}
	if err := stream.Err(); err != nil {
		t.Errorf("the watch ended with %v, want OK", err)
	}
}

// TestTheFloorAnswersLikeJobwatchWhereTheBenchLooks: the codes a caller
// of jobwatch would get, and unimplemented for what the floor leaves out.
func TestTheFloorAnswersLikeJobwatchWhereTheBenchLooks(t *testing.T) {
	c, _ := serve(t, Config{ClaimCap: 50 * time.Millisecond})
	ctx := context.Background()
	if _, err := c.JobService().GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: "no-such-job"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetJob of an unknown job: %v, want not_found", err)
	}
	claim, err := c.WorkerService().ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"none"}})
	if err != nil || claim.GetJob() != nil {
		t.Errorf("a claim with nothing ready = %v, %v; want an empty answer at the cap", claim, err)
	}
	if _, err := c.JobService().CancelJob(ctx, &jobwatchv1.CancelJobRequest{JobId: "x"}); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("CancelJob: %v, want unimplemented (the floor is not a second jobwatch)", err)
	}
}

// The floor compresses as jobwatch does (server.New): a response under
// 1 KiB goes as it is, a larger one gzipped, to a caller that accepts
// gzip; so a fan-out of small answers costs both servers the same.
func TestTheFloorCompressesOnlyResponsesOfAKiBOrMore(t *testing.T) {
	_, base := serve(t, Config{})
	for _, tt := range []struct {
		name     string
		payload  int // bytes of the job's payload, echoed in the response
		encoding string
	}{
		{"a small response goes uncompressed", 10, ""},
		{"a response over 1 KiB goes gzipped", 4 << 10, "gzip"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"kind":"k","payload":"` + strings.Repeat("x", tt.payload) + `"}`
			req, err := http.NewRequest(http.MethodPost, base+"/jobwatch.v1.JobService/SubmitJob", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept-Encoding", "gzip") // set by hand: net/http then leaves the body as sent
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("SubmitJob: %s", resp.Status)
			}
			if got := resp.Header.Get("Content-Encoding"); got != tt.encoding {
				t.Errorf("Content-Encoding %q, want %q", got, tt.encoding)
			}
		})
	}
}
