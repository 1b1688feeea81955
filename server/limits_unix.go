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
// connection, without taking anything from it (peek).
func peerClosed(c net.Conn) bool {
	n, err := peek(c)
	switch {
	case err == nil:
		return n == 0 // 0 bytes without an error is the peer's FIN
	case errors.Is(err, errNotSocket), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		return false // open, nothing to read: the client is waiting for the answer
	default:
		return true // ECONNRESET and the like
	}
}

// requestWaiting reports whether bytes from the client are waiting to be
// read on c: a new connection whose request has arrived, which the server
// has not read yet, is about to speak.
func requestWaiting(c net.Conn) bool {
	n, err := peek(c)
	return err == nil && n > 0
}

var errNotSocket = errors.New("not a socket")

// peek looks at c's next byte without taking it, and without waiting:
// what recv(MSG_PEEK|MSG_DONTWAIT) returns. It runs under Control, not
// Read, because net/http's background read may be parked in a Read of
// the same connection, and a second Read would wait for it.
func peek(c net.Conn) (n int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errNotSocket
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, errNotSocket
	}
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n, err
}
