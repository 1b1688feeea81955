package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/store"
)

// errContested is readClaims' answer to a guarded claim that found a
// queue of its picks with ready jobs of several tenants (claimStatement).
var errContested = errors.New("a queue of the picked jobs has ready jobs of several tenants")

// claimFair claims under f as ClaimJobs does, taking fair claiming's
// turns (store.FairState), in one transaction on one connection, in
// three or four pipelined round trips per job:
//
//   - BEGIN, the prelude (the plan settings and the rules' advisory
//     locks keys) and the pick of one job (locked, SKIP LOCKED), which
//     names the queue the job comes from;
//   - that queue's fair lock, then its tenants with ready jobs and its
//     fair state, read after the lock, so they see every claim that held
//     it before;
//   - if several tenants have ready jobs and another than the picked
//     job's comes first in the state's order, the pick of one job of
//     that tenant (seeks of its jobs only), and so on down the order
//     until one is found;
//   - the state, the claim of the job by seq and, with the last job the
//     claim may take, COMMIT.
//
// The fair locks serialize the turns of one queue across every replica.
// The first is waited for, holding no other fair lock; a claim that
// would need a second queue's and cannot have it at once stops there
// with what it took, so two claims never wait for each other's. A job
// picked but passed over for another tenant's stays locked until the
// claim commits, and other claims step over it meanwhile.
func (s *Store) claimFair(ctx context.Context, f store.ClaimFilter, c store.Claim, keys []int64) ([]store.Claimed, error) {
	var claimed []store.Claimed
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) (err error) {
		claimed = nil
		open := false
		defer func() {
			if err != nil && open {
				_, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
				err = errors.Join(err, rbErr)
			}
		}()
		locked := map[string]bool{}
		for i := range c.LeaseIDs {
			b := &pgx.Batch{}
			if !open {
				b.Queue("BEGIN")
				b.Queue(prelude, keys)
			}
			query, args := pickQuery(f, true, 1, "j.seq, j.queue, j.tenant", true, 1)
			b.Queue(query, args...)
			br := conn.SendBatch(ctx, b)
			if !open {
				open = true
				_, err = br.Exec()
				if err == nil {
					_, err = br.Exec()
				}
			}
			var first fairPick
			ok := false
			if err == nil {
				first, ok, err = scanPick(br.QueryRow())
			}
			if err = errors.Join(err, br.Close()); err != nil {
				return err
			}
			if !ok {
				break
			}
			lock := tryFairLock
			if len(locked) == 0 || locked[first.queue] {
				lock = waitFairLock // the first, or held already: no wait
			}
			tenants, state, got, err := lookFair(ctx, conn, lock, s.lockKeyFair(first.queue), first.queue, f)
			if err != nil {
				return err
			}
			if !got {
				break // another claim holds it: stop with what is taken
			}
			locked[first.queue] = true
			if len(tenants) > 1 {
				s.contested.Store(first.queue, len(tenants))
			} else {
				s.contested.Delete(first.queue)
			}
			one := c
			one.LeaseIDs = c.LeaseIDs[i : i+1]
			last := i == len(c.LeaseIDs)-1
			job, err := fairTurn(ctx, conn, f, one, first, tenants, state, last)
			if err != nil {
				return err
			}
			claimed = append(claimed, job)
			if last {
				open = false // committed with the claim
			}
		}
		if !open {
			return nil
		}
		_, err = conn.Exec(ctx, "COMMIT")
		open = false
		return err
	})
	return s.claimed(claimed, err)
}

// mayBeContested says whether f may claim from a queue whose last claim
// here found it contested.
func (s *Store) mayBeContested(f store.ClaimFilter) bool {
	found := false
	s.contested.Range(func(q, _ any) bool {
		found = len(f.Queues) == 0 || slices.Contains(f.Queues, q.(string))
		return !found
	})
	return found
}

// likelyQueue is the queue a claim under f will most likely pick from,
// if one stands out: the one queue f names, or else the one queue f may
// claim from whose last claim here found it contested. claimTurns reads
// its fair state beside the pick, saving a round trip when it guessed
// right.
func (s *Store) likelyQueue(f store.ClaimFilter) (queue string, ok bool) {
	if qs := distinct(f.Queues); len(qs) == 1 {
		return qs[0], true
	}
	n := 0
	s.contested.Range(func(q, _ any) bool {
		if len(f.Queues) == 0 || slices.Contains(f.Queues, q.(string)) {
			queue, n = q.(string), n+1
		}
		return n < 2
	})
	return queue, n == 1
}

// firstPick is how many jobs claimTurns picks first for a claim of n
// from queue: n, or, when the last claim here found queue contested by
// tenants (at most n of them), a whole number of rounds of them with one
// more than n needs. A contested claim's turns go round the tenants from
// where their passes stand, which may give a tenant a turn more than an
// even share of n; a first pick of interleaved tenants' jobs with a
// round to spare holds every tenant's due, so the turns need not read
// any tenant's jobs in a round trip of their own (tenantTurns). The
// jobs picked and not taken stay locked until the claim commits, and
// other claims step over them meanwhile.
func (s *Store) firstPick(queue string, n int) int {
	v, ok := s.contested.Load(queue)
	if !ok {
		return n
	}
	tenants := v.(int)
	if tenants <= 1 || tenants > n {
		return n
	}
	return (n + 2*tenants - 1) / tenants * tenants
}

// fairPick is a job a fair claim picked: its row, queue and tenant.
type fairPick struct {
	seq           int64
	queue, tenant string
}

// scanPick reads a fair claim's pick of one job, if there is one.
func scanPick(row pgx.Row) (fairPick, bool, error) {
	var p fairPick
	err := row.Scan(&p.seq, &p.queue, &p.tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	return p, err == nil, err
}

// lockKeyFair is the advisory lock of queue's fair state.
func (s *Store) lockKeyFair(queue string) int64 { return lockKey(s.schema, "fair", queue) }

// fairTurn claims, under c (one lease), the job of first's queue that
// the queue's turn gives: first's, unless the queue has ready jobs of
// several tenants and another comes first in the state's order with a
// job the claim may take. The caller holds the queue's fair lock and
// read tenants and state under it.
func fairTurn(ctx context.Context, conn *pgxpool.Conn, f store.ClaimFilter, c store.Claim, first fairPick, tenants []string, state store.FairState, commit bool) (store.Claimed, error) {
	chosen := first
	save := forgetFairSQL
	saveArgs := []any{first.queue}
	if len(tenants) > 1 {
		state.Prune(tenants)
		for _, t := range state.Order(tenants) {
			if len(f.Tenants) > 0 && !slices.Contains(f.Tenants, t) {
				continue
			}
			if t != first.tenant {
				one := f
				one.Tenants, one.Queues = []string{t}, []string{first.queue}
				query, args := pickQuery(one, true, 1, "j.seq, j.queue, j.tenant", true, 1)
				p, ok, err := scanPick(conn.QueryRow(ctx, query, args...))
				if err != nil {
					return store.Claimed{}, err
				}
				if !ok {
					continue // its jobs are not this worker's, or its serial head runs
				}
				chosen = p
			}
			state.Charge(t, store.Weight(f.Weights, t))
			break
		}
		save, saveArgs = saveFairSQL, fairArgs(first.queue, state)
	}
	query, args := claimStatement(f, c, false, func(first int) (string, []any) {
		return fmt.Sprintf("SELECT %s FROM jobs AS j WHERE j.seq = $%d", pickedColumns, first), []any{chosen.seq}
	})
	b := &pgx.Batch{}
	b.Queue(save, saveArgs...)
	b.Queue(query, args...)
	if commit {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, b)
	claimed, err := readClaims(br)
	if err == nil && commit {
		_, err = br.Exec()
	}
	err = errors.Join(err, br.Close())
	if err == nil && len(claimed) != 1 {
		err = fmt.Errorf("claim of job %d took %d jobs", chosen.seq, len(claimed))
	}
	if err != nil {
		return store.Claimed{}, err
	}
	return claimed[0], nil
}

// fairLock is how lookFair takes a queue's fair lock.
type fairLock int

const (
	noFairLock   fairLock = iota // not at all (claimTurns adds its charges after it commits)
	tryFairLock                  // only if it is free at once
	waitFairLock                 // waiting for it
)

// lookFair takes, as lock says, the transaction advisory lock key of
// queue's fair state (got says whether it did), then reads the tenants
// with ready jobs in queue (as readyTenantsSQL finds them) and, when
// there are several, queue's fair state: one round trip.
func lookFair(ctx context.Context, conn *pgxpool.Conn, lock fairLock, key int64, queue string, f store.ClaimFilter) (tenants []string, state store.FairState, got bool, err error) {
	b := &pgx.Batch{}
	switch lock {
	case tryFairLock:
		b.Queue("SELECT pg_try_advisory_xact_lock($1)", key)
	case waitFairLock:
		b.Queue("SELECT true FROM pg_advisory_xact_lock($1)", key)
	}
	b.Queue(lookFairSQL, queue, f.Now)
	br := conn.SendBatch(ctx, b)
	defer func() { err = errors.Join(err, br.Close()) }()
	got = true
	if lock != noFairLock {
		if err := br.QueryRow().Scan(&got); err != nil || !got {
			return nil, store.FairState{}, false, err
		}
	}
	tenants, state, err = readFair(br)
	return tenants, state, err == nil, err
}

// readFair reads the answer of lookFairSQL, the next statement of br.
func readFair(br pgx.BatchResults) (tenants []string, state store.FairState, err error) {
	state = store.FairState{Passes: map[string]float64{}}
	rows, err := br.Query()
	if err != nil {
		return nil, state, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			tenant *string
			v      float64
			ready  bool
		)
		if err := rows.Scan(&tenant, &v, &ready); err != nil {
			return nil, state, err
		}
		switch {
		case tenant == nil:
			state.Clock = v
		case ready:
			tenants = append(tenants, *tenant)
			if v >= 0 {
				state.Passes[*tenant] = v
			}
		}
		// A tenant with a stored pass and no ready jobs is left out:
		// the turn forgets it (store.FairState.Prune).
	}
	slices.Sort(tenants) // readyTenantsSQL lists them last first
	return tenants, state, rows.Err()
}

// lookFairSQL reads queue $1's fair state and its tenants with ready
// jobs at $2: the clock (a row without a tenant), then each tenant with
// ready jobs, its stored pass (-1 for none).
var lookFairSQL = `WITH ready AS (` + readyTenantsSQL + `)
	SELECT NULL::text, clock, false FROM fair_clocks WHERE queue = $1
	UNION ALL
	SELECT r.tenant, coalesce((SELECT p.pass FROM fair_passes AS p WHERE p.queue = $1 AND p.tenant = r.tenant), -1), true
	FROM ready AS r`

// readyOf is the condition that the tenant of s (an alias with queue
// and tenant) has a job in s's queue ready at now: a seek of
// jobs_unfinished_queue_tenant, written as a scalar subquery, not
// EXISTS, which the planner would make a semi-join with every queued
// job. It seeks the tenant's newest ready job and reads backward from
// it: the oldest are where claims take jobs from, and the entries the
// claimed jobs left stay there, dead, until a vacuum, which a seek from
// the oldest steps over (700 µs a look at ten tenants midway through a
// burn-down of 20,000). The queue is an equality, so that the scan stops
// where the tenant's queued jobs begin; the tenant and state are in row
// comparisons, which only jobs_unfinished_queue_tenant's order answers
// (see unfinishedOf).
func readyOf(s, now string) string {
	return "(SELECT true FROM jobs AS x WHERE x.queue = " + s + ".queue AND x.state IN ('queued', 'running')" +
		" AND (x.tenant, x.state, x.run_at) <= (" + s + ".tenant, 'queued', " + now + ")" +
		" AND (x.tenant, x.state) >= (" + s + ".tenant, 'queued')" +
		" ORDER BY x.queue DESC, x.tenant DESC, x.state DESC, x.run_at DESC, x.seq DESC LIMIT 1) IS NOT NULL"
}

// readyTenantsSQL lists the tenants with a ready QUEUED job in queue $1
// at $2, of any kind: a skip scan of jobs_unfinished_queue_tenant from
// the queue's last tenant backward, a seek per tenant with unfinished
// jobs there (which lands on its newest, running or queued, alive but
// for a tenant with nothing left to run) and one more to ask whether
// one is ready (readyOf).
var readyTenantsSQL = `WITH RECURSIVE t(queue, tenant) AS (
		SELECT $1::text, ` + tenantBefore("$1::text", "") + `
		UNION ALL
		SELECT t.queue, ` + tenantBefore("t.queue", "t.tenant") + ` FROM t WHERE t.tenant IS NOT NULL)
	SELECT t.tenant FROM t WHERE t.tenant IS NOT NULL
		AND ` + readyOf("t", "$2::timestamptz")

// saveFairSQL writes queue $1's fair state: its clock $2, and its
// tenants' passes ($3, $4), over the stored one.
const saveFairSQL = `WITH clock AS (
		INSERT INTO fair_clocks (queue, clock) VALUES ($1, $2) ON CONFLICT (queue) DO UPDATE SET clock = excluded.clock),
	gone AS (DELETE FROM fair_passes WHERE queue = $1 AND tenant <> ALL($3::text[])),
	passes AS (INSERT INTO fair_passes (queue, tenant, pass) SELECT $1, u.t, u.p FROM unnest($3::text[], $4::float8[]) AS u(t, p)
		ON CONFLICT (queue, tenant) DO UPDATE SET pass = excluded.pass)
SELECT`

// addFairSQL adds to queue $1's fair state what a claim that took its
// turns from a state read without the queue's lock charged ($4, $5: each
// served tenant's strides, see store.FairState.Served), under the lock:
// the clock becomes the later of the stored one and the claim's ($2), a
// served tenant's pass its stored one (or, if it is behind, the stored
// clock) plus its strides, and the passes of tenants that had no ready
// jobs at the claim's look (not in $3) are forgotten. So claims running
// side by side on stale reads of the state still add up every charge.
// An upsert's DO UPDATE sees only the row it would have inserted, so
// that row carries the old clock plus the strides, and the update takes
// the old clock back off.
const addFairSQL = `WITH old AS (SELECT coalesce((SELECT clock FROM fair_clocks WHERE queue = $1), 0) AS clock),
	clock AS (
		INSERT INTO fair_clocks (queue, clock) VALUES ($1, $2)
		ON CONFLICT (queue) DO UPDATE SET clock = greatest(fair_clocks.clock, excluded.clock)),
	gone AS (DELETE FROM fair_passes WHERE queue = $1 AND tenant <> ALL($3::text[])),
	passes AS (
		INSERT INTO fair_passes (queue, tenant, pass)
		SELECT $1, u.t, (SELECT clock FROM old) + u.d FROM unnest($4::text[], $5::float8[]) AS u(t, d) ORDER BY u.t
		ON CONFLICT (queue, tenant) DO UPDATE
			SET pass = greatest(fair_passes.pass, (SELECT clock FROM old)) + (excluded.pass - (SELECT clock FROM old)))
SELECT`

// forgetFairSQL deletes queue $1's fair state: its ready jobs are one
// tenant's.
const forgetFairSQL = `WITH clock AS (DELETE FROM fair_clocks WHERE queue = $1)
DELETE FROM fair_passes WHERE queue = $1`

// claimTurns is a contested claim of several jobs without rules whose
// picks are all of one queue, taking all its turns at once
// (store.FairState.Turns), in two to four pipelined round trips
// whatever the number of jobs: BEGIN, the prelude and the pick of the
// claim's jobs; the queue's tenants and passes, in the first round trip
// when the queue was guessed right (likelyQueue), else in a second; the
// jobs a tenant is due beyond what the first pick holds of it (one pick
// per such tenant, all in one round trip, often none: see tenantTurns;
// again for a tenant with fewer than it was due, at most once more per
// tenant); the claim of every job, COMMIT, and the charges added to the
// queue's state (addFairSQL) in a transaction of their own under the
// queue's fair lock.
//
// So the fair lock is held only while the charges are added, not from
// the read of the passes to the claim's commit: claims of one queue run
// side by side, as one tenant's do. Claims running at once decide on the
// same passes, and each adds its own charges to them, so over many
// claims the shares are the weights' as when they took turns under the
// lock; a tenant favoured by several claims at once is passed over by
// the claims after them until the others catch up. handled is false,
// with nothing taken, when the picks are of several queues: claimFair's
// turns then go job by job.
func (s *Store) claimTurns(ctx context.Context, f store.ClaimFilter, c store.Claim, keys []int64) (claimed []store.Claimed, handled bool, err error) {
	err = s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) (err error) {
		claimed, handled = nil, false
		open := false
		defer func() {
			if open {
				_, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
				err = errors.Join(err, rbErr)
			}
		}()
		n := len(c.LeaseIDs)
		likely, guessed := s.likelyQueue(f)
		size := n
		if guessed {
			size = s.firstPick(likely, n)
		}
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(prelude, keys)
		query, args := pickQuery(f, true, size, "j.seq, j.queue, j.tenant", true, 1)
		b.Queue(query, args...)
		if guessed {
			b.Queue(lookFairSQL, likely, f.Now)
		}
		open = true
		picks, tenants, state, err := sendPicksAndLook(ctx, conn, b, guessed)
		if err != nil || len(picks) == 0 {
			handled = err == nil
			return err
		}
		queue := picks[0].queue
		for _, p := range picks {
			if p.queue != queue {
				return nil // several queues: claimFair's
			}
		}
		handled = true
		if !guessed || queue != likely {
			if tenants, state, _, err = lookFair(ctx, conn, noFairLock, 0, queue, f); err != nil {
				return err
			}
		}
		chosen := picks[:min(n, len(picks))]
		save, saveArgs := forgetFairSQL, []any{queue}
		if len(tenants) > 1 {
			s.contested.Store(queue, len(tenants))
			state.Prune(tenants)
			before := state.Clone()
			if chosen, err = tenantTurns(ctx, conn, f, queue, tenants, &state, n, picks, len(picks) < size); err != nil {
				return err
			}
			save, saveArgs = addFairSQL, addFairArgs(queue, tenants, before, state)
		} else {
			s.contested.Delete(queue)
		}
		if len(chosen) == 0 {
			return nil
		}
		seqs := make([]int64, len(chosen))
		for i, p := range chosen {
			seqs[i] = p.seq
		}
		some := c
		some.LeaseIDs = c.LeaseIDs[:len(chosen)]
		query, args = claimStatement(f, some, false, func(first int) (string, []any) {
			return fmt.Sprintf("SELECT %s FROM jobs AS j WHERE j.seq = ANY($%d::bigint[])", pickedColumns, first), []any{seqs}
		})
		// The claim commits, and then the charges are added to the
		// queue's state in a transaction of their own, under its fair
		// lock, which is held for that statement alone. Nothing waits for
		// that transaction's flush: a crash may lose it, and with it one
		// claim's charges, never a job. If the claim fails, the pipeline
		// stops before it.
		b = &pgx.Batch{}
		b.Queue(query, args...)
		b.Queue("COMMIT")
		b.Queue("BEGIN")
		b.Queue("SELECT set_config('synchronous_commit', 'off', true), pg_advisory_xact_lock($1)", s.lockKeyFair(queue))
		b.Queue(save, saveArgs...)
		b.Queue("COMMIT")
		br := conn.SendBatch(ctx, b)
		claimed, err = readClaimed(br)
		if err == nil {
			_, err = br.Exec()
		}
		if err != nil {
			return errors.Join(err, br.Close())
		}
		open = false
		var chargeErr error
		for range 4 {
			if _, chargeErr = br.Exec(); chargeErr != nil {
				break
			}
		}
		if chargeErr = errors.Join(chargeErr, br.Close()); chargeErr != nil {
			// The claim committed and stands; its charges did not.
			_, rbErr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			s.log.Warn("postgres: a fair claim's charges to its queue's tenants were not recorded",
				"queue", queue, "err", errors.Join(chargeErr, rbErr))
		}
		return nil
	})
	if !handled {
		return nil, false, err
	}
	claimed, err = s.claimed(claimed, err)
	return claimed, true, err
}

// tenantTurns takes n turns of queue's tenants on state
// (store.TakeTurns) and returns the jobs they give, in turn order.
//
// first is the claim's first pick, locked: the first jobs in claim
// order that no other claim holds, all of queue, and so each tenant's
// first such jobs; complete says it holds every one. A tenant due more
// than first holds of it, when first is not complete, has its jobs read
// (locked), every such tenant in one pipelined round trip; when the
// tenants' jobs are interleaved, as they are when they submit side by
// side, and first holds a round more than the claim takes (firstPick),
// none is.
func tenantTurns(ctx context.Context, conn *pgxpool.Conn, f store.ClaimFilter, queue string, tenants []string, state *store.FairState, n int, first []fairPick, complete bool) ([]fairPick, error) {
	known := map[string][]fairPick{}
	for _, p := range first {
		known[p.tenant] = append(known[p.tenant], p)
	}
	return store.TakeTurns(state, tenants, f.Tenants, f.Weights, n, func(want map[string]int) (map[string][]fairPick, error) {
		got := map[string][]fairPick{}
		b := &pgx.Batch{}
		var asked []string
		for t, k := range want {
			switch has := known[t]; {
			case len(has) >= k:
				got[t] = has[:k]
				continue
			case complete:
				got[t] = has
				continue
			}
			one := f
			one.Tenants, one.Queues = []string{t}, []string{queue}
			// The tenant's first k jobs: again those picked before,
			// which this claim locked and SKIP LOCKED does not skip.
			query, args := pickQuery(one, true, k, "j.seq, j.queue, j.tenant", true, 1)
			b.Queue(query, args...)
			asked = append(asked, t)
		}
		if len(asked) == 0 {
			return got, nil
		}
		picked, err := sendPicks(ctx, conn, b)
		if err != nil {
			return nil, err
		}
		for i, t := range asked {
			got[t] = picked[i]
		}
		return got, nil
	})
}

// sendPicksAndLook sends claimTurns' first round trip, b: BEGIN, the
// prelude, the pick and, if look, lookFairSQL; and reads the picks and
// what lookFairSQL found.
func sendPicksAndLook(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, look bool) (picks []fairPick, tenants []string, state store.FairState, err error) {
	br := conn.SendBatch(ctx, b)
	defer func() { err = errors.Join(err, br.Close()) }()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, nil, state, err
		}
	}
	if picks, err = readPicks(br); err != nil || !look {
		return picks, nil, state, err
	}
	tenants, state, err = readFair(br)
	return picks, tenants, state, err
}

// sendPicks sends b, a batch of picks, and reads each one's.
func sendPicks(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) (out [][]fairPick, err error) {
	br := conn.SendBatch(ctx, b)
	defer func() { err = errors.Join(err, br.Close()) }()
	for range b.Len() {
		picks, err := readPicks(br)
		if err != nil {
			return nil, err
		}
		out = append(out, picks)
	}
	return out, nil
}

// readPicks reads the next statement of br's picks.
func readPicks(br pgx.BatchResults) ([]fairPick, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (fairPick, error) {
		var p fairPick
		return p, r.Scan(&p.seq, &p.queue, &p.tenant)
	})
}

// addFairArgs are addFairSQL's arguments for the turns a claim took on
// queue from before to after, among the tenants with ready jobs.
func addFairArgs(queue string, tenants []string, before, after store.FairState) []any {
	var names []string
	var strides []float64
	for t, d := range after.Served(before) {
		names, strides = append(names, t), append(strides, d)
	}
	return []any{queue, after.Clock, tenants, names, strides}
}

// fairArgs are saveFairSQL's arguments for queue's state.
func fairArgs(queue string, state store.FairState) []any {
	var names []string
	var passes []float64
	for t, p := range state.Passes {
		names, passes = append(names, t), append(passes, p)
	}
	return []any{queue, state.Clock, names, passes}
}
