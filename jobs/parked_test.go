package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// What a test waits on before it changes a job under a parked Wait or
// Watch, instead of sleeping to "let it park": the call's own first read
// of the job. Wait and Watch subscribe to the job before they read it
// (see Wait), so once that read has returned, every change the engine
// publishes afterwards reaches the call, whether it has reached its
// select yet or not: it has seen the job as it was and cannot miss what
// comes next. Counting every GetJob would not do: a replica's listener
// reads the jobs it has subscribers for, and such a read may return
// before the call's own.

type callReadsKey struct{}

// countingReads returns ctx marked so that each GetJob the engine makes
// for a call under it (the engine keeps ctx's values when it reads)
// adds one to n once it has returned.
func countingReads(ctx context.Context, n *atomic.Int64) context.Context {
	return context.WithValue(ctx, callReadsKey{}, n)
}

// callReads is a store that counts, for calls made under countingReads,
// the GetJob reads that have returned.
type callReads struct{ store.Store }

func (s callReads) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	if n, ok := ctx.Value(callReadsKey{}).(*atomic.Int64); ok {
		defer n.Add(1)
	}
	return s.Store.GetJob(ctx, id)
}

// waitedRead starts a Wait on job id of e (an engine over callReads)
// and returns once it has read its job: it is parked, or cannot miss a
// change. It fails if the Wait returns first.
func waitedRead(t *testing.T, e *jobs.Engine, ctx context.Context, id string, deadline time.Time) <-chan outcome[jobtype.Job] {
	t.Helper()
	var reads atomic.Int64
	ctx = countingReads(ctx, &reads)
	c := async(func() (jobtype.Job, error) { return e.Wait(ctx, id, deadline) })
	until := time.Now().Add(20 * time.Second)
	for reads.Load() == 0 {
		select {
		case o := <-c:
			t.Fatalf("wait returned before it parked: %s, %v", o.v.State, o.err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(until) {
			t.Fatal("the wait had not read its job within 20s")
		}
	}
	return c
}

// waitReads waits until n reaches want: that many calls under
// countingReads(ctx, n) have read their job.
func waitReads(t *testing.T, n *atomic.Int64, want int64) {
	t.Helper()
	until := time.Now().Add(20 * time.Second)
	for n.Load() < want {
		if time.Now().After(until) {
			t.Fatalf("%d of %d calls had read their job within 20s", n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}
