package jobs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Changes this engine did not make itself (another replica's, on a
// shared PostgreSQL database) reach it through the store's listener
// (store.Store.Listen), and are published as its own are: a waiter
// parked here wakes when a worker on another replica completes its job.
//
// A change the store marks Local was made through this engine, which
// published it right after the commit, so it is passed over. For any
// other, the engine reads the job only if someone here waits on it or
// watches it (the hub has a subscriber below the change's version); a
// tenant's feeds are told to look again (they read the store
// themselves); and the claimers it may give work or room to are woken
// from what the change says (tenant, kind, queue, state, RunAt), with no
// read. A job queued ready elsewhere wakes a claimer here only if no
// claimer there took it within claimWakeDelay (holdClaimWake), so that
// each new job does not wake a claimer on every replica.
//
// When the store says it may have missed changes (its connection to the
// database was lost and is back), the engine reads again every job with
// a subscriber, tells every feed to look again, reloads the jobs due
// later and wakes every claimer: nothing that changed during the gap
// stays unannounced.

// startListening begins hearing the store's changes; Shutdown stops it.
// A store that cannot listen yet (the database is down at start) is
// asked again every listenRetry, and the first success counts as a gap.
func (e *Engine) startListening() {
	ctx, cancel := context.WithCancel(context.Background())
	e.stopListening = cancel
	e.listenCtx = ctx
	if err := e.store.Listen(ctx, e.heard); err != nil {
		e.log.Warn("cannot hear other replicas' changes yet; trying again", "err", err)
		go e.listenLater(ctx)
	}
}

const listenRetry = time.Second

func (e *Engine) listenLater(ctx context.Context) {
	t := time.NewTicker(listenRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := e.store.Listen(ctx, e.heard); err == nil {
			e.log.Info("hearing other replicas' changes")
			e.heard(nil, true)
			return
		}
	}
}

// heard is the store's listener callback.
func (e *Engine) heard(changes []store.Change, missed bool) {
	ctx := e.listenCtx
	if missed {
		e.resync(ctx)
	}
	latest := latestChanges(changes)
	read := e.readHeard(ctx, changes, latest)
	defer e.hearing.begin()()
	for i, c := range changes {
		if c.QueueChange {
			e.heardQueueChange(c) // pause.go
			continue
		}
		if c.LogChange {
			if !c.Local {
				e.heardLogChange(c) // logs.go
			}
			continue
		}
		if c.StopClaiming {
			if !c.Local {
				e.stopClaimingHere(stopper{c.Worker, c.Caller}) // claimers.go
			}
			continue
		}
		// A change made through this engine's store was published when
		// it committed, but for those the store made on its own beside
		// it (Released: a job's dependencies ended). It supersedes a wake
		// held for an older change of its job: the store's catch-up can
		// list this engine's own change (a job queued here) before its
		// notification comes, as another replica's, and a claimer here
		// that took the job meanwhile must not leave a second one woken
		// to find nothing.
		if c.Local && !c.Released {
			e.supersedeClaimWake(c.JobID, c.Version)
			continue
		}
		if latest != nil && latest[c.JobID] != i {
			continue
		}
		j := jobtype.Job{ID: c.JobID, Tenant: c.Tenant, Kind: c.Kind, Queue: c.Queue,
			State: c.State, Version: c.Version, RunAt: c.RunAt}
		if full, asked := read[c.JobID]; asked {
			if full != nil {
				j = *full
				e.hub.Publish(j.ID, j.Version, &Snapshot{Job: j, shared: true})
			} else {
				// Deleted (another replica's Delete announces the
				// deletion at the version past the job's last): its
				// waiters and watchers end with not found.
				e.hub.Publish(j.ID, j.Version, &Snapshot{Job: j, shared: true, Gone: true})
			}
		}
		e.signals.Publish(tenantSignal(c.Tenant), e.signalSeq.Add(1), struct{}{})
		if c.Local {
			// Released here: no claimer of another replica is nearer.
			e.wakeClaimers(j)
			continue
		}
		e.holdClaimWake(j)
	}
}

// readHeard reads, in one store read, the jobs of changes (the latest
// change of each, as latest says) that have a subscriber here below the
// change's version, and returns each by id: nil for one the read did not
// find (deleted). A burst of another replica's commits (a thousand jobs
// cancelled, each waited on by a WaitJobs here) is so one read, not a
// read each on the listener's goroutine, behind which every other
// change of the burst would wait. A read that fails is logged at debug
// and returns nothing: the feeds and claimers still hear of the changes,
// and a waiter reads its job again at its cap. A subscriber that came
// after the read read the job itself, after subscribing.
func (e *Engine) readHeard(ctx context.Context, changes []store.Change, latest map[string]int) map[string]*jobtype.Job {
	var ids []string
	for i, c := range changes {
		if c.QueueChange || c.LogChange || c.StopClaiming || c.Local && !c.Released || latest != nil && latest[c.JobID] != i {
			continue
		}
		if v, subscribed := e.hub.Version(c.JobID); subscribed && v < c.Version {
			ids = append(ids, c.JobID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	jobs, err := e.store.ReadJobs(ctx, ids, store.JobRead{})
	if err != nil {
		e.log.Debug("read the jobs another replica changed", "jobs", len(ids), "err", err)
		return nil
	}
	read := make(map[string]*jobtype.Job, len(ids))
	for _, id := range ids {
		read[id] = nil
	}
	for i := range jobs {
		read[jobs[i].ID] = &jobs[i]
	}
	return read
}

// claimWakeDelay is how long a job another replica queued waits before
// it wakes a claimer here: long enough for a claimer of that replica,
// if it has one parked, to take it (a claim and its notification take a
// few milliseconds), so that a job does not wake a claimer on every
// replica of which all but one then find nothing. A claimer of another
// replica takes a job queued where no claimer waits this much later.
const claimWakeDelay = 20 * time.Millisecond

// heldWakes are the jobs other replicas queued, ready, held for
// claimWakeDelay (holdClaimWake).
type heldWakes struct {
	mu sync.Mutex
	// delay replaces claimWakeDelay when positive (tests on a busy
	// machine, where a claim's notice may take longer than 20ms).
	delay time.Duration
	jobs  map[string]jobtype.Job
	armed bool
}

// holdClaimWake tells the claimers of another replica's change j: at
// once, unless j is a job queued and ready, which is held for
// claimWakeDelay and dropped if a later change (claimed there) comes
// first. Claim wake-ups from other replicas are so coalesced per job.
func (e *Engine) holdClaimWake(j jobtype.Job) {
	h := &e.heldWakes
	ready := j.State == jobtype.Queued && !j.RunAt.After(e.now())
	h.mu.Lock()
	if !ready {
		delete(h.jobs, j.ID)
		h.mu.Unlock()
		e.wakeClaimers(j)
		return
	}
	if h.jobs == nil {
		h.jobs = map[string]jobtype.Job{}
	}
	h.jobs[j.ID] = j
	arm := !h.armed
	h.armed = true
	delay := claimWakeDelay
	if h.delay > 0 {
		delay = h.delay
	}
	h.mu.Unlock()
	if arm {
		time.AfterFunc(delay, e.releaseClaimWakes)
	}
}

// supersedeClaimWake drops the wake held for job id, if it is for a
// version older than version.
func (e *Engine) supersedeClaimWake(id string, version int64) {
	h := &e.heldWakes
	h.mu.Lock()
	if j, ok := h.jobs[id]; ok && j.Version < version {
		delete(h.jobs, id)
	}
	h.mu.Unlock()
}

// releaseClaimWakes wakes the claimers of every job held.
func (e *Engine) releaseClaimWakes() {
	h := &e.heldWakes
	h.mu.Lock()
	jobs := h.jobs
	h.jobs, h.armed = nil, false
	h.mu.Unlock()
	for _, j := range jobs {
		e.wakeClaimers(j)
	}
}

// latestChanges returns, for a batch holding several changes of one job,
// the index of each job's latest change, so that a burst of changes is
// handled once per job: a job queued and claimed elsewhere within one
// batch wakes no claimer here. nil when no job appears twice.
func latestChanges(changes []store.Change) map[string]int {
	if len(changes) < 2 {
		return nil
	}
	latest := make(map[string]int, len(changes))
	for i, c := range changes {
		if c.LogChange || c.QueueChange || c.StopClaiming {
			continue // no job's version
		}
		if j, ok := latest[c.JobID]; !ok || c.Version >= changes[j].Version {
			latest[c.JobID] = i
		}
	}
	if len(latest) == len(changes) {
		return nil
	}
	return latest
}

// resync announces whatever may have changed while the listener was deaf.
func (e *Engine) resync(ctx context.Context) {
	for _, id := range e.hub.Keys() {
		if j, err := e.store.GetJob(ctx, id); err == nil {
			e.hub.Publish(j.ID, j.Version, &Snapshot{Job: j, shared: true})
		}
	}
	for _, key := range e.signals.Keys() {
		e.signals.Publish(key, e.signalSeq.Add(1), struct{}{})
	}
	for _, id := range e.logs.Keys() {
		e.logs.Publish(id, e.signalSeq.Add(1), nil)
	}
	cs := &e.claimers
	cs.mu.Lock()
	cs.loaded = false
	cs.mu.Unlock()
	e.loadScheduled(ctx)
	e.wakeAllClaimers()
}

// storeClock is the database's clock as this machine reads it: this
// machine's clock plus an offset measured against store.Store.Now, at
// start and every clockSync. Replicas sharing a database then stamp and
// compare times (leases, RunAt, retention, UpdatedAt) on one clock
// without a round trip per reading.
//
// A reading of the database's clock lands somewhere within the round
// trip that fetched it, so an offset is known only to within half that
// round trip. Of clockSamples readings the one with the shortest round
// trip is kept, and an offset no larger than its half round trip is
// taken as none: it cannot be told from zero. So a database on this
// machine, or one whose clock agrees with it, never shifts this clock;
// had it, a replica that happened to measure a slow round trip would
// have stamped times a few milliseconds off its neighbours', enough to
// reorder jobs submitted one after another to different replicas.
type storeClock struct {
	st     store.Store
	offset atomic.Int64 // nanoseconds to add to time.Now
}

const (
	clockSync    = 30 * time.Second
	clockSamples = 3
)

func (c *storeClock) now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// sync measures the offset again; on error the last one stays.
func (c *storeClock) sync(ctx context.Context) error {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range clockSamples {
		before := time.Now()
		db, err := c.st.Now(ctx)
		if err != nil {
			return err
		}
		rtt := time.Since(before)
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = db.Sub(before.Add(rtt/2)), rtt
		}
	}
	if best.Abs() <= bestRTT/2 {
		best = 0
	}
	c.offset.Store(int64(best))
	return nil
}

// hearing is the batches of heard changes being published one job at a
// time: a commit that ended many jobs at once (a failure's cascade to
// the jobs after it, another replica's bulk of changes) reaches the hub
// as a loop of publishes, and a WaitMany of ANY of them wakes at the
// first. It looks again once the batches in flight when it woke are out
// (settled), so that its answer lists every job the commit ended, not the
// few published before it looked.
type hearing struct {
	mu       sync.Mutex
	inFlight map[chan struct{}]struct{}
}

// begin marks a batch in flight, until the function it returns is called.
func (h *hearing) begin() (end func()) {
	done := make(chan struct{})
	h.mu.Lock()
	if h.inFlight == nil {
		h.inFlight = map[chan struct{}]struct{}{}
	}
	h.inFlight[done] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.inFlight, done)
		h.mu.Unlock()
		close(done)
	}
}

// settled waits until the batches in flight now are out, or ctx ends.
func (h *hearing) settled(ctx context.Context) {
	h.mu.Lock()
	var batches []chan struct{}
	for done := range h.inFlight {
		batches = append(batches, done)
	}
	h.mu.Unlock()
	for _, done := range batches {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}
