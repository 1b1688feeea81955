package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/store"
)

const insertJob = `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
	payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::json, $10::text::json, $11, $12, $13, $14, $15,
	$16, $17, $18, $19, $20, $21, $22, $23)`

// updateJob writes every column (PostgreSQL keeps an update HOT when no
// indexed value changed, whatever the SET list says) if the row is still
// at the revision UpdateJob read.
const updateJob = `UPDATE jobs SET (tenant, kind, queue, state, version, percent, step,
	payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at) =
	($2, $3, $4, $5, $6, $7, $8, $9::text::json, $10::text::json, $11, $12, $13, $14, $15,
	$16, $17, $18, $19, $20, $21, $22, $23), rev = rev + 1
	WHERE id = $1 AND rev = $24`

// holderQuery finds the active job holding a unique key; its WHERE says
// what jobs_unique_active says, so that index answers it.
const holderQuery = `SELECT id FROM jobs
	WHERE tenant = $1 AND unique_key = $2 AND id <> $3
	AND unique_key <> '' AND state IN ('pending', 'queued', 'running')`

// conflictAttempts bounds how often a write that hit a unique key whose
// holder ended before it could be named tries again.
const conflictAttempts = 3

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j store.Job) (store.Job, error) {
	j = normalize(j)
	for attempt := 1; ; attempt++ {
		err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
			_, err := conn.Exec(ctx, insertJob, values(j)...)
			return err
		})
		if err == nil {
			s.announce(j)
			return j, nil
		}
		if !isUniqueViolation(err, "jobs_unique_active") || attempt == conflictAttempts {
			return store.Job{}, fmt.Errorf("create job %s: %w", j.ID, classify(err))
		}
		if conflict := s.activeHolder(ctx, j); conflict != nil {
			return store.Job{}, conflict
		}
	}
}

// activeHolder explains a unique violation on jobs_unique_active while
// writing j: the *store.ConflictError naming the holder, nil if none holds
// the key any more (the caller tries again), or the lookup's own error.
func (s *Store) activeHolder(ctx context.Context, j store.Job) error {
	var id string
	err := s.pool.QueryRow(ctx, holderQuery, j.Tenant, j.UniqueKey, j.ID).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("job %s: look up the active job with unique key %q: %w", j.ID, j.UniqueKey, classify(err))
	}
	return &store.ConflictError{ActiveID: id, UniqueKey: j.UniqueKey}
}

func (s *Store) getJob(ctx context.Context, id string) (storedRow, error) {
	row, err := scanJob(s.pool.QueryRow(ctx, "SELECT "+columns+" FROM jobs WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return storedRow{}, fmt.Errorf("job %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return storedRow{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return row, nil
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	row, err := s.getJob(ctx, id)
	return row.job, err
}

// UpdateJob implements store.Store optimistically: it reads the row
// (no lock), lets update change a copy, and writes it with one UPDATE
// that holds only if the row's revision is still the one read; if
// another write came between, it reads again and calls update again.
func (s *Store) UpdateJob(ctx context.Context, id string, update func(*store.Job) error) (store.Job, error) {
	conflicts := 0
	for {
		old, err := s.getJob(ctx, id)
		if err != nil {
			return store.Job{}, err
		}
		next := normalize(old.job)
		if err := update(&next); err != nil {
			return store.Job{}, err
		}
		next = normalize(next)
		if next.ID != old.job.ID {
			return store.Job{}, fmt.Errorf("update job %s: the id cannot change (to %q)", id, next.ID)
		}
		next.Version = old.job.Version
		if !next.SameVisible(&old.job) {
			next.Version++
		}
		if sameStored(next, old.job) {
			return old.job, nil
		}
		var tag pgconn.CommandTag
		err = s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
			tag, err = conn.Exec(ctx, updateJob, append(values(next), old.rev)...)
			return err
		})
		switch {
		case isUniqueViolation(err, "jobs_unique_active") && conflicts < conflictAttempts:
			conflicts++
			if conflict := s.activeHolder(ctx, next); conflict != nil {
				return store.Job{}, conflict
			}
			continue
		case err != nil:
			return store.Job{}, fmt.Errorf("update job %s: %w", id, classify(err))
		case tag.RowsAffected() == 0:
			continue // written (or deleted) since the read: read again
		}
		if next.Version > old.job.Version {
			s.announce(next)
		}
		return next, nil
	}
}

// --- claims ---

// claimSet is what ClaimJob's UPDATE sets; $1 is the claim's time, $2
// the worker, $3 the lease id, $4 and $5 the queues with leases of their
// own and those leases in microseconds, $6 the default lease.
const claimSet = `UPDATE jobs AS j SET state = 'running', attempt = j.attempt + 1, worker_id = $2,
	lease_id = $3, started_at = coalesce(j.started_at, $1), updated_at = $1,
	lease_expires_at = $1 + coalesce((SELECT l.d FROM unnest($4::text[], $5::bigint[]) AS l(q, d)
		WHERE l.q = j.queue), $6) * interval '1 microsecond',
	version = j.version + 1, rev = j.rev + 1
FROM picked WHERE j.seq = picked.seq
RETURNING ` + "%s" + `, picked.updated_at`

// pick builds the query that finds the job ClaimJob takes (ready true)
// or the earliest RunAt NextReady reports (ready false), with the queue
// rules checked in SQL, selecting sel from it (alias j) and ending with
// suffix. Its arguments start at $first.
//
// A queue's rules: a serial queue offers only its head (its first QUEUED
// job by RunAt then creation, whatever its kind or tenant, or with
// HoldRetry its first job backing off before a retry), which must then
// match the worker's filter; a queue at its max_running, or one that uses
// a full pool, offers nothing.
//
// Without rules it is the first matching ready job, read from the
// partial index jobs_queued (or jobs_queued_queue for given queues) in
// claim order. With rules no query walks the jobs of a queue that has no
// room: each ruled queue offers at most as many of its first matching
// jobs as it has room for (one, if serial), from jobs_queued_queue, and
// each queue without rules at most candidatesFree of its own, the first
// candidatesFree of which are kept; the job taken is the first of those
// candidates that no other claim holds.
func pick(f store.ClaimFilter, ready bool, sel, suffix string, first int) (string, []any) {
	var (
		args  []any
		match []string // the worker's filter, on alias h
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", first+len(args)-1)
	}
	match = append(match, "h.state = 'queued'")
	if ready {
		match = append(match, "h.run_at <= "+arg(f.Now)+"::timestamptz")
	}
	if len(f.Tenants) > 0 {
		match = append(match, "h.tenant = ANY("+arg(f.Tenants)+"::text[])")
	}
	if len(f.Kinds) > 0 {
		match = append(match, "h.kind = ANY("+arg(f.Kinds)+"::text[])")
	}
	if len(f.Queues) > 0 {
		match = append(match, "h.queue = ANY("+arg(f.Queues)+"::text[])")
	}
	matches := strings.Join(match, " AND ")
	rules := rulesFor(f)
	if len(rules.queues) == 0 {
		return "SELECT " + sel + " FROM jobs AS j WHERE " + strings.ReplaceAll(matches, "h.", "j.") +
			" ORDER BY j.run_at, j.seq LIMIT 1" + suffix, args
	}
	ruled := arg(rules.queues)
	// names are the queues without rules that may offer candidates: the
	// worker's, or every queue with a QUEUED job, found by a skip scan of
	// jobs_queued_queue (one seek per queue, never a walk of its jobs).
	names := `names(queue) AS (
		SELECT (SELECT min(x.queue) FROM jobs AS x WHERE x.state = 'queued')
		UNION ALL
		SELECT (SELECT min(x.queue) FROM jobs AS x WHERE x.state = 'queued' AND x.queue > n.queue)
		FROM names AS n WHERE n.queue IS NOT NULL)`
	if len(f.Queues) > 0 {
		names = `names(queue) AS (SELECT DISTINCT q FROM unnest(` + arg(f.Queues) + `::text[]) AS q)`
	}
	q := `WITH RECURSIVE ` + names + `,
	lim(queue, max_running, serial, hold) AS (
		SELECT * FROM unnest(` + ruled + `::text[], ` + arg(rules.max) + `::int[], ` +
		arg(rules.serial) + `::bool[], ` + arg(rules.hold) + `::bool[])),
	pool_use(queue, pool) AS (
		SELECT DISTINCT * FROM unnest(` + arg(rules.useQueues) + `::text[], ` + arg(rules.usePools) + `::text[])),
	pool_size(pool, size) AS (
		SELECT * FROM unnest(` + arg(rules.pools) + `::text[], ` + arg(rules.sizes) + `::int[])),
	running(queue, n) AS (
		SELECT q.queue, (SELECT count(*) FROM jobs AS r WHERE r.state = 'running' AND r.queue = q.queue)
		FROM (SELECT queue FROM lim UNION SELECT queue FROM pool_use) AS q),
	pool_free(pool, free) AS (
		SELECT p.pool, p.size - (SELECT coalesce(sum(r.n), 0) FROM pool_use AS o
			JOIN running AS r ON r.queue = o.queue WHERE o.pool = p.pool)
		FROM pool_size AS p),
	room(queue, serial, hold, n) AS (
		SELECT l.queue, l.serial, l.hold, least(
			CASE WHEN l.serial THEN 1 ELSE ` + fmt.Sprint(candidatesRuled) + ` END,
			CASE WHEN l.max_running > 0 THEN l.max_running - r.n END,
			(SELECT min(p.free) FROM pool_use AS u JOIN pool_free AS p ON p.pool = u.pool WHERE u.queue = l.queue))
		FROM lim AS l JOIN running AS r ON r.queue = l.queue),
	heads(seq) AS (
		SELECT coalesce(
			CASE WHEN o.hold THEN (SELECT x.seq FROM jobs AS x
				WHERE x.state = 'queued' AND x.attempt > 0 AND x.queue = o.queue
				ORDER BY x.run_at, x.seq LIMIT 1) END,
			(SELECT x.seq FROM jobs AS x WHERE x.state = 'queued' AND x.queue = o.queue
				ORDER BY x.run_at, x.seq LIMIT 1))
		FROM room AS o WHERE o.serial AND o.n > 0),
	candidates(seq, run_at) AS (
		SELECT h.seq, h.run_at FROM heads JOIN jobs AS h ON h.seq = heads.seq WHERE ` + matches + `
		UNION ALL
		SELECT c.seq, c.run_at FROM room AS o, LATERAL (
			SELECT h.seq, h.run_at FROM jobs AS h WHERE ` + matches + ` AND h.queue = o.queue
			ORDER BY h.run_at, h.seq LIMIT o.n) AS c
		WHERE NOT o.serial AND o.n > 0
		UNION ALL
		(SELECT c.seq, c.run_at FROM names AS n, LATERAL (
			SELECT h.seq, h.run_at FROM jobs AS h WHERE ` + matches + ` AND h.queue = n.queue
			ORDER BY h.run_at, h.seq LIMIT ` + fmt.Sprint(candidatesFree) + `) AS c
		WHERE n.queue IS NOT NULL AND n.queue <> ALL(` + ruled + `::text[])
		ORDER BY c.run_at, c.seq LIMIT ` + fmt.Sprint(candidatesFree) + `))
	SELECT ` + sel + ` FROM candidates AS c JOIN jobs AS j ON j.seq = c.seq WHERE j.state = 'queued'
	ORDER BY c.run_at, c.seq LIMIT 1` + suffix
	return q, args
}

// candidatesRuled bounds the jobs a ruled queue offers a claim, and
// candidatesFree those the queues without rules offer together: a claim
// under rules holds the advisory locks of every ruled queue it may take
// from, so only claims from queues without rules alone (which lock
// nothing) compete with it for those jobs' row locks, and a claim that
// finds all its candidates taken looks again (ClaimJob).
const (
	candidatesRuled = 8
	candidatesFree  = 8
)

// rules are a claim's queue rules as arrays, for unnest.
type rules struct {
	queues       []string
	max          []int32
	serial, hold []bool
	useQueues    []string
	usePools     []string
	pools        []string
	sizes        []int32
}

// rulesFor keeps the rules of the queues f may claim from (all of
// f.Limits when f names no queues).
func rulesFor(f store.ClaimFilter) rules {
	var r rules
	for q, l := range f.Limits {
		if len(f.Queues) > 0 && !slices.Contains(f.Queues, q) {
			continue
		}
		r.queues = append(r.queues, q)
		r.max = append(r.max, int32(l.MaxRunning))
		r.serial = append(r.serial, l.Serial)
		r.hold = append(r.hold, l.Serial && l.HoldRetry)
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
		if l.MaxRunning <= 0 && !l.Serial && len(l.Pools) == 0 {
			continue
		}
		keys = append(keys, lockKey(s.schema, "queue", q))
		for _, p := range l.Pools {
			keys = append(keys, lockKey(s.schema, "pool", p))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// ClaimJob implements store.Store with one statement: it picks the job
// with FOR UPDATE SKIP LOCKED (claimers never wait for each other's rows,
// and a row another claim took is re-checked and passed over) and
// updates it, returning it and its old updated_at.
//
// Under queue rules, counting RUNNING jobs in a statement that began
// before another claim committed would let both see room for one: so the
// claim first takes the transaction advisory locks of lockKeys, then
// runs its statement, whose snapshot (READ COMMITTED takes one per
// statement) is later than the commit of every claim that held those
// locks before. Both statements go in one pipelined batch, one
// round trip and one implicit transaction that the locks last for.
//
// A statement's snapshot may miss jobs committed while it ran, and find
// the jobs it saw taken: so a claim that finds nothing reads whether a
// job is ready now (NextReady's query) and, if one is, claims again (at
// most claimAttempts in all). The engine reads NextReady after a claim
// that found nothing anyway; this saves it a park and a wake-up.
func (s *Store) ClaimJob(ctx context.Context, f store.ClaimFilter, c store.Claim) (store.Job, time.Time, error) {
	now := micro(c.Now)
	f.Now = micro(f.Now)
	var leaseQueues []string
	var leases []int64
	for q, d := range c.Leases {
		leaseQueues, leases = append(leaseQueues, q), append(leases, d.Microseconds())
	}
	args := []any{now, c.WorkerID, c.LeaseID, leaseQueues, leases, c.Lease.Microseconds()}
	picked, pickArgs := pick(f, true, "j.seq, j.updated_at", " FOR UPDATE OF j SKIP LOCKED", len(args)+1)
	query := "WITH picked AS (" + picked + ") " + fmt.Sprintf(claimSet, qualified(columns, "j"))
	args = append(args, pickArgs...)

	keys := s.lockKeys(f)
	for attempt := 1; ; attempt++ {
		j, queuedAt, err := s.claim(ctx, keys, query, args)
		if !errors.Is(err, store.ErrNoJob) || attempt == claimAttempts {
			return j, queuedAt, err
		}
		// The claim's snapshot may predate jobs committed while it ran,
		// and the jobs it saw may have been taken meanwhile: if a fresh
		// read finds one ready, claim again.
		if _, ok, err := s.nextReady(ctx, f, true); err != nil || !ok {
			return store.Job{}, time.Time{}, store.ErrNoJob
		}
	}
}

// claimAttempts bounds how often ClaimJob claims again after finding
// nothing while a later read finds a job ready.
const claimAttempts = 3

// claim runs the claim statement, after the batch of advisory locks
// keys if there are any.
func (s *Store) claim(ctx context.Context, keys []int64, query string, args []any) (store.Job, time.Time, error) {
	var (
		queuedAt pgtype.Timestamptz
		row      storedRow
	)
	err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		var err error
		if len(keys) == 0 {
			row, err = scanJob(conn.QueryRow(ctx, query, args...), &queuedAt)
			return err
		}
		b := &pgx.Batch{}
		b.Queue("SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k", keys)
		b.Queue(query, args...)
		br := conn.SendBatch(ctx, b)
		if _, err = br.Exec(); err == nil {
			row, err = scanJob(br.QueryRow(), &queuedAt)
		}
		return errors.Join(err, br.Close())
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Job{}, time.Time{}, store.ErrNoJob
	case err != nil:
		return store.Job{}, time.Time{}, fmt.Errorf("claim job: %w", classify(err))
	}
	s.announce(row.job)
	return row.job, fromTime(queuedAt), nil
}

// NextReady implements store.Store with ClaimJob's pick, without the
// ready condition and without locks: it is a read.
func (s *Store) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	return s.nextReady(ctx, f, false)
}

func (s *Store) nextReady(ctx context.Context, f store.ClaimFilter, ready bool) (time.Time, bool, error) {
	f.Now = micro(f.Now)
	query, args := pick(f, ready, "j.run_at", "", 1)
	var runAt pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, query, args...).Scan(&runAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next ready: %w", classify(err))
	}
	return fromTime(runAt), true, nil
}

// --- lists ---

// A page token is the key of the last job of the page behind a format
// byte: (created_at in microseconds, seq) for a list newest first
// (listFormat), (change_seq, seq) for a list of changes (changeFormat),
// so a token of one order is refused in the other.
const (
	listFormat   = 1
	changeFormat = 2
)

// ListJobs implements store.Store. Pages are keyed by (created_at, seq),
// or with ChangedSince by (change_seq, seq), so rows created meanwhile
// never shift them. With MaxBytes the database adds up each row's size
// (Job.Size, in SQL, from lengths it knows without reading the values)
// in list order and returns only the rows that fit, and the first that
// does not with no payload or result: so a page of large jobs reads at
// most MaxBytes of them.
func (s *Store) ListJobs(ctx context.Context, f store.ListFilter) ([]store.Job, string, error) {
	var (
		where = []string{"true"}
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Tenant != "" {
		where = append(where, "tenant = "+arg(f.Tenant))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if f.Kind != "" {
		where = append(where, "kind = "+arg(f.Kind))
	}
	if f.Queue != "" {
		where = append(where, "queue = "+arg(f.Queue))
	}
	// order is the list's order by its key, for alias a.
	format := byte(listFormat)
	order := func(a string) string { return a + "created_at DESC, " + a + "seq DESC" }
	if f.ChangedSince != "" {
		c, err := decodeCursor(f.ChangedSince)
		if err != nil {
			return nil, "", err
		}
		where = append(where, "change_xid >= "+arg(fmt.Sprint(c.xmin))+"::text::xid8")
		format = changeFormat
		order = func(a string) string { return a + "change_seq, " + a + "seq" }
	}
	if f.PageToken != "" {
		key, seq, err := store.DecodePageToken(format, f.PageToken)
		if err != nil {
			return nil, "", err
		}
		if format == listFormat {
			createdAt := time.UnixMicro(key).UTC()
			where = append(where, "(created_at, seq) < ("+arg(orderTime(createdAt))+"::timestamptz, "+arg(seq)+"::bigint)")
		} else {
			where = append(where, "(change_seq, seq) > ("+arg(key)+"::bigint, "+arg(seq)+"::bigint)")
		}
	}
	selected := summaryColumns
	if f.Full {
		selected = columns
	}
	limit := ""
	if f.Limit > 0 {
		// One more than asked tells whether there is a next page.
		limit = " LIMIT " + arg(f.Limit+1)
	}
	query := "SELECT " + selected + ", change_seq, true FROM jobs WHERE " + strings.Join(where, " AND ") +
		" ORDER BY " + order("") + limit
	if f.MaxBytes > 0 {
		inner := "SELECT *, " + sizeExpr(f.Full) + " AS size FROM jobs WHERE " + strings.Join(where, " AND ") +
			" ORDER BY " + order("") + limit
		max := arg(f.MaxBytes)
		fits := "(p.rn = 1 OR p.total <= " + max + ")"
		sel := strings.Replace(qualified(selected, "p"),
			"p.payload::text, p.result::text",
			"CASE WHEN "+fits+" THEN p.payload::text END, CASE WHEN "+fits+" THEN p.result::text END", 1)
		query = "SELECT " + sel + ", p.change_seq, " + fits + " FROM (SELECT q.*, " +
			"row_number() OVER w AS rn, sum(q.size) OVER w AS total FROM (" + inner + ") AS q " +
			"WINDOW w AS (ORDER BY " + order("q.") + " ROWS UNBOUNDED PRECEDING)) AS p " +
			"WHERE p.rn <= 2 OR p.total - p.size <= " + max + " ORDER BY " + order("p.")
	}
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	defer rows.Close()
	var (
		jobs    []store.Job
		lastKey int64
		lastSeq int64
	)
	for rows.Next() {
		var (
			changeSeq int64
			fits      bool
		)
		row, err := scanJob(rows, &changeSeq, &fits)
		if err != nil {
			return nil, "", fmt.Errorf("list jobs: %w", classify(err))
		}
		if !fits || (f.Limit > 0 && len(jobs) == f.Limit) {
			// row starts the next page.
			return jobs, store.EncodePageToken(format, lastKey, lastSeq), nil
		}
		jobs, lastSeq = append(jobs, row.job), row.seq
		if lastKey = row.job.CreatedAt.UnixMicro(); format == changeFormat {
			lastKey = changeSeq
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	return jobs, "", nil
}
