package jobs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

func priority(p int32) *int32 { return &p }

// A submission's priority is the one it gives, or its queue's rule, or
// 0; claims take the most urgent first; a reload's new default applies
// to the submissions after it.
func TestSubmitTakesThePriorityGivenOrTheQueuesDefault(t *testing.T) {
	e, _ := newEngine(t, jobs.Config{Rules: jobtype.Rules{Queues: map[string]jobtype.QueueRules{
		"bulk": {Priority: 7},
	}}})
	tests := []struct {
		name  string
		r     jobs.SubmitRequest
		want  int32
		order int // claim order among the jobs of queue "bulk"
	}{
		{"a queue without rules defaults to 0", jobs.SubmitRequest{Queue: "other"}, 0, -1},
		{"the queue's rule when none is given", jobs.SubmitRequest{Queue: "bulk"}, 7, 2},
		{"the one given over the queue's", jobs.SubmitRequest{Queue: "bulk", Priority: priority(9)}, 9, 3},
		{"0 given is 0, not the queue's", jobs.SubmitRequest{Queue: "bulk", Priority: priority(0)}, 0, 0},
		{"the most urgent given after", jobs.SubmitRequest{Queue: "bulk", Priority: priority(3)}, 3, 1},
	}
	ids := make([]string, 4)
	for _, tt := range tests {
		j := submit(t, e, tt.r)
		if j.Priority != tt.want {
			t.Errorf("%s: priority %d, want %d", tt.name, j.Priority, tt.want)
		}
		if got := get(t, e, j.ID).Priority; got != tt.want {
			t.Errorf("%s: stored priority %d, want %d", tt.name, got, tt.want)
		}
		if tt.order >= 0 {
			ids[tt.order] = j.ID
		}
	}
	for i, want := range ids {
		j, err := e.Claim(context.Background(), jobs.ClaimRequest{WorkerID: "w", Queues: []string{"bulk"}}, time.Now())
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if j.ID != want {
			t.Errorf("claim %d took %s (priority %d), want %s", i, j.ID, j.Priority, want)
		}
	}

	if err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"bulk": {Priority: 2}}}); err != nil {
		t.Fatal(err)
	}
	if j := submit(t, e, jobs.SubmitRequest{Queue: "bulk"}); j.Priority != 2 {
		t.Errorf("priority after a reload = %d, want the new default 2", j.Priority)
	}
}

// A priority out of range is refused, naming the field and the range,
// and nothing is created; so is a queue rule out of range.
func TestAPriorityOutOfRangeIsRefused(t *testing.T) {
	e, st := newEngine(t, jobs.Config{})
	for _, p := range []int32{-1, 10, 1 << 30} {
		_, err := e.Submit(context.Background(), jobs.SubmitRequest{Kind: "k", Priority: priority(p)})
		if !isInvalid(err, "priority") || !strings.Contains(err.Error(), "0 (most urgent) to 9") {
			t.Errorf("submit of priority %d: %v, want invalid priority naming 0 to 9", p, err)
		}
	}
	if n, err := st.CountByState(context.Background()); err != nil || len(n) != 0 {
		t.Errorf("jobs after the refusals: %v, %v; want none", n, err)
	}
	err := e.SetRules(jobtype.Rules{Queues: map[string]jobtype.QueueRules{"q": {Priority: 10}}})
	if !isInvalid(err, "priority") {
		t.Errorf("rules with priority 10: %v, want invalid priority", err)
	}
}
