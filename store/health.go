package store

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// WriteHealth turns the outcomes of a backend's writes into episodes an
// operator can read: the first write that fails with ErrUnavailable (the
// database refuses or drops connections, is locked, full, read-only)
// logs one warning with its cause; the failures after it log nothing; the
// first write that succeeds again logs one info line saying how long the
// episode lasted and how many writes it refused. Errors that are the
// caller's, not the database's (not found, a conflict, a caller that
// left), change nothing. Which successes prove that the database takes
// writes again is the backend's to say (store/sqlite counts only commits
// that changed rows). The zero WriteHealth is ready to use; it is safe
// for concurrent use.
type WriteHealth struct {
	mu       sync.Mutex
	failing  bool
	since    time.Time // when the episode began
	failures int       // writes refused in this episode
}

// Observe records the outcome of one write, err (nil: it succeeded), and
// logs to log when an episode begins or ends.
func (h *WriteHealth) Observe(log *slog.Logger, err error) {
	if err != nil && !errors.Is(err, jobtype.ErrUnavailable) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil && !h.failing:
		h.failing, h.since, h.failures = true, time.Now(), 1
		log.Warn("the database refuses writes: submits and updates answer unavailable until it recovers", "err", err)
	case err != nil:
		h.failures++
	case h.failing:
		h.failing = false
		log.Info("the database accepts writes again",
			"after", time.Since(h.since).Round(time.Millisecond), "refused_writes", h.failures)
	}
}

// Failing reports whether an episode is on.
func (h *WriteHealth) Failing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}
