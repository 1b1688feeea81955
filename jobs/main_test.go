package jobs_test

import (
	"os"
	"testing"

	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// TestMain stops the throwaway PostgreSQL cluster the tests may have
// started (internal/pgtest) when they run on PostgreSQL without one.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
