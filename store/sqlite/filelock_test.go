//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
)

// secondOpenEnv names the file a child process of this test binary opens
// (TestASecondProcessCannotOpenTheFile), printing what came of it.
const secondOpenEnv = "JOBWATCH_TEST_SECOND_OPEN"

// A SQLite file serves one process: while one has a Store open on it,
// another process's Open is refused at once, in words that say what to
// do; Stores of the one process share it; once they are all closed,
// another process may open it.
func TestASecondProcessCannotOpenTheFile(t *testing.T) {
	if path := os.Getenv(secondOpenEnv); path != "" {
		s, err := Open(path)
		if err != nil {
			fmt.Printf("refused: %v (unavailable %v, in use %v)\n", err, errors.Is(err, jobtype.ErrUnavailable), errors.As(err, new(*InUseError)))
			return
		}
		s.Close()
		fmt.Println("opened")
		return
	}
	secondOpen := func(path string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestASecondProcessCannotOpenTheFile$")
		cmd.Env = append(os.Environ(), secondOpenEnv+"="+path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the second process: %v\n%s", err, out)
		}
		return string(out)
	}

	path := tempPath(t)
	first := openTemp(t, path)
	same := openTemp(t, path) // a second Store of this process shares the file
	out := secondOpen(path)
	if !strings.Contains(out, "refused: open sqlite "+path+": another process has it open") ||
		!strings.Contains(out, "use PostgreSQL for several replicas") || !strings.Contains(out, "(unavailable true, in use true)") {
		t.Fatalf("a second process opening the file got:\n%s\nwant it refused as in use, saying what to do", out)
	}
	first.Close()
	if out := secondOpen(path); !strings.Contains(out, "refused:") {
		t.Fatalf("with one of this process's two Stores still open, a second process got:\n%s\nwant it refused", out)
	}
	same.Close()
	if out := secondOpen(path); !strings.Contains(out, "opened\n") {
		t.Fatalf("once this process closed the file, a second process got:\n%s\nwant it opened", out)
	}
}
