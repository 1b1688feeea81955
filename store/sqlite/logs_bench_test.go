package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/store/storetest"
)

// BenchmarkAppendLogs: appends of 10 lines, with and without the look for
// the same append sent again (docs/BENCHMARKS.md, "Job logs").
func BenchmarkAppendLogs(b *testing.B) {
	storetest.BenchAppendLogs(b, func(b *testing.B) store.Store {
		s, err := Open(filepath.Join(b.TempDir(), "jobs.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}
