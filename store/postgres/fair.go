package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// errContested is readClaims' answer to a guarded claim that found a
// queue of its picks with ready jobs of several tenants (claimStatement).
var errContested = errors.New("a queue of the picked jobs has ready jobs of several tenants")

// claimFair claims under f as ClaimJobs does, taking fair claiming's
// turns (store.FairState), in one transaction on one connection:
//
//   - the prelude: the plan settings and the rules' advisory locks keys;
//   - for each job: the pick of one job (locked, SKIP LOCKED), which
//     names the queue the job comes from; that queue's fair lock, then
//     its tenants with ready jobs and its fair state (one pipelined
//     round trip, so the reads see every claim that held the lock
//     before); if several tenants have ready jobs, the pick of one job
//     of each tenant in the state's order until one is found (seeks of
//     that tenant's jobs only); then the state and the claim of the job
//     by seq, in one round trip.
//
// The fair locks serialize the turns of one queue across every replica.
// The first is waited for, holding no other fair lock; a claim that
// would need a second queue's and cannot have it at once stops there
// with what it took, so two claims never wait for each other's. A job
// picked but passed over for another tenant's stays locked until the
// claim commits, and other claims step over it meanwhile.
func (s *Store) claimFair(ctx context.Context, f store.ClaimFilter, c store.Claim, keys []int64) ([]store.Claimed, error) {
	var claimed []store.Claimed
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		claimed = nil
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, prelude, keys); err != nil {
			return err
		}
		locked := map[string]bool{}
		for i := range c.LeaseIDs {
			first, ok, err := pickFair(ctx, tx, f)
			if err != nil || !ok {
				return err
			}
			if !locked[first.queue] {
				got, err := lockFair(ctx, tx, s.lockKeyFair(first.queue), len(locked) == 0)
				if err != nil {
					return err
				}
				if !got {
					break // another claim holds it: stop with what is taken
				}
				locked[first.queue] = true
			}
			one := c
			one.LeaseIDs = c.LeaseIDs[i : i+1]
			job, err := fairTurn(ctx, tx, f, one, first)
			if err != nil {
				return err
			}
			claimed = append(claimed, job)
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", classify(err))
	}
	if len(claimed) == 0 {
		return nil, jobtype.ErrNoJob
	}
	for _, c := range claimed {
		s.announce(c.Job)
	}
	return claimed, nil
}

// fairPick is a job a fair claim picked: its row, queue and tenant.
type fairPick struct {
	seq           int64
	queue, tenant string
}

// pickFair picks, and locks, the job a claim under f takes next.
func pickFair(ctx context.Context, tx pgx.Tx, f store.ClaimFilter) (fairPick, bool, error) {
	query, args := pickQuery(f, true, 1, "j.seq, j.queue, j.tenant", true, 1)
	var p fairPick
	err := tx.QueryRow(ctx, query, args...).Scan(&p.seq, &p.queue, &p.tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	return p, err == nil, err
}

// lockFair takes the transaction advisory lock key: waiting for it if
// wait, else only if it is free at once (got says whether it did).
func lockFair(ctx context.Context, tx pgx.Tx, key int64, wait bool) (got bool, err error) {
	if wait {
		_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key)
		return err == nil, err
	}
	err = tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", key).Scan(&got)
	return got, err
}

// lockKeyFair is the advisory lock of queue's fair state.
func (s *Store) lockKeyFair(queue string) int64 { return lockKey(s.schema, "fair", queue) }

// fairTurn claims, under c (one lease), the job of first's queue that
// the queue's turn gives: first's, unless the queue has ready jobs of
// several tenants and another comes first in the state's order with a
// job the claim may take. The caller holds the queue's fair lock.
func fairTurn(ctx context.Context, tx pgx.Tx, f store.ClaimFilter, c store.Claim, first fairPick) (store.Claimed, error) {
	tenants, state, err := loadFair(ctx, tx, first.queue, f)
	if err != nil {
		return store.Claimed{}, err
	}
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
				p, ok, err := pickFair(ctx, tx, one)
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
		var names []string
		var passes []float64
		for t, p := range state.Passes {
			names, passes = append(names, t), append(passes, p)
		}
		save, saveArgs = saveFairSQL, []any{first.queue, state.Clock, names, passes}
	}
	query, args := claimStatement(f, c, false, func(first int) (string, []any) {
		return fmt.Sprintf("SELECT %s FROM jobs AS j WHERE j.seq = $%d", pickedColumns, first), []any{chosen.seq}
	})
	b := &pgx.Batch{}
	b.Queue(save, saveArgs...)
	b.Queue(query, args...)
	br := tx.SendBatch(ctx, b)
	claimed, err := readClaims(br)
	err = errors.Join(err, br.Close())
	if err == nil && len(claimed) != 1 {
		err = fmt.Errorf("claim of job %d took %d jobs", chosen.seq, len(claimed))
	}
	if err != nil {
		return store.Claimed{}, err
	}
	return claimed[0], nil
}

// loadFair reads the tenants with ready jobs in queue (as
// readyTenantsSQL finds them) and queue's fair state.
func loadFair(ctx context.Context, tx pgx.Tx, queue string, f store.ClaimFilter) ([]string, store.FairState, error) {
	state := store.FairState{Passes: map[string]float64{}}
	rows, err := tx.Query(ctx, readyTenantsSQL, queue, f.Now)
	if err != nil {
		return nil, state, err
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, state, err
	}
	if len(tenants) <= 1 {
		return tenants, state, nil
	}
	rows, err = tx.Query(ctx, `SELECT NULL::text, clock FROM fair_clocks WHERE queue = $1
		UNION ALL SELECT tenant, pass FROM fair_passes WHERE queue = $1`, queue)
	if err != nil {
		return nil, state, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			tenant *string
			v      float64
		)
		if err := rows.Scan(&tenant, &v); err != nil {
			return nil, state, err
		}
		if tenant != nil {
			state.Passes[*tenant] = v
		} else {
			state.Clock = v
		}
	}
	return tenants, state, rows.Err()
}

// readyTenantsSQL lists the tenants with a ready QUEUED job in queue $1
// at $2, of any kind: a skip scan of jobs_unfinished_queue_tenant, a seek
// per tenant with unfinished jobs there and one more to ask whether one
// is ready.
var readyTenantsSQL = `WITH RECURSIVE t(queue, tenant) AS (
		SELECT $1::text, ` + unfinishedTenant("$1::text", "") + `
		UNION ALL
		SELECT t.queue, ` + unfinishedTenant("t.queue", "t.tenant") + ` FROM t WHERE t.tenant IS NOT NULL)
	SELECT t.tenant FROM t WHERE t.tenant IS NOT NULL
		AND EXISTS (SELECT FROM jobs AS x WHERE ` + unfinishedOf("x", "t", "queued") + ` AND x.run_at <= $2::timestamptz)`

// saveFairSQL writes queue $1's fair state: its clock $2, and its
// tenants' passes ($3, $4), over the stored one.
const saveFairSQL = `WITH clock AS (
		INSERT INTO fair_clocks (queue, clock) VALUES ($1, $2) ON CONFLICT (queue) DO UPDATE SET clock = excluded.clock),
	gone AS (DELETE FROM fair_passes WHERE queue = $1 AND tenant <> ALL($3::text[])),
	passes AS (INSERT INTO fair_passes (queue, tenant, pass) SELECT $1, u.t, u.p FROM unnest($3::text[], $4::float8[]) AS u(t, p)
		ON CONFLICT (queue, tenant) DO UPDATE SET pass = excluded.pass)
SELECT`

// forgetFairSQL deletes queue $1's fair state: its ready jobs are one
// tenant's.
const forgetFairSQL = `WITH clock AS (DELETE FROM fair_clocks WHERE queue = $1)
DELETE FROM fair_passes WHERE queue = $1`
