package postgres

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// health turns the outcomes of writes into episodes an operator can read:
// the first write that fails with store.ErrUnavailable (the database
// refuses or drops connections, shuts down, times out) logs one warning
// with its cause; the failures after it log nothing; the first write
// that succeeds again logs one info line with how long the episode
// lasted and how many writes it refused. Errors that are not the
// database's (not found, a conflict, a caller that left) change nothing.
type health struct {
	log *slog.Logger

	mu       sync.Mutex
	failing  bool
	since    time.Time
	failures int
}

func (h *health) observe(err error) {
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil && !h.failing:
		h.failing, h.since, h.failures = true, time.Now(), 1
		h.log.Warn("the database refuses writes: submits and updates answer unavailable until it recovers", "err", err)
	case err != nil:
		h.failures++
	case h.failing:
		h.failing = false
		h.log.Info("the database accepts writes again",
			"after", time.Since(h.since).Round(time.Millisecond), "refused_writes", h.failures)
	}
}
