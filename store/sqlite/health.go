package sqlite

import (
	"log/slog"

	"github.com/jobwatch/jobwatch/store"
)

// health is store.WriteHealth over this store's writes. Only writes are
// tracked: a full disk or a read-only file fails them alone, so reads
// that still work must not end an episode, and an unreadable file fails
// writes too (the engine's sweep writes every second). A transaction
// that changed nothing, such as a retention sweep with nothing to delete,
// commits even on a full disk, so it proves nothing: only a commit that
// changed rows ends an episode.
type health struct {
	log      *slog.Logger
	episodes store.WriteHealth
}

// observe records the outcome of one write; wrote says whether it
// committed changed rows.
func (h *health) observe(err error, wrote bool) {
	if err == nil && !wrote {
		return
	}
	h.episodes.Observe(h.log, err)
}

// isFailing reports whether an episode is on: only then does a commit
// need to tell whether it changed rows.
func (h *health) isFailing() bool { return h.episodes.Failing() }
