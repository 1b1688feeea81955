package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

func TestPauseQueuesAndResumeShowAndChangeAQueuesPause(t *testing.T) {
	s := startCLIServer(t, time.Second)
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report", Queue: "reports"})

	code, out, errOut := runInProcess(t, "pause", "reports", "--server", s.URL)
	if code != 0 || !strings.Contains(out, "reports: paused since ") || !strings.Contains(out, "by anonymous") {
		t.Fatalf("pause reports = exit %d:\n%s%s\nwant it paused, by whom", code, out, errOut)
	}

	code, out, errOut = runInProcess(t, "queues", "--server", s.URL)
	if code != 0 {
		t.Fatalf("queues = exit %d: %s", code, errOut)
	}
	var row string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "reports ") {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 6 || f[1] != "1" || f[3] != "since" || f[5] != "anonymous" {
		t.Errorf("queues printed %q for reports, want 1 queued, paused since ..., by anonymous, in:\n%s", row, out)
	}

	// A paused queue is among the most pressing, which a bound keeps.
	code, out, errOut = runInProcess(t, "queues", "--server", s.URL, "--max-queues", "1")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) < 3 || !strings.HasPrefix(lines[1], "reports ") ||
		strings.Contains(out, "\ndefault ") || lines[len(lines)-1] != "(1 more queue: these are the 1 most pressing; --max-queues lists more)" {
		t.Errorf("queues --max-queues 1 = exit %d:\n%s%s\nwant the paused queue alone, and a line saying one more was left out", code, out, errOut)
	}

	code, out, errOut = runInProcess(t, "queues", "--server", s.URL, "--json")
	if code != 0 {
		t.Fatalf("queues --json = exit %d: %s", code, errOut)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var q map[string]any
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			t.Fatalf("queues --json line %q: %v", line, err)
		}
		if q["name"] == "reports" {
			found = true
			if q["paused"] != true || q["pausedBy"] != "anonymous" || q["pausedAt"] == nil {
				t.Errorf("queues --json printed %v for reports, want paused, pausedBy and pausedAt", q)
			}
		}
	}
	if !found {
		t.Errorf("queues --json has no line for reports:\n%s", out)
	}

	code, out, errOut = runInProcess(t, "resume", "reports", "--server", s.URL)
	if code != 0 || strings.TrimSpace(out) != "reports: running (not paused)" {
		t.Fatalf("resume reports = exit %d:\n%s%s", code, out, errOut)
	}
}

func TestPauseAndResumeExitAsOtherCommandsOnBadInput(t *testing.T) {
	s := startCLIServer(t, time.Second)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"a queue the server does not know is an error naming it", []string{"pause", "no-such-queue"}, 1, "no-such-queue"},
		{"resume of an unknown queue too", []string{"resume", "no-such-queue"}, 1, "no-such-queue"},
		{"no queue is a usage error", []string{"pause"}, 2, "usage: jobwatch pause QUEUE"},
		{"two queues are a usage error", []string{"resume", "a", "b"}, 2, "usage: jobwatch resume QUEUE"},
		{"queues takes no argument", []string{"queues", "x"}, 2, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runInProcess(t, append(tc.args, "--server", s.URL)...)
			if code != tc.code || !strings.Contains(errOut, tc.says) {
				t.Errorf("%v = exit %d:\n%s%s\nwant exit %d saying %q", tc.args, code, out, errOut, tc.code, tc.says)
			}
		})
	}
}

// jobwatch queues lists each queue's busiest tenants under it, busiest
// first, and says how many it left out; --tenants asks for another
// number, and --json has them as the API does.
func TestQueuesListsEachQueuesBusiestTenantsUnderIt(t *testing.T) {
	s := startBatchServer(t, 0)
	now := time.Now()
	ago := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-d)) }
	// acme: 5 queued, one of them ready an hour ago; globex: 3 queued
	// and 1 running; t03 to t12: one queued each, t03's the longest
	// waiting, so they rank in name order.
	for i := range 5 {
		req := &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "report.build", Queue: "reports"}
		if i == 0 {
			req.RunAt = ago(time.Hour)
		}
		s.submit(t, req)
	}
	for range 3 {
		s.submit(t, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "report.build", Queue: "reports", RunAt: ago(time.Minute)})
	}
	s.submit(t, &jobwatchv1.SubmitJobRequest{Tenant: "globex", Kind: "report.urgent", Queue: "reports"})
	s.claim(t, "report.urgent")
	for i := 3; i <= 12; i++ {
		s.submit(t, &jobwatchv1.SubmitJobRequest{Tenant: fmt.Sprintf("t%02d", i), Kind: "report.build", Queue: "reports", RunAt: ago(time.Duration(30-i) * time.Minute)})
	}

	// tenantRows returns the rows printed under the queue reports.
	tenantRows := func(t *testing.T, args ...string) []string {
		t.Helper()
		code, out, errOut := runInProcess(t, append([]string{"queues", "--server", s.URL}, args...)...)
		if code != 0 {
			t.Fatalf("queues %v = exit %d: %s", args, code, errOut)
		}
		var rows []string
		under := false
		lines := strings.Split(out, "\n")
		// Each tenant's oldest wait sits under the header's OLDEST WAIT.
		col := strings.Index(lines[0], "OLDEST WAIT")
		for _, line := range lines {
			if strings.HasPrefix(line, "  tenant ") && (len(line) <= col || line[col-1] != ' ' || line[col] < '0' || line[col] > '9') {
				t.Errorf("a tenant's row %q has no oldest wait under OLDEST WAIT (column %d):\n%s", line, col, out)
			}
			switch {
			case strings.HasPrefix(line, "reports "):
				if f := strings.Fields(line); len(f) < 4 || f[1] != "18" || f[2] != "1" || f[3] != "no" {
					t.Errorf("the queue's row is %q, want 18 queued, 1 running, not paused", line)
				}
				under = true
			case under && strings.HasPrefix(line, "  "):
				rows = append(rows, strings.Join(strings.Fields(line), " "))
			default:
				under = false
			}
		}
		return rows
	}

	t.Run("ten tenants by default, the busiest first, and how many more", func(t *testing.T) {
		rows := tenantRows(t)
		want := []string{"tenant acme 5 0", "tenant globex 3 1"}
		for i := 3; i <= 10; i++ {
			want = append(want, fmt.Sprintf("tenant t%02d 1 0", i))
		}
		want = append(want, "(2 more tenants)")
		if len(rows) != len(want) {
			t.Fatalf("the rows under reports are\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
		}
		for i, w := range want {
			if !strings.HasPrefix(rows[i], w) {
				t.Errorf("row %d under reports is %q, want it to start %q", i, rows[i], w)
			}
		}
		// acme's oldest ready job became ready an hour ago.
		if f := strings.Fields(rows[0]); len(f) != 5 || !strings.HasPrefix(f[4], "1h0m") {
			t.Errorf("acme's row is %q, want its oldest wait, about 1h0m0s, last", rows[0])
		}
	})

	t.Run("--tenants asks for another number", func(t *testing.T) {
		rows := tenantRows(t, "--tenants", "1")
		if len(rows) != 2 || !strings.HasPrefix(rows[0], "tenant acme 5 0") || rows[1] != "(11 more tenants)" {
			t.Errorf("the rows under reports with --tenants 1 are %q, want acme and (11 more tenants)", rows)
		}
	})

	t.Run("--json has the tenants as the API does", func(t *testing.T) {
		code, out, errOut := runInProcess(t, "queues", "--server", s.URL, "--json", "--tenants", "2")
		if code != 0 {
			t.Fatalf("queues --json = exit %d: %s", code, errOut)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var q struct {
				Name    string `json:"name"`
				Tenants []struct {
					Tenant          string `json:"tenant"`
					Queued, Running string
					OldestQueuedAge string `json:"oldestQueuedAge"`
				} `json:"tenants"`
				TenantsLeftOut int `json:"tenantsLeftOut"`
			}
			if err := json.Unmarshal([]byte(line), &q); err != nil {
				t.Fatalf("queues --json line %q: %v", line, err)
			}
			if q.Name != "reports" {
				continue
			}
			if len(q.Tenants) != 2 || q.Tenants[0].Tenant != "acme" || q.Tenants[0].Queued != "5" ||
				q.Tenants[1].Tenant != "globex" || q.Tenants[1].Running != "1" || q.TenantsLeftOut != 10 {
				t.Errorf("queues --json printed %s for reports, want acme (5 queued), globex (1 running) and 10 left out", line)
			}
			if !strings.HasPrefix(q.Tenants[0].OldestQueuedAge, "360") {
				t.Errorf("acme's oldestQueuedAge is %q, want about 3600s", q.Tenants[0].OldestQueuedAge)
			}
			return
		}
		t.Errorf("queues --json has no line for reports:\n%s", out)
	})

	t.Run("--tenants below zero is a usage error", func(t *testing.T) {
		code, _, errOut := runInProcess(t, "queues", "--server", s.URL, "--tenants", "-1")
		if code != 2 || !strings.Contains(errOut, "--tenants must not be negative") {
			t.Errorf("queues --tenants -1 = exit %d: %s; want a usage error", code, errOut)
		}
	})
}

// jobwatch queues says since when a queue has been alerting (its work
// waited longer than its alert_after without draining), beside the rest
// of its row; --json has it as the API does.
func TestQueuesSaysSinceWhenAQueueIsAlerting(t *testing.T) {
	db := filepath.Join(t.TempDir(), "jobwatch.db")
	st, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	s := serveForCLI(t, db, st, jobs.Config{
		LeaseTimeout: time.Minute, SweepInterval: 20 * time.Millisecond,
		Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: 50 * time.Millisecond}}},
	}, server.Config{})
	s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "reindex", Queue: "index", RunAt: timestamppb.New(time.Now().Add(-time.Hour))})

	var out string
	waitFor(t, "jobwatch queues to say index is alerting", func() bool {
		code, o, errOut := runInProcess(t, "queues", "--server", s.URL)
		if code != 0 {
			t.Fatalf("queues = exit %d: %s", code, errOut)
		}
		out = o
		return strings.Contains(out, "ALERTING") && strings.Contains(rowOf(out, "index"), " since ")
	})
	f := strings.Fields(rowOf(out, "index"))
	if since, err := time.Parse(time.RFC3339, f[len(f)-1]); err != nil || f[len(f)-2] != "since" || time.Since(since) > time.Minute {
		t.Errorf("queues printed %q for index, want it to end with since and a time of the last minute, in:\n%s", rowOf(out, "index"), out)
	}
	if row := rowOf(out, "default"); strings.Contains(row, "since") {
		t.Errorf("queues printed %q for default, which is not alerting", row)
	}
	code, js, errOut := runInProcess(t, "queues", "--server", s.URL, "--json")
	if code != 0 || !strings.Contains(js, `"alerting":true`) || !strings.Contains(js, `"alertingSince":`) {
		t.Errorf("queues --json = exit %d:\n%s%s\nwant index alerting, with alertingSince", code, js, errOut)
	}
}

// rowOf is the line of jobwatch queues' table for queue, or "".
func rowOf(table, queue string) string {
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, queue+" ") {
			return line
		}
	}
	return ""
}

// jobwatch get says when a QUEUED job that is not ready yet may be
// claimed (its run_at, or the backoff after a failed attempt), so an
// operator can tell it from one no worker takes; a ready job says
// nothing of it.
func TestGetSaysWhenAQueuedJobBecomesReady(t *testing.T) {
	s := startCLIServer(t, time.Second)
	later := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report", RunAt: timestamppb.New(time.Now().Add(time.Hour))})
	ready := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "report"})

	code, out, errOut := runInProcess(t, "get", later, "--server", s.URL)
	if code != 0 || !strings.Contains(out, "ready at:") || !strings.Contains(out, "(in 59m") && !strings.Contains(out, "(in 1h0m0s") {
		t.Errorf("get of a job ready in an hour = exit %d:\n%s%s\nwant a ready at line, in about an hour", code, out, errOut)
	}
	if code, out, errOut := runInProcess(t, "get", ready, "--server", s.URL); code != 0 || strings.Contains(out, "ready at") {
		t.Errorf("get of a ready job = exit %d:\n%s%s\nwant no ready at line", code, out, errOut)
	}
}

// jobwatch get says what of its queue holds a QUEUED job back, as the
// page does, for a token that may read the queues: the queue's
// max_running, the tenant's max_running_per_tenant, a serial queue's
// running job of the tenant, a pause; and nothing once it no longer does.
func TestGetSaysWhatOfItsQueueHoldsAQueuedJob(t *testing.T) {
	s := startCLIServer(t, time.Minute)
	if err := s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"render": {MaxRunning: 1},
		"bulk":   {MaxRunningPerTenant: 1},
		"deploy": {Serial: true},
	}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct{ queue, want string }{
		{"render", "queue render runs at most 1 job at once, and 1 is running"},
		{"bulk", "queue bulk runs at most 1 job of a tenant at once, and 1 of tenant default's is running"},
		{"deploy", "queue deploy is serial, and a job of tenant default is running"},
	} {
		kind := "build-" + tt.queue
		s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: kind, Queue: tt.queue})
		waiting := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: kind, Queue: tt.queue})
		running := s.claim(t, kind)
		// ListQueues answers from a read of the queues' tenants that a
		// slow read (a loaded machine) lets calls share for up to 5 s:
		// the line may lag the change that far.
		held := func(want string) func() bool {
			return func() bool { return heldLine(t, s, waiting) == want }
		}
		if !held(tt.want)() {
			waitForWithin(t, 30*time.Second, fmt.Sprintf("get of the second job of %s to say held: %q (it says %q)", tt.queue, tt.want, heldLine(t, s, waiting)), held(tt.want))
		}
		if _, err := s.Engine.Complete(ctx, running.ID, running.LeaseID, nil); err != nil {
			t.Fatal(err)
		}
		if !held("")() {
			waitForWithin(t, 30*time.Second, fmt.Sprintf("get of the job of %s, its queue's slot free, to say no held line", tt.queue), held(""))
		}
	}
	paused := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "mail"})
	if _, err := s.Engine.Pause(ctx, "default", "token ops (admin)"); err != nil {
		t.Fatal(err)
	}
	if got := heldLine(t, s, paused); !strings.HasPrefix(got, "queue default is paused since ") || !strings.HasSuffix(got, " by token ops (admin) (jobwatch resume default)") {
		t.Errorf("get of a job of a paused queue says held: %q, want since when, by whom and how to resume it", got)
	}
}

// heldLine is what "jobwatch get id" says after "held:", or "".
func heldLine(t *testing.T, s *cliServer, id string) string {
	t.Helper()
	code, out, errOut := runInProcess(t, "get", id, "--server", s.URL)
	if code != 0 {
		t.Fatalf("get %s = exit %d:\n%s%s", id, code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "held:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// jobwatch get of a QUEUED job of a serial queue that waits behind an
// older QUEUED job of its tenant (one of a kind no worker runs, which
// never starts) says so, how long that one has waited, and what to do;
// the older job itself, and another tenant's, say nothing; nor does the
// job once the one ahead of it is cancelled.
func TestGetSaysASerialQueuesOlderQueuedJobHoldsTheTenantsLaterOnes(t *testing.T) {
	s := startCLIServer(t, time.Minute)
	if err := s.Engine.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"ser": {Serial: true}}}); err != nil {
		t.Fatal(err)
	}
	head := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "nobody.runs", Queue: "ser", Tenant: "acme", RunAt: timestamppb.New(time.Now().Add(-5 * time.Minute))})
	later := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "build", Queue: "ser", Tenant: "acme"})
	other := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "build", Queue: "ser", Tenant: "globex"})

	want := regexp.MustCompile(`^queue ser is serial, and an older job of tenant acme is queued ahead of it \(waiting 5m[01]s\): it runs first; ` +
		`a job no worker takes holds the tenant's later ones \(cancel it, or run a worker of its kind\)$`)
	if got := heldLine(t, s, later); !want.MatchString(got) {
		t.Errorf("get of the later job of acme says held: %q, want it to name the older job of acme ahead of it, its wait, and what to do", got)
	}
	if got := heldLine(t, s, head); got != "" {
		t.Errorf("get of acme's oldest job says held: %q, want no held line: nothing of its tenant is ahead of it", got)
	}
	if got := heldLine(t, s, other); got != "" {
		t.Errorf("get of globex's job says held: %q, want no held line: acme's jobs are not ahead of it", got)
	}
	if _, err := s.Client.Cancel(context.Background(), head); err != nil {
		t.Fatal(err)
	}
	if got := heldLine(t, s, later); got != "" {
		t.Errorf("get of the later job of acme, the job ahead of it cancelled, says held: %q, want no held line", got)
	}
}
