package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
)

// TestACallersDeadlineWhileWaitingForAConnectionIsNoStoreFailure: a write
// whose caller's deadline passes while every connection of the pool is
// busy answers with the caller's deadline (context.DeadlineExceeded),
// not jobtype.ErrUnavailable, and starts no "refuses writes" episode: the
// database is fine, the caller was short of time. The write changed
// nothing, and the next one goes through.
func TestACallersDeadlineWhileWaitingForAConnectionIsNoStoreFailure(t *testing.T) {
	url := pgtest.URL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s := openURL(t, url+sep+"pool_max_conns=1")
	conn, err := s.pool.Acquire(t.Context()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = s.CreateJob(ctx, job("hasty", "default", 0))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jobtype.ErrUnavailable) {
		t.Errorf("a write that waited for a connection past its caller's deadline: %v, want context.DeadlineExceeded only", err)
	}
	if s.reach.failing() {
		t.Error("a caller's deadline started an episode of failing writes")
	}
	conn.Release()
	mustCreate(t, s, job("patient", "default", 1))
	if _, err := s.GetJob(t.Context(), "hasty"); !errors.Is(err, jobtype.ErrNotFound) {
		t.Errorf("the hasty write: %v, want ErrNotFound", err)
	}
}
