package alerthook

import "github.com/jobwatch/jobwatch/jobs"

// The engine knows no HTTP: it is handed a Hook as its jobs.AlertSender
// (jobs.Config.Alerts), which serve builds.
var _ jobs.AlertSender = (*Hook)(nil)

// SendAlert queues the engine's change c for webhook, as an Event, and
// returns at once: it implements jobs.AlertSender.
func (h *Hook) SendAlert(webhook string, c jobs.AlertChange) { h.Send(webhook, EventOf(c)) }

// EventOf is the JSON body that tells a webhook of c.
func EventOf(c jobs.AlertChange) Event {
	ev := Event{Queue: c.Queue, Alerting: c.Alerting, At: c.At, Queued: c.Queued, Running: c.Running}
	if c.AlertAfter > 0 {
		ev.AlertAfter = c.AlertAfter.String()
	}
	if !c.LastDrainedAt.IsZero() {
		at := c.LastDrainedAt
		ev.LastDrainedAt = &at
	}
	return ev
}
