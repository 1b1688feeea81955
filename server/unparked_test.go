package server_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/server"
	"github.com/jobwatch/jobwatch/store"
)

// heldLooks holds every NextReady for kind "none", once armed, until
// released, counting those that wait. The parked claim asks for another
// kind, so that its own looks (it is counted parked before its first
// look ends) are neither held nor counted.
type heldLooks struct {
	store.Store
	armed   atomic.Bool
	waiting atomic.Int64
	release chan struct{}
}

func (s *heldLooks) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	if s.armed.Load() && slices.Contains(f.Kinds, "none") {
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
		<-s.release
	}
	return s.Store.NextReady(ctx, f)
}

// Past --max-parked-calls one claim at a time looks for a ready job; the
// others are refused at once without touching the store. A flood of
// claims over the limit, each looking, filled the store's read pool and
// held everyone's reads for seconds (an outside probe: GetJob 12 s).
func TestOneClaimOverTheParkedLimitLooksAtATime(t *testing.T) {
	held := &heldLooks{release: make(chan struct{})}
	ts := startServer(t, serverOptions{
		config:    server.Config{MaxParkedCalls: 1, ClaimCap: time.Minute},
		wrapStore: func(st store.Store) store.Store { held.Store = st; return held },
	})
	c := ts.h2c()
	ctx, cancel := context.WithCancel(ctxTimeout(t, time.Minute))
	defer cancel()
	go func() {
		_, _ = c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "parked", Kinds: []string{"parked"}})
	}()
	ts.waitForGauge("jobwatch_parked_calls", 1)

	held.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := c.workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "looks", Kinds: []string{"none"}})
		first <- err
	}()
	for deadline := time.Now().Add(callBound); held.waiting.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first claim over the limit never looked for a job")
		}
	}
	// While it looks, 20 more are refused, none of them looking.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := c.workers.ClaimJob(ctxTimeout(t, callBound), &jobwatchv1.ClaimJobRequest{WorkerId: "flood", Kinds: []string{"none"}})
			wantCode(t, err, connect.CodeResourceExhausted)
		})
	}
	wg.Wait()
	if n := held.waiting.Load(); n != 1 {
		t.Errorf("%d claims over the limit looked at once, want 1", n)
	}
	close(held.release)
	wantCode(t, <-first, connect.CodeResourceExhausted)
}
