package sqlite

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/jobwatch/jobwatch/jobtype"
)

// causeFileGone is a write refused because the database file at the
// store's path is no longer the one it opened.
const causeFileGone = "the database file was removed or replaced under the server"

// fileIdentity is the database file as the store opened it. SQLite goes
// on writing to a file removed (or renamed, or replaced) under it, and
// to a -wal file removed under it, and answers as if nothing were amiss;
// but what it writes is not at the path any more, so a restart would
// open another file, or none, without it: every write acknowledged since
// would be lost. So the writer refuses to commit while the file at its
// path is not the one opened, or its -wal is not there (check), and
// writes resume if they are put back. The -wal is checked only for being
// there: SQLite itself removes it when the last connection closes and
// makes a new one, another file, with the next, and inside the writer's
// transaction it is always there.
type fileIdentity struct {
	path string
	info fs.FileInfo
}

// identify reads what the file at path is now.
func identify(path string) (fileIdentity, error) {
	info, err := os.Stat(path)
	return fileIdentity{path: path, info: info}, err
}

// check refuses when the file at the path is gone or is another, or
// the -wal is gone: an *UnavailableError, which keeps the store
// unhealthy (its probes fail the same way) until they are back. Two stat
// calls, a few microseconds, once a batch.
func (id fileIdentity) check() error {
	gone := ""
	if info, err := os.Stat(id.path); err != nil || !os.SameFile(info, id.info) {
		gone = id.path + " is not the file this server opened (removed, renamed or replaced while it ran)"
	} else if _, err := os.Stat(id.path + "-wal"); err != nil {
		gone = id.path + "-wal, which holds the latest writes, was removed while the server ran"
	}
	if gone == "" {
		return nil
	}
	return &UnavailableError{Cause: causeFileGone, err: fmt.Errorf(
		"%w: %s: writes are refused, since what they wrote would not be found there again; "+
			"put the file back, or restart the server to open what is there now (what was written to the file before it went is in that file alone)",
		jobtype.ErrUnavailable, gone)}
}
