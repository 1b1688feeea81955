package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
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
