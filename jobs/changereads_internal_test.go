package jobs

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// A page is read once for the streams that ask for it while it is read
// and soon after, if it began after they took their cursors; a read that
// failed is not kept, and a stream that leaves does not end the read for
// the others.
func TestChangeReadsShareAPageAndKeepNoFailure(t *testing.T) {
	var r changeReads
	k := changeKey{tenant: "acme", since: "c1", limit: 50}
	cursorTaken := time.Now()
	loads := 0
	release := make(chan struct{})
	load := func(ctx context.Context, p *changePage) error {
		loads++
		<-release
		if err := ctx.Err(); err != nil {
			t.Errorf("the read's context ended with a stream's: %v", err)
		}
		p.jobs, p.next = []jobtype.Job{{ID: "j1", Version: 2}}, "n"
		return nil
	}

	leaving, leave := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	pages := make([]*changePage, 3)
	for i := range pages {
		ctx := context.Background()
		if i == 0 {
			ctx = leaving // the stream that reads it leaves while it is read
		}
		wg.Go(func() {
			p, err := r.read(ctx, k, cursorTaken, load)
			if i == 0 {
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("the stream that left got %v, want the page or its context's end", err)
				}
				return
			}
			if err != nil {
				t.Error(err)
			}
			pages[i] = p
		})
	}
	waitForWaiters(t, &r, k)
	leave()
	close(release)
	wg.Wait()
	if pages[1] == nil || pages[1] != pages[2] || len(pages[1].jobs) != 1 || pages[1].next != "n" {
		t.Fatalf("pages = %v, %v; want one page read for both", pages[1], pages[2])
	}
	again, err := r.read(context.Background(), k, cursorTaken, load)
	if err != nil || again != pages[1] {
		t.Errorf("a read soon after got %p, %v; want the page read before", again, err)
	}
	// One that took its cursor after the read began reads again, even
	// the same cursor: a change may have committed, and signalled, since.
	if p, _ := r.read(context.Background(), k, time.Now(), load); p == pages[1] {
		t.Error("a window whose cursor was taken after the read began got its page")
	}
	if loads != 2 {
		t.Errorf("%d reads of the store; want 2 (one per window)", loads)
	}

	failed := changeKey{tenant: "acme", since: "c9"}
	broken := errors.New("disk on fire")
	for range 2 {
		if _, err := r.read(context.Background(), failed, cursorTaken, func(context.Context, *changePage) error { loads++; return broken }); !errors.Is(err, broken) {
			t.Fatalf("got %v, want the read's error", err)
		}
	}
	if loads != 4 {
		t.Errorf("a failed read was kept: %d reads of the store, want 4", loads)
	}
}

// waitForWaiters returns once k is being read (its page is in r, not yet
// ready): the streams that ask for it after then wait for that read.
func waitForWaiters(t *testing.T, r *changeReads, k changeKey) {
	t.Helper()
	for {
		r.mu.Lock()
		_, ok := r.pages[k]
		r.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// A page's jobs are passed on as they are when none was sent before, and
// otherwise copied: the page is shared, and filtering it in place would
// change what other streams read.
func TestUnsentLeavesTheSharedPageAlone(t *testing.T) {
	page := []jobtype.Job{{ID: "a", Version: 2}, {ID: "b", Version: 5}, {ID: "c", Version: 1}}
	if got := unsent(page, map[string]int64{"a": 1}); &got[0] != &page[0] || len(got) != 3 {
		t.Errorf("unsent of an all-new page = %v, want the page itself", got)
	}
	got := unsent(page, map[string]int64{"b": 5})
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Errorf("unsent = %v, want a and c", got)
	}
	if page[1].ID != "b" || page[2].ID != "c" {
		t.Errorf("the page became %v", page)
	}
}
