package sqlite

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// health turns the outcomes of writes into episodes an operator can read:
// the first write that fails with store.ErrUnavailable (the file is
// locked past the lock timeout, the disk is full, the file is read-only
// or unreadable) logs one warning with its cause; the failures after it
// log nothing; the first write that succeeds again and changes rows logs
// one info line saying how long the episode lasted and how many writes it
// refused. (A transaction that changed nothing, such as a retention sweep
// with nothing to delete, commits even on a full disk, so it proves
// nothing.)
//
// Only writes are tracked: a full disk or a read-only file fails them
// alone, so reads that still work must not end the episode, and an
// unreadable file fails writes too (the engine's sweep writes every
// second). Errors that are not store failures (not found, a conflict, a
// caller that left) change nothing.
type health struct {
	log *slog.Logger

	mu       sync.Mutex
	failing  bool
	since    time.Time // when the episode began
	failures int       // writes refused in this episode
}

// observe records the outcome of one write; wrote says whether it
// committed changed rows.
func (h *health) observe(err error, wrote bool) {
	if err != nil && !errors.Is(err, store.ErrUnavailable) || err == nil && !wrote {
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

// isFailing reports whether an episode is on: only then does a commit
// need to tell whether it changed rows.
func (h *health) isFailing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}
