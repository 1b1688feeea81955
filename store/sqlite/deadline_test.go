package sqlite

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// TestACallersNearDeadlineIsNoStoreFailure: a write that waits behind
// the other writes of this process until its caller's deadline is near
// gives up with the caller's deadline (context.DeadlineExceeded), not
// jobtype.ErrUnavailable, and logs no "refuses writes" warning: a caller's
// short deadline says nothing of the database. A write that waits its
// lock timeout, with no deadline of its caller's sooner, still does.
func TestACallersNearDeadlineIsNoStoreFailure(t *testing.T) {
	var logs bytes.Buffer
	s, err := OpenWith(tempPath(t), Config{LockTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	resume := pauseWriter(t, s)
	for _, timeout := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err := s.CreateJob(ctx, testJob("hasty-"+timeout.String()))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jobtype.ErrUnavailable) {
			t.Errorf("a caller with a %v deadline: %v, want context.DeadlineExceeded only", timeout, err)
		}
	}
	if strings.Contains(logs.String(), "refuses writes") {
		t.Errorf("a caller's deadline was logged as a store failure:\n%s", logs.String())
	}

	// The lock timeout is the store's: past it the store is failing.
	_, err = s.CreateJob(context.Background(), testJob("patient"))
	if !errors.Is(err, jobtype.ErrUnavailable) {
		t.Errorf("a write held past the lock timeout: %v, want ErrUnavailable", err)
	}
	if !strings.Contains(logs.String(), "refuses writes") {
		t.Errorf("a write held past the lock timeout was not logged:\n%s", logs.String())
	}
	resume()
	if _, err := s.CreateJob(context.Background(), testJob("after")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"hasty-2ms", "hasty-20ms", "hasty-100ms", "patient"} {
		if _, err := s.GetJob(t.Context(), id); !errors.Is(err, jobtype.ErrNotFound) {
			t.Errorf("job %s after a refused write: %v, want ErrNotFound", id, err)
		}
	}
}
