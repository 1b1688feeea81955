package jobs

import (
	"container/heap"
	"container/list"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// The registry of parked claims: whom each change wakes.
//
// A Claim registers itself (its tenants, kinds and queues) before its
// first look and stays registered until it returns, so a job committed
// after the registration is either seen by a look or wakes the claimer:
// none is lost between a look and a park. Each claimer counts the wakes
// it was given (gen); it parks only if none came since its last look
// began, else it looks again.
//
// Whom a change wakes:
//
//   - A job committed QUEUED and ready now wakes one claimer whose
//     filter (tenants, kinds, queues) takes it, never one limited to
//     other tenants: the first parked one in registration order. That
//     claimer owes the job an answer: if it claims another job or
//     returns without one (its caller went away, its deadline passed,
//     the store failed), the wake passes to the next claimer. A look
//     that finds nothing ready answers it: the job was taken by another
//     look, or its queue has no room.
//     When none is parked, every claimer that is looking and takes the
//     job looks once more (its look may have begun before the commit),
//     and none owes it: each either looks again after the commit or
//     returns with a job, and a claimer that parks later has looked
//     since the commit. So a busy engine, whose claimers are all
//     looking, keeps no list of the jobs behind them: handing such a
//     list from claimer to claimer cost every claim the length of the
//     backlog.
//   - A job committed QUEUED with a future RunAt (scheduled, or backing
//     off before a retry) wakes nobody. The engine keeps it, by RunAt,
//     under one timer for the whole engine, which at RunAt wakes one
//     claimer for it as if it had just been queued: no claimer polls,
//     and 50 parked claimers do not all wake for one due job.
//   - A job that ends, or is QUEUED again after it ran, in a queue with
//     limits (serial, max_running, max_running_per_tenant, pools, rate)
//     frees room in the queue and in every queue sharing a pool with
//     it: every claimer that may take from those queues, whatever its
//     tenants and kinds, is woken (a broadcast: which of them has a job
//     behind the limit is known only to the store). One blocked by the
//     limits again finds nothing and parks. The snapshot does not say
//     whether a QUEUED job ran before, so any QUEUED snapshot after the
//     first version of a job in such a queue counts as freeing room.
//   - Such a job of a tenant with a bound on its running jobs
//     (TenantRules.MaxRunning) frees room for that tenant in every
//     queue: every claimer that may take the tenant's jobs, whatever its
//     kinds and queues, is woken too (one broadcast with the one above,
//     so no claimer is woken twice for one change). It comes from
//     whichever replica ran the job (listen.go), so a claim parked
//     behind the bound here learns of a job of the tenant ending on
//     another replica without polling. A job of such a tenant that is
//     queued and ready wakes one claimer as in a queue without limits,
//     but, as in a queue with limits, that claimer reads before it
//     writes: the bound may hold the job back.
//   - SetRules wakes every claimer: the limits changed.
//
// The jobs queued to run later before the engine started are read from
// the store once, by the first Claim (store.ScheduledJobs), and kept like
// those committed since. Beyond maxScheduled such jobs, or should one
// escape the engine's notice, the claimers' own looks find them: each
// look reports the earliest RunAt its claimer could claim, and at that
// time one claimer of each filter is woken, unless a kept job due then
// has its own wake; if it claims, the wake passes to the next claimer of
// the filter, because the store said when, not how many. After an
// overflow no kept job is taken to stand for the store's answer.
type claimers struct {
	mu    sync.Mutex
	fifo  list.List // of *claimer, in registration order
	wakes int64     // wakes given, for tests

	// loaded: the store's scheduled jobs have been read. While loading,
	// seen holds the version of every job published meanwhile, so that
	// the read does not bring back a job that has changed since.
	loaded, loading bool
	seen            map[string]int64
	// overflowed: some scheduled job was not kept (maxScheduled).
	overflowed bool
	// max replaces maxScheduled when positive (tests).
	max int

	// scheduled holds the RunAt of each job this engine saw committed
	// QUEUED with a future RunAt, by id; byRunAt orders them, with stale
	// entries (the job changed since) skipped when they come due.
	scheduled map[string]scheduledJob
	byRunAt   dueJobs
	timer     *time.Timer
	timerAt   time.Time // when timer fires; zero: not set

	// stopping holds the workers that asked to stop claiming
	// (StopClaiming), with when they asked: their claims answer at once
	// for stopClaimingFor after.
	stopping map[stopper]time.Time
}

// stopper names whose claims a StopClaiming reaches: a worker's, sent by
// one caller (ClaimRequest.Caller).
type stopper struct{ worker, caller string }

// scheduledJob is a job that was QUEUED with a future RunAt: its wake,
// that RunAt and the version that said so. A snapshot older than version,
// published late (another replica's), does not unschedule it.
type scheduledJob struct {
	dueJob
	version int64
}

// maxScheduled bounds the jobs kept under the timer. Beyond it a
// scheduled job's RunAt is given to the claimers that may take it as if
// their look had reported it: no job is forgotten, but when it comes due
// one claimer of each filter wakes instead of one in all.
const maxScheduled = 100_000

func (cs *claimers) limit() int {
	if cs.max > 0 {
		return cs.max
	}
	return maxScheduled
}

// claimer is one registered Claim.
type claimer struct {
	tenants, kinds, queues []string
	// key: tenants, kinds and queues sorted; claimers with one key see
	// the same jobs.
	key  string
	elem *list.Element
	wake chan struct{} // capacity 1: look again

	by      stopper // the worker that claims and who sent it
	stopped bool    // its worker asked to stop claiming: answer now

	parked   bool        // parked since its last look, and not woken since
	gen      uint64      // wakes given to it
	owed     []claimWake // wakes it must answer, or pass on when it returns
	byChange bool        // a wake followed a commit (for the woke metric)
	due      time.Time   // earliest RunAt its last look reported; zero: none
}

// claimWake is a reason to look: a job that is ready (jobID), or a time
// that came due for the claimers of one filter (due, key).
type claimWake struct {
	jobID, tenant, kind, queue string
	due                        bool
	key                        string
}

func newClaimer(r ClaimRequest) *claimer {
	// Names never hold "," or "|" (jobtype.NameReason), so the key is unambiguous.
	part := func(names []string) string {
		names = slices.Clone(names)
		slices.Sort(names)
		return strings.Join(slices.Compact(names), ",")
	}
	return &claimer{
		by:      stopper{r.WorkerID, r.Caller},
		tenants: r.Tenants,
		kinds:   r.Kinds,
		queues:  r.Queues,
		key:     part(r.Tenants) + "|" + part(r.Kinds) + "|" + part(r.Queues),
		wake:    make(chan struct{}, 1),
	}
}

// takes reports whether c may claim a job of tenant and kind in queue.
func (c *claimer) takes(tenant, kind, queue string) bool {
	return (len(c.tenants) == 0 || slices.Contains(c.tenants, tenant)) &&
		(len(c.kinds) == 0 || slices.Contains(c.kinds, kind)) &&
		(len(c.queues) == 0 || slices.Contains(c.queues, queue))
}

// takesTenant reports whether c may claim jobs of tenant. Room freed
// for a tenant is room in every queue and for every kind, so neither
// narrows whom it wakes.
func (c *claimer) takesTenant(tenant string) bool {
	return len(c.tenants) == 0 || slices.Contains(c.tenants, tenant)
}

// takesFrom reports whether c may claim from any of queues. Room freed
// in a queue is room for every tenant's and kind's job behind it, so
// neither narrows whom it wakes.
func (c *claimer) takesFrom(queues []string) bool {
	if len(c.queues) == 0 {
		return true
	}
	for _, q := range queues {
		if slices.Contains(c.queues, q) {
			return true
		}
	}
	return false
}

func (c *claimer) answers(w claimWake) bool {
	if w.due {
		return c.key == w.key
	}
	return c.takes(w.tenant, w.kind, w.queue)
}

// addClaimer registers a claim; call it before the claim's first look.
func (e *Engine) addClaimer(r ClaimRequest) *claimer {
	c := newClaimer(r)
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.elem = cs.fifo.PushBack(c)
	if at, ok := cs.stopping[c.by]; ok && e.now().Sub(at) < stopClaimingFor {
		c.stopped = true
	}
	return c
}

// stopClaimingFor is how long after StopClaiming a worker's new claims
// still answer at once: one sent just before the worker stopped, which
// reaches the server after StopClaiming, must not park. It is short, as
// a worker started again under the same id (jobwatch worker --id) has
// its claims answered empty until it passes, and so as long as the
// workers let a claim answer after asking (client's stoppedClaimGrace).
const stopClaimingFor = 2 * time.Second

// StopClaiming answers the parked claims of workerID sent by caller
// (ClaimRequest.Caller) at once, each with what it was granted or none
// (ErrNoJob), and those it sends in the next stopClaimingFor with none,
// without looking; then it tells the other replicas sharing the store
// (store.Store.AnnounceStopClaiming), which do the same for the claims
// the worker parked with them when they hear it (listen.go). A worker
// that is stopping asks this so that it receives the answer of every
// claim it sent, rather than cut a call whose answer may be on its way
// (its job would then stay RUNNING under a lease nobody holds). Claims
// of other workers, and of other callers, are not touched. A worker id
// that no claim could name is an *InvalidError. If the other replicas
// cannot be told, the claims here are answered all the same and it
// returns nil: the worker then cuts a claim parked elsewhere after its
// grace, as it would with an older server.
func (e *Engine) StopClaiming(ctx context.Context, workerID, caller string) error {
	if err := jobtype.CheckName("worker_id", workerID); err != nil {
		return err
	}
	e.stopClaimingHere(stopper{workerID, caller})
	// The caller may leave as soon as its claims here are answered (a
	// worker that then exits): the other replicas are told all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceTimeout)
	defer cancel()
	if err := e.store.AnnounceStopClaiming(ctx, workerID, caller); err != nil {
		e.log.Warn("cannot tell the other replicas that a worker stops claiming", "worker", workerID, "err", err)
	}
	return nil
}

// announceTimeout bounds telling the other replicas of a stop.
const announceTimeout = 5 * time.Second

// stopClaimingHere is StopClaiming's part on this replica.
func (e *Engine) stopClaimingHere(s stopper) {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	now := e.now()
	if cs.stopping == nil {
		cs.stopping = map[stopper]time.Time{}
	}
	for w, at := range cs.stopping {
		if now.Sub(at) >= stopClaimingFor {
			delete(cs.stopping, w)
		}
	}
	cs.stopping[s] = now
	e.wakeAllLocked(func(c *claimer) bool {
		if c.by != s {
			return false
		}
		c.stopped = true
		return true
	})
}

// claimStopped reports whether c's worker asked to stop claiming.
func (e *Engine) claimStopped(c *claimer) bool {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return c.stopped
}

// beginLook starts a look of c: it returns the count of wakes given so
// far, for park, whether one since the last look followed a commit, and
// whether c owes an answer to a ready job in a queue without limits, of
// a tenant without a bound on its running jobs (it was woken for that
// job alone, so a claim will most likely find it; in a queue with
// limits, or for a bounded tenant, the limits may still hold it back).
func (e *Engine) beginLook(c *claimer) (gen uint64, byChange, owesJob bool) {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	select {
	case <-c.wake:
	default:
	}
	byChange, c.byChange = c.byChange, false
	rules := e.rules.Load()
	owesJob = slices.ContainsFunc(c.owed, func(w claimWake) bool {
		_, limited := rules.limits[w.queue]
		return !w.due && !limited && rules.caps[w.tenant] == 0
	})
	return c.gen, byChange, owesJob
}

// park records that c's look, begun at gen, found nothing ready, and
// that c may be woken at due (zero: only by a change). It returns false,
// and c must look again, if a wake came since the look began or due has
// passed. Wakes owed from before the look are answered by it.
func (e *Engine) park(c *claimer, gen uint64, due time.Time) bool {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c.gen != gen || (!due.IsZero() && !due.After(e.now())) {
		return false
	}
	c.parked = true
	c.owed = nil
	c.due = due
	if !due.IsZero() {
		e.armLocked(due)
	}
	return true
}

// removeClaimer unregisters c, which claimed the jobs claimed (none
// none), and passes on every wake it did not answer.
func (e *Engine) removeClaimer(c *claimer, claimed []string) {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.fifo.Remove(c.elem)
	passedDue := false
	var jobs []claimWake
	for _, w := range c.owed {
		switch {
		case w.due && !passedDue:
			// Whether c claimed or not, another job may have come due at
			// the same time: the next claimer of the filter looks.
			passedDue = true
			e.wakeOneLocked(w, false)
		case !w.due && !slices.Contains(claimed, w.jobID):
			jobs = append(jobs, w)
		}
	}
	e.passOnLocked(jobs)
	if c.due.IsZero() {
		return
	}
	for el := cs.fifo.Front(); el != nil; el = el.Next() {
		if p := el.Value.(*claimer); p.key == c.key {
			if p.due.IsZero() || c.due.Before(p.due) {
				p.due = c.due
			}
			return
		}
	}
}

// wakeOneLocked wakes one parked claimer that answers w, which then owes
// it an answer, else every looking one that answers it, owing nothing
// (see the comment at the top of this file).
func (e *Engine) wakeOneLocked(w claimWake, byChange bool) {
	for el := e.claimers.fifo.Front(); el != nil; el = el.Next() {
		if c := el.Value.(*claimer); c.parked && c.answers(w) {
			e.deliverLocked(c, &w, byChange)
			return
		}
	}
	e.wakeLookingLocked(w, byChange)
}

// wakeLookingLocked makes every looking claimer that answers w look once
// more; a claimer already due to look again costs nothing more.
func (e *Engine) wakeLookingLocked(w claimWake, byChange bool) {
	for el := e.claimers.fifo.Front(); el != nil; el = el.Next() {
		if c := el.Value.(*claimer); !c.parked && c.answers(w) {
			e.deliverLocked(c, nil, byChange)
		}
	}
}

// passOnLocked wakes a claimer for each of the job wakes ws, as
// wakeOneLocked would one by one, but in one pass over the parked
// claimers.
func (e *Engine) passOnLocked(ws []claimWake) {
	for el := e.claimers.fifo.Front(); el != nil && len(ws) > 0; el = el.Next() {
		c := el.Value.(*claimer)
		if !c.parked {
			continue
		}
		if i := slices.IndexFunc(ws, c.answers); i >= 0 {
			e.deliverLocked(c, &ws[i], true)
			ws = slices.Delete(ws, i, i+1)
		}
	}
	// No parked claimer is left for the rest.
	for _, w := range ws {
		e.wakeLookingLocked(w, true)
	}
}

// wakeAllLocked wakes every claimer for which match is true, owing
// nothing: every one of them looks.
func (e *Engine) wakeAllLocked(match func(*claimer) bool) {
	for el := e.claimers.fifo.Front(); el != nil; el = el.Next() {
		if c := el.Value.(*claimer); match(c) {
			e.deliverLocked(c, nil, true)
		}
	}
}

func (e *Engine) deliverLocked(c *claimer, w *claimWake, byChange bool) {
	c.parked = false
	if w != nil {
		c.owed = append(c.owed, *w)
	}
	c.gen++
	c.byChange = c.byChange || byChange
	e.claimers.wakes++
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wakeAllClaimers wakes every registered claimer.
func (e *Engine) wakeAllClaimers() {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	e.wakeAllLocked(func(*claimer) bool { return true })
}

// wakeClaimers tells the claimers about the committed snapshot j (see
// the comment at the top of this file).
func (e *Engine) wakeClaimers(j jobtype.Job) {
	rules := e.rules.Load()
	_, limited := rules.limits[j.Queue]
	capped := rules.caps[j.Tenant] > 0
	now := e.now()
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.loading {
		if cs.seen == nil {
			cs.seen = map[string]int64{}
		}
		cs.seen[j.ID] = max(cs.seen[j.ID], j.Version)
	}
	if s, ok := cs.scheduled[j.ID]; ok {
		if j.Version < s.version {
			return
		}
		delete(cs.scheduled, j.ID)
	}
	freed := (limited || capped) && (j.State.Terminal() || (j.State == jobtype.Queued && j.Version > 1))
	if freed {
		var queues []string
		if limited {
			queues = sharingPools(rules, j.Queue)
		}
		e.wakeAllLocked(func(c *claimer) bool {
			return (limited && c.takesFrom(queues)) || (capped && c.takesTenant(j.Tenant))
		})
	}
	switch {
	case j.State != jobtype.Queued:
	case j.RunAt.After(now):
		e.scheduleLocked(store.ScheduledJob{ID: j.ID, Tenant: j.Tenant, Kind: j.Kind, Queue: j.Queue, RunAt: j.RunAt, Version: j.Version})
	case !freed:
		// When freed, the broadcast woke every claimer that takes the
		// job already.
		e.wakeOneLocked(claimWake{jobID: j.ID, tenant: j.Tenant, kind: j.Kind, queue: j.Queue}, true)
	}
}

// sharingPools returns queue and every queue that uses a pool it uses.
func sharingPools(r *ruleSet, queue string) []string {
	queues := []string{queue}
	pools := r.limits[queue].Pools
	for name, l := range r.limits {
		if name == queue {
			continue
		}
		for _, p := range l.Pools {
			if slices.Contains(pools, p) {
				queues = append(queues, name)
				break
			}
		}
	}
	return queues
}

// loadScheduled reads the jobs queued to run later from the store, once:
// the first Claim calls it before it registers. A failed read is tried
// again by the next Claim; meanwhile the claimers' looks stand in.
func (e *Engine) loadScheduled(ctx context.Context) {
	cs := &e.claimers
	cs.mu.Lock()
	if cs.loaded || cs.loading {
		cs.mu.Unlock()
		return
	}
	cs.loading = true
	limit := cs.limit()
	cs.mu.Unlock()

	jobs, err := e.store.ScheduledJobs(ctx, e.now(), limit+1)

	cs.mu.Lock()
	defer cs.mu.Unlock()
	seen := cs.seen
	cs.loading, cs.seen = false, nil
	if err != nil {
		e.log.Debug("read scheduled jobs", "err", err)
		return
	}
	cs.loaded = true
	if len(jobs) > limit {
		cs.overflowed = true
		jobs = jobs[:limit]
	}
	for _, j := range jobs {
		if v, ok := seen[j.ID]; ok && v >= j.Version {
			continue
		}
		if s, ok := cs.scheduled[j.ID]; ok && s.version >= j.Version {
			continue
		}
		e.scheduleLocked(j)
	}
}

// scheduleLocked keeps the QUEUED job j until its future RunAt.
func (e *Engine) scheduleLocked(j store.ScheduledJob) {
	cs := &e.claimers
	if len(cs.byRunAt) >= cs.limit() && len(cs.scheduled) < cs.limit()/2 {
		// Most entries are of jobs that changed since (cancelled, say):
		// drop them rather than fall back.
		cs.byRunAt = cs.byRunAt[:0]
		for _, sj := range cs.scheduled {
			cs.byRunAt = append(cs.byRunAt, sj.dueJob)
		}
		heap.Init(&cs.byRunAt)
	}
	if len(cs.byRunAt) >= cs.limit() {
		cs.overflowed = true
		for el := cs.fifo.Front(); el != nil; el = el.Next() {
			if c := el.Value.(*claimer); c.takes(j.Tenant, j.Kind, j.Queue) && (c.due.IsZero() || j.RunAt.Before(c.due)) {
				c.due = j.RunAt
			}
		}
		e.armLocked(j.RunAt)
		return
	}
	if cs.scheduled == nil {
		cs.scheduled = map[string]scheduledJob{}
	}
	d := dueJob{at: j.RunAt, wake: claimWake{jobID: j.ID, tenant: j.Tenant, kind: j.Kind, queue: j.Queue}}
	cs.scheduled[j.ID] = scheduledJob{dueJob: d, version: j.Version}
	heap.Push(&cs.byRunAt, d)
	e.armLocked(j.RunAt)
}

// stopDueTimer stops the timer of the jobs due later, for Shutdown: a
// stopped engine wakes no claimer, and a pending timer would keep it in
// memory until it fired.
func (e *Engine) stopDueTimer() {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.timer != nil {
		cs.timer.Stop()
	}
	cs.timerAt = time.Time{}
}

// armLocked makes the timer fire at at, unless it fires earlier already.
// After Shutdown it is not set: no claim parks any more.
func (e *Engine) armLocked(at time.Time) {
	cs := &e.claimers
	if e.shuttingDown() || (!cs.timerAt.IsZero() && !at.Before(cs.timerAt)) {
		return
	}
	cs.timerAt = at
	// at is a wall-clock instant from the engine's clock; the timer runs
	// on the monotonic one, so fireDue checks what is due by the engine's
	// clock and sets the timer again for what is not.
	d := max(at.Sub(e.now()), 0)
	if cs.timer == nil {
		cs.timer = time.AfterFunc(d, e.fireDue)
		return
	}
	cs.timer.Reset(d)
}

// fireDue wakes one claimer for each scheduled job whose RunAt has come,
// and one claimer of each filter whose reported RunAt has come and is
// not such a job's, then sets the timer for the next RunAt.
func (e *Engine) fireDue() {
	cs := &e.claimers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.timerAt = time.Time{}
	now := e.now()
	var fired []dueJob
	for len(cs.byRunAt) > 0 && !cs.byRunAt[0].at.After(now) {
		d := heap.Pop(&cs.byRunAt).(dueJob)
		if s, ok := cs.scheduled[d.wake.jobID]; ok && s.at.Equal(d.at) {
			delete(cs.scheduled, d.wake.jobID)
			fired = append(fired, d)
		}
	}
	for _, d := range fired {
		e.wakeOneLocked(d.wake, false)
	}
	var next time.Time
	woken := map[string]bool{}
	for el := cs.fifo.Front(); el != nil; el = el.Next() {
		c := el.Value.(*claimer)
		switch {
		case c.due.IsZero():
			continue
		case c.due.After(now):
			if next.IsZero() || c.due.Before(next) {
				next = c.due
			}
			continue
		}
		due := c.due
		c.due = time.Time{}
		if woken[c.key] || (!cs.overflowed && slices.ContainsFunc(fired, func(d dueJob) bool { return d.at.Equal(due) && c.answers(d.wake) })) {
			// Another claimer of the filter looks for them both; or the
			// claimer's look reported a job the engine keeps, which has
			// its own wake (when none was left out, any other job due
			// then is kept too).
			continue
		}
		woken[c.key] = true
		e.deliverLocked(c, &claimWake{due: true, key: c.key}, false)
	}
	if len(cs.byRunAt) > 0 && (next.IsZero() || cs.byRunAt[0].at.Before(next)) {
		next = cs.byRunAt[0].at
	}
	if !next.IsZero() {
		e.armLocked(next)
	}
}

// dueJob is a scheduled job's wake and when it is due.
type dueJob struct {
	at   time.Time
	wake claimWake
}

// dueJobs is a min-heap of dueJob by at.
type dueJobs []dueJob

func (h dueJobs) Len() int           { return len(h) }
func (h dueJobs) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueJobs) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueJobs) Push(x any)        { *h = append(*h, x.(dueJob)) }
func (h *dueJobs) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
