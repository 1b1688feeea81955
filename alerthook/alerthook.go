// Package alerthook delivers queue alert changes to a webhook: one JSON
// POST per change, in order, retried with backoff, on a goroutine of its
// own so that whoever reports a change (the engine's sweep) never waits
// for the receiver. The backoff is jobwatch's one retry policy
// (internal/backoff: exponential, full jitter), so the hooks of replicas
// that saw one receiver fail together do not retry together.
//
// A webhook URL is a secret (Slack-style hooks carry theirs in the path,
// others in the query): it never reaches the log whole. Logs name it by
// Describe (scheme, host and a fingerprint), and errors of net/http,
// whose *url.Error quotes the full URL, lose that quote first.
package alerthook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jobwatch/jobwatch/internal/backoff"
)

// Delivery limits. A receiver that is down longer than the retries last
// misses the change; the log says so. The waits between the attempts add
// up to at most 12.7 s (about half that on average, with the jitter), and
// each attempt may take up to RequestTimeout.
const (
	// MaxAttempts is how often one change is POSTed before it is dropped.
	MaxAttempts = 8
	// InitialBackoff doubles after each failed attempt, up to MaxBackoff;
	// the wait after an attempt is drawn between 0 and that step.
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
	retry   backoff.Policy // InitialBackoff up to MaxBackoff
}

// New starts a hook that stops when done is closed; changes still
// pending then are dropped.
func New(log *slog.Logger, done <-chan struct{}) *Hook {
	h := &Hook{log: log, client: &http.Client{Timeout: RequestTimeout}, pending: make(chan delivery, Pending), done: done,
		retry: backoff.Policy{Initial: InitialBackoff, Max: MaxBackoff}}
	go h.run()
	return h
}

// FingerprintLength is how many hex digits of the SHA-256 of a webhook
// URL Describe shows: enough to tell two hooks of one host apart, far
// too few to find the URL.
const FingerprintLength = 8

// Describe is how logs name the webhook rawURL: its scheme and host (with
// the port, without any user or password) and the first
// FingerprintLength hex digits of the SHA-256 of the whole URL, such as
// "https://hooks.example.org sha256:1a2b3c4d". The path and the query,
// where webhooks keep their secret, are never shown; the fingerprint
// tells which URL it is to someone who has the file
// (printf %s "$url" | sha256sum).
func Describe(rawURL string) string {
	sum := sha256.Sum256([]byte(rawURL))
	fp := "sha256:" + hex.EncodeToString(sum[:])[:FingerprintLength]
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "(a URL that does not parse) " + fp
	}
	return u.Scheme + "://" + u.Host + " " + fp
}

// withoutURL is err without the URL a *url.Error quotes ("Post
// \"https://…/SECRET\": dial tcp …"): what went wrong, not where.
func withoutURL(err error) error {
	var uerr *url.Error
	for errors.As(err, &uerr) {
		err = uerr.Err
	}
	return err
}

// Send queues ev for rawURL and returns at once.
func (h *Hook) Send(rawURL string, ev Event) {
	select {
	case h.pending <- delivery{url: rawURL, event: ev}:
	default:
		h.log.Warn("alert webhook: too many changes waiting; dropped one", "queue", ev.Queue, "alerting", ev.Alerting, "webhook", Describe(rawURL))
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

// deliver posts d until a 2xx answer, MaxAttempts, or done. Its logs
// name the webhook by Describe, and post's errors carry no URL.
func (h *Hook) deliver(d delivery) {
	body, err := json.Marshal(d.event)
	if err != nil {
		h.log.Error("alert webhook: encode event", "err", err)
		return
	}
	retry := backoff.Retry{Policy: h.retry}
	webhook := Describe(d.url)
	for attempt := 1; ; attempt++ {
		err := h.post(d.url, body)
		if err == nil {
			h.log.Debug("alert webhook delivered", "queue", d.event.Queue, "alerting", d.event.Alerting, "attempt", attempt, "webhook", webhook)
			return
		}
		if attempt == MaxAttempts {
			h.log.Warn("alert webhook: giving up", "queue", d.event.Queue, "alerting", d.event.Alerting, "attempts", attempt, "webhook", webhook, "err", err)
			return
		}
		wait := retry.Next()
		h.log.Debug("alert webhook failed; retrying", "queue", d.event.Queue, "attempt", attempt, "in", wait, "webhook", webhook, "err", err)
		if !backoff.Sleep(h.done, wait) {
			return
		}
	}
}

func (h *Hook) post(rawURL string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", withoutURL(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		// A redirect's error quotes the URL it was sent to, which may
		// carry the secret too: withoutURL drops every one.
		return fmt.Errorf("post: %w", withoutURL(err))
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post: answered %s", resp.Status)
	}
	return nil
}
