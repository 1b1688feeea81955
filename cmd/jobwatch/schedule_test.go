package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

func TestServeLoadsTheIssuesExampleAndRunsItsSchedule(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile(filepath.Join("..", "..", "config", "testdata", "example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "jobwatch.yaml")
	writeFile(t, cfg, string(example))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg)
	queues := jobwatchv1connect.NewQueueServiceClient(http.DefaultClient, base)
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)

	// A new schedule runs once at once: the first sweep queues its run.
	var runs []*jobwatchv1.Job
	waitFor(t, "the schedule's first run", func() bool {
		resp, err := jobsClient.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Tenant: "crates", Kind: "update_downloads"})
		runs = resp.GetJobs()
		return err == nil && len(runs) > 0
	})
	if len(runs) != 1 || runs[0].GetQueue() != "downloads" || runs[0].GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("runs %v; want one QUEUED in downloads", runs)
	}
	resp, err := queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetSchedules(); len(s) != 1 || s[0].GetName() != "update-downloads" || s[0].GetLastJobId() != runs[0].GetId() || s[0].GetNextRunAt() != nil {
		t.Fatalf("ListSchedules = %v; want update-downloads with its queued run and no next run yet", s)
	}

	// A reload without the schedule lists none and queues no more runs.
	withoutSchedules := string(example[:strings.Index(string(example), "schedules:")]) + "alerts:\n  webhook: http://127.0.0.1:9000/hooks/jobwatch\n"
	writeFile(t, cfg, withoutSchedules)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the reload", func() bool { return strings.Contains(logs.String(), "schedules=0") })
	resp, err = queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
	if err != nil || len(resp.GetSchedules()) != 0 {
		t.Fatalf("after a reload without schedules: %v, %v; want none", resp.GetSchedules(), err)
	}
}
