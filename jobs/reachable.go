package jobs

// StoreReachable reports whether the engine's store can reach its
// database now, as far as the store has seen: a store that implements
// Reachable() bool says so (store/postgres: false while PostgreSQL is
// away; store/sqlite: false while the file refuses writes, full or
// read-only or locked past the lock timeout); any other always can. The
// server's gRPC health follows it.
func (e *Engine) StoreReachable() bool {
	if r, ok := e.store.(fairReads).Store.(interface{ Reachable() bool }); ok {
		return r.Reachable()
	}
	return true
}
