package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// A claim must cost the same however many jobs wait, and the planner
// must not be able to decide otherwise from statistics that lag behind
// the table. Right after a bulk insert into a table last analyzed when
// it held only finished jobs, PostgreSQL estimates one queued row, and
// then a sort of every queued job (or a bitmap scan of them and a sort)
// looks as cheap as a walk of an index in claim order. It picked the
// sort: a claim of one job took 14 ms at 20,000 queued jobs, 100 ms at
// 200,000, 630 ms at 1,000,000; and for a join of candidates with the
// jobs, a nested loop over every queued job on both sides. So:
//
//   - every scan of the queued jobs seeks one index whose columns are the
//     scan's equality columns followed by priority, run_at and seq (claim
//     order), once per priority (see byPriority): jobs_queued_priority
//     (any job), jobs_queued_queue_priority (one queue), jobs_queued_kind
//     (one kind), jobs_queued_queue_kind (one queue and one kind); a
//     serial queue's head, first by run_at whatever its priority, seeks
//     jobs_queued_queue (queue, run_at, seq); a filter on several queues
//     or kinds seeks once per queue, kind or pair, and a tenant filter is
//     checked on the jobs those seeks find;
//   - a seek of one queue or kind is written as a range of (queue, kind,
//     priority, run_at) ordered by those columns, not as queue = $1 ORDER BY
//     run_at: equality would make the queue a constant that any index in
//     run_at order also satisfies (jobs_queued, with the queue as a
//     filter), and with stale statistics that walk of every queue's jobs
//     looks as cheap as the seek; ordered by the range, only the index
//     that holds it gives that order without a sort;
//   - a job a claim reads by seq (a candidate, a serial queue's head) is
//     checked with a condition no index answers (see recheck), so the
//     planner cannot read it by a scan of every queued job instead;
//   - the statement runs with sorts, bitmap scans, sequential scans, hash
//     and merge joins disabled (planSettings), so a plan that sorts or
//     scans the jobs costs more than any that seeks, whatever the row
//     estimates; the only sorts left are of the few candidates the seeks
//     return, which every plan has. JIT is off too: the disabled paths'
//     cost would pass jit_above_cost and compile every claim.
//   - the plan is generic (made once per connection for any arguments),
//     not one made for each run's arguments: PostgreSQL keeps making
//     custom plans for these statements, as their generic plans look
//     dearer, and planning cost half of a claim of one job or a
//     heartbeat (0.5 of 1.1 ms). The settings above make the generic
//     plan the one that seeks, as they do a custom one.
//
// So a claim of one job takes about 1 to 2 ms at any depth here.
// TestClaimPlanSeeksIndexesWithStaleStatistics pins the plans.
const planSettings = `set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true),
	set_config('enable_bitmapscan', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true)`

// prelude is the statement a claim, NextReady and WriteLeases send
// before their own, in one pipelined batch and so one implicit
// transaction (or first in a transaction of their own): the plan
// settings for the transaction, the advisory locks $1 (none but for
// claims from queues with rules), and then, once it holds them, the
// time, as jobwatch.took_effect, for lockWait. The server runs a
// pipeline's messages in order, so the settings hold when the next
// statement is bound to its plan.
const prelude = `SELECT ` + planSettings + `,
	(SELECT set_config('jobwatch.took_effect', clock_timestamp()::text, true)
		FROM (SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k) AS locked)`

// claimNumbered and claimUpdate are the claim's statement around the
// pick (the CTE picked: the jobs taken, locked, with their seq,
// updated_at, run_at, priority, queue and tenant; see claimStatement):
// it numbers them in claim order and gives the i-th lease i. $1 is the
// claim's time, $2 the worker, $3 the lease ids, $4 and $5 the queues
// with leases of their own and those leases in microseconds, $6 the
// default lease. %[1]s is the columns returned, %[2]s a condition the
// UPDATE adds (the guard of fair claiming).
const claimNumbered = `,
	numbered AS (
	SELECT p.seq, p.updated_at, row_number() OVER (ORDER BY p.priority, p.run_at, p.seq) AS i FROM picked AS p)`

const claimUpdate = `UPDATE jobs AS j SET state = 'running', attempt = j.attempt + 1, worker_id = $2,
	lease_id = ($3::text[])[p.i], started_at = coalesce(j.started_at, ` + claimTime + `), updated_at = ` + claimTime + `,
	lease_expires_at = ` + claimTime + ` + coalesce((SELECT d.us FROM unnest($4::text[], $5::bigint[]) AS d(q, us)
		WHERE d.q = j.queue), $6) * interval '1 microsecond',
	version = j.version + 1, rev = j.rev + 1
FROM numbered AS p
WHERE j.seq = p.seq%[2]s
RETURNING %[1]s, p.updated_at, p.i`

// lockWait is how long the prelude of a claim's transaction waited for
// the advisory locks of a ruled queue, held by another replica's claim:
// from the transaction's start (transaction_timestamp) to the time the
// prelude recorded once it held them (tookEffect). The claim adds it to
// its time, so that a lease counts from when the claim took effect (a
// wait of seconds behind a slow claim elsewhere had the job LOST while
// its worker started it). Every job of one claim gets the same time,
// however many statements the claim's turns take after the prelude (a
// fair claim's jobs, each claimed in a statement of its own, got times
// apart by the turns before theirs, and so a rate's window counted them
// as started apart). Under 100 ms it is taken as none: a lease or a
// rate's window is seconds long, and a claim nothing held up keeps the
// engine's time to the microsecond.
const lockWait = `(CASE WHEN ` + tookEffect + ` - transaction_timestamp() >= interval '100 milliseconds'
		THEN ` + tookEffect + ` - transaction_timestamp() ELSE interval '0' END)`

// tookEffect is the time the prelude recorded, or the transaction's
// start where no prelude ran in it (a setting set for a transaction
// reads as empty after it).
const tookEffect = `coalesce(nullif(current_setting('jobwatch.took_effect', true), '')::timestamptz, transaction_timestamp())`

// claimTime is the claim's time in claimUpdate: $1 after lockWait.
const claimTime = `($1::timestamptz + ` + lockWait + `)`

// candidateSlack is how many jobs beyond the ones it takes a claim reads
// where it reads candidates before it locks any (a filter of several
// queues or kinds, and queues without rules beside queues with rules):
// claims running beside it may hold some of the first ones, and skipping
// those must leave enough. A pool of DefaultMaxConns runs at most as
// many claims at once.
const candidateSlack = DefaultMaxConns

// pickQuery is the query that finds the jobs a claim takes (ready true:
// up to n, locked, in claim order) or the earliest RunAt NextReady
// reports (ready false, n 1, not locked), with the queue rules checked in
// SQL, selecting sel (of alias j). Its arguments start at $first.
//
// Claim order is Priority (0 first), then RunAt, then creation; a serial
// queue's own order ignores Priority.
//
// Without rules, one queue or kind (or none) is one walk of one index in
// claim order (a seek per priority), locking as it goes with SKIP LOCKED
// until it has n jobs: claims running beside it cost it only the rows
// they hold. Several
// queues or kinds are a seek per queue, kind or pair, each reading its
// first n + candidateSlack jobs, of which the first n + candidateSlack in
// claim order are candidates; the claim takes the first n of those that
// no other claim holds.
//
// A queue's rules: a serial queue offers only its heads, each tenant's
// first QUEUED job by RunAt then creation, whatever its kind (or with
// HoldRetry its first job backing off before a retry), of the tenants
// with none of their jobs there running, each of which must then match
// the worker's filter; a queue with max_running offers at most its
// room (max_running less its RUNNING jobs), and a queue using a pool at
// most the pool's free units. Several queues sharing a pool offer at most
// its free units between them: the candidates are counted per pool in
// claim order, and one past the pool's free units is dropped. No query
// walks the jobs of a queue that has no room. Queues without rules offer
// their first n + candidateSlack jobs each, found by a skip scan of the
// queue names (one seek per queue), never by a walk of the jobs of the
// queues with rules.
func pickQuery(f store.ClaimFilter, ready bool, n int, sel string, lock bool, first int) (string, []any) {
	p := &picker{first: first, ready: ready, now: f.Now}
	if ready {
		p.due = p.arg(f.Now) + "::timestamptz"
	}
	if len(f.Tenants) > 0 {
		p.tenants = p.arg(f.Tenants) + "::text[]"
	}
	queues, kinds := distinct(f.Queues), distinct(f.Kinds)
	if len(distinct(f.Tenants)) == 1 && len(queues) == 1 {
		// Fair claiming's pick of one tenant's job in one queue: seeks of
		// that tenant's jobs only, of each of the worker's kinds if it
		// names any (jobs_queued_queue_tenant_kind; with the kinds
		// checked on the tenant's jobs, a worker of a kind one tenant
		// submits walked another tenant's whole backlog of other kinds),
		// else of any kind (jobs_queued_queue_tenant).
		p.tenant = p.arg(f.Tenants[0]) + "::text"
	}
	suffix := ""
	if lock {
		suffix = " FOR UPDATE OF j SKIP LOCKED"
	}
	rules := rulesFor(f)
	if len(rules.queues) == 0 && len(rules.capTenants) == 0 {
		return p.free(queues, kinds, n, sel, suffix), p.args
	}
	return p.ruled(rules, queues, kinds, n, sel, suffix), p.args
}

// picker builds a pick query and its arguments.
type picker struct {
	first   int
	args    []any
	ready   bool
	due     string // the claim's time, when ready
	tenants string // the tenants to match, or "" for any
	// priority is the priority a seek is at (an SQL expression), or ""
	// for any; set by byPriority for the seeks it writes.
	priority string
	// now is the claim's time, which rates count their windows back
	// from, ready or not.
	now time.Time
	// tenant, when set, is the one tenant whose jobs every seek walks
	// (an SQL expression), right after the queue.
	tenant string
}

func (p *picker) arg(v any) string {
	p.args = append(p.args, v)
	return fmt.Sprintf("$%d", p.first+len(p.args)-1)
}

// count is n as an argument, for a LIMIT: a claim's statement is the
// same text whatever number of jobs it asks for, so that each connection
// prepares and plans it once, not once for each number.
func (p *picker) count(n int) string {
	return p.arg(n) + "::int"
}

// seek is the WHERE and ORDER BY of a walk, in RunAt then creation
// order, of the QUEUED jobs (alias a) of queue q and kind k (SQL
// expressions of one value, or "" for any) and of p.priority, if set,
// that match the worker's tenants, from the index whose columns are
// those and run_at, seq. The walk is a range of the index, not an
// equality: see planSettings.
func (p *picker) seek(a, q, k string) (where, order string) {
	var cols, vals []string
	if q != "" {
		cols, vals = append(cols, a+".queue"), append(vals, q)
	}
	if p.tenant != "" {
		cols, vals = append(cols, a+".tenant"), append(vals, p.tenant)
	}
	if k != "" {
		cols, vals = append(cols, a+".kind"), append(vals, k)
	}
	if p.priority != "" {
		cols, vals = append(cols, a+".priority"), append(vals, p.priority)
	}
	where = a + ".state = 'queued'"
	order = a + ".run_at, " + a + ".seq"
	switch {
	case len(cols) > 0:
		upper := "'infinity'::timestamptz"
		if p.ready {
			upper = p.due
		}
		// A B-tree scan stops at the end of a range only where the
		// column that decides it has a key it may stop on, and of a row
		// comparison only the first column has one (PostgreSQL 15): a
		// seek of kind k at priority 0 written as one range of (kind,
		// priority, run_at), once every job of k at 0 was claimed, read
		// on through the entries of every other priority of k to the
		// end of the kind (11 ms a claim at 200,000 queued). So with a
		// priority, the columns before it are equalities and the range
		// is of (priority, run_at), whose first column decides where it
		// ends. The order asked stays (queue, kind, priority, run_at):
		// with the equalities the planner drops their columns from it,
		// and priority then run_at is an order only the indexes by
		// priority give, of which the one with the equality columns
		// reads fewest entries.
		eq, rc, rv := "", cols, vals
		if p.priority != "" && len(cols) > 1 {
			for i := range cols[:len(cols)-1] {
				eq += " AND " + cols[i] + " = " + vals[i]
			}
			rc, rv = cols[len(cols)-1:], vals[len(vals)-1:]
		}
		c, v := strings.Join(rc, ", "), strings.Join(rv, ", ")
		where += eq + fmt.Sprintf(" AND (%s, %s.run_at) >= (%s, '-infinity'::timestamptz) AND (%s, %s.run_at) <= (%s, %s)",
			c, a, v, c, a, v, upper)
		c = strings.Join(cols, ", ")
		order = c + ", " + order
	case p.ready:
		where += " AND " + a + ".run_at <= " + p.due
	}
	if p.tenants != "" {
		where += " AND " + a + ".tenant = ANY(" + p.tenants + ")"
	}
	// Paused queues (pauses.go) are checked in the statement itself, so
	// no replica claims from one paused before the claim began, heard
	// of or not. Of one queue, the check references no column of the
	// walk, so it runs once per seek and a paused queue's jobs are never
	// walked; a walk of several queues (none named) checks each job, and
	// steps over the ready jobs of paused queues ahead of the first it
	// may take.
	paused := a + ".queue"
	if q != "" {
		paused = q
	}
	where += " AND NOT EXISTS (SELECT FROM queue_pauses AS qp WHERE qp.queue = " + paused + ")"
	return where, order
}

// recheck is what the job a candidate names (alias j, joined by seq)
// must still be when it is locked: another claim may have taken it, and
// failed it back to QUEUED with a later run_at, since the candidates were
// read. It is written "(...) IS TRUE", which no index can answer (state
// is never NULL, so it means what the condition inside says): as
// "j.state = 'queued'" it would let the planner read j by a scan of every
// queued job (any index on state, or any partial index of the queued
// jobs, which it matches) instead of by seq, and with stale statistics,
// which expect no queued job, that scan looks cheapest.
func (p *picker) recheck() string {
	if p.ready {
		return "(j.state = 'queued' AND j.run_at <= " + p.due + ") IS TRUE"
	}
	return "(j.state = 'queued') IS TRUE"
}

// A ready job is one whose run_at has come: under each priority a range
// of run_at, not one range of an index by priority then run_at, whose
// walk would step over every urgent job due later before it reached the
// ready jobs of the next priority. So every scan of the queued jobs in
// claim order is one seek per priority (MinPriority to MaxPriority, as
// constants in the statement), in order, under a Limit: PostgreSQL's
// Append runs its inputs one after the other and stops with the Limit
// above it, so the seeks of the priorities after the first that has
// enough jobs never run, and a claim from a group whose most urgent
// priority has ready jobs reads what it read before priorities. Where
// the order of the Append's output matters (the candidates it keeps),
// they are also sorted: a claim that reads more than one group, and the
// numbering of the claimed jobs, sort the few candidates by claim order.
// NextReady, which wants the earliest RunAt whatever the priority,
// reads each priority's first job and sorts those by RunAt.

// priorities are the priorities a job may have, as SQL constants, most
// urgent first.
var priorities = func() []string {
	var out []string
	for pr := jobtype.MinPriority; pr <= jobtype.MaxPriority; pr++ {
		out = append(out, strconv.Itoa(pr))
	}
	return out
}()

// byPriority is a FROM item (alias c, columns seq, priority, run_at,
// queue and tenant) of the QUEUED jobs of queue q and kind k (as for seek) that a
// claim may take, in claim order, at most lim (an SQL expression) of
// them: one seek per priority (see above). Not ready, it holds each
// priority's first lim jobs, in no order.
func (p *picker) byPriority(q, k, lim string) string {
	arms := make([]string, len(priorities))
	for i, pr := range priorities {
		p.priority = pr
		where, order := p.seek("h", q, k)
		arms[i] = "(SELECT h.seq, h.priority, h.run_at, h.queue, h.tenant FROM jobs AS h WHERE " + where +
			" ORDER BY " + order + " LIMIT " + lim + ")"
	}
	p.priority = ""
	all := strings.Join(arms, "\n\t\tUNION ALL ")
	if !p.ready {
		return "(" + all + ") AS c"
	}
	return "(SELECT * FROM (" + all + ") AS c LIMIT " + lim + ") AS c"
}

// order is the order of the pick's jobs (alias a): claim order when
// ready; by RunAt for NextReady, which reports the earliest RunAt,
// whatever its priority.
func (p *picker) order(a string) string {
	if p.ready {
		return a + ".priority, " + a + ".run_at, " + a + ".seq"
	}
	return a + ".run_at, " + a + ".seq"
}

// free is the pick without queue rules.
func (p *picker) free(queues, kinds []string, n int, sel, suffix string) string {
	if len(queues) <= 1 && len(kinds) <= 1 {
		var q, k string
		if len(queues) == 1 {
			q = p.arg(queues[0]) + "::text"
		}
		if len(kinds) == 1 {
			k = p.arg(kinds[0]) + "::text"
		}
		// One seek per priority, each locking as it goes (with SKIP
		// LOCKED, claims running beside it cost it only the rows they
		// hold) until the Limit has n jobs; not ready, each priority's
		// first job, of which the earliest.
		arms := make([]string, len(priorities))
		for i, pr := range priorities {
			p.priority = pr
			where, order := p.seek("j", q, k)
			limit := ""
			if !p.ready {
				limit = " LIMIT 1"
			}
			arms[i] = fmt.Sprintf("SELECT * FROM (SELECT %s FROM jobs AS j WHERE %s ORDER BY %s%s%s) AS a%d",
				sel, where, order, limit, suffix, i)
		}
		p.priority = ""
		all := strings.Join(arms, "\nUNION ALL ")
		if !p.ready {
			return "SELECT * FROM (" + all + ") AS c ORDER BY c.run_at LIMIT 1"
		}
		return all + "\nLIMIT " + p.count(n)
	}
	// One seek per queue, kind, or pair of them.
	var keys, q, k string
	switch {
	case len(queues) > 0 && len(kinds) > 0:
		var kq, kk []string
		for _, queue := range queues {
			for _, kind := range kinds {
				kq, kk = append(kq, queue), append(kk, kind)
			}
		}
		keys = "unnest(" + p.arg(kq) + "::text[], " + p.arg(kk) + "::text[]) AS k(queue, kind)"
		q, k = "k.queue", "k.kind"
	case len(queues) > 0:
		keys, q = "unnest("+p.arg(queues)+"::text[]) AS k(queue)", "k.queue"
	default:
		keys, k = "unnest("+p.arg(kinds)+"::text[]) AS k(kind)", "k.kind"
	}
	m := p.count(n + candidateSlack)
	return fmt.Sprintf(`SELECT %s FROM (
	SELECT c.seq, c.priority, c.run_at FROM %s, LATERAL %s
	ORDER BY %s LIMIT %s) AS c
JOIN jobs AS j ON j.seq = c.seq WHERE %s
ORDER BY %s LIMIT %s%s`, sel, keys, p.byPriority(q, k, m), p.order("c"), m, p.recheck(), p.order("c"), p.count(n), suffix)
}

// ruled is the pick under queue rules.
func (p *picker) ruled(rules rules, queues, kinds []string, n int, sel, suffix string) string {
	m := p.count(n + candidateSlack)
	// match is the worker's filter on a serial queue's head (alias h),
	// which is its first job whatever its kind or tenant; read by seq,
	// it is written as recheck is.
	match := []string{"h.state = 'queued'"}
	if p.ready {
		match = append(match, "h.run_at <= "+p.due)
	}
	if p.tenants != "" {
		match = append(match, "h.tenant = ANY("+p.tenants+")")
	}
	if len(kinds) > 0 {
		match = append(match, "h.kind = ANY("+p.arg(kinds)+"::text[])")
	}
	// kinds, for the seeks of a queue's jobs: a join with one row per
	// kind (k.kind), or one kind as a constant, or none.
	var kindRows, kind string
	switch len(kinds) {
	case 0:
	case 1:
		kind = p.arg(kinds[0]) + "::text"
	default:
		kindRows, kind = " CROSS JOIN unnest("+p.arg(kinds)+"::text[]) AS k(kind)", "k.kind"
	}
	ruled := p.arg(rules.queues)
	// names are the queues without rules that may offer candidates: the
	// worker's, or every queue with a QUEUED job, found by a skip scan of
	// jobs_queued_queue (one seek per queue, never a walk of its jobs).
	names := `names(queue) AS (
		SELECT (SELECT x.queue FROM jobs AS x WHERE x.state = 'queued' ORDER BY x.queue LIMIT 1)
		UNION ALL
		SELECT (SELECT x.queue FROM jobs AS x WHERE x.state = 'queued' AND x.queue > n.queue ORDER BY x.queue LIMIT 1)
		FROM names AS n WHERE n.queue IS NOT NULL)`
	if len(queues) > 0 {
		names = `names(queue) AS (SELECT q FROM unnest(` + p.arg(queues) + `::text[]) AS q)`
	}
	// A serial queue's tenants with unfinished jobs, by a skip scan of
	// jobs_unfinished_queue_tenant (one seek per tenant), or the one
	// tenant a fair claim asks for.
	serialTenants := `serial_tenants(queue, hold, tenant) AS (
		SELECT o.queue, o.hold, ` + unfinishedTenant("o.queue", "") + ` FROM room AS o WHERE o.serial AND coalesce(o.n, 1) > 0
		UNION ALL
		SELECT s.queue, s.hold, ` + unfinishedTenant("s.queue", "s.tenant") + ` FROM serial_tenants AS s WHERE s.tenant IS NOT NULL)`
	if p.tenant != "" {
		serialTenants = `serial_tenants(queue, hold, tenant) AS (
		SELECT o.queue, o.hold, ` + p.tenant + ` FROM room AS o WHERE o.serial AND coalesce(o.n, 1) > 0)`
	}
	ruledJobs := p.byPriority("o.queue", kind, "least(o.n, "+m+")")
	freeJobs := p.byPriority("n.queue", kind, m)
	lanes, laneCandidates, notLaned, freeNotLaned, serialNotCapped, tenantOver, notOver := p.lanes(rules, kinds, ruled, m)
	return `WITH RECURSIVE ` + names + `,
	lim(queue, max_running, serial, hold, rate_limit, rate_per, per_tenant, rate_tenant) AS (
		SELECT * FROM unnest(` + ruled + `::text[], ` + p.arg(rules.max) + `::int[], ` +
		p.arg(rules.serial) + `::bool[], ` + p.arg(rules.hold) + `::bool[], ` +
		p.arg(rules.rateLimits) + `::int[], ` + p.arg(rules.ratePers) + `::bigint[], ` + p.arg(rules.perTenant) + `::int[], ` +
		p.arg(rules.rateTenants) + `::bool[])),
	pool_use(queue, pool) AS (
		SELECT DISTINCT * FROM unnest(` + p.arg(rules.useQueues) + `::text[], ` + p.arg(rules.usePools) + `::text[])),
	pool_size(pool, size) AS (
		SELECT * FROM unnest(` + p.arg(rules.pools) + `::text[], ` + p.arg(rules.sizes) + `::int[])),
	-- Each queue's RUNNING jobs, counted up to the largest limit they
	-- count against (past it the queue, or the pool, is full anyway), so
	-- that counting reads no more jobs than the rules allow to run.
	running(queue, n) AS (
		SELECT q.queue, (SELECT count(*) FROM (SELECT FROM jobs AS r
			WHERE r.state = 'running' AND r.queue >= q.queue AND r.queue <= q.queue ORDER BY r.queue LIMIT greatest(q.cap, 0)) AS r)
		FROM (SELECT c.queue, max(c.cap) AS cap FROM (
			SELECT queue, max_running AS cap FROM lim
			UNION ALL
			SELECT u.queue, coalesce(z.size, 0) FROM pool_use AS u LEFT JOIN pool_size AS z ON z.pool = u.pool) AS c
			GROUP BY c.queue) AS q),
	pool_free(pool, free) AS (
		SELECT p.pool, p.size - (SELECT coalesce(sum(r.n), 0) FROM pool_use AS o
			JOIN running AS r ON r.queue = o.queue WHERE o.pool = p.pool)
		FROM pool_size AS p),
	room(queue, serial, hold, per_tenant, rate_tenant, rate_limit, rate_per, n) AS (
		SELECT l.queue, l.serial, l.hold, l.per_tenant, l.rate_tenant, l.rate_limit, l.rate_per, least(
			CASE WHEN l.max_running > 0 THEN l.max_running - r.n END,
			-- A rate's room: its limit less the queue's claims in the
			-- window (rates.go), at most the limit of them read.
			CASE WHEN l.rate_limit > 0 AND NOT l.rate_tenant THEN l.rate_limit - (SELECT count(*) FROM (SELECT FROM queue_starts AS s
				WHERE s.queue = l.queue AND s.at > ` + p.arg(p.now) + `::timestamptz - l.rate_per * interval '1 microsecond'
				ORDER BY s.queue, s.at LIMIT l.rate_limit) AS s) END,
			(SELECT min(p.free) FROM pool_use AS u JOIN pool_free AS p ON p.pool = u.pool WHERE u.queue = l.queue))
		FROM lim AS l JOIN running AS r ON r.queue = l.queue),` + lanes + `
	` + serialTenants + `,
	-- A serial queue's heads are each tenant's first job whatever its
	-- priority, of the tenants with none of their jobs in it running
	-- (with hold, its first job backing off before a retry, if any);
	-- among the queues' candidates each counts by its priority.
	heads(seq) AS (
		SELECT coalesce(
			CASE WHEN s.hold THEN (SELECT h.seq FROM jobs AS h WHERE h.state = 'queued' AND h.attempt > 0
				AND h.queue >= s.queue AND h.queue <= s.queue AND h.tenant = s.tenant
				ORDER BY h.queue, h.run_at, h.seq LIMIT 1) END,
			(SELECT h.seq FROM jobs AS h WHERE ` + unfinishedOf("h", "s", "queued") + `
				ORDER BY ` + unfinishedOrder("h") + ` LIMIT 1))
		FROM serial_tenants AS s WHERE s.tenant IS NOT NULL` + serialNotCapped + `
			-- A scalar subquery, not NOT EXISTS, which the planner would
			-- make an anti-join with every running job.
			AND (SELECT true FROM jobs AS r WHERE ` + unfinishedOf("r", "s", "running") + `
				ORDER BY ` + unfinishedOrder("r") + ` LIMIT 1) IS NULL),
	candidates(seq, priority, run_at, queue, tenant) AS (
		SELECT h.seq, h.priority, h.run_at, h.queue, h.tenant FROM heads JOIN jobs AS h ON h.seq = heads.seq
		WHERE (` + strings.Join(match, " AND ") + `) IS TRUE
		UNION ALL
		SELECT c.seq, c.priority, c.run_at, c.queue, c.tenant FROM room AS o` + kindRows + `, LATERAL ` + ruledJobs + `
		WHERE NOT o.serial AND coalesce(o.n, 1) > 0 AND ` + notLaned + `
		UNION ALL
		(SELECT c.seq, c.priority, c.run_at, c.queue, c.tenant FROM names AS n` + kindRows + `, LATERAL ` + freeJobs + `
		WHERE n.queue IS NOT NULL AND n.queue <> ALL(` + ruled + `::text[]) AND ` + freeNotLaned + `
		ORDER BY ` + p.order("c") + ` LIMIT ` + m + `)` + laneCandidates + `),
	-- Each queue keeps the candidates it has room for, in claim order,
	-- and then each pool those its free units allow.
	queue_fit(seq, priority, run_at, queue, tenant) AS (
		SELECT c.seq, c.priority, c.run_at, c.queue, c.tenant FROM (
			SELECT c.*, row_number() OVER (PARTITION BY c.queue ORDER BY ` + p.order("c") + `) AS i
			FROM candidates AS c) AS c
		LEFT JOIN room AS o ON o.queue = c.queue
		WHERE o.n IS NULL OR c.i <= o.n),
	pool_over(seq) AS (
		SELECT u.seq FROM (
			SELECT c.seq, p.pool, row_number() OVER (PARTITION BY p.pool ORDER BY ` + p.order("c") + `) AS i
			FROM queue_fit AS c JOIN pool_use AS p ON p.queue = c.queue) AS u
		JOIN pool_free AS f ON f.pool = u.pool WHERE u.i > f.free)
` + tenantOver + `
	SELECT ` + sel + ` FROM queue_fit AS c JOIN jobs AS j ON j.seq = c.seq
	WHERE ` + p.recheck() + ` AND c.seq NOT IN (SELECT seq FROM pool_over)` + notOver + `
	ORDER BY ` + p.order("c") + " LIMIT " + p.count(n) + suffix
}

// lanes are the parts of the ruled pick for queues whose jobs are
// sought tenant by tenant (else empty, or "true" for the conditions): a
// queue with a per-tenant bound (store.QueueLimit.MaxRunningPerTenant)
// or, with any tenant's bound on its running jobs
// (store.ClaimFilter.TenantMaxRunning), every queue. A lane is one
// tenant's jobs in one queue: the queue's tenants are found by a skip
// scan of jobs_unfinished_queue_tenant; a tenant at its bound (capped,
// counted in jobs_running_tenant) or at the queue's per-tenant bound
// has none; each other lane offers its first jobs in claim order, up to
// its room, sought in jobs_queued_queue_tenant, or, for a worker that
// names its kinds, those of each kind in jobs_queued_queue_tenant_kind.
// So a tenant without room costs a seek or two, never a walk of its
// jobs, and neither does a tenant with none of the worker's kinds. A claim of several jobs keeps of each bounded
// tenant's candidates those its room allows (tenant_over).
//
// It returns the CTEs (after room), the lanes' candidates (a UNION ALL
// arm), the conditions that keep laned queues out of the other arms,
// the serial heads' condition on capped tenants, and tenant_over and the
// condition on it.
func (p *picker) lanes(r rules, kinds []string, ruled, m string) (ctes, candidates, notLaned, freeNotLaned, serialNotCapped, over, notOver string) {
	perTenant := slices.ContainsFunc(r.perTenant, func(n int32) bool { return n > 0 }) || slices.Contains(r.rateTenants, true)
	capping := len(r.capTenants) > 0
	if !perTenant && !capping {
		return "", "", "true", "true", "", "", ""
	}
	capTenants, caps := p.arg(r.capTenants)+"::text[]", p.arg(r.caps)+"::int[]"
	laned := "(o.per_tenant > 0 OR o.rate_tenant)"
	notLaned, freeNotLaned = "NOT (o.per_tenant > 0 OR o.rate_tenant)", "true"
	free := ""
	if capping {
		laned, notLaned, freeNotLaned = "true", "false", "false"
		free = `
		UNION ALL
		SELECT n.queue, 0, false, 0, 0::bigint, NULL::bigint FROM names AS n WHERE n.queue IS NOT NULL AND n.queue <> ALL(` + ruled + `::text[])`
		serialNotCapped = " AND s.tenant NOT IN (SELECT tenant FROM capped)"
		over = `,
	tenant_over(seq) AS (
		SELECT u.seq FROM (
			SELECT c.seq, c.tenant, row_number() OVER (PARTITION BY c.tenant ORDER BY ` + p.order("c") + `) AS i
			FROM queue_fit AS c) AS u
		JOIN cap_room AS k ON k.tenant = u.tenant WHERE u.i > k.room)`
		notOver = " AND c.seq NOT IN (SELECT seq FROM tenant_over)"
	}
	running := func(a string) string {
		return "(SELECT count(*) FROM (SELECT FROM jobs AS r WHERE " + unfinishedOf("r", a, "running") +
			" ORDER BY " + unfinishedOrder("r") + " LIMIT " + a + ".per_tenant) AS r)"
	}
	ctes = `
	-- Each bounded tenant's room: its bound less its running jobs,
	-- counted up to the bound in jobs_running_tenant.
	cap_room(tenant, room) AS (
		SELECT c.t, c.n - (SELECT count(*) FROM (SELECT FROM jobs AS r WHERE r.state = 'running'
			AND r.tenant >= c.t AND r.tenant <= c.t ORDER BY r.tenant LIMIT c.n) AS r)
		FROM unnest(` + capTenants + `, ` + caps + `) AS c(t, n)),
	capped(tenant) AS (SELECT k.tenant FROM cap_room AS k WHERE k.room <= 0),
	laned_queues(queue, per_tenant, rate_tenant, rate_limit, rate_per, n) AS (
		SELECT o.queue, o.per_tenant, o.rate_tenant, o.rate_limit, o.rate_per, o.n FROM room AS o
		WHERE NOT o.serial AND coalesce(o.n, 1) > 0 AND ` + laned + free + `),
	lane_tenants(queue, per_tenant, rate_tenant, rate_limit, rate_per, n, tenant) AS (
		SELECT q.queue, q.per_tenant, q.rate_tenant, q.rate_limit, q.rate_per, q.n, ` + unfinishedTenant("q.queue", "") + ` FROM laned_queues AS q
		UNION ALL
		SELECT l.queue, l.per_tenant, l.rate_tenant, l.rate_limit, l.rate_per, l.n, ` + unfinishedTenant("l.queue", "l.tenant") + `
		FROM lane_tenants AS l WHERE l.tenant IS NOT NULL),
	-- A lane's room: the queue's, its tenant's in the queue, and with a
	-- rate kept per tenant, the tenant's limit less its claims in the
	-- window (at most the limit of them read).
	lanes(queue, tenant, room) AS (
		SELECT l.queue, l.tenant, least(l.n, CASE WHEN l.per_tenant > 0 THEN l.per_tenant - ` + running("l") + ` END,
			CASE WHEN l.rate_tenant THEN l.rate_limit - (SELECT count(*) FROM (SELECT FROM queue_starts AS s
				WHERE s.queue = l.queue AND s.tenant = l.tenant AND s.at > ` + p.arg(p.now) + `::timestamptz - l.rate_per * interval '1 microsecond'
				ORDER BY s.queue, s.tenant, s.at LIMIT l.rate_limit) AS s) END)
		FROM lane_tenants AS l WHERE l.tenant IS NOT NULL AND l.tenant NOT IN (SELECT tenant FROM capped)` + p.laneTenants() + `),`
	saved := *p
	p.tenant = "l.tenant"
	room := "least(coalesce(l.room, " + m + "), " + m + ")"
	jobs := p.byPriority("l.queue", "", room)
	if len(kinds) > 0 {
		// Each of the worker's kinds sought in the lane on its own
		// (jobs_queued_queue_tenant_kind), then the lane's first of them
		// up to its room: with the kinds checked on the lane's jobs, a
		// worker of one kind walked another tenant's whole backlog of
		// other kinds at every claim once any tenant had a max_running.
		jobs = "(SELECT c.* FROM unnest(" + p.arg(kinds) + "::text[]) AS k(kind), LATERAL " + p.byPriority("l.queue", "k.kind", room) +
			" ORDER BY " + p.order("c") + " LIMIT " + room + ") AS c"
	}
	p.tenant = saved.tenant
	candidates = `
		UNION ALL
		SELECT c.seq, c.priority, c.run_at, c.queue, c.tenant FROM lanes AS l, LATERAL ` + jobs + `
		WHERE coalesce(l.room, 1) > 0`
	return ctes, candidates, notLaned, freeNotLaned, serialNotCapped, over, notOver
}

// laneTenants is the condition on a lane's tenant (alias l) of the
// worker's tenants, if it names them.
func (p *picker) laneTenants() string {
	if p.tenants == "" {
		return ""
	}
	return " AND l.tenant = ANY(" + p.tenants + ")"
}

// unfinishedTenant is the first tenant after the tenant after (an SQL
// expression, or "" for the first) with QUEUED or RUNNING jobs in
// queue, or NULL: one seek of jobs_unfinished_queue_tenant, the only
// index in (queue, tenant) order, which the ORDER BY asks for (see
// planSettings: a range of the queue, not an equality).
func unfinishedTenant(queue, after string) string {
	where := "x.queue >= " + queue + " AND x.queue <= " + queue
	if after != "" {
		where = "(x.queue, x.tenant) > (" + queue + ", " + after + ") AND x.queue <= " + queue
	}
	return "(SELECT x.tenant FROM jobs AS x WHERE x.state IN ('queued', 'running') AND " + where +
		" ORDER BY x.queue, x.tenant LIMIT 1)"
}

// tenantBefore is the last tenant before the tenant before (an SQL
// expression; "" for the queue's last tenant) with QUEUED or RUNNING
// jobs in queue, or NULL: one seek of jobs_unfinished_queue_tenant,
// read backward.
func tenantBefore(queue, before string) string {
	where := "x.queue <= " + queue
	if before != "" {
		where = "(x.queue, x.tenant) < (" + queue + ", " + before + ")"
	}
	return "(SELECT x.tenant FROM jobs AS x WHERE x.state IN ('queued', 'running') AND " + where +
		" AND x.queue >= " + queue + " ORDER BY x.queue DESC, x.tenant DESC LIMIT 1)"
}

// unfinishedOrder is the order of jobs_unfinished_queue_tenant (of
// alias a), which a seek in it asks for so that no other index can
// answer it without a sort (see planSettings).
func unfinishedOrder(a string) string {
	return a + ".queue, " + a + ".tenant, " + a + ".state, " + a + ".run_at, " + a + ".seq"
}

// unfinishedOf is the condition that a job (alias a) is of the queue
// and tenant of s (an alias with both) and in state, sought in
// jobs_unfinished_queue_tenant as a range of (queue, tenant), whose
// entries of one state are in run_at then seq order.
func unfinishedOf(a, s, state string) string {
	return "(" + a + ".queue, " + a + ".tenant) >= (" + s + ".queue, " + s + ".tenant) AND (" + a + ".queue, " + a + ".tenant) <= (" +
		s + ".queue, " + s + ".tenant) AND " + a + ".state IN ('queued', 'running') AND " + a + ".state = '" + state + "'"
}

// distinct returns names without repeats, in their first order.
func distinct(names []string) []string {
	var out []string
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// rules are a claim's queue rules as arrays, for unnest.
type rules struct {
	queues       []string
	max          []int32
	serial, hold []bool
	rateLimits   []int32
	ratePers     []int64 // µs
	rateTenants  []bool  // Rate.PerTenant
	perTenant    []int32 // MaxRunningPerTenant
	capTenants   []string
	caps         []int32 // TenantMaxRunning, of capTenants
	useQueues    []string
	usePools     []string
	pools        []string
	sizes        []int32
}

// rulesFor keeps the rules of the queues f may claim from (all of
// f.Limits when f names no queues).
func rulesFor(f store.ClaimFilter) rules {
	r := rules{queues: []string{}} // never NULL: queue <> ALL(NULL) is never true
	for q, l := range f.Limits {
		if len(f.Queues) > 0 && !slices.Contains(f.Queues, q) {
			continue
		}
		r.queues = append(r.queues, q)
		r.max = append(r.max, int32(l.MaxRunning))
		r.serial = append(r.serial, l.Serial)
		r.hold = append(r.hold, l.Serial && l.HoldRetry)
		r.rateLimits = append(r.rateLimits, int32(l.Rate.Limit))
		r.ratePers = append(r.ratePers, l.Rate.Per.Microseconds())
		r.perTenant = append(r.perTenant, int32(l.MaxRunningPerTenant))
		r.rateTenants = append(r.rateTenants, l.Rate.PerTenant && !l.Serial)
		for _, p := range l.Pools {
			r.useQueues, r.usePools = append(r.useQueues, q), append(r.usePools, p)
		}
	}
	// A pool counts the running jobs of every queue that uses it, also of
	// queues this claim does not take from.
	for q, l := range f.Limits {
		if len(f.Queues) == 0 || slices.Contains(f.Queues, q) {
			continue
		}
		for _, p := range l.Pools {
			if slices.Contains(r.usePools, p) {
				r.useQueues, r.usePools = append(r.useQueues, q), append(r.usePools, p)
			}
		}
	}
	for p, n := range f.Pools {
		r.pools, r.sizes = append(r.pools, p), append(r.sizes, int32(n))
	}
	for t, n := range f.TenantMaxRunning {
		if n > 0 {
			r.capTenants, r.caps = append(r.capTenants, t), append(r.caps, int32(n))
		}
	}
	return r
}

// lockKeys are the advisory locks a claim under f takes before it
// counts: one per queue it may take from that has a rule, one per pool
// such a queue uses, sorted so that claims take them in one order and
// never deadlock. Claims from queues without rules take none, so they
// never wait for each other.
func (s *Store) lockKeys(f store.ClaimFilter) []int64 {
	var keys []int64
	for q, l := range f.Limits {
		if len(f.Queues) > 0 && !slices.Contains(f.Queues, q) {
			continue
		}
		if l.MaxRunning <= 0 && !l.Serial && len(l.Pools) == 0 && l.Rate.IsZero() && l.MaxRunningPerTenant <= 0 {
			continue
		}
		keys = append(keys, lockKey(s.schema, "queue", q))
		for _, p := range l.Pools {
			keys = append(keys, lockKey(s.schema, "pool", p))
		}
	}
	for _, n := range f.TenantMaxRunning {
		if n > 0 {
			// The tenants' bounds count running jobs of every queue: one
			// lock for them all, so that claims count one at a time.
			keys = append(keys, lockKey(s.schema, "tenant-caps", ""))
			break
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// ruledTurns lets one claim at a time of this Store go to the database
// for each advisory lock key a ruled claim takes (lockKeys); the others
// wait here, holding no connection. Claims waiting in the database for
// a lock each held one of the pool's connections: twenty workers parked
// on a rate-limited queue, woken together, held every connection while
// they queued for its lock one behind the other, and heartbeats and
// completions waited for a connection until their jobs were LOST. The
// database lets one claim hold a lock anyway; another replica's claims
// queue there, one per replica.
type ruledTurns struct {
	mu      sync.Mutex
	turns   map[int64]chan struct{} // capacity 1: full while a claim has the key
	waiting atomic.Int64            // claims waiting here for a turn
}

// take waits for the turn of each key, in the order given (lockKeys
// sorts them, as the prelude takes their locks), and returns their
// release; ok is false, with no turn held, if ctx ends first.
func (r *ruledTurns) take(ctx context.Context, keys []int64) (release func(), ok bool) {
	held := make([]chan struct{}, 0, len(keys))
	release = func() {
		for _, t := range held {
			<-t
		}
	}
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	for _, k := range keys {
		t := r.turn(k)
		select {
		case t <- struct{}{}:
			held = append(held, t)
		case <-ctx.Done():
			release()
			return nil, false
		}
	}
	return release, true
}

// turn returns key's turn. Keys are the queues with rules, their pools
// and the tenants' bounds, so the map stays as small as the config.
func (r *ruledTurns) turn(key int64) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.turns == nil {
		r.turns = map[int64]chan struct{}{}
	}
	t, ok := r.turns[key]
	if !ok {
		t = make(chan struct{}, 1)
		r.turns[key] = t
	}
	return t
}

// ClaimJobs implements store.Store with one statement: it picks the jobs
// with FOR UPDATE SKIP LOCKED (claimers never wait for each other's rows,
// and a row another claim took is re-checked and passed over) and
// updates them, returning them and their old updated_at.
//
// Under queue rules, counting RUNNING jobs in a statement that began
// before another claim committed would let both see room for one: so the
// claim first takes the transaction advisory locks of lockKeys, then
// runs its statement, whose snapshot (READ COMMITTED takes one per
// statement) is later than the commit of every claim that held those
// locks before. The locks and the plan settings (see planSettings) go in
// a statement before the claim's, in one pipelined batch: one round trip
// and one implicit transaction that both last for.
//
// A statement's snapshot may miss jobs committed while it ran, and find
// the jobs it saw taken: so a claim that finds nothing reads whether a
// job is ready now (NextReady's query) and, if one is, claims again (at
// most claimAttempts in all). The engine reads NextReady after a claim
// that found nothing anyway; this saves it a park and a wake-up.
func (s *Store) ClaimJobs(ctx context.Context, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	if len(c.LeaseIDs) == 0 {
		return nil, jobtype.ErrNoJob
	}
	keys := s.lockKeys(f)
	if len(keys) > 0 {
		release, ok := s.ruledTurns.take(ctx, keys)
		if !ok {
			return nil, jobtype.ErrNoJob // the caller left
		}
		defer release()
	}
	// A ruled claim reads its time now that its turn has come, and again
	// before each transaction after the first: one before it may have
	// waited for the locks, and ended with its time.
	now := func() {
		if len(keys) > 0 && c.Clock != nil {
			c.Now = c.Clock()
			f.Now = c.Now
		}
		f.Now = micro(f.Now)
	}
	now()
	query, args := claimQuery(f, c)
	for attempt := 1; ; attempt++ {
		var (
			claimed []store.Claimed
			err     error = errContested
		)
		if !s.mayBeContested(f) {
			claimed, err = s.claim(ctx, keys, query, args)
		}
		if errors.Is(err, errContested) {
			now()
			handled := false
			if len(c.LeaseIDs) > 1 && !f.Ruled() {
				claimed, handled, err = s.claimTurns(ctx, f, c, keys)
			}
			if !handled {
				claimed, err = s.claimFair(ctx, f, c, keys)
			}
		}
		if !errors.Is(err, jobtype.ErrNoJob) || attempt == claimAttempts {
			return claimed, err
		}
		// The claim's snapshot may predate jobs committed while it ran,
		// and the jobs it saw may have been taken meanwhile: if a fresh
		// read finds one ready, claim again.
		if _, ok, err := s.nextReady(ctx, f, true); err != nil || !ok {
			return nil, jobtype.ErrNoJob
		}
		now()
		query, args = claimQuery(f, c)
	}
}

// claimQuery is ClaimJobs' statement and its arguments: the claim of
// the jobs the pick finds, guarded (see claimStatement).
func claimQuery(f store.ClaimFilter, c store.Claim) (string, []any) {
	return claimStatement(f, c, true, func(first int) (string, []any) {
		return pickQuery(f, true, len(c.LeaseIDs), pickedColumns, true, first)
	})
}

// pickedColumns are the columns of the CTE picked (of alias j).
const pickedColumns = "j.seq, j.updated_at, j.run_at, j.priority, j.queue, j.tenant"

// claimStatement is the claim of the jobs pick finds (a query selecting
// pickedColumns of the jobs, locked, whose arguments start at first),
// and its arguments. A claim from rate-limited queues also records each
// job it takes in queue_starts (claimRated).
//
// Guarded (ClaimJobs' first try), it claims nothing if a queue of the
// picked jobs has ready jobs of another tenant than the picked job's,
// and answers then with one row of a picked job numbered 0, which
// readClaims reports as errContested: such a queue's claims take fair
// claiming's turns (claimFair). Otherwise it forgets the picked queues'
// fair state (store.FairState): their ready jobs are one tenant's. The
// look for another tenant is a skip scan of the picked queues' tenants
// (contestedCTEs), a seek or two per tenant with unfinished jobs there.
func claimStatement(f store.ClaimFilter, c store.Claim, guarded bool, pick func(first int) (string, []any)) (string, []any) {
	var leaseQueues []string
	var leases []int64
	for q, d := range c.Leases {
		leaseQueues, leases = append(leaseQueues, q), append(leases, d.Microseconds())
	}
	args := []any{micro(c.Now), c.WorkerID, c.LeaseIDs, leaseQueues, leases, c.Lease.Microseconds()}
	picked, pickArgs := pick(len(args) + 1)
	args = append(args, pickArgs...)
	query := "WITH RECURSIVE picked AS (" + picked + ")" + claimNumbered
	guard, tail := "", "SELECT * FROM claimed"
	if guarded {
		args = append(args, f.Now)
		query += contestedCTEs(len(args))
		guard = "\n\tAND NOT EXISTS (SELECT FROM contested)"
		tail = `forgot_clock AS (DELETE FROM fair_clocks AS k WHERE k.queue IN (SELECT queue FROM picked_queues)
		AND NOT EXISTS (SELECT FROM contested)),
	forgot_passes AS (DELETE FROM fair_passes AS k WHERE k.queue IN (SELECT queue FROM picked_queues)
		AND NOT EXISTS (SELECT FROM contested))
SELECT * FROM claimed
UNION ALL
SELECT ` + qualified(columns, "j") + `, j.updated_at, 0::bigint FROM contested AS c JOIN jobs AS j ON j.seq = c.seq`
	}
	query += ",\n\tclaimed AS (" + fmt.Sprintf(claimUpdate, qualified(columns, "j"), guard) + ")"
	var rated []string
	var pers []int64
	for q, l := range f.Limits {
		if !l.Rate.IsZero() && (len(f.Queues) == 0 || slices.Contains(f.Queues, q)) {
			rated, pers = append(rated, q), append(pers, (l.Rate.Per+store.StartsKept).Microseconds())
		}
	}
	if len(rated) > 0 {
		query += fmt.Sprintf(claimRated, len(args)+1, len(args)+2, len(args)+3)
		args = append(args, rated, pers, f.Now)
	}
	if guarded {
		return query + ",\n\t" + tail, args
	}
	return query + "\n" + tail, args
}

// contestedCTEs are the guard's CTEs, with the claim's time $now:
// picked_queues, the queues of the picked jobs, each with the least of
// its picked tenants; queue_tenants, their tenants with unfinished jobs;
// and contested, a picked job whose queue has a ready job of another
// tenant, if any. Whether a tenant has a ready job is asked only of a
// tenant other than a picked job's of its queue, and once per tenant
// (the CASE orders the two): asked of the picked tenant for every
// picked job, that seek, which steps over the dead entries of the jobs
// claimed since the last vacuum, made a claim of 50 jobs behind 20,000
// take 60 ms instead of 4.
//
// The queue's tenants are found by a skip scan that starts at a picked
// tenant, which has jobs there, and goes both ways from it
// (unfinishedTenant, tenantBefore), never by a seek of the queue's first
// tenant's first entry: in a queue burned down oldest first that entry
// is behind the dead entries of every job claimed since the last vacuum,
// which such a seek steps over at each claim (428 buffers a claim in a
// burn-down of 200,000, more the deeper the queue).
func contestedCTEs(now int) string {
	return `,
	picked_queues(queue, tenant) AS (SELECT p.queue, min(p.tenant) FROM picked AS p GROUP BY p.queue),
	queue_tenants(queue, tenant, way) AS (
		SELECT q.queue, q.tenant, 0 FROM picked_queues AS q
		UNION ALL
		SELECT t.queue, n.tenant, n.way FROM queue_tenants AS t, LATERAL (
			SELECT ` + unfinishedTenant("t.queue", "t.tenant") + ` AS tenant, 1 AS way WHERE t.way >= 0
			UNION ALL
			SELECT ` + tenantBefore("t.queue", "t.tenant") + `, -1 WHERE t.way <= 0) AS n
		WHERE t.tenant IS NOT NULL),
	contested(seq) AS (
		SELECT (SELECT p.seq FROM picked AS p WHERE p.queue = t.queue LIMIT 1) FROM queue_tenants AS t
		WHERE CASE WHEN EXISTS (SELECT FROM picked AS p WHERE p.queue = t.queue AND p.tenant <> t.tenant)
			THEN ` + readyOf("t", fmt.Sprintf("$%d::timestamptz", now)) + ` ELSE false END
		LIMIT 1)`
}

// claimRated is the end of a claim from rate-limited queues: after the
// UPDATE (claimed), a row in queue_starts for each job it took from one
// of the queues $%[1]d at the filter's time $%[3]d (the time the pick
// counted the windows back from) after lockWait, as the jobs' leases
// count from, and the queues' rows that left their
// windows more than store.StartsKept ago ($%[2]d µs old each) deleted. The claim holds the
// queues' advisory locks (lockKeys), so claims count and record one
// after the other.
const claimRated = `,
	started AS (INSERT INTO queue_starts (queue, tenant, at)
		SELECT c.queue, c.tenant, $%[3]d::timestamptz + ` + lockWait + ` FROM claimed AS c WHERE c.queue = ANY($%[1]d::text[])),
	pruned AS (DELETE FROM queue_starts AS s USING unnest($%[1]d::text[], $%[2]d::bigint[]) AS r(queue, per)
		WHERE s.queue = r.queue AND s.at <= $%[3]d::timestamptz - r.per * interval '1 microsecond')`

// claimAttempts bounds how often ClaimJobs claims again after finding
// nothing while a later read finds a job ready.
const claimAttempts = 3

// claim runs the claim statement after the prelude with the advisory
// locks keys, and returns the jobs in claim order.
func (s *Store) claim(ctx context.Context, keys []int64, query string, args []any) ([]store.Claimed, error) {
	var claimed []store.Claimed
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		b := &pgx.Batch{}
		b.Queue(prelude, keys)
		b.Queue(query, args...)
		br := conn.SendBatch(ctx, b)
		var err error
		claimed, err = readClaims(br)
		return errors.Join(err, br.Close())
	})
	if errors.Is(err, errContested) {
		return nil, errContested
	}
	return s.claimed(claimed, err)
}

// claimed is a claim's answer once its transaction ended with err: the
// jobs it took, each announced to the listeners, or ErrNoJob for none.
func (s *Store) claimed(claimed []store.Claimed, err error) ([]store.Claimed, error) {
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	if len(claimed) == 0 {
		return nil, jobtype.ErrNoJob
	}
	for _, c := range claimed {
		s.announce(c.Job)
	}
	s.vacuum.wrote(len(claimed))
	return claimed, nil
}

// readClaims reads the result of the statement before the claim (the
// prelude, or the fair state's write) and then the claim's (readClaimed).
func readClaims(br pgx.BatchResults) ([]store.Claimed, error) {
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	return readClaimed(br)
}

// readClaimed reads the claimed rows, which RETURNING gives in no set
// order, into claim order.
func readClaimed(br pgx.BatchResults) ([]store.Claimed, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		claimed []store.Claimed
		order   []int64
	)
	for rows.Next() {
		var (
			queuedAt pgtype.Timestamptz
			i        int64
		)
		row, err := scanJob(rows, &queuedAt, &i)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			return nil, errContested
		}
		claimed = append(claimed, store.Claimed{Job: row.job, QueuedAt: fromTime(queuedAt)})
		order = append(order, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]store.Claimed, len(claimed))
	for k, i := range order {
		out[i-1] = claimed[k]
	}
	return out, nil
}

// NextReady implements store.Store with ClaimJobs' pick of one job,
// without the ready condition and without locks: it is a read.
func (s *Store) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	return s.nextReady(ctx, f, false)
}

func (s *Store) nextReady(ctx context.Context, f store.ClaimFilter, ready bool) (time.Time, bool, error) {
	f.Now = micro(f.Now)
	query, args := pickQuery(f, ready, 1, "j.run_at", false, 1)
	var runAt pgtype.Timestamptz
	b := &pgx.Batch{}
	b.Queue(prelude, []int64(nil))
	b.Queue(query, args...)
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&runAt)
	}
	err = errors.Join(err, br.Close())
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next ready: %w", classify(err))
	}
	return fromTime(runAt), true, nil
}
