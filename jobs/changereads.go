package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// changeReads shares the store reads of WatchTenant's windows among a
// tenant's streams. A burst of changes wakes every stream of the tenant
// at once, and streams that took the same cursors read the same pages:
// 500 streams and 4,000 changed jobs were 54,000 reads of 50 jobs
// (BenchmarkWatchTenantBurst), and 2,500 streams over the wire took the
// server four minutes and 300 s of CPU (docs/BENCHMARKS.md). Now a page is
// read once for every stream that asks for it while it is read or within
// changeReadLinger after, and each stream filters it by what it has sent
// itself.
//
// A stream joins only a read that began after it took its window's end
// cursor (store.ChangeCursor), and so after it took its signal (a change
// committed before then woke it, or it would not be looking, and one
// committed after signals it again): the read has every change the
// stream looks for, and maybe changes after its end cursor, which the
// next window reads again and which the stream sends once (it keeps the
// higher version). A read that began earlier is not joined even when its
// stream took the same cursor: on PostgreSQL a cursor holds the oldest
// transaction in flight, and a younger one may commit, and signal, with
// the cursor unchanged.
type changeReads struct {
	mu    sync.Mutex
	pages map[changeKey]*changePage
	// kept is the size of the pages kept after their read
	// (changeReadLinger), at most maxKeptChangeBytes.
	kept int
}

// changeKey is what a page of a window depends on, besides its end.
type changeKey struct {
	tenant, batch      string
	since, page        string
	limit, maxBytes    int
	full, deletedPages bool
}

// A changePage is one read: ready closes once jobs (or deleted), next
// and err are set, and nothing changes them after.
type changePage struct {
	began   time.Time // before the read asked the store
	ready   chan struct{}
	jobs    []jobtype.Job
	deleted []string
	next    string
	err     error

	// memos are what TenantWatchOptions.SendShared built for the batches
	// of jobs sent of this page.
	mu    sync.Mutex
	memos map[batchSpan]*batchMemo
}

// batchSpan is a batch of a page's jobs sent as they are: where it
// starts, how many, and the window's end cursor if it ends the window
// (its token; the others carry the start's, which the page's key holds).
type batchSpan struct {
	at, n int
	end   string
}

type batchMemo struct {
	once sync.Once
	v    any
}

// memo returns the memo function of the batch span of p, for SendShared.
func (p *changePage) memo(span batchSpan) func(build func() any) any {
	p.mu.Lock()
	m, ok := p.memos[span]
	if !ok {
		if p.memos == nil {
			p.memos = map[batchSpan]*batchMemo{}
		}
		m = &batchMemo{}
		p.memos[span] = m
	}
	p.mu.Unlock()
	return func(build func() any) any {
		m.once.Do(func() { m.v = build() })
		return m.v
	}
}

// changeReadLinger is how long a page read stays shared after it ends:
// the streams of one burst drift apart as their clients read at their
// own pace. maxKeptChangeBytes bounds the size of the pages so kept
// (jobtype.Job.Size; a page is at most MaxPageBytes, a summary a few
// hundred bytes a job), and with them the wire form of their batches:
// past it a page is shared only while it is read.
const (
	changeReadLinger   = 2 * time.Second
	maxKeptChangeBytes = 32 << 20
)

// read returns the page of k for a window whose end cursor was taken at
// ended, reading it with load unless a read of it that began after ended
// is under way or ended less than changeReadLinger ago. The read does not
// end with ctx: other streams may be waiting for it.
func (r *changeReads) read(ctx context.Context, k changeKey, ended time.Time, load func(context.Context, *changePage) error) (*changePage, error) {
	r.mu.Lock()
	p, ok := r.pages[k]
	if ok = ok && p.began.After(ended); !ok {
		if r.pages == nil {
			r.pages = map[changeKey]*changePage{}
		}
		p = &changePage{began: time.Now(), ready: make(chan struct{})}
		r.pages[k] = p // an earlier read of k goes on for its streams
	}
	r.mu.Unlock()
	if !ok {
		r.load(ctx, k, p, load)
	}
	select {
	case <-p.ready:
		return p, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// load reads p with load, which sets its jobs (or deleted) and next, and
// keeps it for changeReadLinger if it read well and there is room.
func (r *changeReads) load(ctx context.Context, k changeKey, p *changePage, load func(context.Context, *changePage) error) {
	err := load(context.WithoutCancel(ctx), p)
	p.err = err
	close(p.ready)

	size := 0
	for i := range p.jobs {
		size += p.jobs[i].Size()
	}
	for _, id := range p.deleted {
		size += len(id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || r.kept+size > maxKeptChangeBytes {
		r.forget(k, p)
		return
	}
	r.kept += size
	time.AfterFunc(changeReadLinger, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.kept -= size
		r.forget(k, p)
	})
}

// forget removes p, the page of k, from the shared pages; r.mu is held.
func (r *changeReads) forget(k changeKey, p *changePage) {
	if r.pages[k] == p {
		delete(r.pages, k)
	}
}

// SharedChangeBytes is the size of the changed jobs (and deleted ids)
// that WatchJobs reads keep for other streams to share after the read,
// each page for changeReadLinger: at most 32 MiB, and 0 a couple of
// seconds after the last burst of changes.
func (e *Engine) SharedChangeBytes() int {
	e.changeReads.mu.Lock()
	defer e.changeReads.mu.Unlock()
	return e.changeReads.kept
}

// changedJobs reads a page of the jobs of f changed after f.ChangedSince,
// in a read that began after the window's end cursor was taken (at
// ended), shared with the streams reading the same page.
func (e *Engine) changedJobs(ctx context.Context, f store.ListFilter, ended time.Time) (*changePage, error) {
	k := changeKey{tenant: f.Tenant, batch: f.Batch, since: f.ChangedSince, page: f.PageToken, limit: f.Limit, maxBytes: f.MaxBytes, full: f.Full}
	return e.changeReads.read(ctx, k, ended, func(ctx context.Context, p *changePage) (err error) {
		p.jobs, p.next, err = e.store.ListJobs(ctx, f)
		return err
	})
}

// deletedJobs reads a page of the ids of jobs deleted after d.Since,
// shared as changedJobs is.
func (e *Engine) deletedJobs(ctx context.Context, d store.DeletedFilter, ended time.Time) ([]string, string, error) {
	k := changeKey{tenant: d.Tenant, batch: d.Batch, since: d.Since, page: d.PageToken, limit: d.Limit, deletedPages: true}
	p, err := e.changeReads.read(ctx, k, ended, func(ctx context.Context, p *changePage) (err error) {
		p.deleted, p.next, err = e.store.JobsDeleted(ctx, d)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return p.deleted, p.next, nil
}
