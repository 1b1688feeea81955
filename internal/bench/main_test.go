package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// TestMain removes the jobwatch binary the tests built, and stops the
// throwaway PostgreSQL cluster pgtest may have started.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the jobwatch binary of this test process, made once.
var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// jobwatchBinary returns a jobwatch binary built from this checkout, for
// --binary: the bench starts its servers from it ("serve", and "bench
// --serve-floor" for the floor), and this test binary is not jobwatch.
// Built with -race when the tests are, so the servers are checked too.
func jobwatchBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "jobwatch-bench-test-"); built.err != nil {
			return
		}
		args := []string{"build", "-o", filepath.Join(built.dir, "jobwatch")}
		if bi, ok := debug.ReadBuildInfo(); ok && slices.Contains(bi.Settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
			args = append(args, "-race")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", append(args, "github.com/jobwatch/jobwatch/cmd/jobwatch")...).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build ./cmd/jobwatch: %w\n%s", err, out)
			return
		}
		built.path = filepath.Join(built.dir, "jobwatch")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}
