package postgres

import (
	"testing"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/storetest"
)

// open opens a store on url; the suite closes it.
func open(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, pgtest.URL(t)) })
}

// Two Stores on one schema are two replicas on one database.
func TestConformanceShared(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		url := pgtest.URL(t)
		return open(t, url), open(t, url)
	})
}
