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
	if s := resp.GetSchedules(); len(s) != 2 || s[0].GetName() != "update-downloads" || s[0].GetLastJobId() != runs[0].GetId() || s[0].GetNextRunAt() != nil {
		t.Fatalf("ListSchedules = %v; want update-downloads with its queued run and no next run yet", s)
	}
	// The cron schedule waits for its first time, 02:00 in Berlin.
	if s := resp.GetSchedules()[1]; s.GetName() != "nightly-report" || s.GetLastJobId() != "" || s.GetNextRunAt() == nil ||
		!strings.Contains(s.GetNextRunLocal(), "T02:00:00+0") {
		t.Fatalf("the cron schedule = %v; want no run yet and the next at 02:00 local time", s)
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

func TestServeListsACronScheduleInItsZoneAndKeepsItWhenAReloadBringsABadExpression(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobwatch.yaml")
	good := "schedules:\n  - name: nightly\n    kind: report\n    cron: \"0 2 * * *\"\n    timezone: Europe/Berlin\n"
	writeFile(t, cfg, good)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg)
	queues := jobwatchv1connect.NewQueueServiceClient(http.DefaultClient, base)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		resp, err := queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
		if err != nil || len(resp.GetSchedules()) != 1 {
			t.Fatalf("%s: ListSchedules = %v, %v; want the nightly schedule", when, resp.GetSchedules(), err)
		}
		s := resp.GetSchedules()[0]
		next := s.GetNextRunAt().AsTime().In(berlin)
		if s.GetCron() != "0 2 * * *" || s.GetTimezone() != "Europe/Berlin" || s.GetEvery() != nil ||
			next.Hour() != 2 || next.Minute() != 0 || !next.After(time.Now()) || next.After(time.Now().Add(25*time.Hour)) ||
			s.GetNextRunLocal() != next.Format(time.RFC3339) || s.GetLastJobId() != "" {
			t.Fatalf("%s: %v; want cron 0 2 * * * in Europe/Berlin, no run yet, next at the coming 02:00 Berlin time in both forms", when, s)
		}
	}
	check("at start")

	writeFile(t, cfg, strings.Replace(good, "0 2 * * *", "0 25 * * *", 1))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the refused reload", func() bool { return strings.Contains(logs.String(), "config reload refused") })
	if want := "jobwatch.yaml:4:11: schedules[0].cron: does not parse (end of range (25) above maximum (23))"; !strings.Contains(logs.String(), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, logs.String())
	}
	check("after the refused reload")
}
