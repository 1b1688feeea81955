package postgres

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// health is the store's one view of whether its database can be
// reached, fed by its writes (Store.write), its listener's connection
// (listen.go) and its notifier's sends (notify.go). PostgreSQL going away
// shows in all three within milliseconds of each other, in any order, so
// they make one episode: the first failure of any logs one warning with
// its cause, the failures after it log at debug, and the episode ends,
// with one info line saying how long it lasted and how many writes it
// refused, once writes succeed and the listener listens again and
// nothing has failed for episodeSettle since: the stragglers of an outage
// (a write sent on a connection cut a moment ago, a notification on an
// idle one) and a database that flaps belong to the episode they follow.
//
// Reachable (gRPC health's SERVING) is false from the first write refused
// unavailable, or the listener's connection lost, until then. A failed
// notification alone does not make the store unreachable: the next write
// sends again on a new connection, and a write that fails says more.
//
// While writes fail, probe runs every probeEvery a statement that needs a
// writable primary, so that the episode ends when the database takes
// writes again even if no caller writes: a load balancer that follows
// health sends none to a replica that says NOT_SERVING.
type health struct {
	log     *slog.Logger
	probe   func(context.Context) error
	closing context.Context
	settle  time.Duration // episodeSettle when zero (tests shorten it)

	mu            sync.Mutex
	on            bool      // an episode is on
	since         time.Time // when it began
	refused       int       // writes refused unavailable in it
	writesFailing bool
	listenerDown  bool
	notifyFailing bool
	probing       bool
	recovered     time.Time   // when the last failure of the episode recovered
	settling      *time.Timer // ends the episode episodeSettle after recovered
}

// probeEvery is how often a store whose writes fail tries one, and
// probeTimeout how long it waits for it.
const (
	probeEvery   = time.Second
	probeTimeout = time.Second
	// episodeSettle is how long everything must work before an episode
	// is over, and a failure after it is a new one.
	episodeSettle = 2 * time.Second
)

// reachable reports whether the database takes writes and the listener
// hears changes, as far as the store has seen.
func (h *health) reachable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.writesFailing && !h.listenerDown
}

// failing reports whether writes are being refused unavailable.
func (h *health) failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writesFailing
}

// observe records the outcome of one write, err (nil: it committed).
// Errors that are the caller's, not the database's (not found, a
// conflict, a caller that left), change nothing.
func (h *health) observe(err error) {
	if err != nil && !errors.Is(err, jobtype.ErrUnavailable) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if h.writesFailing {
			h.writesFailing = false
			h.mayEnd()
		}
		return
	}
	h.begin("writes", err)
	h.refused++
	h.writesFailing = true
	if !h.probing && h.probe != nil {
		h.probing = true
		go h.probeWrites()
	}
}

// listenerLost and listenerBack record the listener's connection lost
// and listening again.
func (h *health) listenerLost(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.begin("listener", err)
	h.listenerDown = true
}

func (h *health) listenerBack() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listenerDown = false
	// The database answers: the notifier's next send connects again.
	h.notifyFailing = false
	h.mayEnd()
}

// notified records the outcome of one send of the notifier.
func (h *health) notified(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if h.notifyFailing {
			h.notifyFailing = false
			h.mayEnd()
		}
		return
	}
	if h.notifyFailing {
		return
	}
	h.notifyFailing = true
	if h.on || errors.Is(err, jobtype.ErrUnavailable) && !TooManyConnections(err) {
		h.begin("notifications", err)
		return
	}
	// A failure that is no outage (a notification the server refused, or
	// its connection, for want of room): said once, until a send
	// succeeds.
	h.log.Warn("postgres: cannot notify other replicas; they catch up from the database", "err", err)
}

// begin starts an episode, or notes one more failure of the one on.
// h.mu is held.
func (h *health) begin(what string, err error) {
	if h.on {
		h.log.Debug("postgres: the database is still away", "failed", what, "err", err)
		return
	}
	h.on, h.since, h.refused = true, time.Now(), 0
	h.log.Warn("postgres: the database cannot be reached: writes answer unavailable and health says NOT_SERVING until it is back",
		"failed", what, "err", err)
}

// mayEnd ends the episode episodeSettle from now if nothing fails
// until then. h.mu is held.
func (h *health) mayEnd() {
	if !h.on || h.writesFailing || h.listenerDown || h.notifyFailing {
		return
	}
	h.recovered = time.Now()
	if h.settling == nil {
		h.settling = time.AfterFunc(h.settleFor(), h.settleEpisode)
	}
}

func (h *health) settleFor() time.Duration {
	if h.settle > 0 {
		return h.settle
	}
	return episodeSettle
}

func (h *health) settleEpisode() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settling = nil
	if !h.on || h.writesFailing || h.listenerDown || h.notifyFailing {
		return // failing again: a later recovery settles it
	}
	if wait := h.settleFor() - time.Since(h.recovered); wait > 0 {
		h.settling = time.AfterFunc(wait, h.settleEpisode) // it failed and recovered again meanwhile
		return
	}
	h.on = false
	h.log.Info("postgres: the database can be reached again",
		"after", h.recovered.Sub(h.since).Round(time.Millisecond), "refused_writes", h.refused)
}

// probeWrites runs probe every probeEvery while writes fail.
func (h *health) probeWrites() {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-h.closing.Done():
			h.mu.Lock()
			h.probing = false
			h.mu.Unlock()
			return
		case <-t.C:
		}
		h.mu.Lock()
		if !h.writesFailing {
			h.probing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(h.closing, probeTimeout)
		err := h.probe(ctx)
		cancel()
		if err == nil {
			h.observe(nil)
		}
	}
}
