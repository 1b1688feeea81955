package alerthook_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/alerthook"
	"github.com/jobwatch/jobwatch/jobs"
)

// A Hook handed to the engine as its jobs.AlertSender posts each change
// as the JSON body docs/OPERATING.md describes (alerts.webhook): alert_after as a duration,
// last_drained_at left out when the queue was never seen drained.
func TestAHookPostsTheEnginesAlertChangesAsJSON(t *testing.T) {
	bodies := make(chan map[string]any, 2)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil {
			t.Errorf("body %q: %v", b, err)
		}
		bodies <- body
	}))
	defer receiver.Close()
	done := make(chan struct{})
	defer close(done)
	var sender jobs.AlertSender = alerthook.New(slog.New(slog.DiscardHandler), done)

	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	sender.SendAlert(receiver.URL, jobs.AlertChange{Queue: "index", Alerting: true, At: at,
		LastDrainedAt: at.Add(-2 * time.Minute), AlertAfter: time.Minute, Queued: 3, Running: 1})
	sender.SendAlert(receiver.URL, jobs.AlertChange{Queue: "index", At: at.Add(time.Minute)})

	next := func() map[string]any {
		t.Helper()
		select {
		case b := <-bodies:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no POST")
			return nil
		}
	}
	start := next()
	for key, want := range map[string]any{"queue": "index", "alerting": true, "at": "2030-01-02T03:04:05Z",
		"last_drained_at": "2030-01-02T03:02:05Z", "alert_after": "1m0s", "queued": 3.0, "running": 1.0} {
		if start[key] != want {
			t.Errorf("start: %s = %v, want %v (body %v)", key, start[key], want, start)
		}
	}
	end := next()
	if _, ok := end["last_drained_at"]; ok || end["alerting"] != false || end["alert_after"] != "" {
		t.Errorf("end: %v; want alerting false, no last_drained_at, alert_after empty", end)
	}
}
