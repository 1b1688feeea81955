package server_test

import (
	"encoding/json"
	"maps"

	"connectrpc.com/connect"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func TestListSchedulesShowsEachScheduleWithItsNextRun(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules: jobtype.Rules{Schedules: []jobtype.Schedule{
			{Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates", Every: 10 * time.Minute},
			{Name: "cleanup", Kind: "cleanup", Every: time.Hour},
		}},
	}})
	c := ts.h2c()
	ctx := ctxTimeout(t, 10*time.Second)
	list := func() []*jobwatchv1.Schedule {
		t.Helper()
		resp, err := c.queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetSchedules()) != 2 {
			t.Fatalf("ListSchedules = %v, want the 2 schedules", resp.GetSchedules())
		}
		return resp.GetSchedules()
	}
	sameSchedule := func(when string, got, want *jobwatchv1.Schedule) {
		t.Helper()
		if !proto.Equal(got, want) {
			t.Errorf("%s: %v\nwant %v", when, got, want)
		}
	}

	start := clock.Now()
	got := list()
	sameSchedule("before the first sweep", got[0], &jobwatchv1.Schedule{
		Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates",
		Every: durationpb.New(10 * time.Minute), NextRunAt: timestamppb.New(start),
	})
	sameSchedule("the schedule with defaults, before the first sweep", got[1], &jobwatchv1.Schedule{
		Name: "cleanup", Kind: "cleanup", Queue: jobtype.DefaultQueue, Tenant: jobtype.DefaultTenant,
		Every: durationpb.New(time.Hour), NextRunAt: timestamppb.New(start),
	})

	if err := ts.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got = list()
	runID := got[0].GetLastJobId()
	sameSchedule("while the first run is queued", got[0], &jobwatchv1.Schedule{
		Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates",
		Every: durationpb.New(10 * time.Minute), LastJobId: runID, LastJobState: jobwatchv1.JobState_JOB_STATE_QUEUED,
	})
	lease := claim(t, c, "update_downloads")
	if lease.GetJob().GetId() != runID || lease.GetJob().GetTenant() != "crates" {
		t.Fatalf("claimed %v, want the schedule's run %s", lease.GetJob(), runID)
	}
	if s := list()[0]; s.GetLastJobState() != jobwatchv1.JobState_JOB_STATE_RUNNING || s.GetNextRunAt() != nil {
		t.Errorf("while the run is running: %v; want RUNNING and no next run", s)
	}

	clock.Advance(3 * time.Minute)
	done := complete(t, c, lease, nil)
	endedAt := done.GetFinishedAt().AsTime()
	sameSchedule("after the run succeeded", list()[0], &jobwatchv1.Schedule{
		Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates",
		Every: durationpb.New(10 * time.Minute), LastJobId: runID, LastJobState: jobwatchv1.JobState_JOB_STATE_SUCCEEDED,
		LastEndedAt: timestamppb.New(endedAt), NextRunAt: timestamppb.New(endedAt.Add(10 * time.Minute)),
	})

	// curl, with JSON over HTTP/1.1, sees the same in camelCase.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url+"/jobwatch.v1.QueueService/ListSchedules", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ts.http1Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Schedules []struct {
			Name      string `json:"name"`
			Every     string `json:"every"`
			NextRunAt string `json:"nextRunAt"`
			LastState string `json:"lastJobState"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Schedules) != 2 {
		t.Fatalf("JSON ListSchedules: %d %s (%v)", resp.StatusCode, body, err)
	}
	wantNext := endedAt.Add(10 * time.Minute).Format(time.RFC3339Nano)
	if s := out.Schedules[0]; s.Name != "update-downloads" || s.Every != "600s" || s.NextRunAt != wantNext || s.LastState != "JOB_STATE_SUCCEEDED" {
		t.Errorf("JSON schedule %+v; want every 600s, nextRunAt %s, lastJobState JOB_STATE_SUCCEEDED", s, wantNext)
	}
}

func TestListSchedulesIsEmptyWithoutSchedules(t *testing.T) {
	ts := startServer(t, serverOptions{})
	resp, err := ts.h2c().queues.ListSchedules(ctxTimeout(t, 5*time.Second), &jobwatchv1.ListSchedulesRequest{})
	if err != nil || len(resp.GetSchedules()) != 0 {
		t.Fatalf("ListSchedules: %v, %v; want no schedules", resp.GetSchedules(), err)
	}
}

func TestACronScheduleQueuesARunAtItsTimeAndListSchedulesShowsItsNextRunInItsZone(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 12, 2, 0, 59, 30, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules: jobtype.Rules{Schedules: []jobtype.Schedule{
			{Name: "minutely", Kind: "tick", Cron: "* * * * *", Timezone: "Europe/Berlin"},
		}},
	}})
	ctx := ctxTimeout(t, 10*time.Second)
	for _, p := range []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"Connect, h2c", ts.h2cClient(), nil},
		{"gRPC, h2c", ts.h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"gRPC-Web, HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithGRPCWeb()}},
		{"Connect JSON, HTTP/1.1", ts.http1Client(), []connect.ClientOption{connect.WithProtoJSON()}},
	} {
		c := ts.clients(p.hc, p.opts...)
		t.Run(p.name, func(t *testing.T) {
			resp, err := c.queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first := time.Date(2030, 12, 2, 1, 0, 0, 0, time.UTC)
			want := &jobwatchv1.Schedule{
				Name: "minutely", Kind: "tick", Queue: jobtype.DefaultQueue, Tenant: jobtype.DefaultTenant,
				Cron: "* * * * *", Timezone: "Europe/Berlin",
				NextRunAt: timestamppb.New(first), NextRunLocal: "2030-12-02T02:00:00+01:00",
			}
			if got := resp.GetSchedules(); len(got) != 1 || !proto.Equal(got[0], want) {
				t.Errorf("ListSchedules = %v\nwant %v", got, want)
			}
		})
	}

	c := ts.h2c()
	if err := ts.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err := c.jobs.ListJobs(ctx, &jobwatchv1.ListJobsRequest{Kind: "tick"}); err != nil || len(list.GetJobs()) != 0 {
		t.Fatalf("before the first time: %v, %v; want no run", list.GetJobs(), err)
	}
	clock.Advance(30 * time.Second)
	if err := ts.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	lease := claim(t, c, "tick")
	resp, err := c.queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetSchedules()[0]; s.GetLastJobId() != lease.GetJob().GetId() || s.GetNextRunAt() != nil || s.GetNextRunLocal() != "" {
		t.Errorf("while the run is running: %v; want its id and no next run", s)
	}
	clock.Advance(90 * time.Second) // ends at 01:01:30: 01:01 is skipped
	complete(t, c, lease, nil)
	resp, err = c.queues.ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.GetSchedules()[0]; !s.GetNextRunAt().AsTime().Equal(time.Date(2030, 12, 2, 1, 2, 0, 0, time.UTC)) || s.GetNextRunLocal() != "2030-12-02T02:02:00+01:00" {
		t.Errorf("after the run ended at 01:01:30: %v; want the next at 01:02 UTC, 02:02 in Berlin", s)
	}
}

// scheduleSamples reads each series of name from the registry, by its
// schedule label.
func (ts *testServer) scheduleSamples(name string) map[string]float64 {
	ts.t.Helper()
	families, err := ts.registry.Gather()
	if err != nil {
		ts.t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "schedule" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// /metrics says, for each schedule, when its next run is due, whether a
// run is unfinished, and how the latest ended: an operator alerts on a
// schedule that stopped running (time() past its next run) or whose
// runs fail, where only jobwatch schedules showed it (an outside probe).
func TestMetricsSayWhenEachScheduleRunsNextAndHowItsLastRunEnded(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	ts := startServer(t, serverOptions{now: clock.Now, engine: jobs.Config{
		LeaseTimeout: time.Hour,
		Rules: jobtype.Rules{Schedules: []jobtype.Schedule{
			{Name: "nightly", Kind: "nightly", Every: 10 * time.Minute},
		}},
	}})
	c := ts.h2c()
	ctx := ctxTimeout(t, 10*time.Second)
	const (
		next      = "jobwatch_schedule_next_run_timestamp_seconds"
		running   = "jobwatch_schedule_running"
		ended     = "jobwatch_schedule_last_run_end_timestamp_seconds"
		succeeded = "jobwatch_schedule_last_run_succeeded"
	)
	seconds := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	check := func(when string, want map[string]map[string]float64) {
		t.Helper()
		for _, name := range []string{next, running, ended, succeeded} {
			if got := ts.scheduleSamples(name); !maps.Equal(got, want[name]) {
				t.Errorf("%s: %s = %v, want %v", when, name, got, want[name])
			}
		}
	}
	start := clock.Now()
	check("before the first run", map[string]map[string]float64{
		next: {"nightly": seconds(start)}, running: {"nightly": 0}, ended: {}, succeeded: {},
	})
	if err := ts.engine.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	check("while the run is queued", map[string]map[string]float64{
		next: {}, running: {"nightly": 1}, ended: {}, succeeded: {},
	})
	lease := claim(t, c, "nightly")
	clock.Advance(time.Minute)
	end := clock.Now()
	if _, err := c.workers.FailJob(ctx, &jobwatchv1.FailJobRequest{JobId: lease.GetJob().GetId(), LeaseId: lease.GetLeaseId(),
		Error: &jobwatchv1.JobError{Message: "boom"}}); err != nil {
		t.Fatal(err)
	}
	check("after the run failed", map[string]map[string]float64{
		next: {"nightly": seconds(end.Add(10 * time.Minute))}, running: {"nightly": 0},
		ended: {"nightly": seconds(end)}, succeeded: {"nightly": 0},
	})
}
