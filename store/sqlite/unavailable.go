package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/mattn/go-sqlite3"

	"github.com/jobwatch/jobwatch/jobtype"
)

// The causes of refused writes that a caller may be told, in its words.
// Nothing else of SQLite's errors (paths, codes, statements) reaches a
// caller: the operator reads them in the log.
const (
	causeDiskFull = "the database's disk is full"
	causeReadOnly = "the database file is read-only"
)

// UnavailableError is a write or an open refused by the database for a
// cause a caller may be told (UnavailableCause); it wraps
// jobtype.ErrUnavailable and SQLite's error, and its Error is theirs, for
// the log.
type UnavailableError struct {
	// Cause is the cause in a caller's words: causeDiskFull,
	// causeReadOnly, or "" when there is none to tell (a lock held by
	// another process, an unreadable file).
	Cause string
	err   error
}

func (e *UnavailableError) Error() string { return e.err.Error() }
func (e *UnavailableError) Unwrap() error { return e.err }

// UnavailableCause is the cause in a caller's words, or "". A server
// finds it with errors.As on an interface{ UnavailableCause() string },
// so that it needs to know nothing of SQLite.
func (e *UnavailableError) UnavailableCause() string { return e.Cause }

// causeOf is the cause of se in a caller's words, or "". SQLite says
// SQLITE_FULL for a full disk (ENOSPC) and for its own max_page_count,
// and SQLITE_READONLY for a file it opened read-only; a file system
// remounted read-only under an open file fails its writes with EROFS,
// which SQLite reports as an I/O error.
func causeOf(se sqlite3.Error) string {
	switch {
	case se.Code == sqlite3.ErrFull, se.SystemErrno == syscall.ENOSPC, se.SystemErrno == syscall.EDQUOT:
		return causeDiskFull
	case se.Code == sqlite3.ErrReadonly, se.SystemErrno == syscall.EROFS:
		return causeReadOnly
	}
	return ""
}

// openFailed puts what an operator should do before an error that kept
// the file at path from opening, when its cause is one. An error without
// a cause of its own is one of a read-only file system when path's
// directory is on one.
func openFailed(path string, err error) error {
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Cause == "" {
		if !onReadOnlyFS(filepath.Dir(path)) {
			return err
		}
		inner := fmt.Errorf("%s is on a file system mounted read-only: %w", filepath.Dir(path), err)
		if !errors.Is(err, jobtype.ErrUnavailable) {
			inner = fmt.Errorf("%w: %w", jobtype.ErrUnavailable, inner)
		}
		ue = &UnavailableError{Cause: causeReadOnly, err: inner}
		err = ue
	}
	switch ue.Cause {
	case causeReadOnly:
		return fmt.Errorf("%s: make it, its -wal and -shm files and their directory writable by this user, "+
			"on a file system mounted read-write: %w", ue.Cause, err)
	case causeDiskFull:
		return fmt.Errorf("%s: free space on its file system: %w", ue.Cause, err)
	}
	return err
}

// InUseError refuses to open a file another process has open as a
// store: a SQLite file serves one process at a time, since a second one
// would not hear the first's changes (its waiters would sleep through
// jobs the other ended). It wraps jobtype.ErrUnavailable.
type InUseError struct {
	Path string
}

func (e *InUseError) Error() string {
	return "another process has it open as a jobwatch store: a SQLite file serves one process at a time " +
		"(a second one would not hear the first's changes); stop that one, give this one a file of its own (serve's and demo's --db FILE), " +
		"or use PostgreSQL for several replicas"
}

func (e *InUseError) Unwrap() error { return jobtype.ErrUnavailable }
