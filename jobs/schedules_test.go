package jobs_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

const every = 10 * time.Minute

func withSchedules(schedules ...jobtype.Schedule) jobtype.Rules {
	return jobtype.Rules{Schedules: schedules}
}

var downloads = jobtype.Schedule{Name: "update-downloads", Kind: "update_downloads", Queue: "downloads", Tenant: "crates", Every: every, Payload: mustJSON(map[string]any{})}

// runs lists the jobs of kind in tenant, oldest first.
func runs(t *testing.T, e *jobs.Engine, tenant, kind string) []jobtype.Job {
	t.Helper()
	list, _, err := e.List(context.Background(), jobs.ListRequest{Tenant: tenant, Kind: kind, Full: true})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
		list[i], list[j] = list[j], list[i]
	}
	return list
}

func claimRun(t *testing.T, e *jobs.Engine, kind string) jobtype.Job {
	t.Helper()
	j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w1", Kinds: []string{kind}}, time.Time{})
	if err != nil {
		t.Fatalf("claim %s: %v", kind, err)
	}
	return j
}

func TestANewScheduleQueuesItsFirstRunAtOnceAsASubmissionWould(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Rules: jobtype.Rules{
		Schedules: []jobtype.Schedule{downloads},
		Queues:    map[string]jobtype.QueueRules{"downloads": {MaxAttempts: 3}},
	}})
	sweep(t, e)
	got := runs(t, e, "crates", "update_downloads")
	if len(got) != 1 {
		t.Fatalf("after the first sweep: %d runs, want 1", len(got))
	}
	j := got[0]
	if j.State != jobtype.Queued || j.Queue != "downloads" || j.Tenant != "crates" || string(j.Payload) != "{}" ||
		j.MaxAttempts != 3 || !j.RunAt.Equal(clock.Now()) || j.Version != 1 {
		t.Errorf("first run %+v; want QUEUED in downloads for crates, payload {}, the queue's 3 attempts, run_at now", j)
	}
}

func TestAScheduleNeverHasTwoRunsAtOnce(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: 24 * time.Hour, Rules: jobtype.Rules{
		Schedules: []jobtype.Schedule{{Name: "tick", Kind: "tick", Every: time.Second}},
		Queues:    map[string]jobtype.QueueRules{jobtype.DefaultQueue: {MaxAttempts: 2}},
	}})
	ctx := context.Background()
	sweep(t, e)
	onlyOne := func(when string) {
		t.Helper()
		for range 3 {
			clock.Advance(time.Hour)
			sweep(t, e)
		}
		if got := runs(t, e, jobtype.DefaultTenant, "tick"); len(got) != 1 {
			t.Fatalf("%s, hours later: %d runs, want still 1", when, len(got))
		}
	}
	onlyOne("while the run is queued")
	j := claimRun(t, e, "tick")
	onlyOne("while the run is running")
	if _, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Flaky"}, true); err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, j.ID); got.State != jobtype.Queued || got.Attempt != 1 {
		t.Fatalf("after a retryable failure the run is %s at attempt %d, want queued for a retry", got.State, got.Attempt)
	}
	onlyOne("while the run waits for its retry")
	j = claimRun(t, e, "tick")
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "tick"); len(got) != 2 {
		t.Fatalf("a second after the run ended: %d runs, want 2", len(got))
	}
}

func TestTheNextRunIsQueuedEveryAfterThePreviousEndedWhateverItsOutcome(t *testing.T) {
	const leaseTimeout = 30 * time.Second
	outcomes := []struct {
		name string
		end  func(t *testing.T, e *jobs.Engine, clock *fakeClock, j jobtype.Job)
		want jobtype.State
	}{
		{"succeeded", func(t *testing.T, e *jobs.Engine, _ *fakeClock, j jobtype.Job) {
			if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
				t.Fatal(err)
			}
		}, jobtype.Succeeded},
		{"failed", func(t *testing.T, e *jobs.Engine, _ *fakeClock, j jobtype.Job) {
			if _, err := e.Fail(context.Background(), j.ID, j.LeaseID, jobtype.JobError{Type: "Broken"}, false); err != nil {
				t.Fatal(err)
			}
		}, jobtype.Failed},
		{"cancelled", func(t *testing.T, e *jobs.Engine, _ *fakeClock, j jobtype.Job) {
			if _, err := e.Cancel(context.Background(), j.ID); err != nil {
				t.Fatal(err)
			}
		}, jobtype.Cancelled},
		{"lost", func(t *testing.T, e *jobs.Engine, clock *fakeClock, _ jobtype.Job) {
			clock.Advance(leaseTimeout + time.Second)
			sweep(t, e)
		}, jobtype.Lost},
	}
	for _, o := range outcomes {
		t.Run(o.name, func(t *testing.T) {
			clock := newFakeClock()
			e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: leaseTimeout, Rules: withSchedules(downloads)})
			sweep(t, e)
			clock.Advance(time.Minute)
			j := claimRun(t, e, downloads.Kind)
			clock.Advance(3 * time.Minute) // the run takes a while
			o.end(t, e, clock, j)
			ended := get(t, e, j.ID)
			if ended.State != o.want {
				t.Fatalf("the run is %s, want %s", ended.State, o.want)
			}

			clock.Advance(every - time.Millisecond)
			sweep(t, e)
			if got := runs(t, e, "crates", downloads.Kind); len(got) != 1 {
				t.Fatalf("just before end+every: %d runs, want 1", len(got))
			}
			clock.Advance(time.Millisecond)
			sweep(t, e)
			got := runs(t, e, "crates", downloads.Kind)
			if len(got) != 2 {
				t.Fatalf("at end+every: %d runs, want 2", len(got))
			}
			if want := ended.FinishedAt.Add(every); !got[1].RunAt.Equal(want) {
				t.Errorf("next run_at %v, want the end %v + every = %v", got[1].RunAt, ended.FinishedAt, want)
			}
		})
	}
}

// openFile opens the database db as an engine's store would.
func openFile(t *testing.T, db string) store.Store {
	t.Helper()
	return testdb.OpenT(t, db)
}

func TestARestartAfterFivePeriodsQueuesOneCatchUpRun(t *testing.T) {
	clock := newFakeClock()
	path := testdb.New(t)
	cfg := jobs.Config{Now: clock.Now, Rules: withSchedules(downloads)}

	first := openFile(t, path)
	before := newEngineOver(t, first, cfg)
	sweep(t, before)
	j := claimRun(t, before, downloads.Kind)
	if _, err := before.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	before.Shutdown()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	clock.Advance(5 * every) // the server is down for five periods
	after := newEngineOver(t, openFile(t, path), cfg)
	restartedAt := clock.Now()
	for range 10 {
		sweep(t, after)
		clock.Advance(time.Second)
	}
	got := runs(t, after, "crates", downloads.Kind)
	if len(got) != 2 {
		t.Fatalf("after the restart: %d runs in all, want the first and one catch-up", len(got))
	}
	if !got[1].RunAt.Equal(restartedAt) {
		t.Errorf("catch-up run_at %v, want the first sweep after the restart, %v", got[1].RunAt, restartedAt)
	}
	info, err := after.Schedules(context.Background())
	if err != nil || len(info) != 1 || info[0].LastJobID != got[1].ID || !info[0].NextRunAt.IsZero() {
		t.Errorf("schedules after the restart: %+v, %v; want the catch-up run as the latest, unfinished", info, err)
	}
}

func TestAReloadAppliesANewEveryToTheNextRunAndARemovedScheduleQueuesNoMore(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Rules: withSchedules(downloads)})
	ctx := context.Background()
	finishRun := func() time.Time {
		t.Helper()
		j := claimRun(t, e, downloads.Kind)
		done, err := e.Complete(ctx, j.ID, j.LeaseID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return done.FinishedAt
	}
	sweep(t, e)
	ended := finishRun()

	faster := downloads
	faster.Every = time.Minute
	if err := e.SetRules(withSchedules(faster)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	sweep(t, e)
	got := runs(t, e, "crates", downloads.Kind)
	if len(got) != 2 || !got[1].RunAt.Equal(ended.Add(time.Minute)) {
		t.Fatalf("after every went to 1m: %d runs, want the next one at end + 1m", len(got))
	}
	finishRun()

	if err := e.SetRules(jobtype.Rules{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	sweep(t, e)
	if got := runs(t, e, "crates", downloads.Kind); len(got) != 2 {
		t.Fatalf("two hours after the schedule was removed: %d runs, want still 2", len(got))
	}
	if info, err := e.Schedules(ctx); err != nil || len(info) != 0 {
		t.Errorf("schedules after the removal: %+v, %v; want none", info, err)
	}

	// Declared again, it goes on from its latest run: due long ago, so
	// one run at once.
	if err := e.SetRules(withSchedules(faster)); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	sweep(t, e)
	if got := runs(t, e, "crates", downloads.Kind); len(got) != 3 {
		t.Fatalf("after declaring it again: %d runs, want 3", len(got))
	}
}

func TestTwoEnginesOnOneFileTickingAtOnceQueueOneRun(t *testing.T) {
	clock := newFakeClock()
	path := testdb.New(t)
	cfg := jobs.Config{Now: clock.Now, Rules: withSchedules(downloads)}
	engines := []*jobs.Engine{newEngineOver(t, openFile(t, path), cfg), newEngineOver(t, openFile(t, path), cfg)}
	tickAll := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, e := range engines {
			for range 4 {
				wg.Go(func() {
					if err := e.Sweep(context.Background()); err != nil {
						t.Errorf("sweep: %v", err)
					}
				})
			}
		}
		wg.Wait()
	}
	for round := 1; round <= 3; round++ {
		tickAll()
		got := runs(t, engines[0], "crates", downloads.Kind)
		if len(got) != round {
			t.Fatalf("round %d: %d runs in all, want %d", round, len(got), round)
		}
		latest := got[len(got)-1]
		j := claimRun(t, engines[round%2], downloads.Kind)
		if j.ID != latest.ID {
			t.Fatalf("claimed %s, want the latest run %s", j.ID, latest.ID)
		}
		if _, err := engines[round%2].Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
		clock.Advance(every)
	}
}

func TestARunWakesAParkedClaimer(t *testing.T) {
	clock := newFakeClock()
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Rules: withSchedules(downloads)})
	parked := async(func() (jobtype.Job, error) {
		return e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w1", Kinds: []string{downloads.Kind}}, soon())
	})
	waitParked(t, e, 1)
	sweep(t, e)
	j, err := await(t, parked)
	if err != nil || j.Kind != downloads.Kind || j.State != jobtype.Running {
		t.Fatalf("parked claim: %+v, %v; want the schedule's run", j, err)
	}
}

func TestSchedulesReportEachScheduleWithItsNextRun(t *testing.T) {
	clock := newFakeClock()
	other := jobtype.Schedule{Name: "cleanup", Kind: "cleanup", Every: time.Hour}
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Rules: withSchedules(downloads, other)})
	ctx := context.Background()
	schedules := func() []jobs.ScheduleInfo {
		t.Helper()
		info, err := e.Schedules(ctx)
		if err != nil || len(info) != 2 {
			t.Fatalf("schedules: %+v, %v; want 2", info, err)
		}
		return info
	}

	info := schedules()
	if info[0].Name != downloads.Name || info[1].Name != "cleanup" || info[1].Queue != jobtype.DefaultQueue || info[1].Tenant != jobtype.DefaultTenant {
		t.Errorf("schedules %+v; want the file's order, defaults filled in", info)
	}
	for _, s := range info {
		if !s.NextRunAt.Equal(clock.Now()) || s.LastJobID != "" {
			t.Errorf("%s before its first run: next %v, last %q; want due now, no run", s.Name, s.NextRunAt, s.LastJobID)
		}
	}

	sweep(t, e)
	info = schedules()
	if !info[0].NextRunAt.IsZero() || info[0].LastJobID == "" || info[0].LastJobState != jobtype.Queued || !info[0].LastEndedAt.IsZero() {
		t.Errorf("while its run is queued: %+v; want no next run, the run queued", info[0])
	}
	j := claimRun(t, e, downloads.Kind)
	clock.Advance(time.Minute)
	done, err := e.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "Broken"}, false)
	if err != nil {
		t.Fatal(err)
	}
	info = schedules()
	if info[0].LastJobID != j.ID || info[0].LastJobState != jobtype.Failed || !info[0].LastEndedAt.Equal(done.FinishedAt) ||
		!info[0].NextRunAt.Equal(done.FinishedAt.Add(every)) {
		t.Errorf("after its run failed: %+v; want the failed run, next at its end + every", info[0])
	}
}

func TestSetRulesRefusesSchedulesThatCouldNeverRun(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{MaxPayloadBytes: 300, Rules: withSchedules(downloads)})
	tests := []struct {
		name string
		r    jobtype.Rules
		want string
	}{
		{"every below a second", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: 500 * time.Millisecond}), "every must be at least 1s"},
		{"no every", withSchedules(jobtype.Schedule{Name: "s", Kind: "k"}), "every must be at least 1s"},
		{"no kind", withSchedules(jobtype.Schedule{Name: "s", Every: time.Minute}), "kind: must not be empty"},
		{"a name no request could use", withSchedules(jobtype.Schedule{Name: "my schedule", Kind: "k", Every: time.Minute}), "may only contain"},
		{"a name given twice", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute}, jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute}), "declared twice"},
		{"a queue no request could use", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Queue: "a queue", Every: time.Minute}), "queue: may only contain"},
		{"a payload over the limit", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute, Payload: mustJSON(strings.Repeat("x", 400))}), "over the limit of 300"},
		{"a payload nested too deep", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute, Payload: []byte(strings.Repeat("[", 129) + strings.Repeat("]", 129))}), "levels deep"},
		{"both every and cron", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute, Cron: "* * * * *"}), "give every or cron, not both"},
		{"a cron expression that does not parse", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Cron: "0 2 *"}), "cron: does not parse (expected exactly 5 fields, found 3)"},
		{"an unknown time zone", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Cron: "0 2 * * *", Timezone: "Mars/Olympus"}), "timezone: is not a known IANA time zone name"},
		{"a time zone without cron", withSchedules(jobtype.Schedule{Name: "s", Kind: "k", Every: time.Minute, Timezone: "UTC"}), "timezone applies to cron schedules only"},
		{"an undeclared queue under strict rules", jobtype.Rules{Strict: true, Schedules: []jobtype.Schedule{{Name: "s", Kind: "k", Every: time.Minute}}}, `queue "default" is not declared`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.SetRules(tt.r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SetRules: %v; want a refusal saying %q", err, tt.want)
			}
			if got := e.Rules().Schedules; len(got) != 1 || got[0].Name != downloads.Name {
				t.Errorf("after the refusal the schedules are %+v; want the old ones", got)
			}
		})
	}
}

func TestASweepWritesForSchedulesOnlyWhenARunIsDue(t *testing.T) {
	clock := newFakeClock()
	st := &countingSchedules{Store: openStore(t)}
	e := newEngineOver(t, st, jobs.Config{Now: clock.Now, LeaseTimeout: 24 * time.Hour, Rules: withSchedules(downloads)})
	sweep(t, e)
	if n := st.writes.Load(); n != 1 {
		t.Fatalf("the first sweep called RunSchedules %d times, want 1 (the first run)", n)
	}
	j := claimRun(t, e, downloads.Kind)
	for range 5 {
		clock.Advance(time.Hour)
		sweep(t, e)
	}
	if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		clock.Advance(time.Minute)
		sweep(t, e)
	}
	if n := st.writes.Load(); n != 1 {
		t.Errorf("sweeps while the run was unfinished, then before it was due, called RunSchedules %d times in all, want still 1", n)
	}
	clock.Advance(5 * time.Minute)
	sweep(t, e)
	if n := st.writes.Load(); n != 2 {
		t.Errorf("the sweep at end+every: RunSchedules called %d times in all, want 2", n)
	}
}

// countingSchedules counts RunSchedules, the write of a schedule tick.
type countingSchedules struct {
	store.Store
	writes atomic.Int64
}

func (c *countingSchedules) RunSchedules(ctx context.Context, runs []store.ScheduleRun, now time.Time) ([]jobtype.Job, error) {
	c.writes.Add(1)
	return c.Store.RunSchedules(ctx, runs, now)
}

// BenchmarkScheduleTickNothingDue is what a sweep costs with 100
// schedules whose runs are all unfinished (their tick is one read),
// beside a sweep without schedules.
func BenchmarkScheduleTickNothingDue(b *testing.B) {
	for _, n := range []int{0, 100} {
		b.Run(strconv.Itoa(n)+" schedules", func(b *testing.B) {
			st, err := sqlite.Open(filepath.Join(b.TempDir(), "jobs.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var schedules []jobtype.Schedule
			for i := range n {
				schedules = append(schedules, jobtype.Schedule{Name: "s" + strconv.Itoa(i), Kind: "k", Every: time.Minute})
			}
			clock := newFakeClock()
			e := jobs.New(st, jobs.Config{Now: clock.Now, Logger: slog.New(slog.DiscardHandler), Rules: withSchedules(schedules...)})
			defer e.Shutdown()
			ctx := context.Background()
			if err := e.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := e.Sweep(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestACronScheduleRunsAtItsTimesOnceEachAndCatchesUpOnceAfterAGap(t *testing.T) {
	clock := newFakeClock()
	report := jobtype.Schedule{Name: "report", Kind: "report", Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Rules: withSchedules(report)})
	ctx := context.Background()
	nextRun := func() time.Time {
		t.Helper()
		infos, err := e.Schedules(ctx)
		if err != nil || len(infos) != 1 {
			t.Fatalf("Schedules: %v, %v", infos, err)
		}
		if infos[0].Location.String() != "Europe/Berlin" {
			t.Errorf("location %v, want Europe/Berlin", infos[0].Location)
		}
		return infos[0].NextRunAt
	}
	if got, want := nextRun(), time.Date(2030, 1, 2, 3, 5, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("before the first sweep the next run is %v, want the first time %v", got, want)
	}
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "report"); len(got) != 0 {
		t.Fatalf("a new cron schedule ran at once: %v", got)
	}
	clock.Advance(55*time.Second - time.Millisecond)
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "report"); len(got) != 0 {
		t.Fatalf("a run before the first time: %v", got)
	}
	clock.Advance(time.Millisecond) // 03:05:00
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "report"); len(got) != 1 {
		t.Fatalf("at the first time: %d runs, want 1", len(got))
	}
	// The run takes until 03:11: 03:10 is skipped, the next is 03:15.
	j := claimRun(t, e, "report")
	clock.Advance(6 * time.Minute)
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "report"); len(got) != 1 {
		t.Fatalf("while the run is unfinished at 03:10: %d runs, want 1", len(got))
	}
	if !nextRun().IsZero() {
		t.Errorf("while a run is unfinished the next run is %v, want none", nextRun())
	}
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := nextRun(), time.Date(2030, 1, 2, 3, 15, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("after the run ended at 03:11 the next run is %v, want %v", got, want)
	}
	// Stopped for a day: one catch-up run, whatever the ticks. (The
	// first run is gone by then: retention deleted it.)
	clock.Advance(24 * time.Hour)
	for range 3 {
		sweep(t, e)
		clock.Advance(time.Second)
	}
	got := runs(t, e, jobtype.DefaultTenant, "report")
	if len(got) != 1 || got[0].ID == j.ID || got[0].State != jobtype.Queued {
		t.Fatalf("after a day's gap: runs %v, want one catch-up run queued", got)
	}
}

// A reload that changes a cron schedule's times starts no run for a time
// before the change, whether the schedule has run or not: its next run
// is the new expression's first time after the reload. A reload that
// leaves it as it is keeps that.
func TestACronScheduleEditedByAReloadStartsNoRunForATimeBeforeTheEdit(t *testing.T) {
	clock := newFakeClock() // 03:04:05
	early := jobtype.Schedule{Name: "early", Kind: "early", Cron: "10 3 * * *"}
	daily := jobtype.Schedule{Name: "daily", Kind: "daily", Cron: "5 3 * * *"}
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, Rules: withSchedules(early, daily)})
	ctx := context.Background()
	sweep(t, e)
	clock.Advance(time.Minute) // 03:05:05
	sweep(t, e)
	j := claimRun(t, e, "daily")
	if _, err := e.Complete(ctx, j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}

	clock.Advance(15 * time.Minute) // 03:20:05
	early.Cron, daily.Cron = "15 3 * * *", "12 3 * * *"
	if err := e.SetRules(withSchedules(early, daily)); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	clock.Advance(5 * time.Minute)
	if err := e.SetRules(withSchedules(early, daily)); err != nil { // as it is
		t.Fatal(err)
	}
	sweep(t, e)
	if got, done := runs(t, e, jobtype.DefaultTenant, "early"), runs(t, e, jobtype.DefaultTenant, "daily"); len(got) != 0 || len(done) != 1 {
		t.Fatalf("after the edit at 03:20 to 03:15 and 03:12: %d runs of early and %d of daily, want none new", len(got), len(done))
	}
	infos, err := e.Schedules(ctx)
	if err != nil || len(infos) != 2 {
		t.Fatalf("Schedules: %v, %v", infos, err)
	}
	for _, info := range infos {
		want := time.Date(2030, 1, 3, 3, 15, 0, 0, time.UTC)
		if info.Name == "daily" {
			want = time.Date(2030, 1, 3, 3, 12, 0, 0, time.UTC)
		}
		if !info.NextRunAt.Equal(want) {
			t.Errorf("%s's next run is %v, want %v: the next day's", info.Name, info.NextRunAt, want)
		}
	}

	clock.Advance(23*time.Hour + 47*time.Minute) // the next day, 03:12:05
	sweep(t, e)
	// (The first run is gone by then: retention deleted it.)
	if got := runs(t, e, jobtype.DefaultTenant, "daily"); len(got) != 1 || got[0].ID == j.ID || got[0].State != jobtype.Queued {
		t.Fatalf("at its new time the next day: runs of daily %v, want a new one queued", got)
	}
	clock.Advance(3 * time.Minute)
	sweep(t, e)
	if got := runs(t, e, jobtype.DefaultTenant, "early"); len(got) != 1 {
		t.Fatalf("at its new time the next day: %d runs of early, want 1", len(got))
	}
}
