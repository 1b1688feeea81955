package main

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// A job whose history was trimmed to its bound says, where the history
// starts, that earlier attempts are not kept: get started at "#5 ended,
// retried" as if that were the job's first run.
func TestGetSaysEarlierAttemptsAreNotKept(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	const attempts = jobtype.MaxHistory + 4
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cli.flaky", MaxAttempts: attempts})
	for range attempts {
		j := s.claim(t, "cli.flaky")
		if _, err := s.Engine.Fail(t.Context(), j.ID, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: "503"}, true); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runInProcess(t, "get", id, "--server", s.URL)
	if code != 0 {
		t.Fatalf("get: exit %d, %q", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	first := slicesIndex(lines, "history:")
	if first < 0 || !strings.Contains(lines[first], "… 4 earlier attempts not kept (a job keeps the last 20 entries of its history)") ||
		!strings.Contains(lines[first+1], "#5 ended, retried (QUEUED)") {
		t.Fatalf("get of a job of %d attempts:\n%s\nwant its history to start by saying 4 earlier attempts are not kept, then #5", attempts, stdout)
	}
	if strings.Count(stdout, "error=Upstream: 503") != jobtype.MaxHistory {
		t.Fatalf("get:\n%s\nwant the %d entries kept", stdout, jobtype.MaxHistory)
	}

	// A history kept whole says nothing of the kind.
	whole := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "cli.once", MaxAttempts: 1})
	j := s.claim(t, "cli.once")
	if _, err := s.Engine.Fail(t.Context(), j.ID, j.LeaseID, jobtype.JobError{Type: "Upstream", Message: "503"}, false); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runInProcess(t, "get", whole, "--server", s.URL)
	lines = strings.Split(stdout, "\n")
	if first = slicesIndex(lines, "history:"); code != 0 || strings.Contains(stdout, "not kept") || first < 0 || !strings.Contains(lines[first], " #1 FAILED") {
		t.Fatalf("get of a job of one attempt: exit %d\n%s\nwant its one entry, nothing said dropped", code, stdout)
	}
}

// slicesIndex is the index of the first line that starts with prefix, or -1.
func slicesIndex(lines []string, prefix string) int {
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	return -1
}

// A bulk action the token may not take is refused before the question,
// not after the "y": a client token of acme naming tenant globex was
// asked "delete every job of tenant globex with queue gq? [y/N]" and
// only then told permission_denied.
func TestABulkActionTheTokenMayNotTakeIsRefusedBeforeTheQuestion(t *testing.T) {
	s := serveWithAcmeAndAdmin(t)
	globex, err := s.Engine.Submit(t.Context(), jobs.SubmitRequest{Tenant: "globex", Kind: "cli.bulk", Queue: "gq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdinIsTerminal = func() bool { return false } })

	for _, tc := range []struct {
		name, token, tenant, want string
	}{
		{"a client token of another tenant", "acme-secret", "globex", "permission_denied"},
		{"a client token naming every tenant", "acme-secret", "*", "permission_denied"},
		{"no token", "", "globex", "unauthenticated"},
		{"a tenant no request may name", "admin-secret", "glo bex", "invalid_argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin, stdinIsTerminal = strings.NewReader("y\n"), func() bool { return true }
			code, _, stderr := runInProcess(t, "delete", "--server", s.URL, "--token", tc.token, "--tenant", tc.tenant, "--queue", "gq")
			if code != 1 || strings.Contains(stderr, "[y/N]") || !strings.Contains(stderr, "delete: "+tc.want) {
				t.Fatalf("exit %d, %q; want %s before any question", code, stderr, tc.want)
			}
		})
	}
	if j, err := s.Engine.Get(t.Context(), globex.ID); err != nil || j.State != jobtype.Queued {
		t.Fatalf("globex's job after the refusals: %v, %v; want it still queued", j.State, err)
	}

	// A token that may act is asked, and acts on "y".
	stdin, stdinIsTerminal = strings.NewReader("y\n"), func() bool { return true }
	code, stdout, stderr := runInProcess(t, "cancel", "--server", s.URL, "--token", "admin-secret", "--tenant", "globex", "--queue", "gq")
	if code != 0 || !strings.Contains(stderr, "cancel every job of tenant globex with queue gq? [y/N]") || stdout != "1 matched, 1 cancelled\n" {
		t.Fatalf("the admin's cancel: exit %d, %q, %q; want the question, then 1 cancelled", code, stdout, stderr)
	}
}

// The count of attempts not kept reads the first entry kept: a run's end
// leaves the runs before it out, a retry (no start of its own) the run
// it retried too.
func TestHistoryGapCountsTheRunsNotKept(t *testing.T) {
	run := func(n int32) *jobwatchv1.JobAttempt {
		return &jobwatchv1.JobAttempt{Attempt: n, StartedAt: timestamppb.Now(), State: jobwatchv1.JobState_JOB_STATE_QUEUED}
	}
	retry := func(n int32) *jobwatchv1.JobAttempt {
		return &jobwatchv1.JobAttempt{Attempt: n, State: jobwatchv1.JobState_JOB_STATE_QUEUED, By: "ops (admin)"}
	}
	full := func(first ...*jobwatchv1.JobAttempt) []*jobwatchv1.JobAttempt {
		h := append([]*jobwatchv1.JobAttempt(nil), first...)
		for len(h) < jobtype.MaxHistory {
			h = append(h, run(h[len(h)-1].GetAttempt()+1))
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		history []*jobwatchv1.JobAttempt
		want    string
	}{
		{"a history kept whole", []*jobwatchv1.JobAttempt{run(1), retry(1), run(2)}, ""},
		{"one that starts at run 8's end", full(run(8)), "… 7 earlier attempts not kept (a job keeps the last 20 entries of its history)"},
		{"one that starts at the retry after run 8", full(retry(8)), "… 8 earlier attempts not kept (a job keeps the last 20 entries of its history)"},
		{"a full one that starts before any run", full(retry(0)), "… earlier entries, if any, not kept (a job keeps the last 20 entries of its history)"},
	} {
		if got := historyGap(tc.history); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
