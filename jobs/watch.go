package jobs

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/store"
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
	// watch with that error.
	Send func(*store.Job) error
}

// Watch sends the job's snapshots as DESIGN.md says for WatchJob: current
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
		return &InvalidError{Field: "after_version", Reason: "must not be negative"}
	}
	sub := e.hub.Subscribe(id)
	defer sub.Close()

	j, err := e.store.GetJob(ctx, id)
	if err != nil {
		return wrap("watch", id, err)
	}
	sent := o.AfterVersion
	if j.Version != o.AfterVersion {
		if err := o.Send(&j); err != nil {
			return err
		}
		sent = j.Version
	}
	if j.State.Terminal() {
		return nil
	}

	deadline, stop := e.timerUntil(o.Deadline)
	defer stop()
	keepalive := newKeepalive(o.Keepalive)
	defer keepalive.stop()
	woken := false
	for {
		latest, version, changed := sub.Latest()
		if version > sent {
			if woken {
				e.woke("watch", latest.UpdatedAt)
			}
			if err := o.Send(&latest); err != nil {
				return err
			}
			sent = version
			keepalive.reset()
			if latest.State.Terminal() {
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
	// ResumeToken from the last batch; "" starts with the PageSize most
	// recent jobs.
	ResumeToken string
	// PageSize: jobs in the first batch and at most per batch after it.
	// 0: DefaultPageSize; more than MaxPageSize is cut to it.
	PageSize  int
	Deadline  time.Time // zero: no limit
	Keepalive time.Duration
	// Send delivers the jobs changed since the last batch and the token
	// to resume after them; an empty batch is a keepalive.
	Send func(jobs []store.Job, resumeToken string) error
}

// tenantOverlap is how far before its cursor each WatchTenant query looks
// again. This engine's own writes never need it (the cursor stays behind
// every write in flight, see inFlight); it is for writes of other
// replicas, announced through Publish, whose clocks and commit delays this
// engine cannot see: any of those that commits within this long of its
// stamp, by a clock within this much of ours, is seen. The cost is
// re-reading (and not re-sending) the jobs changed in that window.
const tenantOverlap = 2 * time.Second

// WatchTenant sends batches of a tenant's changed jobs until the
// deadline or Shutdown (nil error), or ctx's end (ctx.Err()).
//
// It subscribes to the tenant's signal, then queries the store for jobs
// updated since its cursor less tenantOverlap and sends those whose
// version it has not yet sent in this stream. The resume token encodes
// the cursor, so a resumed stream may repeat a job at a version the
// client already has (the client keeps the higher version), but misses
// none. A job deleted by retention is not announced.
func (e *Engine) WatchTenant(ctx context.Context, tenant string, o TenantWatchOptions) error {
	if tenant == "" {
		tenant = DefaultTenant
	}
	if err := validName("tenant", tenant); err != nil {
		return err
	}
	if o.PageSize < 0 {
		return &InvalidError{Field: "page_size", Reason: "must not be negative"}
	}
	size := pageSize(o.PageSize)
	var cursor time.Time
	if o.ResumeToken != "" {
		var err error
		if cursor, err = decodeTenantToken(o.ResumeToken); err != nil {
			return err
		}
		// A token from the future (another replica's clock ran ahead,
		// or the clock was set back) would skip every change stamped
		// before it by this clock: resume from now instead.
		if now := e.writes.horizon(e.now); cursor.After(now) {
			cursor = now
		}
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
	if o.ResumeToken == "" {
		start := e.writes.horizon(e.now)
		jobs, _, err := e.store.ListJobs(ctx, store.ListFilter{Tenant: tenant, Limit: size})
		if err != nil {
			return wrap("watch tenant", "", err)
		}
		cursor = start
		for _, j := range jobs {
			sent[j.ID] = j.Version
		}
		if err := o.Send(jobs, encodeTenantToken(cursor)); err != nil {
			return err
		}
		// The initial page was read after subscribing; only a signal
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
			start := e.writes.horizon(e.now)
			fresh, all, err := e.tenantChanges(ctx, tenant, cursor.Add(-tenantOverlap), sent)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
			token := encodeTenantToken(cursor)
			if start.After(cursor) {
				cursor = start
			}
			sent = all
			if woken && len(fresh) > 0 {
				e.woke("watch", newestUpdate(fresh))
			}
			for len(fresh) > 0 {
				n := min(size, len(fresh))
				// Only the last batch may advance the client's token: until
				// it is sent, a resume must read this window again.
				if n == len(fresh) {
					token = encodeTenantToken(cursor)
				}
				if err := o.Send(fresh[:n], token); err != nil {
					return err
				}
				fresh = fresh[n:]
				keepalive.reset()
			}
		}
		look, woken = false, false
		select {
		case <-changed:
			look, woken = true, true
		case <-keepalive.c():
			if err := o.Send(nil, encodeTenantToken(cursor)); err != nil {
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

// tenantChanges reads every job of tenant updated at or after since and
// returns those with a version not in sent, and the versions of all it
// read (to become the next sent).
func (e *Engine) tenantChanges(ctx context.Context, tenant string, since time.Time, sent map[string]int64) (fresh []store.Job, all map[string]int64, err error) {
	all = map[string]int64{}
	f := store.ListFilter{Tenant: tenant, UpdatedSince: since, Limit: MaxPageSize}
	for {
		jobs, next, err := e.store.ListJobs(ctx, f)
		if err != nil {
			return nil, nil, wrap("watch tenant", "", err)
		}
		for _, j := range jobs {
			if j.Version > sent[j.ID] {
				fresh = append(fresh, j)
			}
			all[j.ID] = max(j.Version, sent[j.ID])
		}
		if next == "" {
			return fresh, all, nil
		}
		f.PageToken = next
	}
}

func newestUpdate(jobs []store.Job) time.Time {
	var t time.Time
	for _, j := range jobs {
		if j.UpdatedAt.After(t) {
			t = j.UpdatedAt
		}
	}
	return t
}

// A tenant resume token is "t1." and the cursor in Unix nanoseconds,
// base 36. The prefix versions the format.
const tenantTokenPrefix = "t1."

func encodeTenantToken(cursor time.Time) string {
	return tenantTokenPrefix + strconv.FormatInt(cursor.UnixNano(), 36)
}

func decodeTenantToken(tok string) (time.Time, error) {
	bad := &InvalidError{Field: "resume_token", Reason: "is not a token this server issued"}
	rest, ok := strings.CutPrefix(tok, tenantTokenPrefix)
	if !ok {
		return time.Time{}, bad
	}
	n, err := strconv.ParseInt(rest, 36, 64)
	if err != nil || n < 0 {
		return time.Time{}, bad
	}
	return time.Unix(0, n).UTC(), nil
}
