package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A database restored from an older copy takes a new identity when it is
// opened, as the change sequence beside it (FILE-seen) shows it went
// back: a cursor issued before the restore stays another database's
// (CursorAhead) however many changes the copy makes afterwards, where it
// passed for the copy's own once the copy's changes had caught up with
// it. A database opened again as it was keeps its identity and its
// cursors.
func TestADatabaseRestoredFromAnOlderCopyTakesANewIdentity(t *testing.T) {
	path := tempPath(t)
	ctx := t.Context()
	s := openTemp(t, path)
	create := func(s *Store, n int, prefix string) {
		t.Helper()
		for i := range n {
			if _, err := s.CreateJob(ctx, testJob(fmt.Sprint(prefix, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(s, 3, "a")
	backup := filepath.Join(t.TempDir(), "backup.db")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, "VACUUM INTO ?", backup)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	create(s, 5, "b")
	before, err := s.ChangeCursor(ctx) // later than the copy's changes
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Opened again as it was: the same database.
	s = openTemp(t, path)
	if ahead, err := s.CursorAhead(ctx, before); err != nil || ahead {
		t.Fatalf("CursorAhead of a cursor of the same database, opened again = %v, %v; want false", ahead, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Restored twice from the same copy, the second time with nothing
	// written in between: the copy's identity was retired by the first.
	for restore := 1; restore <= 2; restore++ {
		restoreCopy(t, path, backup)
		restored := openTemp(t, path)
		if restore == 2 {
			create(restored, 20, "c") // the copy's changes pass the cursor's
		}
		if ahead, err := restored.CursorAhead(ctx, before); err != nil || !ahead {
			t.Fatalf("restore %d: CursorAhead of a cursor from before the restore = %v, %v; want true", restore, ahead, err)
		}
		own, err := restored.ChangeCursor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ahead, err := restored.CursorAhead(ctx, own); err != nil || ahead {
			t.Fatalf("restore %d: CursorAhead of the restored database's own cursor = %v, %v; want false", restore, ahead, err)
		}
		if err := restored.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// A watermark file that is not one is written anew; the store opens.
	if err := os.WriteFile(watermarkPath(path), []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openTemp(t, path)
	defer s.Close()
	if w, err := readWatermark(watermarkPath(path)); err != nil || w.identity != s.identity {
		t.Fatalf("the watermark after a garbage one = %+v, %v; want it written anew with the identity %s", w, err, s.identity)
	}
}

// restoreCopy puts a copy of backup in the place of the database at
// path, whose store has closed: the file and its WAL go.
func restoreCopy(t *testing.T, path, backup string) {
	t.Helper()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
