// Package alerthook delivers queue alert changes to a webhook: one JSON
// POST per change, in order, retried with backoff, on a goroutine of its
// own so that whoever reports a change (the engine's sweep) never waits
// for the receiver.
package alerthook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Delivery limits. A receiver that is down longer than the retries last
// (about a minute) misses the change; the log says so.
const (
	// MaxAttempts is how often one change is POSTed before it is dropped.
	MaxAttempts = 8
	// InitialBackoff doubles after each failed attempt, up to MaxBackoff.
	InitialBackoff = 100 * time.Millisecond
	MaxBackoff     = 30 * time.Second
	// RequestTimeout bounds one POST.
	RequestTimeout = 10 * time.Second
	// Pending is how many changes may wait for delivery; more are dropped
	// (and logged) rather than held in memory without bound.
	Pending = 256
)

// Event is the JSON body of a POST.
type Event struct {
	Queue    string `json:"queue"`
	Alerting bool   `json:"alerting"` // true: entering; false: leaving
	// At is when the sweep saw the change.
	At time.Time `json:"at"`
	// LastDrainedAt is when the queue last drained; absent: never seen.
	LastDrainedAt *time.Time `json:"last_drained_at,omitempty"`
	AlertAfter    string     `json:"alert_after"`
	Queued        int64      `json:"queued"`
	Running       int64      `json:"running"`
}

type delivery struct {
	url   string
	event Event
}

// Hook posts events, one at a time, until done is closed.
type Hook struct {
	log     *slog.Logger
	client  *http.Client
	pending chan delivery
	done    <-chan struct{}
}

// New starts a hook that stops when done is closed; changes still
// pending then are dropped.
func New(log *slog.Logger, done <-chan struct{}) *Hook {
	h := &Hook{log: log, client: &http.Client{Timeout: RequestTimeout}, pending: make(chan delivery, Pending), done: done}
	go h.run()
	return h
}

// Send queues ev for url and returns at once.
func (h *Hook) Send(url string, ev Event) {
	select {
	case h.pending <- delivery{url: url, event: ev}:
	default:
		h.log.Warn("alert webhook: too many changes waiting; dropped one", "queue", ev.Queue, "alerting", ev.Alerting)
	}
}

func (h *Hook) run() {
	for {
		select {
		case <-h.done:
			return
		case d := <-h.pending:
			h.deliver(d)
		}
	}
}

// deliver posts d until a 2xx answer, MaxAttempts, or done.
func (h *Hook) deliver(d delivery) {
	body, err := json.Marshal(d.event)
	if err != nil {
		h.log.Error("alert webhook: encode event", "err", err)
		return
	}
	backoff := InitialBackoff
	for attempt := 1; ; attempt++ {
		err := h.post(d.url, body)
		if err == nil {
			h.log.Debug("alert webhook delivered", "queue", d.event.Queue, "alerting", d.event.Alerting, "attempt", attempt)
			return
		}
		if attempt == MaxAttempts {
			h.log.Warn("alert webhook: giving up", "queue", d.event.Queue, "alerting", d.event.Alerting, "attempts", attempt, "err", err)
			return
		}
		h.log.Debug("alert webhook failed; retrying", "queue", d.event.Queue, "attempt", attempt, "in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-h.done:
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff = min(backoff*2, MaxBackoff)
	}
}

func (h *Hook) post(url string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post: answered %s", resp.Status)
	}
	return nil
}
