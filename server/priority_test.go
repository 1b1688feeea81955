package server_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func ptr[T any](v T) *T { return &v }

// Over Connect, gRPC and gRPC-Web, as a client and a worker see it: jobs
// submitted to one queue with priorities are claimed most urgent first,
// then oldest; a job submitted without one takes the queue's default,
// which ListQueues shows; every job carries its priority.
func TestClaimsTakeTheMostUrgentJobFirstOverTheWire(t *testing.T) {
	queues := map[string]jobtype.QueueRules{}
	protocols := []struct {
		name string
		hc   func(*testServer) *http.Client
		opts []connect.ClientOption
	}{
		{"Connect, h2c", (*testServer).h2cClient, nil},
		{"Connect JSON, HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithProtoJSON()}},
		{"gRPC, h2c", (*testServer).h2cClient, []connect.ClientOption{connect.WithGRPC()}},
		{"gRPC-Web, HTTP/1.1", (*testServer).http1Client, []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for i := range protocols {
		queues[fmt.Sprintf("bulk-%d", i)] = jobtype.QueueRules{Priority: 6}
	}
	ts := startServer(t, serverOptions{engine: jobs.Config{Rules: jobtype.Rules{Queues: queues}}})
	for i, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := ts.clients(p.hc(ts), p.opts...)
			queue := fmt.Sprintf("bulk-%d", i)
			type sub struct {
				name     string
				priority *int32
				want     int32
			}
			subs := []sub{
				{"nightly", ptr[int32](9), 9},
				{"default-a", nil, 6},
				{"urgent", ptr[int32](0), 0},
				{"report", ptr[int32](3), 3},
				{"default-b", nil, 6},
				{"urgent-too", ptr[int32](0), 0},
			}
			ids := map[string]string{}
			for _, s := range subs {
				j := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: queue, Priority: s.priority})
				if j.GetPriority() != s.want {
					t.Errorf("%s submitted with priority %v: job has %d, want %d", s.name, s.priority, j.GetPriority(), s.want)
				}
				ids[j.GetId()] = s.name
			}
			var order []string
			for range subs {
				resp, err := c.workers.ClaimJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.ClaimJobRequest{WorkerId: "w", Queues: []string{queue}})
				if err != nil || resp.GetJob() == nil {
					t.Fatalf("claim: %v, %v", resp, err)
				}
				order = append(order, ids[resp.GetJob().GetId()])
				got, err := c.jobs.GetJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.GetJobRequest{JobId: resp.GetJob().GetId()})
				if err != nil || got.GetJob().GetPriority() != resp.GetJob().GetPriority() {
					t.Errorf("get of a claimed job: %v, %v; want its priority %d", got, err, resp.GetJob().GetPriority())
				}
			}
			want := []string{"urgent", "urgent-too", "report", "default-a", "default-b", "nightly"}
			if !slices.Equal(order, want) {
				t.Errorf("claim order = %v, want %v", order, want)
			}
			listed, err := c.queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defaults := map[string]int32{}
			for _, q := range listed.GetQueues() {
				defaults[q.GetName()] = q.GetDefaultPriority()
			}
			if d, ok := defaults[queue]; !ok || d != 6 {
				t.Errorf("ListQueues default_priority of %s = %d (listed %v), want 6", queue, d, ok)
			}
			if d := defaults[jobtype.DefaultQueue]; d != 0 {
				t.Errorf("ListQueues default_priority of the default queue = %d, want 0", d)
			}
		})
	}
}

// A priority out of range is invalid_argument naming the field and the
// range, over every protocol and over curl, and creates no job.
func TestAPriorityOutOfRangeIsInvalidArgumentOverTheWire(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, p := range []struct {
		name string
		c    clients
	}{
		{"Connect", ts.h2c()},
		{"gRPC", ts.clients(ts.h2cClient(), connect.WithGRPC())},
		{"gRPC-Web", ts.clients(ts.http1Client(), connect.WithGRPCWeb())},
	} {
		for _, priority := range []int32{-1, 10, 1 << 30} {
			t.Run(fmt.Sprintf("%s, %d", p.name, priority), func(t *testing.T) {
				_, err := p.c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "k", Priority: ptr(priority)})
				wantCode(t, err, connect.CodeInvalidArgument)
				var ce *connect.Error
				if !errors.As(err, &ce) || !strings.Contains(ce.Message(), "priority: must be 0 (most urgent) to 9") {
					t.Errorf("error %v, want a message naming priority and 0 to 9", err)
				}
			})
		}
	}
	status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json", []byte(`{"kind":"k","priority":12}`))
	if status != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") || !strings.Contains(body, "priority: must be 0 (most urgent) to 9, got 12") {
		t.Errorf("curl: %d %s, want 400 invalid_argument naming priority and 0 to 9", status, body)
	}
	listed, err := ts.h2c().jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{})
	if err != nil || len(listed.GetJobs()) != 0 {
		t.Errorf("jobs after the refusals: %v, %v; want none", listed.GetJobs(), err)
	}
}
