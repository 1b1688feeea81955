package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheDatabaseAndItsWALAreCreatedForTheOwnerAlone: the database file
// holds every tenant's payloads and results, and its -wal and -shm files
// hold the latest of them, so none may be read by other users: all three
// are 0600 after Open and after writes.
func TestTheDatabaseAndItsWALAreCreatedForTheOwnerAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobwatch.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check := func(when string, names ...string) {
		t.Helper()
		for _, name := range names {
			info, err := os.Stat(name)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if mode := info.Mode().Perm(); mode&0o077 != 0 || mode&0o600 != 0o600 {
				t.Errorf("%s: %s has mode %#o, want %#o", when, filepath.Base(name), mode, FileMode)
			}
		}
	}
	check("after open", path, path+"-wal", path+"-shm")
	for i := range 50 {
		if _, err := s.CreateJob(context.Background(), testJob(fmt.Sprintf("job-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	check("after writes", path, path+"-wal", path+"-shm")
}

// TestAnExistingDatabaseOthersMayReadKeepsItsModeAndIsLogged: the
// operator's file keeps the mode it has, and a warning says what to do.
func TestAnExistingDatabaseOthersMayReadKeepsItsModeAndIsLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobwatch.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err = OpenWith(path, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o644 {
		t.Errorf("mode %#o, want the operator's 0644 kept", info.Mode().Perm())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "chmod 600") {
		t.Errorf("no warning with what to do:\n%s", logs.String())
	}
}

// A path that is a directory is refused as such, with no warning about
// its mode first.
func TestADirectoryIsNotADatabase(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{dir, dir + "/"} {
		var logs bytes.Buffer
		_, err := OpenWith(path, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil || !strings.Contains(err.Error(), path+" is a directory: give the path of a database file") {
			t.Fatalf("opening a directory as %s: %v, want it said to be a directory", path, err)
		}
		if logs.Len() > 0 {
			t.Errorf("opening a directory as %s logged:\n%s", path, logs.String())
		}
	}
}
