package sqlite

import (
	"errors"
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
