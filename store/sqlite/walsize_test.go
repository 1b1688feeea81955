package sqlite

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// A write larger than the backstop grows the -wal file past it, as a
// burst of writes or a backup's long read does; once the WAL has been
// copied into the file, the first commit after it starts over cuts the
// file back to walSizeLimit. Without journal_size_limit SQLite kept it at
// its largest until the server stopped (an outside probe: 164.7 MiB
// after a VACUUM INTO backup).
func TestTheWALIsCutBackAfterItGrewPastItsLimit(t *testing.T) {
	path := tempPath(t)
	s := openTemp(t, path)
	defer s.Close()
	ctx := t.Context()
	walSize := func() int64 {
		t.Helper()
		info, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}

	// One transaction of 80 MiB: no checkpoint can cut it short.
	if _, err := s.write.ExecContext(ctx, `CREATE TABLE ballast (b BLOB);
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 80)
		INSERT INTO ballast SELECT randomblob(1048576) FROM n`); err != nil {
		t.Fatal(err)
	}
	if grown := walSize(); grown <= walSizeLimit {
		t.Fatalf("the WAL holds %d bytes after an 80 MiB write; want more than %d", grown, walSizeLimit)
	}
	// Commits go on as a server's do; once a checkpoint has copied the
	// WAL, the next one starts it over and cuts it back.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; walSize() > walSizeLimit+1<<20; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the WAL still holds %d bytes after %d commits; want at most about %d", walSize(), i, walSizeLimit)
		}
		if _, err := s.CreateJob(ctx, testJob(fmt.Sprintf("after-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
}
