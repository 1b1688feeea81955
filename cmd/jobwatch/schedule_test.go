package main

import (
	"context"
	"encoding/json"
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
	"github.com/jobwatch/jobwatch/jobtype"
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

// jobwatch schedules lists the configuration's schedules: how each
// runs, its next run in UTC and in its own zone, and its latest run.
func TestSchedulesListsEachScheduleWithItsNextAndLastRun(t *testing.T) {
	s := startCLIServer(t, time.Second)
	code, out, errOut := runInProcess(t, "schedules", "--server", s.URL)
	if code != 0 || !strings.Contains(out, "No schedules") {
		t.Fatalf("schedules without any = exit %d:\n%s%s\nwant it to say there are none", code, out, errOut)
	}

	if err := s.Engine.SetRules(jobtype.Rules{Schedules: []jobtype.Schedule{
		{Name: "hourly-sync", Kind: "sync", Queue: "syncs", Tenant: "acme", Every: time.Hour},
		{Name: "nightly-report", Kind: "report", Cron: "0 2 * * *", Timezone: "Europe/Berlin"},
	}}); err != nil {
		t.Fatal(err)
	}
	// The every schedule runs at once: the sweep queues its first run.
	var run *jobwatchv1.Job
	waitFor(t, "the every schedule's first run", func() bool {
		resp, err := s.Client.JobService().ListJobs(context.Background(), &jobwatchv1.ListJobsRequest{Tenant: "acme", Kind: "sync"})
		if err != nil || len(resp.GetJobs()) == 0 {
			return false
		}
		run = resp.GetJobs()[0]
		return true
	})

	code, out, errOut = runInProcess(t, "schedules", "--server", s.URL)
	if code != 0 {
		t.Fatalf("schedules = exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SCHEDULE ") || !strings.HasPrefix(lines[1], "hourly-sync ") || !strings.HasPrefix(lines[2], "nightly-report ") {
		t.Fatalf("schedules printed:\n%s\nwant a header and the two schedules in the configuration's order", out)
	}
	for _, want := range []string{"sync", "syncs", "acme", "every 1h", "after the last run ends", run.GetId() + " QUEUED"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("hourly-sync's row %q lacks %q", lines[1], want)
		}
	}
	for _, want := range []string{"report", "default", "cron 0 2 * * * (Europe/Berlin)", ", in ", "T02:00:00+0", "never"} {
		if !strings.Contains(lines[2], want) {
			t.Errorf("nightly-report's row %q lacks %q", lines[2], want)
		}
	}
	// 02:00 in Berlin is 00:00 or 01:00 in UTC, whatever the season.
	if !strings.Contains(lines[2], "T00:00:00Z") && !strings.Contains(lines[2], "T01:00:00Z") {
		t.Errorf("nightly-report's row %q lacks its next run in UTC", lines[2])
	}

	code, out, errOut = runInProcess(t, "schedules", "--server", s.URL, "--json")
	if code != 0 {
		t.Fatalf("schedules --json = exit %d: %s", code, errOut)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("schedules --json printed:\n%s\nwant one line a schedule", out)
	}
	var nightly map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &nightly); err != nil {
		t.Fatal(err)
	}
	if nightly["name"] != "nightly-report" || nightly["timezone"] != "Europe/Berlin" || nightly["nextRunAt"] == nil || nightly["nextRunLocal"] == nil {
		t.Errorf("schedules --json printed %v for nightly-report, want its zone and next run", nightly)
	}

	if code, _, errOut := runInProcess(t, "schedules", "--server", s.URL, "extra"); code != 2 || !strings.Contains(errOut, "takes no arguments") {
		t.Errorf("schedules extra = exit %d: %s; want a usage error", code, errOut)
	}
}

// A schedule's every reads as a config writes it.
func TestDurationTextDropsTheZeroUnitsItEndsWith(t *testing.T) {
	for d, want := range map[time.Duration]string{
		20 * time.Second: "20s", 10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m",
		time.Hour + 30*time.Second: "1h0m30s", 100 * time.Millisecond: "100ms", 24 * time.Hour: "24h",
	} {
		if got := durationText(d); got != want {
			t.Errorf("durationText(%v) = %q, want %q", d, got, want)
		}
	}
}
