package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

func TestAnOutageOfWritesLogsOneWarningAndOneRecovery(t *testing.T) {
	var (
		h   store.WriteHealth
		out bytes.Buffer
		log = slog.New(slog.NewTextHandler(&out, nil))
	)
	// logged returns the lines logged since it was last called.
	logged := func() []string {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		out.Reset()
		if lines[0] == "" {
			return nil
		}
		return lines
	}
	refused := fmt.Errorf("create job j1: %w", jobtype.ErrUnavailable)

	h.Observe(log, nil)
	h.Observe(log, fmt.Errorf("job j2: %w", jobtype.ErrNotFound))
	h.Observe(log, &jobtype.ConflictError{ActiveID: "j0", UniqueKey: "nightly"})
	if got := logged(); len(got) != 0 || h.Failing() {
		t.Fatalf("successes and the callers' errors logged %q, failing %v; want nothing", got, h.Failing())
	}

	h.Observe(log, refused)
	if got := logged(); len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], refused.Error()) || !h.Failing() {
		t.Fatalf("the first refused write logged %q, failing %v; want one warning with its cause", got, h.Failing())
	}

	h.Observe(log, refused)
	h.Observe(log, errors.Join(errors.New("disk full"), jobtype.ErrUnavailable))
	h.Observe(log, fmt.Errorf("job j3: %w", jobtype.ErrNotFound))
	if got := logged(); len(got) != 0 || !h.Failing() {
		t.Fatalf("refusals within the episode logged %q, failing %v; want nothing more", got, h.Failing())
	}

	h.Observe(log, nil)
	if got := logged(); len(got) != 1 || !strings.Contains(got[0], "level=INFO") || !strings.Contains(got[0], "refused_writes=3") ||
		!strings.Contains(got[0], "after=") || h.Failing() {
		t.Fatalf("the first write after the refusals logged %q, failing %v; want one info line counting 3 refused writes", got, h.Failing())
	}

	h.Observe(log, nil)
	if got := logged(); len(got) != 0 {
		t.Fatalf("a write after the recovery logged %q, want nothing", got)
	}
}
