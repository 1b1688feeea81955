package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// Fair claiming (store.FairState) on the single writer: a claim's picks,
// its look for other tenants and its write of the queue's passes are in
// the claim's transaction, so no other claim sees the passes between.

// readyTenantsQuery is readyTenants' query, of the queue :queue (a JSON
// array of one) at :now. The queue comes from json_each, as the walks'
// groups do (see unruledPickQuery): compared with an indexed column as
// a parameter, SQLite would prepare the statement again at each run.
// With kinds (a worker that names its kinds, :kinds) a tenant counts
// only with a ready job of one of them, sought by kind in
// jobs_queued_queue_tenant_kind (tenantKindWalk).
func readyTenantsQuery(limit int, kinds bool) string {
	const from = `jobs INDEXED BY jobs_unfinished_queue_tenant WHERE state IN ('queued', 'running')`
	ready := `EXISTS (SELECT 1 FROM ` + from + ` AND queue = t.queue AND tenant = t.tenant AND state = 'queued' AND run_at <= :now)`
	if kinds {
		ready = `EXISTS (SELECT 1 FROM jobs INDEXED BY ` + tenantKindIndex + ` WHERE state = 'queued'
			AND queue = t.queue AND tenant = t.tenant AND kind IN (SELECT value FROM json_each(:kinds)) AND run_at <= :now)`
	}
	query := `WITH RECURSIVE t(queue, tenant) AS (
		SELECT q.value, (SELECT MIN(tenant) FROM ` + from + ` AND queue = q.value) FROM json_each(:queue) AS q
		UNION ALL
		SELECT t.queue, (SELECT MIN(tenant) FROM ` + from + ` AND queue = t.queue AND tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL)
	SELECT tenant FROM t WHERE tenant IS NOT NULL AND ` + ready
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	return query
}

// pickTurns reads each tenant's first want[tenant] ready jobs in queue
// that f may take, in claim order, with one query (turnsPickQuery).
func pickTurns(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, queue string, want map[string]int) (map[string][]pick, error) {
	query, args := turnsPickQuery(f, queue, want)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	defer rows.Close()
	got := map[string][]pick{}
	for rows.Next() {
		old, seq, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("claim jobs: %w", classify(err))
		}
		// With several kinds a tenant's groups may hold more than it is
		// due; its rows come in claim order.
		if len(got[old.Tenant]) < want[old.Tenant] {
			got[old.Tenant] = append(got[old.Tenant], pick{job: old, seq: seq})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	return got, nil
}

// turnsPickQuery is pickTurns' query: one walk (priorityWalk) with a
// group per tenant of want, each of that tenant's jobs in queue in
// jobs_queued_queue_tenant, bounded by what it is due (:want ->> the
// group's tenant, which the group's kind column carries); the kinds of
// f are checked on the jobs walked. One statement for every tenant:
// each costs about 60 µs to start, so ten of them cost more than the
// steps of all their walks.
func turnsPickQuery(f store.ClaimFilter, queue string, want map[string]int) (string, []any) {
	args := []any{
		sql.Named("now", toMicro(f.Now)),
		sql.Named("want", mustJSON(want, "{}")),
		sql.Named("queues", mustJSON([]string{queue}, "[]")),
	}
	const filter = " AND run_at <= :now"
	groups := `groups(kind, queue) AS (SELECT t.key, q.value FROM json_each(:want) AS t, json_each(:queues) AS q)`
	index, bound := "jobs_queued_queue_tenant", "(:want ->> w.kind)"
	key := func(g string) string { return "queue = " + g + ".queue AND tenant = " + g + ".kind" }
	if len(f.Kinds) > 0 {
		// A group per tenant and kind (tenantKindWalk).
		args = append(args, sql.Named("kinds", mustJSON(distinct(f.Kinds), "[]")))
		groups = `groups(kind, queue) AS (SELECT json_array(t.key, k.value), q.value
		FROM json_each(:want) AS t, json_each(:kinds) AS k, json_each(:queues) AS q)`
		index, bound, key = tenantKindIndex, "(:want ->> (w.kind ->> 0))", tenantKindKey
	}
	return `WITH RECURSIVE
	` + groups + `,
	` + priorityWalk(index, notPaused("g.queue"), key, filter, bound, false) + `
SELECT ` + columns + ` FROM jobs WHERE seq IN (SELECT seq FROM walk WHERE seq IS NOT NULL)
ORDER BY tenant, ` + pickOrder("", true), args
}

// pick is a job a claim may take, as read, and its row.
type pick struct {
	job jobtype.Job
	seq int64
}

// readyTenants lists the tenants with a ready QUEUED job in queue that
// f may take (of its kinds, if it names any), at most limit of them (0:
// all): a skip-scan of jobs_unfinished_queue_tenant, one seek per
// tenant with unfinished jobs in the queue and one more per tenant (and
// kind) to ask whether one is ready.
func readyTenants(ctx context.Context, tx *sql.Tx, queue string, f store.ClaimFilter, limit int) ([]string, error) {
	query := readyTenantsQuery(limit, len(f.Kinds) > 0)
	args := []any{sql.Named("queue", mustJSON([]string{queue}, "[]")), sql.Named("now", toMicro(f.Now))}
	if len(f.Kinds) > 0 {
		args = append(args, sql.Named("kinds", mustJSON(distinct(f.Kinds), "[]")))
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim jobs: tenants of %s: %w", queue, classify(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("claim jobs: tenants of %s: %w", queue, classify(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("claim jobs: tenants of %s: %w", queue, classify(err))
	}
	return out, nil
}

// contested says whether any queue of picks has ready jobs of more
// than one tenant. The queues that do not forget their fair state
// (forgetFair), so that a tenant that comes back starts level.
func (s *Store) contested(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, picks []pick) (bool, error) {
	var queues []string
	for _, p := range picks {
		if !slices.Contains(queues, p.job.Queue) {
			queues = append(queues, p.job.Queue)
		}
	}
	for _, q := range queues {
		tenants, err := readyTenants(ctx, tx, q, f, 2)
		if err != nil {
			return false, err
		}
		if len(tenants) > 1 {
			return true, nil
		}
	}
	for _, q := range queues {
		if err := s.forgetFair(ctx, tx, q); err != nil {
			return false, err
		}
	}
	return false, nil
}

// fairTurn is the job a claim takes from first's queue, first being
// the job it would take were there one tenant: with ready jobs of
// several tenants there, the first job the claim may take of the
// tenant the queue's FairState puts first, which is then charged.
func (s *Store) fairTurn(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, first pick) (pick, error) {
	queue := first.job.Queue
	tenants, err := readyTenants(ctx, tx, queue, f, 0)
	if err != nil {
		return pick{}, err
	}
	if len(tenants) <= 1 {
		return first, s.forgetFair(ctx, tx, queue)
	}
	state, err := loadFair(ctx, tx, queue)
	if err != nil {
		return pick{}, err
	}
	state.Prune(tenants)
	chosen := first
	for _, t := range state.Order(tenants) {
		if len(f.Tenants) > 0 && !slices.Contains(f.Tenants, t) {
			continue
		}
		if t != first.job.Tenant {
			one := f
			one.Tenants, one.Queues = []string{t}, []string{queue}
			p, ok, err := pickNext(ctx, tx, one)
			if err != nil {
				return pick{}, err
			}
			if !ok {
				continue // its jobs are not this worker's, or its serial head runs
			}
			chosen = p
		}
		state.Charge(t, store.Weight(f.Weights, t))
		break
	}
	return chosen, s.saveFair(ctx, tx, queue, state)
}

// loadFair reads queue's fair state.
func loadFair(ctx context.Context, tx *sql.Tx, queue string) (store.FairState, error) {
	state := store.FairState{Passes: map[string]float64{}}
	rows, err := tx.QueryContext(ctx, `SELECT NULL, clock FROM fair_clocks WHERE queue = :queue
		UNION ALL SELECT tenant, pass FROM fair_passes WHERE queue = :queue`, sql.Named("queue", queue))
	if err != nil {
		return state, fmt.Errorf("claim jobs: fair state of %s: %w", queue, classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			tenant sql.NullString
			v      float64
		)
		if err := rows.Scan(&tenant, &v); err != nil {
			return state, fmt.Errorf("claim jobs: fair state of %s: %w", queue, classify(err))
		}
		if tenant.Valid {
			state.Passes[tenant.String] = v
		} else {
			state.Clock = v
		}
	}
	if err := rows.Err(); err != nil {
		return state, fmt.Errorf("claim jobs: fair state of %s: %w", queue, classify(err))
	}
	return state, nil
}

// saveFair writes queue's fair state over what is stored.
func (s *Store) saveFair(ctx context.Context, tx *sql.Tx, queue string, state store.FairState) error {
	for _, q := range []struct {
		query string
		args  []any
	}{
		{`INSERT INTO fair_clocks (queue, clock) VALUES (?, ?) ON CONFLICT (queue) DO UPDATE SET clock = excluded.clock`, []any{queue, state.Clock}},
		{`DELETE FROM fair_passes WHERE queue = ?`, []any{queue}},
		{`INSERT INTO fair_passes (queue, tenant, pass) SELECT ?, key, value FROM json_each(?)`, []any{queue, mustJSON(state.Passes, "{}")}},
	} {
		if _, err := tx.ExecContext(ctx, q.query, q.args...); err != nil {
			return fmt.Errorf("claim jobs: fair state of %s: %w", queue, classify(err))
		}
	}
	s.fairMu.Lock()
	if s.fairQueues != nil { // else read from the table when first needed
		s.fairQueues[queue] = true
	}
	s.fairMu.Unlock()
	return nil
}

// forgetFair deletes queue's fair state, if it has any: its ready jobs
// are one tenant's (or none), and the tenants that come back start
// level. Whether it has any is known here, as this process is the only
// writer.
func (s *Store) forgetFair(ctx context.Context, tx *sql.Tx, queue string) error {
	s.fairMu.Lock()
	defer s.fairMu.Unlock()
	if s.fairQueues == nil {
		s.fairQueues = map[string]bool{}
		rows, err := tx.QueryContext(ctx, `SELECT queue FROM fair_clocks`)
		if err != nil {
			return fmt.Errorf("claim jobs: fair state: %w", classify(err))
		}
		defer rows.Close()
		for rows.Next() {
			var q string
			if err := rows.Scan(&q); err != nil {
				return fmt.Errorf("claim jobs: fair state: %w", classify(err))
			}
			s.fairQueues[q] = true
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("claim jobs: fair state: %w", classify(err))
		}
	}
	delete(s.fairTenants, queue)
	if !s.fairQueues[queue] {
		return nil
	}
	for _, query := range []string{`DELETE FROM fair_clocks WHERE queue = ?`, `DELETE FROM fair_passes WHERE queue = ?`} {
		if _, err := tx.ExecContext(ctx, query, queue); err != nil {
			return fmt.Errorf("claim jobs: fair state of %s: %w", queue, classify(err))
		}
	}
	delete(s.fairQueues, queue)
	return nil
}

// firstPick is how many jobs a claim of n under f picks first: n, or,
// when a queue f may claim from was contested at its last claim by at
// most n tenants, a whole number of rounds of them with one more than n
// needs, as the PostgreSQL store picks. The turns of a contested claim
// go round the tenants from where their passes stand, which may give a
// tenant a turn more than an even share of n (n is not always a
// multiple of their number); a first pick of interleaved tenants' jobs
// with a round to spare holds what each is due, so the turns need not
// read any tenant's jobs again (claimTurns), and the uncontested claim
// takes the first n of them. In a burn-down of ten tenants the turns
// read some tenant's jobs again in 98 of 400 contested claims when the
// pick was rounded up to whole rounds only, in 11 of 400 with the round
// to spare (docs/BENCHMARKS.md, "Fair claiming").
func (s *Store) firstPick(f store.ClaimFilter, n int) int {
	s.fairMu.Lock()
	defer s.fairMu.Unlock()
	tenants := 0
	for q, t := range s.fairTenants {
		if len(f.Queues) == 0 || slices.Contains(f.Queues, q) {
			tenants = max(tenants, t)
		}
	}
	if tenants <= 1 || tenants > n {
		return n
	}
	return (n + 2*tenants - 1) / tenants * tenants
}

// oneQueue says whether picks are all of one queue, and which.
func oneQueue(picks []pick) (string, bool) {
	for _, p := range picks[1:] {
		if p.job.Queue != picks[0].job.Queue {
			return "", false
		}
	}
	return picks[0].job.Queue, true
}

// claimTurns is a claim without rules whose first jobs in claim order,
// first, are all of queue, where tenants (more than one) have ready
// jobs: it takes all its turns at once (store.FairState.Turns) rather
// than one job at a time. It reads the passes once, reads the jobs each
// tenant is due (store.TakeTurns) that first does not already hold,
// writes the passes once and claims every job with one UPDATE.
//
// first holds each tenant's first jobs that f may take in queue, in
// claim order: it is the first jobs of all in claim order, all of
// queue, and complete says it holds every job f may take. A tenant is
// due more than first holds of it only when first is not complete; so
// when the tenants' jobs are interleaved, as they are when they submit
// side by side, and first holds enough of them (see firstPick), no
// tenant's jobs are read twice.
func (s *Store) claimTurns(ctx context.Context, tx *sql.Tx, f store.ClaimFilter, c store.Claim, queue string, tenants []string, first []pick, complete bool) ([]store.Claimed, error) {
	state, err := loadFair(ctx, tx, queue)
	if err != nil {
		return nil, err
	}
	state.Prune(tenants)
	known := map[string][]pick{}
	for _, p := range first {
		known[p.job.Tenant] = append(known[p.job.Tenant], p)
	}
	s.fairMu.Lock()
	if s.fairTenants == nil {
		s.fairTenants = map[string]int{}
	}
	s.fairTenants[queue] = len(tenants)
	s.fairMu.Unlock()
	picks, err := store.TakeTurns(&state, tenants, f.Tenants, f.Weights, len(c.LeaseIDs), func(want map[string]int) (map[string][]pick, error) {
		got, read := map[string][]pick{}, map[string]int{}
		for t, k := range want {
			switch has := known[t]; {
			case len(has) >= k:
				got[t] = has[:k]
			case complete:
				got[t] = has
			default:
				read[t] = k
			}
		}
		if len(read) == 0 {
			return got, nil
		}
		more, err := pickTurns(ctx, tx, f, queue, read)
		for t := range read {
			got[t] = more[t]
		}
		return got, err
	})
	if err != nil {
		return nil, err
	}
	if len(picks) == 0 {
		return nil, nil
	}
	if err := s.saveFair(ctx, tx, queue, state); err != nil {
		return nil, err
	}
	return s.claimPicks(ctx, tx, f, c, picks, 0)
}
