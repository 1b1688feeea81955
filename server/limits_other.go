//go:build !unix

package server

import "net"

// openFileLimit: this system has no RLIMIT_NOFILE to read.
func openFileLimit() (int, bool) { return 0, false }

// peerClosed cannot ask the socket here; the request's context still
// reports a client that hung up, a moment later.
func peerClosed(net.Conn) bool { return false }
