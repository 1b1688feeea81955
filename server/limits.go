package server

// The network limits: how long a request body may take to arrive, how
// long a response write may stay blocked on a client that stopped
// reading and how many bytes such writes may hold together, and how many
// calls may park at once, in all, of one tenant and of one connection.
// Each is refused or ended with a clear answer and counted on /metrics.
// Another caller pays for it only as the longest-idle connection (no
// call in flight) or the write blocked the longest (a client that does
// not read).
//
// This file holds their defaults; each mechanism has a file of its own:
// bodies.go (the body deadline, a client that hung up), exchange.go (the
// write deadlines), sends.go (the send budget), parked.go (parked calls),
// conns.go (how many connections the server holds, and how many bodies
// may be on their way), streams.go (health and reflection streams).

import "time"

// Defaults of the limits in Config.
const (
	// DefaultSendTimeout is how long one response write may stay blocked
	// on a client that does not read before its stream or call is ended.
	DefaultSendTimeout = 30 * time.Second
	// DefaultBodyTimeout is how long a request body may take to arrive
	// in full, counted from the end of its headers (which have their own
	// 10 s): at 1 MiB, the largest request, that is 100 KiB/s.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultMaxParkedCalls bounds the WaitJob, WatchJob, WatchJobs and
	// ClaimJob calls parked at once, across all clients. A parked
	// WaitJob costs about 19 KiB of server memory, 8 KiB of it its one
	// goroutine's stack, whatever the size of its job (a parked wait
	// keeps no payload, see jobs.Engine.Wait; docs/BENCHMARKS.md "What a
	// parked call costs"), so the default holds the server to a few hundred MiB.
	DefaultMaxParkedCalls = 10_000
	// reservedFiles are the file descriptors DefaultMaxConnections leaves
	// for everything that is not a client: the listener, the SQLite
	// database with its -wal and -shm files for each pooled connection,
	// logs, and the connection accepted only to be refused. It is a
	// floor; an eighth of the limit is kept when that is more.
	reservedFiles = 128
	// streamEndGrace is how long past its lifetime a stream's write may
	// still take: the engine ends a healthy stream OK at the lifetime,
	// and a keepalive sent just before must not be cut in flight.
	streamEndGrace = time.Second
)

// DefaultMaxConnections is the connection limit Config.MaxConnections
// defaults to: the process's open-file limit (RLIMIT_NOFILE, which Go
// raises to the hard limit at start) less an eighth of it, and at least
// 128, kept for the database, logs and the listener. Without it a flood
// of connections would take the last descriptor, and then the SQLite
// store and every new client would fail together until they closed.
func DefaultMaxConnections() int {
	files, ok := openFileLimit()
	if !ok {
		return 1024 // no such limit to read on this system
	}
	return max(16, files-max(reservedFiles, files/8))
}
