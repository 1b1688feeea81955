package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// The listener of a SQLite store is in-process: the writer goroutine
// hands each committed batch's changes to the listeners of every Store
// this process opened on the same file. A SQLite file is served by one
// process, since another process writing it would not be heard (several
// replicas need PostgreSQL: docs/OPERATING.md, "Several replicas"): the
// feed holds an exclusive lock on the file (flock, lockFile) while any
// Store of this process has it open, and a second process's Open is
// refused with an *InUseError.

// feeds holds one feed per file path this process opened.
var (
	feedsMu sync.Mutex
	feeds   = map[string]*feed{}
)

// feed fans the committed changes to one file out to its listeners.
type feed struct {
	path   string
	users  int          // Stores open on it; guarded by feedsMu
	unlock func() error // releases the file's lock (lockFile)

	mu        sync.Mutex
	listeners map[*listener]struct{}
}

// openFeed returns the feed of path, shared by every Store on it; the
// first one locks the file, or is refused if another process has. first
// says whether no other Store of this process had it open.
func openFeed(path string) (f *feed, first bool, err error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	feedsMu.Lock()
	defer feedsMu.Unlock()
	f = feeds[path]
	if f == nil {
		unlock, err := lockFile(path)
		if err != nil {
			return nil, false, err
		}
		f = &feed{path: path, unlock: unlock, listeners: map[*listener]struct{}{}}
		feeds[path] = f
	}
	f.users++
	return f, f.users == 1, nil
}

func (f *feed) close() {
	feedsMu.Lock()
	defer feedsMu.Unlock()
	if f.users--; f.users == 0 {
		delete(feeds, f.path)
		_ = f.unlock()
	}
}

// listening reports whether anyone listens, so that the writer collects
// changes only then.
func (f *feed) listening() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.listeners) > 0
}

// deliver hands the changes committed through store from to every
// listener without waiting for any: each has a mailbox its own goroutine
// empties.
func (f *feed) deliver(from *Store, changes []store.Change) {
	if len(changes) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for l := range f.listeners {
		l.post(changes, l.store == from)
	}
}

// listener is one Listen call: a mailbox of changes not yet handed to fn.
type listener struct {
	store *Store
	fn    func([]store.Change, bool)
	mu    sync.Mutex
	mail  []store.Change
	wake  chan struct{}
}

func (l *listener) post(changes []store.Change, local bool) {
	l.mu.Lock()
	n := len(l.mail)
	l.mail = append(l.mail, changes...)
	for i := n; i < len(l.mail); i++ {
		l.mail[i].Local = local
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run delivers l's mail until ctx ends or its Store closes.
func (l *listener) run(ctx context.Context, f *feed) {
	defer func() {
		f.mu.Lock()
		delete(f.listeners, l)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.store.w.stopped:
			return
		case <-l.wake:
		}
		l.mu.Lock()
		mail := l.mail
		l.mail = nil
		l.mu.Unlock()
		if len(mail) > 0 && ctx.Err() == nil {
			l.fn(mail, false)
		}
	}
}

// Listen implements store.Store: fn hears the changes committed by every
// Store of this process on the same file, never missing any (missed is
// always false), until ctx ends.
func (s *Store) Listen(ctx context.Context, fn func(changes []store.Change, missed bool)) error {
	l := &listener{store: s, fn: fn, wake: make(chan struct{}, 1)}
	s.feed.mu.Lock()
	s.feed.listeners[l] = struct{}{}
	s.feed.mu.Unlock()
	go l.run(ctx, s.feed)
	return nil
}

// A change cursor is "c2.", the database's identity (migration 29), "."
// and the change sequence's value in base 36. One of the earlier format,
// "c1." and the value alone, is read as this database's.
const (
	cursorPrefix    = "c2."
	oldCursorPrefix = "c1."
)

// ChangeCursor implements store.Store: the change sequence's last
// committed value. A batch that commits later takes a higher one.
func (s *Store) ChangeCursor(ctx context.Context) (string, error) {
	n, err := changeSeq(ctx, s.read)
	if err != nil {
		return "", err
	}
	return cursorPrefix + s.identity + "." + strconv.FormatInt(n, 36), nil
}

// CursorAhead implements store.Store: a cursor of another database (a
// server moved to another file, and back) is, as no change of this one
// follows from it.
func (s *Store) CursorAhead(ctx context.Context, c string) (bool, error) {
	n, db, err := decodeCursorOf(c)
	if err != nil {
		if store.CursorBackend(c) == store.PostgresCursor {
			return true, nil // another database's
		}
		return false, err
	}
	if db != "" && db != s.identity {
		return true, nil
	}
	now, err := changeSeq(ctx, s.read)
	if err != nil {
		return false, err
	}
	return n > now, nil
}

// changeSeq is the change sequence's last committed value.
func changeSeq(ctx context.Context, db *sql.DB) (int64, error) {
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT seq FROM changes WHERE id = 1").Scan(&n); err != nil {
		return 0, fmt.Errorf("read the change sequence: %w", classify(err))
	}
	return n, nil
}

// decodeCursor is the change sequence's value in cursor c.
func decodeCursor(c string) (int64, error) {
	n, _, err := decodeCursorOf(c)
	return n, err
}

// decodeCursorOf is the change sequence's value in cursor c, and the
// identity of the database that issued it ("" for the earlier format).
func decodeCursorOf(c string) (n int64, db string, err error) {
	bad := fmt.Errorf("list jobs: change cursor: %w", jobtype.ErrInvalidPageToken)
	rest, ok := strings.CutPrefix(c, cursorPrefix)
	if ok {
		if db, rest, ok = strings.Cut(rest, "."); !ok || db == "" || len(db) > 32 {
			return 0, "", bad
		}
	} else if rest, ok = strings.CutPrefix(c, oldCursorPrefix); !ok {
		return 0, "", bad
	}
	if len(rest) > 13 {
		return 0, "", bad
	}
	n, err = strconv.ParseInt(rest, 36, 64)
	if err != nil || n < 0 {
		return 0, "", bad
	}
	return n, db, nil
}

// Now implements store.Store: the database is a file on this machine,
// so its clock is this machine's.
func (s *Store) Now(context.Context) (time.Time, error) {
	return time.Now().UTC(), nil
}

// changed records, for the batch being written, that j was committed at
// a new version; the writer delivers the batch's changes once it
// commits. Only the writer goroutine calls it.
func (s *Store) changed(j jobtype.Job) {
	if !s.w.collect {
		return
	}
	s.w.changes = append(s.w.changes, store.Change{
		JobID: j.ID, Version: j.Version, Tenant: j.Tenant, Kind: j.Kind, Queue: j.Queue, State: j.State, RunAt: j.RunAt,
	})
}
