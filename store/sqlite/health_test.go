package sqlite

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/jobwatch/jobwatch/jobtype"
)

// copyFiles copies the database file at src and its -wal and -shm files,
// those that exist, to dst: taken while a store has it open, the copy is
// what a process killed with kill -9 leaves behind.
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(src + suffix)
		if errors.Is(err, os.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// wantReadOnlyRefusal checks that an open of path failed as a read-only
// file should: unavailable, naming the file, saying it is read-only in
// words a caller may read, and what to do.
func wantReadOnlyRefusal(t *testing.T, path string, s *Store, err error) {
	t.Helper()
	t.Logf("refused: %v", err)
	if err == nil {
		s.Close()
		t.Fatalf("open of a read-only %s succeeded, want it refused", path)
	}
	var ue *UnavailableError
	if !errors.Is(err, jobtype.ErrUnavailable) || !errors.As(err, &ue) || ue.UnavailableCause() != "the database file is read-only" {
		t.Errorf("err = %v, want ErrUnavailable with the cause \"the database file is read-only\"", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "read-only") || !strings.Contains(msg, "writable") {
		t.Errorf("err = %q, want it to name %s, say it is read-only and what to do", msg, path)
	}
}

// TestOpenRefusesAFileItCannotWrite: SQLite opens a file it may not
// write read-only without a word, and a file in WAL mode whose -wal a
// killed process left needs no write to open; Open must refuse both. As
// root a write-protected file is written anyway, so the file is opened
// read-only with mode=ro, which is what SQLite does by itself for a
// user that may not write it; the chmod case runs when not root.
func TestOpenRefusesAFileItCannotWrite(t *testing.T) {
	// live is a store left open, as a killed process leaves its file.
	live := tempPath(t)
	s := openTemp(t, live)
	defer s.Close()
	if _, err := s.CreateJob(t.Context(), testJob("acknowledged")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live + "-wal"); err != nil {
		t.Fatalf("the open store has no -wal file: %v", err)
	}
	closed := tempPath(t)
	c := openTemp(t, closed)
	if _, err := c.CreateJob(t.Context(), testJob("acknowledged")); err != nil {
		t.Fatal(err)
	}
	c.Close()

	t.Run("a file left with its -wal by a killed process, opened read-only, is refused", func(t *testing.T) {
		path := tempPath(t)
		copyFiles(t, live, path)
		ro, err := open(path, Config{}, "&mode=ro")
		wantReadOnlyRefusal(t, path, ro, err)
	})
	t.Run("a file closed cleanly, opened read-only, is refused", func(t *testing.T) {
		path := tempPath(t)
		copyFiles(t, closed, path)
		ro, err := open(path, Config{}, "&mode=ro")
		wantReadOnlyRefusal(t, path, ro, err)
	})
	t.Run("a write-protected file left with its -wal, in a write-protected directory, is refused", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes a write-protected file; the mode=ro cases stand for it")
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "jobs.db")
		copyFiles(t, live, path)
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if err := os.Chmod(path+suffix, 0o400); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		ro, err := Open(path)
		wantReadOnlyRefusal(t, path, ro, err)
	})
	t.Run("a writable copy of the same files opens and keeps the acknowledged job", func(t *testing.T) {
		path := tempPath(t)
		copyFiles(t, live, path)
		rw := openTemp(t, path)
		defer rw.Close()
		if _, err := rw.GetJob(t.Context(), "acknowledged"); err != nil {
			t.Fatalf("the acknowledged job: %v", err)
		}
	})
}

// openWithoutFreePages opens a store on a new file with one job, logging
// to the buffer it returns, and leaves the file no free page (the
// schema's migrations free some), so that a new job needs it to grow:
// then PRAGMA max_page_count refuses it as a full disk would.
func openWithoutFreePages(t *testing.T) (*Store, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	s, err := OpenWith(tempPath(t), Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateJob(t.Context(), testJob("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.write.Exec("VACUUM"); err != nil {
		t.Fatal(err)
	}
	return s, logs
}

// TestRefusedWritesMakeTheStoreUnreachableUntilAProbeCommits makes the
// file refuse writes as a full disk or a read-only file would (SQLite's
// own limits on the writer connection produce the very errors): the
// store is not Reachable from the first refused write, callers hear the
// cause, the probes that fail keep it so, and once the file takes writes
// again a probe ends the episode though nobody writes.
func TestRefusedWritesMakeTheStoreUnreachableUntilAProbeCommits(t *testing.T) {
	tests := []struct {
		name, fail, recover, cause string
	}{
		{"a full disk", "PRAGMA max_page_count = 1", "PRAGMA max_page_count = 1073741823", "the database's disk is full"},
		{"a read-only file", "PRAGMA query_only = 1", "PRAGMA query_only = 0", "the database file is read-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, logs := openWithoutFreePages(t)
			if !s.Reachable() {
				t.Fatal("a store whose writes succeed is not reachable")
			}
			if _, err := s.write.Exec(tt.fail); err != nil {
				t.Fatal(err)
			}

			j := testJob("during")
			j.Payload = []byte(`"` + strings.Repeat("x", 8192) + `"`) // needs new pages
			_, err := s.CreateJob(t.Context(), j)
			var cause interface{ UnavailableCause() string }
			if !errors.Is(err, jobtype.ErrUnavailable) || !errors.As(err, &cause) || cause.UnavailableCause() != tt.cause {
				t.Fatalf("a refused write: err = %v, want ErrUnavailable with the cause %q", err, tt.cause)
			}
			if s.Reachable() {
				t.Fatal("the store is reachable after a refused write")
			}

			// Probes that fail keep the episode on, and are not counted
			// as refused writes.
			waitFor(t, "two probes", func() bool { return s.writes.probed.Load() >= 2 })
			if s.Reachable() {
				t.Fatal("a failed probe made the store reachable")
			}

			if _, err := s.write.Exec(tt.recover); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the store reachable again, with no caller writing", s.Reachable)

			out := logs.String()
			if n := strings.Count(out, "level=WARN"); n != 1 {
				t.Errorf("%d warnings, want 1 for the episode:\n%s", n, out)
			}
			if n := strings.Count(out, "level=INFO"); n != 1 || !strings.Contains(out, "refused_writes=1") {
				t.Errorf("want one info line for the recovery, counting the 1 refused caller's write:\n%s", out)
			}
			// The probe left nothing behind, and the store writes.
			var n int
			if err := s.read.QueryRow("SELECT count(*) FROM job_releases").Scan(&n); err != nil || n != 0 {
				t.Errorf("job_releases holds %d rows (%v), want none", n, err)
			}
			if _, err := s.CreateJob(t.Context(), j); err != nil {
				t.Errorf("a write after the recovery: %v", err)
			}
		})
	}
}

// TestCloseStopsTheProbes closes a store while its writes are refused:
// Close returns, and nothing probes afterwards.
func TestCloseStopsTheProbes(t *testing.T) {
	s, err := OpenWith(tempPath(t), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.write.Exec("PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJob(t.Context(), testJob("refused")); !errors.Is(err, jobtype.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	waitFor(t, "a probe", func() bool { return s.writes.probed.Load() >= 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.writes.mu.Lock()
	probing := s.writes.probing
	s.writes.mu.Unlock()
	if probing {
		t.Error("a probe runs after Close")
	}
}

// waitFor waits until cond holds, with a deadline only a broken build
// reaches (probes run every second).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, 15*time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTheCauseOfARefusedWriteInACallersWords: what SQLite reports for a
// full disk and a read-only file, also as the errno of an I/O error (a
// file system remounted read-only under the open file), carries the
// cause; other refusals carry none, and errors of no refusal are not
// wrapped.
func TestTheCauseOfARefusedWriteInACallersWords(t *testing.T) {
	tests := []struct {
		name  string
		err   sqlite3.Error
		cause string
	}{
		{"SQLITE_FULL is a full disk", sqlite3.Error{Code: sqlite3.ErrFull}, "the database's disk is full"},
		{"an I/O error with ENOSPC is a full disk", sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.ENOSPC}, "the database's disk is full"},
		{"SQLITE_READONLY is a read-only file", sqlite3.Error{Code: sqlite3.ErrReadonly}, "the database file is read-only"},
		{"an I/O error with EROFS is a read-only file", sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.EROFS}, "the database file is read-only"},
		{"a lock held by another process has no cause to tell", sqlite3.Error{Code: sqlite3.ErrBusy}, ""},
		{"an I/O error of another kind has no cause to tell", sqlite3.Error{Code: sqlite3.ErrIoErr, SystemErrno: syscall.EIO}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(fmt.Errorf("create job j1: %w", tt.err))
			var cause interface{ UnavailableCause() string }
			if !errors.Is(err, jobtype.ErrUnavailable) || !errors.As(err, &cause) || cause.UnavailableCause() != tt.cause {
				t.Errorf("classify = %v, want ErrUnavailable with the cause %q", err, tt.cause)
			}
			if again := classify(err); again != err {
				t.Errorf("classify of a classified error = %v, want it as it was", again)
			}
		})
	}
	if err := classify(sqlite3.Error{Code: sqlite3.ErrConstraint}); errors.Is(err, jobtype.ErrUnavailable) {
		t.Errorf("a constraint violation = %v, want no ErrUnavailable", err)
	}
}
