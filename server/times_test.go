package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// TestRunAtOutsideTheTimeRangeIsRefused: a run_at more than 100 years
// from now, either way, or the zero time (which once read as "now") is
// invalid_argument with a message that names the field and the range,
// over curl's JSON and the Go client alike, and no job is made; times
// inside the range are taken as given.
func TestRunAtOutsideTheTimeRangeIsRefused(t *testing.T) {
	ts := startServer(t, serverOptions{})
	now := time.Now().UTC()
	refused := []struct {
		name, runAt, want string
	}{
		{"1700", "1700-01-01T00:00:00Z", "must be within 100 years of now"},
		{"the zero time", "0001-01-01T00:00:00Z", "leave run_at out to mean now"},
		{"101 years ago", now.AddDate(-101, 0, 0).Format(time.RFC3339), "must be within 100 years of now"},
		{"101 years ahead", now.AddDate(101, 0, 0).Format(time.RFC3339), "must be within 100 years of now"},
		{"9999-12-31", "9999-12-31T23:59:59Z", "must be within 100 years of now"},
		// Refused as it is decoded, before any handler runs.
		{"past what a timestamp holds", "10000-01-01T00:00:00Z", "invalid google.protobuf.Timestamp value"},
	}
	for _, tc := range refused {
		t.Run("curl: "+tc.name, func(t *testing.T) {
			status, body := rawPost(t, ts.url+"/jobwatch.v1.JobService/SubmitJob", "application/json",
				[]byte(`{"kind":"timed","queue":"times","runAt":"`+tc.runAt+`"}`))
			if status != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) || !strings.Contains(body, tc.want) {
				t.Errorf("run_at %s: %d %s, want 400 invalid_argument saying %q", tc.runAt, status, body, tc.want)
			}
		})
	}
	c := ts.h2c()
	for _, runAt := range []time.Time{{}, time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), now.AddDate(200, 0, 0)} {
		_, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "timed", Queue: "times", RunAt: timestamppb.New(runAt)})
		wantCode(t, err, connect.CodeInvalidArgument)
	}
	// In protobuf a timestamp past what one holds reaches the handler,
	// which says what a timestamp holds, not protobuf's own words.
	for _, ts := range []*timestamppb.Timestamp{{Seconds: 1 << 62}, {Seconds: 1, Nanos: -1}} {
		_, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "timed", Queue: "times", RunAt: ts})
		wantCode(t, err, connect.CodeInvalidArgument)
		if msg := err.Error(); !strings.Contains(msg, "run_at: is not a time: a timestamp's seconds run from 0001-01-01 to 9999-12-31") || strings.Contains(msg, "proto:") {
			t.Errorf("run_at %v in protobuf: %v; want it to say what a timestamp holds", ts, err)
		}
	}
	list, err := c.jobs.ListJobs(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListJobsRequest{Queue: "times"})
	if err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("after refusals the queue holds %v, %v; want no job", list.GetJobs(), err)
	}

	for _, runAt := range []time.Time{now.AddDate(-99, 0, 0), now.AddDate(0, 0, -1), now.AddDate(99, 0, 0)} {
		runAt = runAt.Truncate(time.Microsecond)
		j := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "timed", Queue: "times", RunAt: timestamppb.New(runAt)})
		if !j.GetRunAt().AsTime().Equal(runAt) {
			t.Errorf("run_at %v came back as %v", runAt, j.GetRunAt().AsTime())
		}
	}
}

// TestListQueuesAgeOfAJobStoredBeforeTheTimeRangeIsBounded: a job
// stored before the range was enforced, with run_at 1700, made
// ListQueues say oldestQueuedAge 9223372036.854775807s (the largest
// time.Duration: the true age does not fit). It now reads 100 years,
// and no age is negative or past that.
func TestListQueuesAgeOfAJobStoredBeforeTheTimeRangeIsBounded(t *testing.T) {
	var st store.Store
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store { st = s; return s }})
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := st.CreateJob(ctxTimeout(t, 5*time.Second), jobtype.Job{
		ID: "j_legacy_1700", Tenant: "default", Kind: "old", Queue: "legacy", State: jobtype.Queued, Version: 1,
		MaxAttempts: 1, CreatedAt: now, UpdatedAt: now, RunAt: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC),
	}); err != nil {
		t.Fatal(err)
	}
	status, body := rawPost(t, ts.url+"/jobwatch.v1.QueueService/ListQueues", "application/json", []byte(`{}`))
	if status != http.StatusOK || strings.Contains(body, "9223372036") {
		t.Errorf("ListQueues: %d %s", status, body)
	}
	resp, err := ts.h2c().queues.ListQueues(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range resp.GetQueues() {
		if age := q.GetOldestQueuedAge(); age != nil {
			if err := age.CheckValid(); err != nil || age.AsDuration() < 0 || age.AsDuration() > jobtype.MaxTimeOffset {
				t.Errorf("queue %s: oldest queued age %v (%v), want within 0..%v", q.GetName(), age.AsDuration(), err, jobtype.MaxTimeOffset)
			}
		}
		if q.GetName() == "legacy" {
			found = true
			if got := q.GetOldestQueuedAge().AsDuration(); got != jobtype.MaxTimeOffset {
				t.Errorf("the legacy queue's oldest queued age is %v, want %v (100 years)", got, jobtype.MaxTimeOffset)
			}
		}
	}
	if !found {
		t.Errorf("no legacy queue in %v", resp.GetQueues())
	}
}
