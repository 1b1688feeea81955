package server_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/store"
)

// slowQueueStats is the real store whose reads over every unfinished job
// take as long as they would behind a million queued jobs, and are
// counted.
type slowQueueStats struct {
	store.Store
	took               time.Duration
	stats, tenantReads atomic.Int64
}

func (s *slowQueueStats) QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error) {
	s.stats.Add(1)
	time.Sleep(s.took)
	return s.Store.QueueStats(ctx, now)
}

func (s *slowQueueStats) TenantDepths(ctx context.Context, now time.Time) ([]store.TenantDepth, error) {
	s.tenantReads.Add(1)
	time.Sleep(s.took)
	return s.Store.TenantDepths(ctx, now)
}

// Pages that poll ListQueues of a server whose queue counts are costly to
// read (a million queued jobs) share reads: a read that took 200 ms
// answers the calls of the next 2 s, so ten pages asking one after the
// other cost the store one read of each kind, not ten, and still see
// the jobs.
func TestPagesPollingListQueuesShareACostlyRead(t *testing.T) {
	slow := &slowQueueStats{took: 200 * time.Millisecond}
	ts := startServer(t, serverOptions{wrapStore: func(s store.Store) store.Store { slow.Store = s; return slow }})
	c := ts.h2c()
	if _, err := c.jobs.SubmitJob(ctxTimeout(t, 5*time.Second), &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: "polled"}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		row := queueRow(t, c, "polled")
		if row.GetQueued() != 1 || len(row.GetTenants()) != 1 {
			t.Fatalf("a page's ListQueues row of the queue: %v; want its one queued job and its tenant", row)
		}
	}
	// Generous: the ten calls take a few milliseconds each after the
	// first read, well within the 2 s it is reused for; a second read is
	// what a very slow machine might make.
	if n, m := slow.stats.Load(), slow.tenantReads.Load(); n > 2 || m > 2 {
		t.Errorf("ten ListQueues read the queues' counts %d times and the tenants' %d times, want the reads shared", n, m)
	}
}
