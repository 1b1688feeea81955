package sqlite

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A database file removed or renamed while the store runs, or its -wal
// removed, would take every write made since with it: SQLite writes on
// into the file that is no longer at the path, and a restart opens what
// is there instead (an outside probe lost every job so, with every write
// acknowledged and the health check green). So writes are refused, as
// unavailable with the cause in a caller's words, and the store stops
// being reachable, until the file is back; what was acknowledged before
// is still there when the store opens the file again.
func TestWritesAreRefusedWhileTheDatabaseFileIsGoneFromItsPath(t *testing.T) {
	path := tempPath(t)
	s := openTemp(t, path)
	defer s.Close()
	ctx := t.Context()
	if _, err := s.CreateJob(ctx, testJob("before")); err != nil {
		t.Fatal(err)
	}

	for _, moved := range [][]string{{"", "-wal", "-shm"}, {"-wal"}} {
		for _, suffix := range moved {
			if err := os.Rename(path+suffix, path+suffix+".aside"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.CreateJob(ctx, testJob("while-gone"+strings.Join(moved, "")))
		var cause interface{ UnavailableCause() string }
		if !errors.Is(err, jobtype.ErrUnavailable) || !errors.As(err, &cause) || cause.UnavailableCause() != causeFileGone {
			t.Fatalf("a write with %q moved aside: %v; want unavailable, %q", moved, err, causeFileGone)
		}
		if s.Reachable() {
			t.Errorf("with %q moved aside the store says it is reachable", moved)
		}
		for _, suffix := range moved {
			if err := os.Rename(path+suffix+".aside", path+suffix); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.CreateJob(ctx, testJob("back"+strings.Join(moved, ""))); err != nil {
			t.Fatalf("a write once %q was back: %v", moved, err)
		}
	}
	s.Close()

	again := openTemp(t, path)
	defer again.Close()
	for _, id := range []string{"before", "back-wal-shm", "back-wal"} {
		if _, err := again.GetJob(ctx, id); err != nil {
			t.Errorf("job %s, acknowledged, after the store opened the file again: %v", id, err)
		}
	}
	for _, id := range []string{"while-gone-wal-shm", "while-gone-wal"} {
		if _, err := again.GetJob(ctx, id); err == nil {
			t.Errorf("job %s, refused, is in the file", id)
		}
	}
}

// A database file removed while its server ran leaves its -wal (and
// -shm) behind when the server is killed; an outside probe's restart made
// a new, empty file beside them and served no jobs, with a warning that
// every acknowledged write was kept. Open refuses it instead, makes
// nothing, and opens the file once it is back, with its jobs. A server
// that stops with its file gone says so in its last words.
func TestAWALWhoseDatabaseFileIsGoneIsNotOpenedAsANewDatabase(t *testing.T) {
	live := tempPath(t)
	logs := &syncBuffer{}
	s, err := OpenWith(live, Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateJob(t.Context(), testJob("acknowledged")); err != nil {
		t.Fatal(err)
	}

	// As a kill -9 leaves the files, less the database file.
	path := tempPath(t)
	copyFiles(t, live, path)
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path)
	if err == nil || !strings.Contains(err.Error(), "the database file is missing, but "+path+"-wal") || !strings.Contains(err.Error(), "put it back") {
		t.Fatalf("Open of a -wal without its file = %v; want it refused, saying to put the file back", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused Open left a file at the path (stat: %v)", err)
	}
	if err := os.Rename(path+".aside", path); err != nil {
		t.Fatal(err)
	}
	back := openTemp(t, path)
	defer back.Close()
	if _, err := back.GetJob(t.Context(), "acknowledged"); err != nil {
		t.Errorf("the acknowledged job once the file was back: %v", err)
	}

	if err := os.Remove(live); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(logs.String(), "closing a database file that is gone from its path") {
		t.Errorf("a store closed with its file removed logged %q; want it to say the file is gone", logs.String())
	}
}

// BenchmarkFileCheck is what the writer's look at its file costs a batch.
func BenchmarkFileCheck(b *testing.B) {
	path := filepath.Join(b.TempDir(), "jobs.db")
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.file.check(); err != nil {
			b.Fatal(err)
		}
	}
}
