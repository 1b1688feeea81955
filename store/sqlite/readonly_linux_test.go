package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A file system mounted read-only fails SQLite's open of a WAL file
// with "unable to open database file" and ENOENT (the -shm it could not
// make): an outside probe was told the file did not exist. Open names
// the read-only mount and what to do. The mount needs root; the message
// is checked without one too.
func TestOpenOnAReadOnlyFileSystemSaysSo(t *testing.T) {
	t.Run("the message", func(t *testing.T) {
		was := onReadOnlyFS
		onReadOnlyFS = func(string) bool { return true }
		defer func() { onReadOnlyFS = was }()
		path := "/srv/jobs.db"
		err := fmt.Errorf("open sqlite %s: %w", path, openFailed(path,
			fmt.Errorf("%w: unable to open database file: no such file or directory", jobtype.ErrUnavailable)))
		wantReadOnlyRefusal(t, path, nil, err)
	})
	t.Run("a real read-only mount", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mounting a file system needs root; the message case stands for it")
		}
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
			t.Skipf("this machine does not let root mount a tmpfs (%v); the message case stands for it", err)
		}
		defer unix.Unmount(dir, unix.MNT_DETACH)
		path := filepath.Join(dir, "jobs.db")
		openTemp(t, path).Close()
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount read-only: %v", err)
		}
		s, err := Open(path)
		wantReadOnlyRefusal(t, path, s, err)
	})
}

// A file another user owns (a backup root restored and left root's) is
// refused with what to do about it. Root may open any file, so this
// runs only as another user.
func TestOpenOfAnotherUsersFileSaysToChownIt(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root opens any file; run as another user to see the refusal")
	}
	path := filepath.Join(t.TempDir(), "jobs.db")
	openTemp(t, path).Close()
	if err := os.Chmod(path, 0); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path)
	if err == nil || !strings.Contains(err.Error(), "permission denied: make it, its -wal and -shm files and their directory readable and writable by the user") {
		t.Fatalf("Open of a file this user may not open: %v; want it to say to chown it", err)
	}
}

// A path whose directory does not exist, or a file that is not a SQLite
// database, is refused before SQLite opens it, saying what to do, and
// nothing is made: not the directory, not a WAL beside the file. The
// missing directory stays unavailable (a volume may yet be mounted); the
// file that is not a database is not.
func TestAPathThatCannotBeADatabaseIsRefusedSayingWhy(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such")
	notes := filepath.Join(dir, "notes.db")
	if err := os.WriteFile(notes, []byte("my notes, not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want  string
		unavailable bool
	}{
		{filepath.Join(missing, "x.db"), "its directory " + missing + " does not exist: create it first (mkdir -p " + missing + ")", true},
		{notes, "the file is not a SQLite database (it does not begin as one does)", false},
	} {
		s, err := Open(tc.path)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded", tc.path)
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "store unavailable") || errors.Is(err, jobtype.ErrUnavailable) != tc.unavailable {
			t.Errorf("Open(%s) = %v; want it to say %q, unavailable %v", tc.path, err, tc.want, tc.unavailable)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("a refused path made its directory")
	}
	if _, err := os.Stat(notes + "-wal"); err == nil {
		t.Error("a refused file got a WAL beside it")
	}
	if got := shellWord("/tmp/a dir/it's"); got != `'/tmp/a dir/it'\''s'` {
		t.Errorf("shellWord = %s", got)
	}
}
