package jobs_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
)

// sentAlerts is a jobs.AlertSender that keeps what it is handed.
type sentAlerts struct {
	mu      sync.Mutex
	webhook []string
	changes []jobs.AlertChange
}

func (s *sentAlerts) SendAlert(webhook string, c jobs.AlertChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.webhook = append(s.webhook, webhook)
	s.changes = append(s.changes, c)
}

func (s *sentAlerts) sent() ([]string, []jobs.AlertChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.webhook...), append([]jobs.AlertChange(nil), s.changes...)
}

// The engine hands each alert's start and end, once, to the sender it
// was given (it posts nothing itself: it knows no HTTP), with the
// webhook of the rules and what the sweep saw.
func TestTheEngineHandsAlertChangesToItsSender(t *testing.T) {
	clock := newFakeClock()
	sender := &sentAlerts{}
	e, _ := newEngine(t, jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Alerts: sender})
	const webhook = "https://hooks.example.org/jobwatch/SECRET"
	if err := e.SetRules(jobtype.Rules{AlertWebhook: webhook,
		Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	drainedAt := clock.Now()
	j := running(t, e, jobs.SubmitRequest{Queue: "index"})
	clock.Advance(2 * time.Minute)
	startedAt := clock.Now()
	sweep(t, e)
	sweep(t, e) // still alerting: nothing new to send
	if _, err := e.Complete(context.Background(), j.ID, j.LeaseID, nil); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)

	hooks, changes := sender.sent()
	if len(changes) != 2 {
		t.Fatalf("the sender got %d changes, want 2 (start, end): %+v", len(changes), changes)
	}
	for _, h := range hooks {
		if h != webhook {
			t.Errorf("sent to %q, want the rules' webhook", h)
		}
	}
	start, end := changes[0], changes[1]
	if start.Queue != "index" || !start.Alerting || !start.At.Equal(startedAt) || !start.LastDrainedAt.Equal(drainedAt) ||
		start.AlertAfter != time.Minute || start.Running != 1 {
		t.Errorf("start: %+v; want index alerting at %v, last drained %v, alert_after 1m, 1 running", start, startedAt, drainedAt)
	}
	if end.Queue != "index" || end.Alerting {
		t.Errorf("end: %+v; want index no longer alerting", end)
	}
}

// An engine given no sender still sees and logs the alert, and says in
// the log that the webhook of its rules was not posted.
func TestAnEngineWithoutASenderLogsThatTheWebhookWasNotPosted(t *testing.T) {
	clock := newFakeClock()
	logs := &lockedBuffer{}
	// Not newEngine, which may give every engine a sender.
	e := jobs.New(openStore(t), jobs.Config{Now: clock.Now, LeaseTimeout: time.Hour, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(e.Shutdown)
	if err := e.SetRules(jobtype.Rules{AlertWebhook: "https://hooks.example.org/x",
		Queues: map[string]jobtype.QueueRules{"index": {AlertAfter: time.Minute}}}); err != nil {
		t.Fatal(err)
	}
	sweep(t, e)
	running(t, e, jobs.SubmitRequest{Queue: "index"})
	clock.Advance(2 * time.Minute)
	sweep(t, e)
	if !e.AlertingQueues()["index"] {
		t.Fatalf("index is not alerting: %v", e.AlertingQueues())
	}
	if logs.count("queue alerting") != 1 || logs.count("no jobs.Config.Alerts") != 1 {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		t.Errorf("the log does not say once that the alert was seen and not posted:\n%s", logs.buf.String())
	}
}
