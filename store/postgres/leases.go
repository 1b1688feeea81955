package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// writeLeases makes a batch of lease writes (store.LeaseWrite.Apply, in
// SQL) in one statement: an UPDATE of the jobs whose lease holds, joined
// with the writes by id, and a read of the jobs of the other writes.
//
// The jobs are found by id alone: the lease check is written "(...) IS
// TRUE", which no index answers (see recheck in claims.go), because with
// statistics that have not seen the running jobs the planner would
// otherwise walk every RUNNING job (by the index on state) for each
// write. The statement runs after the claims' prelude, for the same plan
// settings (see planSettings).
//
// Every SET computes from j, the row as the UPDATE finds it, never from
// a read made before: if another write commits to a row between this
// statement's snapshot and its update, READ COMMITTED checks the WHERE
// again on the newer row and computes the SET from it, so a concurrent
// change is never overwritten and versions never repeat.
//
// The jobs of writes whose lease does not hold are read as the
// statement's snapshot has them: the truth, unless a change committed
// while the statement ran is what broke the lease (the snapshot then
// still shows the job RUNNING under the write's lease); WriteLeases reads
// those again. changed says whether this transaction raised the job's
// version (jobs_stamp stamps change_xid then), so that only changes are
// announced.
//
// Arguments: $1 the writes' job ids, $2 their leases, $3 their ops
// (store.LeaseOp), $4 percents, $5 steps, $6 results (NULL for none), $7
// and $8 error types and messages, $9 retry, $10 jitter; $11 the time;
// $12 and $13 the queues with leases of their own and those leases in
// microseconds, $14 the default lease; $15, $16 and $17 the queues with
// backoffs of their own and their initial and maximum steps in
// microseconds, $18 and $19 the default backoff's.
var writeLeases = strings.NewReplacer(
	"{{heartbeat}}", fmt.Sprint(int(store.Heartbeat)),
	"{{complete}}", fmt.Sprint(int(store.Complete)),
	"{{fail}}", fmt.Sprint(int(store.Fail)),
	"{{columns}}", qualified(columns, "j"),
	"{{maxHistory}}", fmt.Sprint(jobtype.MaxHistory),
).Replace(strings.NewReplacer(
	// requeue: a Fail that leaves attempts and asks for one.
	"{{requeue}}", "(w.op = {{fail}} AND w.retry AND j.attempt < j.max_attempts)",
	// history: j's history with the entry of the attempt a Complete or
	// Fail ends appended (jobtype.Job.EndAttempt), the last
	// {{maxHistory}} kept, in the JSON that encoding/json reads back as
	// the same []jobtype.HistoryEntry: times as RFC 3339 in UTC to the
	// microsecond, the attempt's start from attempt_started_at.
	"{{history}}", `CASE WHEN j.history IS NULL THEN json_build_array(`+historyEntry+`)
		ELSE (SELECT json_agg(h.e ORDER BY h.n) FROM (
			SELECT e, n FROM json_array_elements(j.history) WITH ORDINALITY AS o(e, n)
			UNION ALL
			SELECT `+historyEntry+`, json_array_length(j.history) + 1
		) AS h(e, n) WHERE h.n > json_array_length(j.history) + 1 - {{maxHistory}}) END`,
	// visible: the write changes a field a watcher sees (see
	// jobtype.Job.SameVisible): Complete and Fail change the state; a
	// Heartbeat, maybe percent or step.
	"{{visible}}", `(w.op <> {{heartbeat}} OR least(greatest(w.percent, 0), 100) > j.percent
		OR (w.step <> '' AND w.step <> j.step))`,
	// delay: store.Backoff.Delay of the job's queue for its attempt, in
	// microseconds: the step is initial doubled attempt - 1 times, at
	// most max (initial as it is if not positive), in numeric so that
	// nothing overflows (2^62 times a positive initial passes any max);
	// then floor(jitter * (step + 1)) in float8, as Go computes it in
	// float64 (so it is a float8 exactly, and the interval's float8
	// multiplication keeps it exact).
	"{{delay}}", `(SELECT floor(w.jitter * (least(
			CASE WHEN b.initial > 0 THEN b.initial * power(2::numeric, greatest(least(j.attempt - 1, 62), 0))
				ELSE b.initial END,
			b.max)::bigint + 1)::float8)::bigint
		FROM (SELECT
			coalesce((SELECT o.initial FROM unnest($15::text[], $16::bigint[]) AS o(q, initial) WHERE o.q = j.queue), $18)::numeric,
			coalesce((SELECT o.max FROM unnest($15::text[], $17::bigint[]) AS o(q, max) WHERE o.q = j.queue), $19)::numeric
		) AS b(initial, max))`,
).Replace(`WITH w AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::int[], $5::text[], $6::text[], $7::text[],
		$8::text[], $9::bool[], $10::float8[])
		WITH ORDINALITY AS w(id, lease, op, percent, step, result, error_type, error_message, retry, jitter, i)),
held AS (
	UPDATE jobs AS j SET
		state = CASE WHEN w.op = {{heartbeat}} THEN j.state WHEN w.op = {{complete}} THEN 'succeeded'
			WHEN {{requeue}} THEN 'queued' ELSE 'failed' END,
		percent = CASE WHEN w.op = {{heartbeat}} THEN greatest(j.percent, least(greatest(w.percent, 0), 100))
			WHEN w.op = {{complete}} THEN 100 WHEN {{requeue}} THEN 0 ELSE j.percent END,
		step = CASE WHEN w.op = {{heartbeat}} AND w.step <> '' THEN w.step WHEN {{requeue}} THEN '' ELSE j.step END,
		result = CASE WHEN w.op = {{complete}} THEN w.result::json ELSE j.result END,
		error_type = CASE WHEN w.op = {{heartbeat}} THEN j.error_type WHEN w.op = {{complete}} THEN NULL
			ELSE w.error_type END,
		error_message = CASE WHEN w.op = {{heartbeat}} THEN j.error_message WHEN w.op = {{complete}} THEN NULL
			ELSE w.error_message END,
		finished_at = CASE WHEN w.op = {{heartbeat}} OR {{requeue}} THEN j.finished_at ELSE $11 END,
		run_at = CASE WHEN {{requeue}} THEN $11 + {{delay}} * interval '1 microsecond' ELSE j.run_at END,
		lease_expires_at = CASE WHEN w.op = {{heartbeat}}
			THEN $11 + coalesce((SELECT d.us FROM unnest($12::text[], $13::bigint[]) AS d(q, us)
				WHERE d.q = j.queue), $14) * interval '1 microsecond' END,
		history = CASE WHEN w.op = {{heartbeat}} THEN j.history ELSE {{history}} END,
		updated_at = CASE WHEN {{visible}} THEN $11 ELSE j.updated_at END,
		version = j.version + CASE WHEN {{visible}} THEN 1 ELSE 0 END,
		rev = j.rev + 1
	FROM w WHERE j.id = w.id AND (j.state = 'running' AND j.lease_id = w.lease) IS TRUE
	RETURNING {{columns}}, w.i, true AS held, j.change_xid = pg_current_xact_id() AS changed),
stale AS (
	SELECT {{columns}}, w.i, false AS held, false AS changed FROM w JOIN jobs AS j ON j.id = w.id
	WHERE w.i NOT IN (SELECT i FROM held))
SELECT * FROM held
UNION ALL
SELECT * FROM stale`))

// historyEntry is the JSON of the history entry of the attempt a
// Complete or Fail w ends (jobtype.Job.EndAttempt). A job's first
// attempt to end, the common case, makes the history a one-entry array
// without reading any other.
var historyEntry = `json_build_object('attempt', j.attempt, 'worker_id', j.worker_id,
	'started_at', ` + jsonTime("j.attempt_started_at") + `, 'finished_at', ` + jsonTime("$11::timestamptz") + `,
	'state', CASE WHEN w.op = {{complete}} THEN 'succeeded'
		WHEN w.op = {{fail}} AND w.retry AND j.attempt < j.max_attempts THEN 'queued' ELSE 'failed' END,
	'error', CASE WHEN w.op = {{fail}} THEN json_build_object('type', w.error_type, 'message', w.error_message) END)`

// jsonTime is the SQL of timestamptz expr as encoding/json writes a UTC
// time.Time to the microsecond (NULL stays NULL, which reads as zero).
func jsonTime(expr string) string {
	return `to_char(` + expr + ` AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
}

// WriteLeases implements store.Store with writeLeases: one statement for
// the whole batch. A batch that writes one job more than once (rare: a
// heartbeat and the completion that follows it, say) is split into
// rounds, the n-th write of each job in round n, so each round writes a
// job at most once (an UPDATE joined with two writes of one row makes
// only one); the rounds run in order in one pipelined batch, one round
// trip and one implicit transaction, each statement seeing the ones
// before it.
func (s *Store) WriteLeases(ctx context.Context, ws []store.LeaseWrite, r store.LeaseRules) ([]store.LeaseResult, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	for _, w := range ws {
		switch {
		case w.Op != store.Heartbeat && w.Op != store.Complete && w.Op != store.Fail:
			return nil, fmt.Errorf("write leases: job %s: unknown op %d", w.JobID, w.Op)
		case w.Op == store.Fail && w.Error == nil:
			return nil, fmt.Errorf("write leases: job %s: a failure without an error", w.JobID)
		}
	}
	rules := leaseRuleArgs(r)
	rounds := leaseRounds(ws) // indexes into ws, per round
	args := make([][]any, len(rounds))
	for i, round := range rounds {
		args[i] = append(leaseWriteArgs(ws, round), rules...)
	}
	results := make([]store.LeaseResult, len(ws))
	var changed []jobtype.Job
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		clear(results)
		changed = changed[:0]
		b := &pgx.Batch{}
		b.Queue(prelude, []int64(nil))
		for _, a := range args {
			b.Queue(writeLeases, a...)
		}
		br := conn.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			return errors.Join(err, br.Close())
		}
		for _, round := range rounds {
			if err := readLeaseResults(br, round, results, &changed); err != nil {
				return errors.Join(err, br.Close())
			}
		}
		return br.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("write leases: %w", classify(err))
	}
	// A write whose lease the snapshot shows holding, yet did not hold,
	// lost to a change committed while it ran: read what that made.
	var raced []string
	for i, res := range results {
		if !res.Held && res.Job.State == jobtype.Running && res.Job.LeaseID == ws[i].LeaseID {
			raced = append(raced, ws[i].JobID)
		}
	}
	if len(raced) > 0 {
		if err := s.readRaced(ctx, ws, raced, results); err != nil {
			return nil, err
		}
	}
	for i, res := range results {
		if !res.Held && res.Job.ID == "" {
			results[i].Err = fmt.Errorf("job %s: %w", ws[i].JobID, jobtype.ErrNotFound)
		}
	}
	// A job written twice is announced at each version it reached.
	for _, j := range changed {
		s.announce(j)
	}
	return results, nil
}

// readRaced reads the jobs ids again into the results of the writes of
// them that did not hold (a job the read does not find is gone).
func (s *Store) readRaced(ctx context.Context, ws []store.LeaseWrite, ids []string, results []store.LeaseResult) error {
	rows, err := s.reads().Query(ctx, "SELECT "+columns+" FROM jobs WHERE id = ANY($1::text[])", ids)
	if err != nil {
		return fmt.Errorf("write leases: read the jobs whose lease broke meanwhile: %w", classify(err))
	}
	defer rows.Close()
	now := map[string]jobtype.Job{}
	for rows.Next() {
		row, err := scanJob(rows)
		if err != nil {
			return fmt.Errorf("write leases: read the jobs whose lease broke meanwhile: %w", classify(err))
		}
		now[row.job.ID] = row.job
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("write leases: read the jobs whose lease broke meanwhile: %w", classify(err))
	}
	for i, w := range ws {
		if !results[i].Held && slices.Contains(ids, w.JobID) {
			results[i].Job = now[w.JobID]
		}
	}
	return nil
}

// readLeaseResults reads one round's rows into results (by the index in
// ws of the write each answers) and appends the jobs whose version the
// write raised to changed.
func readLeaseResults(br pgx.BatchResults, round []int, results []store.LeaseResult, changed *[]jobtype.Job) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			i            int64
			held, raised bool
		)
		row, err := scanJob(rows, &i, &held, &raised)
		if err != nil {
			return err
		}
		results[round[i-1]] = store.LeaseResult{Job: row.job, Held: held}
		if raised {
			*changed = append(*changed, row.job)
		}
	}
	return rows.Err()
}

// leaseRounds splits ws into rounds in which no job is written twice: the
// n-th write of a job goes to round n. Almost always there is one round.
func leaseRounds(ws []store.LeaseWrite) [][]int {
	seen := make(map[string]int, len(ws)) // writes of each job so far
	var rounds [][]int
	for i, w := range ws {
		n := seen[w.JobID]
		seen[w.JobID] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	return rounds
}

// leaseWriteArgs are writeLeases' arrays of the writes of round.
func leaseWriteArgs(ws []store.LeaseWrite, round []int) []any {
	n := len(round)
	var (
		ids, leases, steps, errTypes, errMsgs = make([]string, n), make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
		ops, percents                         = make([]int32, n), make([]int32, n)
		results                               = make([]*string, n)
		retry                                 = make([]bool, n)
		jitter                                = make([]float64, n)
	)
	for k, i := range round {
		w := ws[i]
		ids[k], leases[k], ops[k], percents[k], steps[k] = w.JobID, w.LeaseID, int32(w.Op), w.Percent, w.Step
		if len(w.Result) > 0 {
			res := string(w.Result)
			results[k] = &res
		}
		if w.Error != nil {
			errTypes[k], errMsgs[k] = &w.Error.Type, &w.Error.Message
		}
		retry[k], jitter[k] = w.Retry, w.Jitter
	}
	return []any{ids, leases, ops, percents, steps, results, errTypes, errMsgs, retry, jitter}
}

// leaseRuleArgs are writeLeases' arguments from $11 on.
func leaseRuleArgs(r store.LeaseRules) []any {
	var (
		leaseQueues, backoffQueues []string
		leases, initials, maxes    []int64
	)
	for q, d := range r.Leases {
		leaseQueues, leases = append(leaseQueues, q), append(leases, d.Microseconds())
	}
	for q, b := range r.Backoffs {
		backoffQueues = append(backoffQueues, q)
		initials, maxes = append(initials, b.Initial.Microseconds()), append(maxes, b.Max.Microseconds())
	}
	return []any{micro(r.Now), leaseQueues, leases, r.Lease.Microseconds(),
		backoffQueues, initials, maxes, r.Backoff.Initial.Microseconds(), r.Backoff.Max.Microseconds()}
}
