//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/jobwatch/jobwatch/jobtype"
)

// lockFile takes an exclusive flock on the database file at path and
// returns its release; a lock another process holds is an *InUseError at
// once. flock is apart from the POSIX locks SQLite itself takes on the
// file, so it never blocks SQLite; and the descriptor it holds stays open
// until the release, which comes after every Store of this process on the
// file has closed (a close of another descriptor of the file would drop
// SQLite's POSIX locks).
func lockFile(path string) (unlock func() error, err error) {
	f, err := os.Open(path) // flock needs no write access
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jobtype.ErrUnavailable, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Path: path}
		}
		return nil, fmt.Errorf("%w: lock: %w", jobtype.ErrUnavailable, err)
	}
	return f.Close, nil // closing the descriptor releases its lock
}
