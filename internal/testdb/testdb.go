// Package testdb gives the tests of the engine, the server, the clients
// and the binary the database they run on: a SQLite file by default, or
// a PostgreSQL database when JOBWATCH_TEST_BACKEND is "postgres" (the
// server is found by internal/pgtest). `make test` runs those suites
// once on each, so that both backends keep the same promises.
package testdb

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// Backend is the backend under test: "sqlite" or "postgres".
func Backend() string {
	if os.Getenv("JOBWATCH_TEST_BACKEND") == "postgres" {
		return "postgres"
	}
	return "sqlite"
}

// New returns a fresh, empty database of the backend under test, named
// as `jobwatch serve --db` takes it: a file path, or a postgres:// URL.
// It is removed when t ends.
func New(t testing.TB) string {
	t.Helper()
	if Backend() == "postgres" {
		return newPostgres(t)
	}
	return filepath.Join(t.TempDir(), "jobwatch.db")
}

// IsSQLite reports whether db names a SQLite file.
func IsSQLite(db string) bool {
	return !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://")
}

// Open opens a Store on db (from New, or any SQLite path). Several may be
// open on one db at once, as replicas would have. Close it when done.
func Open(db string) (store.Store, error) {
	if IsSQLite(db) {
		return sqlite.Open(db)
	}
	return openPostgres(context.Background(), db)
}

// OpenT opens a Store on db and closes it when t ends.
func OpenT(t testing.TB, db string) store.Store {
	t.Helper()
	st, err := Open(db)
	if err != nil {
		t.Fatalf("open store %s: %v", db, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
