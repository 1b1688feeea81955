package server

import (
	"context"
	"time"

	"connectrpc.com/grpchealth"
)

// storeHealthEvery is how often Serve asks the engine whether its store
// reaches the database, for gRPC health.
const storeHealthEvery = 250 * time.Millisecond

// followStoreHealth sets gRPC health (Check and Watch) to NOT_SERVING
// while the engine's store cannot reach its database (a PostgreSQL that
// is away, a SQLite file that refuses writes: full, read-only, locked),
// and back to SERVING once it can, until ctx ends. The store itself
// probes while it cannot, so health comes back with no caller writing.
// Serve stops it before it turns health NOT_SERVING for good at
// shutdown.
func (s *Server) followStoreHealth(ctx context.Context) {
	t := time.NewTicker(storeHealthEvery)
	defer t.Stop()
	serving := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := s.engine.StoreReachable(); now != serving {
			serving = now
			status := grpchealth.StatusServing
			if !serving {
				status = grpchealth.StatusNotServing
			}
			for _, name := range append([]string{""}, serviceNames...) {
				s.health.SetStatus(name, status)
			}
		}
	}
}
