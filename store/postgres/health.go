package postgres

import (
	"log/slog"

	"github.com/jobwatch/jobwatch/store"
)

// health is store.WriteHealth over this store's writes (Store.write):
// any write that commits proves that the database takes writes again.
type health struct {
	log      *slog.Logger
	episodes store.WriteHealth
}

func (h *health) observe(err error) { h.episodes.Observe(h.log, err) }
