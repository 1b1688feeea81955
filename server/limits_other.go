//go:build !unix || aix

package server

import "net"

// openFileLimit is not read on this system; DefaultMaxConnections falls
// back to a fixed limit.
func openFileLimit() (int, bool) { return 0, false }

// peerClosed does not ask the socket on this system; the request's
// context still reports a client that hung up, a moment later.
func peerClosed(net.Conn) bool { return false }

// requestWaiting does not ask the socket on this system: a silent
// connection is one that has not sent a whole request.
func requestWaiting(net.Conn) bool { return false }
