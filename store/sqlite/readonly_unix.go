//go:build unix

package sqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// onReadOnlyFS reports whether dir is on a file system mounted
// read-only. SQLite says only "unable to open database file" (with
// ENOENT, from the -shm it could not make) when it opens a WAL file
// there.
var onReadOnlyFS = func(dir string) bool {
	return errors.Is(unix.Access(dir, unix.W_OK), unix.EROFS)
}
