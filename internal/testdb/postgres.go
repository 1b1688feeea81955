package testdb

import (
	"context"
	"testing"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/postgres"
)

// newPostgres returns the URL of a fresh schema on the test server
// (internal/pgtest: skipped without one, failed under CI=true).
func newPostgres(t testing.TB) string {
	t.Helper()
	return pgtest.URL(t)
}

func openPostgres(ctx context.Context, url string) (store.Store, error) {
	return postgres.Open(ctx, url)
}
