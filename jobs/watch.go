package jobs

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
	"github.com/jobwatch/jobwatch/watch"
)

// WatchOptions says how long to watch and where to send snapshots.
type WatchOptions struct {
	// AfterVersion: the first snapshot sent is the current one if its
	// version is above AfterVersion (always when 0), or when AfterVersion
	// is above the current version (a restored database).
	AfterVersion int64
	// Deadline ends the watch (nil error) at the stream lifetime limit:
	// an instant on the monotonic clock, as for Wait. Zero: no limit.
	Deadline time.Time
	// Keepalive: Send(nil) after this long without a snapshot. 0: never.
	Keepalive time.Duration
	// Send delivers a snapshot, or nil for a keepalive. An error ends the
	// watch with that error. A snapshot woken by a publish is the one
	// every waiter and watcher of the job gets (see Snapshot): Send must
	// not modify it.
	Send func(*Snapshot) error
}

// Watch sends the job's snapshots as WatchJob promises: current
// first, then each change, and returns nil right after sending a terminal
// snapshot, at the deadline, or on Shutdown; ctx's end returns ctx.Err().
// ErrNotFound for an unknown job. A PENDING job is watched like any other.
// A job whose terminal version the caller has already seen (AfterVersion
// equal to it) ends the watch at once with nothing sent.
//
// Nothing is queued per watcher: after each Send the watch reads the
// cell's latest value, so a slow Send skips intermediate versions.
func (e *Engine) Watch(ctx context.Context, id string, o WatchOptions) error {
	if err := validID("job_id", id); err != nil {
		return err
	}
	if o.AfterVersion < 0 {
		return &jobtype.InvalidError{Field: "after_version", Reason: "must not be negative"}
	}
	sub := e.hub.Subscribe(id)
	defer sub.Close()

	first, err := e.readSnapshot(ctx, id)
	if err != nil {
		return wrap("watch", id, err)
	}
	if first.Job.Version != o.AfterVersion {
		if err := o.Send(first); err != nil {
			return err
		}
	}
	if first.Job.State.Terminal() {
		return nil
	}
	return e.watchParked(ctx, sub, first.Job.Version, &o)
}

// watchParked sends each snapshot of the cell newer than version sent
// (what was sent, or what the caller has), until a terminal one, the
// deadline, ctx's end or Shutdown.
//
// Its frame holds pointers only, no job, like waitParked's: a watch's
// goroutine sits here between changes, and both this depth and that of
// a Send made from here count against the 8 KiB its stack can stay
// within.
func (e *Engine) watchParked(ctx context.Context, sub *watch.Subscription[*Snapshot], sent int64, o *WatchOptions) error {
	deadline, stop := e.timerUntil(o.Deadline)
	defer stop()
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	woken := false
	for {
		latest, version, changed := sub.Latest()
		if version > sent {
			if latest.Gone {
				// Deleted meanwhile (Delete): nothing more will come.
				return wrap("watch", latest.Job.ID, jobtype.ErrNotFound)
			}
			if woken {
				e.woke("watch", latest.Job.UpdatedAt)
			}
			if err := o.Send(latest); err != nil {
				return err
			}
			sent = version
			keepalive.reset()
			if latest.Job.State.Terminal() {
				return nil
			}
		}
		woken = false
		select {
		case <-changed:
			woken = true
		case <-keepalive.c():
			if err := o.Send(nil); err != nil {
				return err
			}
			keepalive.reset()
		case <-deadline:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			return nil
		}
	}
}

// keepalive fires after d without a reset; with d == 0 it never fires.
type keepalive struct {
	d     time.Duration
	timer *time.Timer
}

func newKeepalive(d time.Duration) *keepalive {
	k := &keepalive{d: d}
	if d > 0 {
		k.timer = time.NewTimer(d)
	}
	return k
}

func (k *keepalive) c() <-chan time.Time {
	if k.timer == nil {
		return nil
	}
	return k.timer.C
}

func (k *keepalive) reset() {
	if k.timer != nil {
		k.timer.Reset(k.d)
	}
}

func (k *keepalive) stop() {
	if k.timer != nil {
		k.timer.Stop()
	}
}

// TenantWatchOptions are WatchOptions for a whole tenant.
type TenantWatchOptions struct {
	// ResumeToken from the last batch that carried one; "" starts with
	// the PageSize most recent jobs.
	ResumeToken string
	// PageSize: how many recent jobs a stream without ResumeToken starts
	// with, and at most how many jobs one batch holds. 0: DefaultPageSize;
	// more than MaxPageSize is cut to it. A batch also holds at most
	// MaxPageBytes of jobs (or one larger job).
	PageSize int
	// Full sends whole jobs; without it, summaries (no Payload or Result).
	Full bool
	// Batch keeps the jobs of that batch (jobtype.Job.Batch) only; "":
	// every job of the tenant. Deletions are sent for the whole tenant
	// (a deletion record does not keep the batch).
	Batch     string
	Deadline  time.Time // zero: no limit
	Keepalive time.Duration
	// Send delivers jobs changed since the last batch, the ids of jobs
	// deleted since then (Delete), and the token to resume after them; an
	// empty batch is a keepalive. The token is "" while the most recent
	// jobs of a stream started without one are still coming, and it stays
	// what the last batch said while a burst of changes takes several
	// batches: a client keeps the last non-empty token.
	Send func(jobs []jobtype.Job, deleted []string, resumeToken string) error
	// SendShared, if set, sends in place of Send a batch of jobs that
	// other streams of the tenant send as well: the same jobs of a page
	// read once for all of them (changeReads), with the same token. memo
	// returns what build returned for the first of them, so that the
	// batch is made ready for the wire once; nobody may modify it, or
	// jobs.
	SendShared func(jobs []jobtype.Job, resumeToken string, memo func(build func() any) any) error
	// StartedOver, if set, is called once, before the first batch, when
	// ResumeToken is set but the stream cannot resume from it (a token
	// later than the database's changes, one another database issued, or
	// one of the earlier format) and starts over with the most recent
	// jobs, as without a token: versions the client holds from before
	// may be higher than the database's now, and jobs it holds may be
	// gone without a deletion to say so.
	StartedOver func()
}

// WatchTenant sends batches of a tenant's changed jobs until the
// deadline or Shutdown (nil error), or ctx's end (ctx.Err()). An empty
// tenant means jobtype.DefaultTenant.
//
// It subscribes to the tenant's signal, then asks the store for the jobs
// changed since its cursor and sends those whose version it has not yet
// sent in this stream. The cursor is the store's (store.ChangeCursor): a
// change sequence stamped in the database, taken before each read, so
// the resume token that carries it means the same on every replica
// sharing the database, and no clock is guessed at. A resumed stream may
// repeat a job at a version the client already has (one whose write was
// in flight as the cursor was taken; the client keeps the higher
// version), and so may a stream when more than rememberedVersions jobs
// changed while it read one window, but none is missed. A job that
// Delete removed is announced by its id (store.JobsDeleted), as long as
// the store keeps the record of its deletion (as long as it keeps
// finished jobs); a job deleted by retention is not announced. A token
// of the earlier, clock-based format ("t1.") starts the stream over, as
// one without a token does, and so does a token later than the
// database's changes or issued by another database (store.CursorAhead);
// such a stream calls StartedOver first, for its client to know.
//
// Every read is a store page of at most PageSize jobs (and MaxPageBytes),
// sent before the next is read, so a stream holds at most one batch of
// jobs however many changed and however large they are: a burst of
// changes wakes every stream of the tenant at once, and each holds what
// it read while its client reads the batch before it.
func (e *Engine) WatchTenant(ctx context.Context, tenant string, o TenantWatchOptions) error {
	switch tenant {
	case "":
		tenant = jobtype.DefaultTenant
	case AllTenants:
		// Every tenant's jobs are a list (List) or a bulk action's, not
		// a feed: a watch follows one tenant's changes.
		return &jobtype.InvalidError{Field: "tenant", Reason: `a watch follows one tenant's jobs: "*" (every tenant) is for ListJobs and the bulk actions; name one tenant`}
	}
	if err := jobtype.CheckName("tenant", tenant); err != nil {
		return err
	}
	if o.PageSize < 0 {
		return &jobtype.InvalidError{Field: "page_size", Reason: "must not be negative"}
	}
	if err := validOptionalName("batch", o.Batch); err != nil {
		return err
	}
	if err := jobtype.CheckLen("resume_token", o.ResumeToken, jobtype.MaxTokenBytes); err != nil {
		return err
	}
	size := pageSize(o.PageSize)
	tok, err := decodeTenantToken(o.ResumeToken)
	if err != nil {
		return err
	}
	cursor := tok.since
	for _, c := range []string{tok.since, tok.end} {
		if c == "" || cursor == "" {
			continue
		}
		// A token later than the database's changes (not issued by it,
		// or issued before it was restored from a backup) would read
		// nothing until the database caught up with it, and one of
		// another database would read what does not follow from it:
		// start over, as without a token.
		ahead, err := e.store.CursorAhead(ctx, c)
		switch {
		case errors.Is(err, jobtype.ErrInvalidPageToken):
			return badTenantToken
		case err != nil:
			return wrap("watch tenant", "", err)
		case ahead:
			cursor = ""
		}
	}
	// A token from within a window (its stream ended part way through
	// it) resumes that window where it stopped: its end cursor, and the
	// page of changed jobs to read next.
	resumeEnd, resumePage := "", ""
	if cursor != "" {
		resumeEnd, resumePage = tok.end, tok.page
	}
	sub := e.signals.Subscribe(tenantSignal(tenant))
	defer sub.Close()

	// sent holds the version sent of every job the last query returned;
	// a job missing from it is older than any later query reaches, unless
	// it changed, so forgetting it cannot cause a repeat.
	sent := map[string]int64{}
	look := true
	// changed is taken again only right before each query: a signal that
	// arrives while the stream sends a keepalive must still cause a look.
	_, _, changed := sub.Latest()
	if cursor == "" {
		if o.ResumeToken != "" && o.StartedOver != nil {
			o.StartedOver()
		}
		if cursor, err = e.store.ChangeCursor(ctx); err != nil {
			return wrap("watch tenant", "", err)
		}
		if err := e.sendRecent(ctx, tenant, size, o, cursor, sent); err != nil {
			return err
		}
		// The recent jobs were read after subscribing; only a signal
		// makes another look worthwhile.
		look = false
	}

	deadline, stop := e.timerUntil(o.Deadline)
	defer stop()
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	woken := false
	for {
		if look {
			_, _, changed = sub.Latest()
			next, from := resumeEnd, resumePage
			if next == "" {
				if next, err = e.store.ChangeCursor(ctx); err != nil {
					return wrap("watch tenant", "", err)
				}
			}
			resumeEnd, resumePage = "", ""
			ended := time.Now() // next is taken: a read that begins now has the window
			first := true
			// Until the last batch is sent a resume reads this window
			// again: only the last batch moves the token on, so that
			// every stream sending a batch sends the same bytes
			// (SendShared). after is where the window's reading stands
			// after the batches sent.
			start, after := encodeTenantToken(tenantToken{since: cursor}), from
			all, err := e.tenantChanges(ctx, tenant, o.Batch, cursor, next, from, ended, sent, o.Full, size,
				func(b tenantBatch, last bool, resume string) error {
					if first && woken && len(b.jobs) > 0 {
						e.woke("watch", newestUpdate(b.jobs))
					}
					first = false
					token := start
					if last {
						token = encodeTenantToken(tenantToken{since: next})
					}
					keepalive.reset()
					if b.memo != nil && o.SendShared != nil {
						err = o.SendShared(b.jobs, token, b.memo)
					} else {
						err = o.Send(b.jobs, b.deleted, token)
					}
					if err != nil || last {
						return err
					}
					after = resume
					select {
					case <-deadline:
						return errWindowLeft
					case <-e.done:
						return errWindowLeft
					default:
						return nil
					}
				})
			switch {
			case errors.Is(err, errWindowLeft):
				// The stream's lifetime or Shutdown, part way through a
				// window: it ends OK, its last message a token that
				// resumes where it stopped (the window's end cursor, and
				// the page after the batches sent), so that a reader
				// slower than the window is not sent its start again at
				// every lifetime.
				return o.Send(nil, nil, encodeTenantToken(tenantToken{since: cursor, end: next, page: after}))
			case err != nil:
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			cursor, sent = next, all
		}
		look, woken = false, false
		select {
		case <-changed:
			look, woken = true, true
		case <-keepalive.c():
			if err := o.Send(nil, nil, encodeTenantToken(tenantToken{since: cursor})); err != nil {
				return err
			}
			keepalive.reset()
		case <-deadline:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-e.done:
			return nil
		}
	}
}

// sendRecent sends the tenant's size most recent jobs, one store page
// (bounded by MaxPageBytes) per batch, and records their versions in
// sent. Only the last batch carries the token of cursor: a client that
// loses the stream before it starts over.
func (e *Engine) sendRecent(ctx context.Context, tenant string, size int, o TenantWatchOptions, cursor string, sent map[string]int64) error {
	f := store.ListFilter{Tenant: tenant, Batch: o.Batch, Limit: size, Full: o.Full, MaxBytes: MaxPageBytes}
	for left := size; ; {
		jobs, next, err := e.store.ListJobs(ctx, f)
		if err != nil {
			return wrap("watch tenant", "", err)
		}
		for _, j := range jobs {
			sent[j.ID] = j.Version
		}
		left -= len(jobs)
		token := ""
		if next == "" || left <= 0 {
			token = encodeTenantToken(tenantToken{since: cursor})
		}
		if err := o.Send(jobs, nil, token); err != nil || token != "" {
			return err
		}
		f.PageToken, f.Limit = next, left
	}
}

// rememberedVersions is how many of the jobs it last read a tenant's
// stream remembers the versions of, to send none of them again: one
// window's jobs changed after the cursor the next window starts at are
// its last in change order, and fewer than this unless more changed
// while it was read. Remembering every job of a window (4,000 after a
// few SubmitJobs, 100,000 after more) cost each of a tenant's many
// streams a map as large.
const rememberedVersions = 2 * MaxPageSize

type jobVersion struct {
	id      string
	version int64
}

// A tenantBatch is what one Send of WatchTenant carries; memo, when not
// nil, is shared by every stream that sends the same batch (SendShared).
type tenantBatch struct {
	jobs    []jobtype.Job
	deleted []string
	memo    func(build func() any) any
}

// tenantChanges pages through the ids of tenant's jobs deleted after
// since and every job of tenant (of batch, if not "") changed after
// since (from the page token from on, when not "": a window resumed part
// way), in reads that began after the window's end cursor end was taken
// (at ended; reads shared with the streams reading the same pages:
// changeReads), and passes the ids and the jobs with a version not in
// sent to send, in batches of at most
// size ids or jobs (a batch of jobs also at most MaxPageBytes), reading
// the jobs a page of size at a time and sending each page's before the
// next is read. last is true for the batch that ends the window; when
// the window's last page brings nothing new after batches of jobs were
// sent, an empty batch ends it, so that send always learns the end of a
// window it sent anything of; resume is the page token to read the
// window's changed jobs from after that batch ("" from their first page).
// It returns the versions of the last rememberedVersions jobs it read (to
// become the next sent).
func (e *Engine) tenantChanges(ctx context.Context, tenant, batch, since, end, from string, ended time.Time, sent map[string]int64, full bool, size int,
	send func(b tenantBatch, last bool, resume string) error) (map[string]int64, error) {
	// A store refuses a cursor it did not issue as an invalid page token,
	// and so a page token from (the caller's resume token's) it did not.
	bad := func(err error, pageToken string) error {
		if errors.Is(err, jobtype.ErrInvalidPageToken) && (pageToken == "" || pageToken == from) {
			return badTenantToken
		}
		return wrap("watch tenant", "", err)
	}
	open := false // batches were sent and none ended the window
	// The last batch of deleted ids waits to learn whether it ends the
	// window (ids are small; a page of jobs is not held back so).
	var deleted []string
	flush := func() error {
		if deleted == nil {
			return nil
		}
		err := send(tenantBatch{deleted: deleted}, false, from)
		deleted, open = nil, true
		return err
	}

	d := store.DeletedFilter{Tenant: tenant, Batch: batch, Since: since, Limit: size}
	for {
		ids, next, err := e.deletedJobs(ctx, d, ended)
		if err != nil {
			return nil, bad(err, d.PageToken)
		}
		if len(ids) > 0 {
			if err := flush(); err != nil {
				return nil, err
			}
			deleted = ids
		}
		if next == "" {
			break
		}
		d.PageToken = next
	}

	// The versions of the last jobs read, in change order: the next
	// window starts at the cursor taken before this one was read, so it
	// may hold again the jobs that changed while this one was read, and
	// those come last in change order.
	tail := make([]jobVersion, 0, min(rememberedVersions, MaxPageSize))
	at := 0 // where the next job read goes once tail is full
	f := store.ListFilter{Tenant: tenant, Batch: batch, ChangedSince: since, PageToken: from, Limit: size, Full: full, MaxBytes: MaxPageBytes}
	for {
		page, err := e.changedJobs(ctx, f, ended)
		if err != nil {
			return nil, bad(err, f.PageToken)
		}
		jobs, next := page.jobs, page.next
		fresh := unsent(jobs, sent)
		// A page sent whole sends the batches every stream with the
		// same window sends: their wire form can be shared.
		whole := len(fresh) == len(jobs)
		for _, j := range jobs {
			v := jobVersion{j.ID, max(j.Version, sent[j.ID])}
			if len(tail) < rememberedVersions {
				tail = append(tail, v)
			} else {
				tail[at], at = v, (at+1)%rememberedVersions
			}
		}
		if len(fresh) > 0 {
			err = flush()
		}
		for at := 0; at < len(fresh) && err == nil; {
			n := min(size, len(fresh)-at)
			last := next == "" && at+n == len(fresh)
			// After the page's last batch a resume reads the next page;
			// after another, this page again.
			resume := f.PageToken
			if at+n == len(fresh) {
				resume = next
			}
			b := tenantBatch{jobs: fresh[at : at+n]}
			if whole {
				span := batchSpan{at: at, n: n}
				if last {
					span.end = end
				}
				b.memo = page.memo(span)
			}
			err = send(b, last, resume)
			open = !last
			at += n
		}
		if err != nil {
			return nil, err
		}
		if next == "" {
			switch {
			case deleted != nil:
				err = send(tenantBatch{deleted: deleted}, true, "")
			case open:
				err = send(tenantBatch{}, true, "")
			}
			if err != nil {
				return nil, err
			}
			all := make(map[string]int64, len(tail))
			for _, v := range tail {
				all[v.id] = max(all[v.id], v.version)
			}
			return all, nil
		}
		f.PageToken = next
	}
}

// unsent returns the jobs of page with a version not in sent: page
// itself when that is all of them (the page is shared with other streams,
// and is not written to), or a copy of those.
func unsent(page []jobtype.Job, sent map[string]int64) []jobtype.Job {
	for i, j := range page {
		if j.Version > sent[j.ID] {
			continue
		}
		fresh := append(make([]jobtype.Job, 0, len(page)-1), page[:i]...)
		for _, j := range page[i+1:] {
			if j.Version > sent[j.ID] {
				fresh = append(fresh, j)
			}
		}
		return fresh
	}
	return page
}

func newestUpdate(jobs []jobtype.Job) time.Time {
	var t time.Time
	for _, j := range jobs {
		if j.UpdatedAt.After(t) {
			t = j.UpdatedAt
		}
	}
	return t
}

// A tenant resume token is "t2." and the store's change cursor: the
// window that starts there. One given part way through a window is "t3."
// and the window's start cursor, its end cursor and the page token of its
// changed jobs to read next, joined by "~" (which neither holds). The
// prefix versions the format: "t1." tokens held a time, which no longer
// means anything to the store.
const (
	tenantTokenPrefix    = "t2."
	midTenantTokenPrefix = "t3."
	oldTenantTokenPrefix = "t1."
)

// tenantToken is what a tenant resume token holds: since alone, or a
// window part read (end, and page when not from its first page).
type tenantToken struct {
	since, end, page string
}

func encodeTenantToken(t tenantToken) string {
	if t.end == "" {
		return tenantTokenPrefix + t.since
	}
	return midTenantTokenPrefix + t.since + "~" + t.end + "~" + t.page
}

// decodeTenantToken returns what tok holds: nothing for no token or one
// of the old format (start over).
func decodeTenantToken(tok string) (tenantToken, error) {
	if tok == "" || strings.HasPrefix(tok, oldTenantTokenPrefix) {
		return tenantToken{}, nil
	}
	if mid, ok := strings.CutPrefix(tok, midTenantTokenPrefix); ok {
		parts := strings.Split(mid, "~")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
			return tenantToken{}, badTenantToken
		}
		return tenantToken{since: parts[0], end: parts[1], page: parts[2]}, nil
	}
	cursor, ok := strings.CutPrefix(tok, tenantTokenPrefix)
	if !ok || cursor == "" {
		return tenantToken{}, badTenantToken
	}
	return tenantToken{since: cursor}, nil
}

// errWindowLeft ends tenantChanges when the stream's lifetime or
// Shutdown comes part way through a window.
var errWindowLeft = errors.New("the stream ended part way through a window")

var badTenantToken = &jobtype.InvalidError{Field: "resume_token", Reason: "is not a token this server issued"}
