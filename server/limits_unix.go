//go:build unix && !aix

package server

import (
	"errors"
	"net"
	"syscall"
)

// openFileLimit is the soft RLIMIT_NOFILE, which the Go runtime raised
// to the hard limit when the process started.
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0, false
	}
	if rl.Cur > 1<<30 { // RLIM_INFINITY and other absurd values
		return 1 << 30, true
	}
	return int(rl.Cur), true
}

// peerClosed reports whether the other end of c has closed or reset the
// connection, without taking anything from it: a peek that neither waits
// nor consumes. It runs under Control, not Read, because net/http's
// background read may be parked in a Read of the same connection, and a
// second Read would wait for it.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0 // 0 bytes without an error is the peer's FIN
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			// Open, nothing to read: the client is waiting for the answer.
		default:
			closed = true // ECONNRESET and the like
		}
	})
	return closed
}
