package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// ClaimJobs implements store.Store. The picks, with the queue rules and
// fair claiming, and the changes are one immediate transaction on the
// single writer, so no other claim can see a job still queued, or a
// queue's or pool's room, or a queue's passes, before this one took it.
//
// Without rules (no queue of f in f.Limits) the first len(c.LeaseIDs)
// ready jobs in claim order are what as many claims in a row would take,
// unless a queue of theirs has ready jobs of another tenant: one query
// picks them all, a look per queue finds it has not, and one UPDATE
// claims them all. Otherwise each pick must see the claims before it (a
// serial queue's next job is its head only once the head runs; a
// queue's or pool's room shrinks with each claim; the tenants' passes
// move with each), so the pick, fair claiming's turn and the claim's
// UPDATE run once per job (claimEach).
func (s *Store) ClaimJobs(ctx context.Context, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	if len(c.LeaseIDs) == 0 {
		return nil, jobtype.ErrNoJob
	}
	var taken []store.Claimed
	err := s.writeTx(ctx, "claim jobs", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		taken, err = s.claimJobs(ctx, tx, f, c)
		if err == nil && len(taken) == 0 {
			err = jobtype.ErrNoJob
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return taken, nil
}

func (s *Store) claimJobs(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	if !f.Ruled() {
		n := len(c.LeaseIDs)
		m := s.firstPick(f, n)
		picks, err := pickUnruled(ctx, tx, f, m)
		if err != nil || len(picks) == 0 {
			return nil, err
		}
		if queue, one := oneQueue(picks); one {
			tenants, err := readyTenants(ctx, tx, queue, f, 0)
			if err != nil {
				return nil, err
			}
			if len(tenants) > 1 {
				return s.claimTurns(ctx, tx, f, c, queue, tenants, picks, len(picks) < m)
			}
			if err := s.forgetFair(ctx, tx, queue); err != nil {
				return nil, err
			}
			return s.claimPicks(ctx, tx, f, c, picks[:min(n, len(picks))], 0)
		}
		picks = picks[:min(n, len(picks))]
		contested, err := s.contested(ctx, tx, f, picks)
		if err != nil {
			return nil, err
		}
		if !contested {
			return s.claimPicks(ctx, tx, f, c, picks, 0)
		}
	}
	return s.claimEach(ctx, tx, f, c)
}

// pickUnruled reads the first n jobs in claim order without rules, with
// one query.
func pickUnruled(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, n int) ([]pick, error) {
	query, args := unruledPickQuery(f, true, n, columns)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	defer rows.Close()
	picks := make([]pick, 0, n)
	for len(picks) < n && rows.Next() {
		old, seq, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("claim jobs: %w", classify(err))
		}
		picks = append(picks, pick{job: old, seq: seq})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	return picks, nil
}

// pickNext reads the job a claim under f takes next, if any, with the
// rules' pick or the pick of one job without them.
func pickNext(ctx context.Context, tx *sql.Tx, f store.ClaimFilter) (pick, bool, error) {
	var (
		query string
		args  []any
	)
	if !f.Ruled() {
		query, args = unruledPickQuery(f, true, 1, columns)
	} else {
		var p string
		p, args = ruledPickQuery(f, true, "j.seq")
		query = "SELECT " + columns + " FROM jobs WHERE seq = (" + p + ")"
	}
	old, seq, err := scanJob(tx.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return pick{}, false, nil
	}
	if err != nil {
		return pick{}, false, fmt.Errorf("claim job: %w", classify(err))
	}
	return pick{job: old, seq: seq}, true, nil
}

// claimEach picks, takes fair claiming's turn and claims one job at a
// time.
func (s *Store) claimEach(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, c store.Claim) ([]store.Claimed, error) {
	var out []store.Claimed
	for i := range c.LeaseIDs {
		p, ok, err := pickNext(ctx, tx, f)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if p, err = s.fairTurn(ctx, tx, f, p); err != nil {
			return nil, err
		}
		claimed, err := s.claimPicks(ctx, tx, f, c, []pick{p}, i)
		if err != nil {
			return nil, err
		}
		out = append(out, claimed...)
	}
	return out, nil
}

// claimPicks claims picks, the first under the lease c.LeaseIDs[first],
// with as few UPDATEs as writeJobs makes, and records their starts in
// their queues' rate windows.
func (s *Store) claimPicks(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, c store.Claim, picks []pick, first int) ([]store.Claimed, error) {
	writes := make([]jobWrite, len(picks))
	for i, p := range picks {
		writes[i] = jobWrite{seq: p.seq, old: p.job, next: claimAs(p.job, c, first+i)}
	}
	if err := s.writeJobs(ctx, tx, writes); err != nil {
		return nil, err
	}
	out := make([]store.Claimed, len(writes))
	for i, w := range writes {
		if rate := f.Limits[w.next.Queue].Rate; !rate.IsZero() {
			if err := recordStart(ctx, tx, w.next.Queue, w.next.Tenant, f.Now, rate); err != nil {
				return nil, err
			}
		}
		s.changed(w.next)
		out[i] = store.Claimed{Job: w.next, QueuedAt: w.old.UpdatedAt}
	}
	return out, nil
}

// claimAs is old as the i-th job a claim under c takes, as committed.
func claimAs(old jobtype.Job, c store.Claim, i int) jobtype.Job {
	next := old.Clone()
	c.LeaseID = c.LeaseIDs[i]
	c.Apply(&next)
	return versioned(old, next)
}

// The pick. Every claim and every parked claimer's look (NextReady) runs
// it, so its cost must not grow with the jobs that wait, whatever the
// worker's filter: TestClaimPlanSeeksEveryQueueHead pins the plans.
//
// Claim order is Priority (0 first), then RunAt, then creation order
// (seq, the rowid); a serial queue's own order ignores Priority (its head
// is its first job by RunAt, then creation), though its head competes
// with other queues' jobs by its priority. Each index below holds the
// QUEUED jobs of one group by priority, then in that order:
//   - jobs_queued_priority (priority, run_at): every queued job;
//   - jobs_queued_queue (queue, priority, run_at): one queue's;
//   - jobs_queued_kind (kind, queue, priority, run_at): one kind's in one
//     queue.
//
// A ready job is one whose run_at has come, a range of run_at under each
// priority, not one range of the index: a walk in index order would step
// over every job of an urgent priority that is due later before it
// reached the ready jobs of the next. So a group is walked a priority at
// a time (priorityWalk): the next priority with queued jobs is one seek
// (MIN(priority) above the last), its first ready job another, each next
// one another. A group whose most urgent priority has ready jobs costs
// one seek more than a walk of one range would; each priority passed
// over, two.
//
// A worker names the kinds it runs (and maybe its queues): its pick walks
// only those groups, never the jobs of other kinds waiting ahead of them
// in the same queue, which it would have to step over one by one in an
// index without the kind. The tenants filter is checked on the jobs of
// the groups walked: a tenant's claim steps over the ready jobs of other
// tenants of the same kind and queue ahead of its own.

// priorityWalk is the CTE walk(kind, queue, p, seq, run_at, i, phase):
// the QUEUED jobs matching filter (conditions on jobs' columns, each
// after AND) of each row of the CTE groups(kind, queue) that guard (a
// condition on g, or "") keeps, sought in index by key (a condition on
// the group's row of alias a, or "" for every job), in claim order. A
// row with a seq is a job (its priority p, its run_at, the i-th of its
// group); the others are the walk's steps between priorities. Its phase
// says what the next step seeks: 0 the next priority with queued jobs,
// 1 that priority's first job, 2 the job after this one. A group stops at
// its last priority or once i reaches bound (an expression, or "" for no
// bound); with each (NextReady's look at the earliest RunAt) it takes
// each priority's first job only.
func priorityWalk(index, guard string, key func(a string) string, filter string, bound string, each bool) string {
	return namedWalk("walk", "groups", index, guard, key, filter, bound, each)
}

// namedWalk is priorityWalk as the CTE name over the groups of the CTE
// groups (whose kind column a key may use for another value: a lane's
// tenant).
func namedWalk(name, groups, index, guard string, key func(a string) string, filter string, bound string, each bool) string {
	on := func(a string) string {
		if k := key(a); k != "" {
			return " AND " + k
		}
		return ""
	}
	from := "jobs INDEXED BY " + index + " WHERE state = 'queued'"
	nextPriority := "(SELECT MIN(priority) FROM " + from + on("w") + " AND priority > w.p)"
	first := "(SELECT seq FROM " + from + on("w") + " AND priority = w.p" + filter + " ORDER BY run_at, seq LIMIT 1)"
	// The job after w: the range starts at w's run_at, and the few jobs
	// of that run_at up to w are stepped over.
	next := "(SELECT seq FROM " + from + on("w") + " AND priority = w.p" + filter +
		" AND run_at >= w.run_at AND (run_at > w.run_at OR seq > w.seq) ORDER BY run_at, seq LIMIT 1)"
	found := "2" // after a job, the job after it
	if each {
		found = "0" // after a job, the next priority
	}
	where := ""
	if guard != "" {
		where = "\n\t\tWHERE " + guard
	}
	stop := "w.p IS NOT NULL"
	if bound != "" {
		stop += " AND w.i < " + bound
	}
	return name + `(kind, queue, p, seq, run_at, i, phase) AS (
		SELECT g.kind, g.queue, -1, NULL, NULL, 0, 0 FROM ` + groups + ` AS g` + where + `
		UNION ALL
		SELECT w.kind, w.queue, CASE WHEN w.phase = 0 THEN ` + nextPriority + ` ELSE w.p END,
			j.seq, j.run_at, w.i + (j.seq IS NOT NULL),
			CASE WHEN w.phase = 0 THEN 1 WHEN j.seq IS NULL THEN 0 ELSE ` + found + ` END
		FROM ` + name + ` AS w LEFT JOIN jobs AS j ON j.seq = CASE w.phase WHEN 1 THEN ` + first + `
			WHEN 2 THEN ` + next + ` END
		WHERE ` + stop + `)`
}

// pickOrder is the order of the pick's jobs (columns of alias a, or bare
// with a ""): claim order when ready; by RunAt for NextReady, which
// reports the earliest RunAt, whatever its priority.
func pickOrder(a string, ready bool) string {
	if a != "" {
		a += "."
	}
	if ready {
		return a + "priority, " + a + "run_at, " + a + "seq"
	}
	return a + "run_at, " + a + "seq"
}

// unruledPickQuery is the pick without rules: selected (columns of jobs)
// of the QUEUED jobs matching f in claim order, ready ones (RunAt at or
// before f.Now) only if ready, of which the first n are the pick. The
// caller reads only the first n rows: the query may hold more. Not ready
// (NextReady), the first row is the job of the earliest RunAt.
//
// Its groups are every queued job (with neither kinds nor queues), or
// each named queue, or each named kind in each queue that has queued jobs
// of it (a skip-scan of jobs_queued_kind, one seek per queue), or both
// lists' pairs; it walks each group's first n jobs (priorityWalk), a seek
// each, sorts their seqs in claim order and reads the first n (up to 2n)
// jobs: at most n jobs per group are sought, however many wait.
//
// It takes no LIMIT as a parameter: SQLite plans a statement that sorts
// under a LIMIT parameter again at every run (it plans with the value),
// which made the pick about ten times as slow (250 µs, not 25). The sort
// of the groups' jobs has a literal one.
func unruledPickQuery(f store.ClaimFilter, ready bool, n int, selected string) (string, []any) {
	var args []any
	filter := ""
	if ready {
		filter += " AND run_at <= :now"
		args = append(args, sql.Named("now", toMicro(f.Now)))
	}
	if len(f.Tenants) > 0 {
		filter += " AND tenant IN (SELECT value FROM json_each(:tenants))"
		args = append(args, sql.Named("tenants", mustJSON(f.Tenants, "[]")))
	}
	args = append(args, sql.Named("n", n))
	if len(f.Kinds) > 0 {
		args = append(args, sql.Named("kinds", mustJSON(distinct(f.Kinds), "[]")))
	}
	if len(f.Queues) > 0 {
		args = append(args, sql.Named("queues", mustJSON(distinct(f.Queues), "[]")))
	}
	var groups, index, guard string
	var key func(group string) string
	oneTenant := len(distinct(f.Tenants)) == 1 && len(distinct(f.Queues)) == 1
	switch {
	case oneTenant && len(f.Kinds) > 0:
		// Fair claiming's pick of one tenant's job of the worker's kinds
		// in one queue: a walk of each kind's jobs of that tenant
		// (tenantKindWalk).
		groups = `groups(kind, queue) AS (SELECT json_array(:tenant, k.value), q.value FROM json_each(:kinds) AS k, json_each(:queues) AS q)`
		index, key = tenantKindIndex, tenantKindKey
		args = append(args, sql.Named("tenant", f.Tenants[0]))
	case oneTenant:
		// Fair claiming's pick of one tenant's job in one queue: a walk
		// of that tenant's jobs only. The group's kind column carries the
		// tenant: a parameter compared with an indexed column is one
		// SQLite's planner reads, and binding it again makes SQLite
		// prepare the whole statement again at its next run (200 to 300
		// µs of this one, against 60 to run it).
		groups = `groups(kind, queue) AS (SELECT :tenant, value FROM json_each(:queues))`
		index = "jobs_queued_queue_tenant"
		key = func(g string) string { return "queue = " + g + ".queue AND tenant = " + g + ".kind" }
		args = append(args, sql.Named("tenant", f.Tenants[0]))
	case len(f.Kinds) == 0 && len(f.Queues) == 0:
		groups = `groups(kind, queue) AS (SELECT NULL, NULL)`
		index = "jobs_queued_priority"
		key = func(string) string { return "" }
	case len(f.Kinds) == 0:
		groups = `groups(kind, queue) AS (SELECT NULL, value FROM json_each(:queues))`
		index = "jobs_queued_queue"
		key = func(g string) string { return "queue = " + g + ".queue" }
	case len(f.Queues) == 0:
		groups = `kinds(kind) AS (SELECT value FROM json_each(:kinds)),
	groups(kind, queue) AS (
		SELECT kind, (SELECT MIN(queue) FROM jobs INDEXED BY jobs_queued_kind
			WHERE state = 'queued' AND kind = k.kind) FROM kinds AS k
		UNION ALL
		SELECT kind, (SELECT MIN(queue) FROM jobs INDEXED BY jobs_queued_kind
			WHERE state = 'queued' AND kind = g.kind AND queue > g.queue) FROM groups AS g
		WHERE g.queue IS NOT NULL)`
		index, guard = "jobs_queued_kind", "g.queue IS NOT NULL"
		key = func(g string) string { return "kind = " + g + ".kind AND queue = " + g + ".queue" }
	default:
		groups = `groups(kind, queue) AS (
		SELECT k.value, q.value FROM json_each(:kinds) AS k, json_each(:queues) AS q)`
		index = "jobs_queued_kind"
		key = func(g string) string { return "kind = " + g + ".kind AND queue = " + g + ".queue" }
	}
	// Paused queues (pauses.go) are passed over in the statement: a
	// group of one queue whole, by its guard; the walk of every queued
	// job (no kinds, no queues) job by job, so such a worker steps over
	// the ready jobs of paused queues ahead of the first it may take.
	if len(f.Kinds) == 0 && len(f.Queues) == 0 {
		filter += " AND " + notPaused("queue")
	} else if guard == "" {
		guard = notPaused("g.queue")
	} else {
		guard += " AND " + notPaused("g.queue")
	}
	if !ready && len(f.Kinds) == 0 && len(f.Queues) == 0 {
		// The earliest RunAt of every queued job, whatever its priority:
		// the first of jobs_state_run_at, one seek.
		return "SELECT " + selected + " FROM jobs INDEXED BY jobs_state_run_at WHERE state = 'queued'" + filter +
			" ORDER BY run_at, seq", args
	}
	bound := ""
	if ready {
		bound = ":n"
	}
	query := `WITH RECURSIVE
	` + groups + `,
	` + priorityWalk(index, guard, key, filter, bound, !ready) + `
`
	order := "p, run_at, seq"
	if !ready {
		order = "run_at, seq"
	}
	queues := len(distinct(f.Queues))
	if oneGroup := (oneTenant || queues <= 1 && (queues == 1 || len(f.Kinds) == 0)) && len(distinct(f.Kinds)) <= 1; ready && n == 1 && oneGroup {
		// One group's walk finds its jobs in claim order (SQLite's
		// recursive queue is first in, first out, and each step adds one
		// row), so its first job is the pick, without a sort, which on a
		// read connection (NextReady) makes a temporary file.
		return query + "SELECT " + selected + " FROM jobs WHERE seq = (SELECT seq FROM walk WHERE seq IS NOT NULL LIMIT 1)", args
	}
	if n == 1 || !ready {
		// One job: a lookup of the first, rather than a sort of them all.
		return query + "SELECT " + selected + " FROM jobs WHERE seq = (SELECT seq FROM walk WHERE seq IS NOT NULL ORDER BY " +
			order + " LIMIT 1)", args
	}
	// The first n of the groups' jobs, by a sort of their seqs, whose
	// LIMIT is n rounded up to a power of two: a literal (so the statement
	// is planned once), and few statement texts.
	limit := 2
	for limit < n {
		limit *= 2
	}
	return query + "SELECT " + selected + " FROM jobs WHERE seq IN (SELECT seq FROM walk WHERE seq IS NOT NULL ORDER BY " +
		order + " LIMIT " + strconv.Itoa(limit) + ") ORDER BY " + pickOrder("", ready), args
}

// tenantKindWalk: fair claiming's walks of one tenant's jobs, for a
// worker that names its kinds, have a group per kind, sought in
// jobs_queued_queue_tenant_kind by queue, tenant and kind, so that they
// read only jobs the worker may take. With the kinds checked on the
// tenant's jobs instead, a worker of a kind that one tenant submits
// walked another tenant's whole backlog of other kinds in the queue, at
// every claim (an outside probe: 175 to 255 ms a claim behind 950,000
// such jobs, holding the writer). The group's kind column is a JSON
// array of the tenant and the kind, read with ->>, as a CTE column the
// planner takes for a value, not a parameter it plans for.
const tenantKindIndex = "jobs_queued_queue_tenant_kind"

func tenantKindKey(g string) string {
	return "queue = " + g + ".queue AND tenant = " + g + ".kind ->> 0 AND kind = " + g + ".kind ->> 1"
}

// distinct returns names without repeats, so that no group is walked
// twice.
func distinct(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// ruledPickQuery finds the job ClaimJobs takes next under rules (the ready
// case) or the one whose RunAt NextReady reports, with the queue rules
// checked in SQL: selected (columns of jobs AS j) of one job, or no row.
// Its parameters: :now,
// :limits (a JSON object: queue -> {max, serial, hold}), :uses (queue ->
// [pool, ...]), :sizes (pool -> units), and, when filtered, :tenants,
// :kinds and :queues (JSON arrays).
//
// Plan, so that no claim scans every queued job:
//   - names: the queues with QUEUED jobs, by a skip-scan of the index
//     jobs_state_queue_run_at (one seek per queue: MIN(queue) > the last
//     one), or the worker's own list of queues;
//   - heads: a serial queue's heads are each tenant's first job by RunAt
//     then creation, whatever its priority or kind (order is the rule: a
//     head the worker may not take blocks its tenant's jobs in the queue
//     for it, never another tenant's), of the tenants with none of their
//     jobs there running: a skip-scan of the queue's tenants and a seek
//     or two per tenant in jobs_unfinished_queue_tenant, whose rows of one
//     (queue, tenant, state) are in run_at then seq (rowid) order; with
//     hold a job backing off before a retry comes first, found in the
//     partial index jobs_queued_retry.
//     Another queue's head is its first job in claim order, found by a
//     walk of its priorities (priorityWalk) in jobs_queued_queue, or, for
//     a worker that names its kinds, of each kind's in jobs_queued_kind;
//   - room, checked before any head is sought: each pool's RUNNING jobs
//     (of every queue that uses it) counted once per claim, and each
//     bounded queue's, by seeks in jobs_state_queue_run_at (state =
//     'running', queue = ?): the work is in the running jobs of the
//     rule's queues, never the queued.
//
// The heads compete in claim order, a serial queue's by its head's
// priority. The rules are MATERIALIZED, so SQLite indexes them (an
// automatic index) instead of re-reading the JSON for every queue. So a
// claim costs a few seeks per queue with work, however deep the queues;
// the only sort is of the heads, a few rows per queue.
func ruledPickQuery(f store.ClaimFilter, ready bool, selected string) (string, []any) {
	args := []any{
		sql.Named("now", toMicro(f.Now)),
		sql.Named("limits", limitsJSON(f.Limits)),
		sql.Named("uses", usesJSON(f.Limits)),
		sql.Named("sizes", mustJSON(f.Pools, "{}")),
	}
	names := `names(name) AS (
		SELECT (SELECT MIN(queue) FROM jobs WHERE state = 'queued')
		UNION ALL
		SELECT (SELECT MIN(queue) FROM jobs WHERE state = 'queued' AND queue > name)
		FROM names WHERE name IS NOT NULL)`
	if len(f.Queues) > 0 {
		names = `names(name) AS (SELECT DISTINCT value FROM json_each(:queues))`
		args = append(args, sql.Named("queues", mustJSON(f.Queues, "[]")))
	}
	due := ""
	if ready {
		due = " AND run_at <= :now"
	}
	// tenants and match are the worker's own filter: a queue's head is
	// its first job that matches, but a serial queue's is its first job,
	// which then must match.
	tenants := ""
	if len(f.Tenants) > 0 {
		tenants = " AND tenant IN (SELECT value FROM json_each(:tenants))"
		args = append(args, sql.Named("tenants", mustJSON(f.Tenants, "[]")))
	}
	match := tenants
	// The queues without a serial rule are the walk's groups: each
	// queue, or each of the worker's kinds in each queue.
	groups := `groups(kind, queue) AS (SELECT NULL, o.name FROM open_queues AS o WHERE NOT o.serial AND NOT o.laned)`
	index := "jobs_queued_queue"
	key := func(g string) string { return "queue = " + g + ".queue" }
	kinds := ""
	walkFilter := due + tenants
	if len(f.Kinds) > 0 {
		match += " AND kind IN (SELECT kind FROM kinds)"
		args = append(args, sql.Named("kinds", mustJSON(f.Kinds, "[]")))
		kinds = `kinds(kind) AS MATERIALIZED (SELECT DISTINCT value FROM json_each(:kinds)),
	`
		groups = `groups(kind, queue) AS (SELECT k.kind, o.name FROM open_queues AS o, kinds AS k WHERE NOT o.serial AND NOT o.laned)`
		index = "jobs_queued_kind"
		key = func(g string) string { return "kind = " + g + ".kind AND queue = " + g + ".queue" }
	}
	switch oneTenant := len(distinct(f.Tenants)) == 1 && len(distinct(f.Queues)) == 1; {
	case oneTenant && len(f.Kinds) > 0:
		// Fair claiming's pick of one tenant's job of the worker's kinds
		// in one queue, as in unruledPickQuery (tenantKindWalk).
		groups = `groups(kind, queue) AS (SELECT json_array(:tenant, k.kind), o.name FROM open_queues AS o, kinds AS k WHERE NOT o.serial AND NOT o.laned)`
		index, key = tenantKindIndex, tenantKindKey
		args = append(args, sql.Named("tenant", f.Tenants[0]))
	case oneTenant:
		// Fair claiming's pick of one tenant's job in one queue: a walk
		// of that tenant's jobs only. The group's kind column carries the
		// tenant, as in unruledPickQuery.
		groups = `groups(kind, queue) AS (SELECT :tenant, o.name FROM open_queues AS o WHERE NOT o.serial AND NOT o.laned)`
		index = "jobs_queued_queue_tenant"
		key = func(g string) string { return "queue = " + g + ".queue AND tenant = " + g + ".kind" }
		args = append(args, sql.Named("tenant", f.Tenants[0]))
	}
	bound := ""
	if ready {
		bound = "1"
	}
	// A serial queue's heads are each tenant's: its tenants are found by
	// a skip-scan of jobs_unfinished_queue_tenant, whose rows of one
	// (queue, tenant, state) are in run_at then seq (rowid) order.
	const unfinished = `jobs INDEXED BY jobs_unfinished_queue_tenant WHERE state IN ('queued', 'running')`
	lanes, laneHeads, notCapped, laned := laneCTEs(f, unfinished, due, bound, ready, tenants, &args)
	query := `WITH RECURSIVE
	lim(queue, max_running, serial, hold, rate_limit, rate_per, rate_tenant, per_tenant) AS MATERIALIZED (
		SELECT key, value ->> 'max', value ->> 'serial', value ->> 'hold', value ->> 'rate', value ->> 'per',
			coalesce(value ->> 'rate_tenant', 0), coalesce(value ->> 'per_tenant', 0)
		FROM json_each(:limits)),
	pool_use(queue, pool) AS MATERIALIZED (
		SELECT u.key, p.value FROM json_each(:uses) AS u, json_each(u.value) AS p),
	full_pool(pool) AS MATERIALIZED (
		SELECT z.key FROM json_each(:sizes) AS z
		WHERE (SELECT COUNT(*) FROM jobs AS r WHERE r.state = 'running'
			AND r.queue IN (SELECT o.queue FROM pool_use AS o WHERE o.pool = z.key)) >= z.value),
	pool_blocked(queue) AS MATERIALIZED (
		SELECT u.queue FROM pool_use AS u JOIN full_pool AS p ON p.pool = u.pool),
	` + kinds + names + `,
	open_queues(name, serial, hold, per_tenant, rate_tenant, rate_limit, rate_per, laned) AS (
		SELECT n.name, coalesce(l.serial, 0), coalesce(l.hold, 0), coalesce(l.per_tenant, 0),
			coalesce(l.rate_tenant, 0), coalesce(l.rate_limit, 0), coalesce(l.rate_per, 0), ` + laned + `
		FROM names AS n LEFT JOIN lim AS l ON l.queue = n.name
		WHERE n.name IS NOT NULL AND ` + notPaused("n.name") + `
			AND n.name NOT IN (SELECT queue FROM pool_blocked)
			AND (coalesce(l.max_running, 0) = 0 OR (SELECT COUNT(*) FROM jobs AS r
				WHERE r.state = 'running' AND r.queue = n.name) < l.max_running)
			AND (coalesce(l.rate_limit, 0) = 0 OR (l.rate_tenant AND NOT coalesce(l.serial, 0)) OR (SELECT COUNT(*) FROM queue_starts AS s
				WHERE s.queue = n.name AND s.at > :now - l.rate_per) < l.rate_limit)),
	` + groups + `,
	` + priorityWalk(index, "", key, walkFilter, bound, !ready) + `,` + lanes + `
	serial_tenants(queue, tenant, hold) AS (
		SELECT o.name, (SELECT MIN(tenant) FROM ` + unfinished + ` AND queue = o.name), o.hold
		FROM open_queues AS o WHERE o.serial
		UNION ALL
		SELECT s.queue, (SELECT MIN(tenant) FROM ` + unfinished + ` AND queue = s.queue AND tenant > s.tenant), s.hold
		FROM serial_tenants AS s WHERE s.tenant IS NOT NULL),
	heads(seq) AS (
		SELECT coalesce(
			CASE WHEN s.hold THEN (SELECT seq FROM jobs INDEXED BY jobs_queued_retry
				WHERE state = 'queued' AND attempt > 0 AND queue = s.queue AND tenant = s.tenant ORDER BY run_at, seq LIMIT 1) END,
			(SELECT seq FROM ` + unfinished + ` AND queue = s.queue AND tenant = s.tenant AND state = 'queued'
				ORDER BY run_at, seq LIMIT 1))
		FROM serial_tenants AS s WHERE s.tenant IS NOT NULL` + strings.ReplaceAll(tenants, "tenant IN", "s.tenant IN") + notCapped + `
			AND NOT EXISTS (SELECT 1 FROM ` + unfinished + ` AND queue = s.queue AND tenant = s.tenant AND state = 'running')
		UNION ALL
		SELECT seq FROM walk WHERE seq IS NOT NULL` + laneHeads + `)
SELECT ` + selected + ` FROM heads AS hd JOIN jobs AS j ON j.seq = hd.seq
WHERE 1` + due + match + `
ORDER BY ` + pickOrder("j", ready) + ` LIMIT 1`
	return query, args
}

// laneCTEs are the CTEs of ruledPickQuery's lanes, when f needs them
// (else empty strings and laned "0"): a queue whose jobs are sought
// tenant by tenant, because a tenant may have no room in it while
// others have (store.QueueLimit.MaxRunningPerTenant), or, with any
// tenant's bound on its running jobs (store.ClaimFilter.TenantMaxRunning),
// every queue. A lane is one tenant's jobs in one queue: the queue's
// tenants are found by a skip-scan of jobs_unfinished_queue_tenant; a
// tenant at its bound (capped, counted in jobs_running_tenant) or at the
// queue's per-tenant bound has none; each other lane is walked in claim
// order in jobs_queued_queue_tenant (namedWalk, with the tenant in the
// groups' kind column), or, for a worker that names its kinds, each of
// its kinds in the lane in jobs_queued_queue_tenant_kind. So a tenant
// without room costs a seek or two, never a walk of its jobs, and
// neither does a tenant with none of the worker's kinds.
// lanes goes after the walk's CTE, laneHeads in heads' UNION, notCapped
// in a serial head's condition; laned is open_queues' laned column.
func laneCTEs(f store.ClaimFilter, unfinished, due, bound string, ready bool, tenants string, args *[]any) (lanes, laneHeads, notCapped, laned string) {
	caps := map[string]int{}
	for t, n := range f.TenantMaxRunning {
		if n > 0 {
			caps[t] = n
		}
	}
	perTenant := false
	for q, l := range f.Limits {
		if (l.MaxRunningPerTenant > 0 || l.Rate.PerTenant) && (len(f.Queues) == 0 || slices.Contains(f.Queues, q)) {
			perTenant = true
		}
	}
	if len(caps) == 0 && !perTenant {
		return "", "", "", "0"
	}
	laned = "coalesce(l.per_tenant, 0) > 0 OR coalesce(l.rate_tenant, 0)"
	if len(caps) > 0 {
		laned = "1"
		notCapped = " AND s.tenant NOT IN (SELECT tenant FROM capped)"
	}
	*args = append(*args, sql.Named("caps", mustJSON(caps, "{}")))
	// Each lane's jobs are sought by tenant, or, for a worker that names
	// its kinds, by tenant and kind (tenantKindWalk): a lane of another
	// tenant's backlog of other kinds is then a seek, not a walk of it.
	index, key := "jobs_queued_queue_tenant", func(g string) string { return "queue = " + g + ".queue AND tenant = " + g + ".kind" }
	groups := "SELECT l.tenant, l.queue FROM lane_tenants AS l"
	if len(f.Kinds) > 0 {
		index, key = tenantKindIndex, tenantKindKey
		groups = "SELECT json_array(l.tenant, k.kind), l.queue FROM lane_tenants AS l, kinds AS k"
	}
	lanes = `
	capped(tenant) AS MATERIALIZED (
		SELECT c.key FROM json_each(:caps) AS c
		WHERE (SELECT COUNT(*) FROM jobs INDEXED BY jobs_running_tenant WHERE state = 'running' AND tenant = c.key) >= c.value),
	lane_tenants(queue, per_tenant, rate_tenant, rate_limit, rate_per, tenant) AS (
		SELECT o.name, o.per_tenant, o.rate_tenant, o.rate_limit, o.rate_per, (SELECT MIN(tenant) FROM ` + unfinished + ` AND queue = o.name)
		FROM open_queues AS o WHERE o.laned AND NOT o.serial
		UNION ALL
		SELECT l.queue, l.per_tenant, l.rate_tenant, l.rate_limit, l.rate_per,
			(SELECT MIN(tenant) FROM ` + unfinished + ` AND queue = l.queue AND tenant > l.tenant)
		FROM lane_tenants AS l WHERE l.tenant IS NOT NULL),
	lanes(kind, queue) AS (
		` + groups + `
		WHERE l.tenant IS NOT NULL` + strings.ReplaceAll(tenants, "tenant IN", "l.tenant IN") + `
			AND l.tenant NOT IN (SELECT tenant FROM capped)
			AND (l.per_tenant = 0 OR (SELECT COUNT(*) FROM ` + unfinished + `
				AND queue = l.queue AND tenant = l.tenant AND state = 'running') < l.per_tenant)
			AND (NOT l.rate_tenant OR (SELECT COUNT(*) FROM queue_starts INDEXED BY queue_starts_queue_tenant_at
				WHERE queue = l.queue AND tenant = l.tenant AND at > :now - l.rate_per) < l.rate_limit)),
	` + namedWalk("lane_walk", "lanes", index, "", key, due, bound, !ready) + `,`
	laneHeads = `
		UNION ALL
		SELECT seq FROM lane_walk WHERE seq IS NOT NULL`
	return lanes, laneHeads, notCapped, laned
}

// pickQuery is the pick of one job, the one NextReady looks at:
// selected of the first QUEUED job ClaimJobs could take (ready), or of
// the earliest RunAt among those it could take once their RunAt comes,
// whatever their priority (not ready), in the first row (of maybe more);
// a bare column name, which both picks know (the ruled one as j's).
func pickQuery(f store.ClaimFilter, ready bool, selected string) (string, []any) {
	if !f.Ruled() {
		return unruledPickQuery(f, ready, 1, selected)
	}
	return ruledPickQuery(f, ready, "j."+selected)
}

// mustJSON encodes v, or gives empty when v is nil.
func mustJSON(v any, empty string) string {
	if reflect.ValueOf(v).Len() == 0 {
		return empty
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err)) // maps of strings and ints always encode
	}
	return string(b)
}

type queueLimitJSON struct {
	Max        int   `json:"max"`
	PerTenant  int   `json:"per_tenant,omitempty"` // MaxRunningPerTenant
	Serial     bool  `json:"serial"`
	Hold       bool  `json:"hold"`
	Rate       int   `json:"rate,omitempty"`        // jobtype.Rate.Limit
	RateTenant bool  `json:"rate_tenant,omitempty"` // jobtype.Rate.PerTenant
	Per        int64 `json:"per,omitempty"`         // jobtype.Rate.Per, µs
}

func limitsJSON(limits map[string]store.QueueLimit) string {
	m := make(map[string]queueLimitJSON, len(limits))
	for q, l := range limits {
		m[q] = queueLimitJSON{Max: l.MaxRunning, PerTenant: l.MaxRunningPerTenant, Serial: l.Serial, Hold: l.Serial && l.HoldRetry,
			Rate: l.Rate.Limit, Per: l.Rate.Per.Microseconds(), RateTenant: l.Rate.PerTenant}
	}
	return mustJSON(m, "{}")
}

func usesJSON(limits map[string]store.QueueLimit) string {
	m := map[string][]string{}
	for q, l := range limits {
		if len(l.Pools) > 0 {
			m[q] = l.Pools
		}
	}
	return mustJSON(m, "{}")
}

// --- many rows in one statement ---

// jobWrite is one row of writeJobs: row seq as read (old) and as it is
// to be (next, from versioned).
type jobWrite struct {
	seq       int64
	old, next jobtype.Job
}

// versioned is next as the store commits it over old, a job as read
// back (or as versioned made it): normalized, with the version
// store.Versioned gives it. Only History's new entries are normalized
// through JSON (normalizeOver).
func versioned(old, next jobtype.Job) jobtype.Job {
	return store.Versioned(old, normalizeOver(old, next))
}

// maxRowsPerUpdate bounds the rows of one UPDATE of writeJobs, and so
// its bind values (a few thousand, far below SQLite's limit).
const maxRowsPerUpdate = 128

// writeJobs stores every write's next over its row, with as few
// statements as it can: one UPDATE per maxRowsPerUpdate rows, which sets
// the columns that change in any of them (each row to its own value,
// which is old's where it does not change) from a VALUES list. One
// statement for many rows saves most of what a statement costs apart from
// its rows (about 12 µs of 30 per claimed row). The list has a power of
// two rows, padded with rows that match none, so that few statement
// texts exist for the statement cache. A row whose version goes up is
// stamped with the batch's change sequence value, as writeJob does; the
// caller tells the listeners (s.changed) of the versions it made. It asks
// whether the caller is still there before its first statement.
func (s *Store) writeJobs(ctx context.Context, tx *sql.Tx, writes []jobWrite) error {
	switch len(writes) {
	case 0:
		return nil
	case 1:
		// One row: the plain UPDATE of what changed, which costs less
		// than one from a VALUES list of one row.
		w := writes[0]
		if w.next.ID != w.old.ID {
			return fmt.Errorf("update job %s: the id cannot change (to %q)", w.old.ID, w.next.ID)
		}
		return s.updateRow(ctx, tx, w.seq, w.old, w.next)
	}
	was := make([][]any, len(writes))
	now := make([][]any, len(writes))
	var changed []int // indexes into valueColumns
	seen := make([]bool, len(valueColumns))
	for i, w := range writes {
		if w.next.ID != w.old.ID {
			return fmt.Errorf("update job %s: the id cannot change (to %q)", w.old.ID, w.next.ID)
		}
		was[i], now[i] = writeValues(w.old, w.next)
		for c := range now[i] {
			if !seen[c] && now[i][c] != was[i][c] {
				seen[c] = true
			}
		}
	}
	if seen[historyColumn] {
		// The UPDATE sets every row's history, so the rows whose history
		// did not change need theirs too.
		for i, w := range writes {
			if now[i][historyColumn] == (storedHistory{}) {
				now[i][historyColumn] = storeHistory(w.next)
			}
		}
	}
	for c, ok := range seen {
		if ok {
			changed = append(changed, c)
		}
	}
	if len(changed) == 0 {
		return nil // nothing stored differs
	}
	if err := callerLeft(ctx); err != nil {
		return leftError("update jobs", err)
	}
	for _, w := range writes {
		if err := forgetQuotaMark(ctx, tx, w.old, w.next); err != nil {
			return err
		}
	}
	for start := 0; start < len(writes); start += maxRowsPerUpdate {
		chunk := writes[start:min(start+maxRowsPerUpdate, len(writes))]
		query, args := updateRows(chunk, now[start:], changed, s.w.change)
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("update %d jobs: %w", len(chunk), classify(err))
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(chunk)) {
			return fmt.Errorf("update %d jobs: %d rows changed (%v)", len(chunk), n, err)
		}
	}
	return nil
}

// updateRows makes writeJobs' UPDATE of chunk, whose rows' values are
// now, setting the columns changed.
func updateRows(chunk []jobWrite, now [][]any, changed []int, change int64) (string, []any) {
	width := len(changed) + 2 // seq, the changed columns, whether the version went up
	rows := 1
	for rows < len(chunk) {
		rows *= 2
	}
	var q strings.Builder
	q.WriteString("UPDATE jobs SET ")
	for i, c := range changed {
		fmt.Fprintf(&q, "%s = v.column%d, ", valueColumns[c], i+2)
	}
	fmt.Fprintf(&q, "change_seq = CASE WHEN v.column%d THEN ? ELSE change_seq END FROM (VALUES ", width)
	row := "(?" + strings.Repeat(", ?", width-1) + ")"
	args := make([]any, 0, 1+rows*width)
	args = append(args, change)
	for r := range rows {
		if r > 0 {
			q.WriteString(", ")
		}
		q.WriteString(row)
		if r >= len(chunk) {
			// A padding row: no seq matches NULL.
			args = append(args, nil)
			for range width - 1 {
				args = append(args, nil)
			}
			continue
		}
		w := chunk[r]
		args = append(args, w.seq)
		for _, c := range changed {
			args = append(args, now[r][c])
		}
		args = append(args, w.next.Version != w.old.Version)
	}
	q.WriteString(") AS v WHERE jobs.seq = v.column1")
	return q.String(), args
}
