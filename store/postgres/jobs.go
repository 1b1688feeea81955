package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

const insertJob = `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
	payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, priority, history, batch, after, after_policy, after_depth, trace_parent, trace_state)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text::json, $10::text::json, $11, $12, $13, $14, $15,
	$16, $17, $18, $19, $20, $21, $22, $23, $24, $25::text::json, $26, $27, $28, $29, $30, $31)`

// insertValues are insertJob's bind values: values, then what no update
// writes (it never changes): the batch, the dependencies, the depth of
// its chain of WAITING jobs (0 unless it waits) and the trace context.
func insertValues(j jobtype.Job, depth int) []any {
	var after any
	if len(j.After) > 0 {
		after = j.After
	}
	return append(values(j), j.Batch, after, string(j.OnDependencyFailure), depth, j.TraceParent, j.TraceState)
}

// updateJob writes every column (PostgreSQL keeps an update HOT when no
// indexed value changed, whatever the SET list says) if the row is still
// at the revision UpdateJob read.
const updateJob = `UPDATE jobs SET (tenant, kind, queue, state, version, percent, step,
	payload, result, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, priority, history) =
	($2, $3, $4, $5, $6, $7, $8, $9::text::json, $10::text::json, $11, $12, $13, $14, $15,
	$16, $17, $18, $19, $20, $21, $22, $23, $24, $25::text::json), rev = rev + 1
	WHERE id = $1 AND rev = $26`

// holderQuery finds the active job holding a unique key; its WHERE says
// what jobs_unique_active says, so that index answers it.
const holderQuery = `SELECT id FROM jobs
	WHERE tenant = $1 AND unique_key = $2 AND id <> $3
	AND unique_key <> '' AND state IN ('pending', 'waiting', 'queued', 'running')`

// conflictAttempts bounds how often a write that hit a unique key whose
// holder ended before it could be named tries again.
const conflictAttempts = 3

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	if len(j.After) > 0 {
		jobs, err := s.CreateJobs(ctx, []jobtype.Job{j})
		if err != nil {
			return jobtype.Job{}, err
		}
		return jobs[0], nil
	}
	j = normalize(j)
	for attempt := 1; ; attempt++ {
		err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
			_, err := conn.Exec(ctx, insertJob, insertValues(j, 0)...)
			return err
		})
		if err == nil {
			s.announce(j)
			s.vacuum.wrote(1)
			return j, nil
		}
		if !isUniqueViolation(err, "jobs_unique_active") || attempt == conflictAttempts {
			return jobtype.Job{}, fmt.Errorf("create job %s: %w", j.ID, classify(err))
		}
		if conflict := s.activeHolder(ctx, j); conflict != nil {
			return jobtype.Job{}, conflict
		}
	}
}

// CreateJobs implements store.Store: CreateJobsWithin without a quota.
func (s *Store) CreateJobs(ctx context.Context, jobs []jobtype.Job) ([]jobtype.Job, error) {
	return s.CreateJobsWithin(ctx, jobs, store.Quota{})
}

// CreateJobsWithin implements store.Store. Without dependencies or a
// quota that charges a tenant the inserts go in one pipelined batch,
// which the server runs as one implicit transaction (a batch's
// statements share one Sync), so a job that cannot be stored rolls back
// the ones before it. With either, in one transaction of its own: see
// createInTx.
func (s *Store) CreateJobsWithin(ctx context.Context, jobs []jobtype.Job, q store.Quota) ([]jobtype.Job, error) {
	in := make([]jobtype.Job, len(jobs))
	waits := false
	for i, j := range jobs {
		in[i] = normalize(j)
		waits = waits || len(j.After) > 0
	}
	charges := q.Charges(in)
	for attempt := 1; ; attempt++ {
		failed := -1 // the job whose insert failed
		var out []jobtype.Job
		err := s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
			if waits || len(charges) > 0 {
				var err error
				out, failed, err = s.createInTx(ctx, conn, in, charges)
				return err
			}
			failed, out = -1, in
			b := &pgx.Batch{}
			for _, j := range in {
				b.Queue(insertJob, insertValues(j, 0)...)
			}
			s.forgetQuotaMarks(b, in, nil)
			br := conn.SendBatch(ctx, b)
			for i := range in {
				if _, err := br.Exec(); err != nil {
					failed = i
					br.Close()
					return err
				}
			}
			return br.Close()
		})
		if err == nil {
			for _, j := range out {
				s.announce(j)
			}
			s.vacuum.wrote(len(out))
			return out, nil
		}
		var (
			missing *jobtype.MissingError
			invalid *jobtype.InvalidError
			quota   *jobtype.QuotaError
		)
		if errors.As(err, &quota) {
			return nil, s.conflictFirst(ctx, quota, in...)
		}
		if errors.As(err, &missing) || errors.As(err, &invalid) {
			return nil, err
		}
		what := fmt.Sprintf("create %d jobs", len(in))
		if failed >= 0 {
			what = "create job " + in[failed].ID
		}
		if failed < 0 || !isUniqueViolation(err, "jobs_unique_active") || attempt == conflictAttempts {
			return nil, fmt.Errorf("%s: %w", what, classify(err))
		}
		if conflict := s.activeHolder(ctx, in[failed]); conflict != nil {
			return nil, conflict
		}
	}
}

// createInTx stores in in one transaction on conn. First, for charges,
// it takes each charged tenant's lock and counts its jobs not yet
// running (checkQuota). Then each job with dependencies (After) is
// settled (store.SettleDependencies) from their rows read FOR SHARE: a
// write that would end one of them waits for this transaction, whose
// rows in job_deps its trigger then finds, and one that ended before
// the read is read ended. Jobs without are inserted in one pipelined
// batch when none of in has dependencies. It returns the jobs as
// stored, or the index of the job whose insert failed.
func (s *Store) createInTx(ctx context.Context, conn *pgxpool.Conn, in []jobtype.Job, charges []store.QuotaCharge) (out []jobtype.Job, failed int, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, -1, err
	}
	defer tx.Rollback(ctx)
	// The tenants of jobs with dependencies are locked too, shared: a
	// retry that joins WAITING chains (deepenWaiters) takes the lock
	// alone, so a job created after a chain's end never counts a depth
	// that retry is raising, while creates do not wait for each other.
	var shared []string
	for _, j := range in {
		if len(j.After) > 0 && !slices.Contains(shared, j.Tenant) {
			shared = append(shared, j.Tenant)
		}
	}
	for _, c := range charges {
		s.boundedTenant(c.Tenant)
	}
	if err := s.checkQuota(ctx, tx, tenantsOf(charges), shared, charges, true); err != nil {
		return nil, -1, err
	}
	out = slices.Clone(in)
	if !slices.ContainsFunc(in, func(j jobtype.Job) bool { return len(j.After) > 0 }) {
		b := &pgx.Batch{}
		for _, j := range in {
			b.Queue(insertJob, insertValues(j, 0)...)
		}
		s.forgetQuotaMarks(b, in, tenantsOf(charges))
		br := tx.SendBatch(ctx, b)
		for i := range in {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return nil, i, err
			}
		}
		if err := br.Close(); err != nil {
			return nil, -1, err
		}
		return out, -1, tx.Commit(ctx)
	}
	// Only a tenant bounded here before has a mark to forget: most
	// creations send nothing, no round trip.
	forget := &pgx.Batch{}
	s.forgetQuotaMarks(forget, in, tenantsOf(charges))
	if forget.Len() > 0 {
		if err := tx.SendBatch(ctx, forget).Close(); err != nil {
			return nil, -1, fmt.Errorf("forget quota marks: %w", err)
		}
	}
	for i := range out {
		j := &out[i]
		var waitFor []string
		depth := 0
		if len(j.After) > 0 {
			deps, err := readDependencies(ctx, tx, j.Tenant, j.After)
			if err != nil {
				return nil, -1, fmt.Errorf("create job %s: %w", j.ID, err)
			}
			if *j, waitFor, depth, err = store.SettleDependencies(*j, deps); err != nil {
				return nil, -1, err
			}
		}
		if _, err := tx.Exec(ctx, insertJob, insertValues(*j, depth)...); err != nil {
			return nil, i, err
		}
		if len(waitFor) > 0 {
			if _, err := tx.Exec(ctx, "INSERT INTO job_deps (after_id, job_id) SELECT unnest($1::text[]), $2 ON CONFLICT DO NOTHING",
				waitFor, j.ID); err != nil {
				return nil, -1, fmt.Errorf("create job %s: record its dependencies: %w", j.ID, err)
			}
		}
	}
	return out, -1, tx.Commit(ctx)
}

// quotaLocks takes, for the rest of its transaction, the advisory lock
// of each tenant whose quota a write checks ($1 and $2: the halves of
// each key, tenantLock, in key order, so that writes locking several
// never wait on each other in a cycle), or shares it ($3) where the write
// only creates jobs with dependencies (createInTx), and sets the plans under which
// queuedCount can only walk its index (see planSettings in claims.go):
// no sequential or bitmap scan (a bitmap reads every one of the
// tenant's entries before the LIMIT) and no sort. The settings last for
// the transaction, whose other statements read by key or insert.
const quotaLocks = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('enable_sort', 'off', true), set_config('enable_incremental_sort', 'off', true),
	(SELECT count(CASE WHEN k.shared THEN pg_advisory_xact_lock_shared(k.hi, k.lo) ELSE pg_advisory_xact_lock(k.hi, k.lo) END)
		FROM unnest($1::int4[], $2::int4[], $3::bool[]) AS k(hi, lo, shared))`

// queuedCount counts tenant $1's jobs not yet running
// (jobtype.QueuedStates), at most $2 of them, by a walk of the tenant's
// range of jobs_tenant_queued that stops at the LIMIT, however many jobs
// the tenant or the table has. The tenant is a range, not an equality,
// and the rows are ordered by (tenant, state), so that, sorts being off,
// no other index can give them (with tenant = $1 any index in state
// order would, jobs_state among them, walking every tenant's queued
// jobs for this one's: the planner chose that after an ANALYZE). With
// the state list in the WHERE the partial index applies.
const queuedCount = `SELECT count(*) FROM (` + queuedWalk + ` LIMIT $2) AS q`

// queuedWalk is queuedCount's walk of tenant $1's jobs not yet running.
const queuedWalk = `SELECT 1 FROM jobs
	WHERE tenant >= $1 AND tenant <= $1 AND state IN ('pending', 'waiting', 'queued')
	ORDER BY tenant, state`

// tenantLock is the key of tenant's quota lock, as the two int4 halves
// pg_advisory_xact_lock(int4, int4) takes. PostgreSQL keeps two-key
// advisory locks apart from one-key ones (pg_advisory_xact_lock(bigint)),
// which every other lock of the store takes (lockKey), so a tenant's
// lock can never be a queue's, a pool's, the schedules' or the
// migrations'. Two tenants whose keys collide (a 64-bit hash) only take
// turns.
func (s *Store) tenantLock(tenant string) (hi, lo int32) {
	k := lockKey(s.schema, "tenant", tenant)
	return int32(k >> 32), int32(k)
}

// tenantsOf are the tenants of charges.
func tenantsOf(charges []store.QuotaCharge) []string {
	tenants := make([]string, len(charges))
	for i, c := range charges {
		tenants[i] = c.Tenant
	}
	return tenants
}

// queueQuotaLocks queues in b the statement that takes the quota locks
// of lock and shares those of shared (quotaLocks; a tenant in both is
// locked), in the order of their keys, as every caller takes them.
func (s *Store) queueQuotaLocks(b *pgx.Batch, lock, shared []string) {
	type key struct {
		hi, lo int32
		shared bool
	}
	var keys []key
	for _, t := range lock {
		hi, lo := s.tenantLock(t)
		keys = append(keys, key{hi, lo, false})
	}
	for _, t := range shared {
		if !slices.Contains(lock, t) {
			hi, lo := s.tenantLock(t)
			keys = append(keys, key{hi, lo, true})
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.hi != b.hi {
			return cmp.Compare(a.hi, b.hi)
		}
		return cmp.Compare(a.lo, b.lo)
	})
	his, los, shares := make([]int32, len(keys)), make([]int32, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		his[i], los[i], shares[i] = k.hi, k.lo, k.shared
	}
	b.Queue(quotaLocks, his, los, shares)
}

// checkQuota takes, in tx, the quota locks of lock, and shares those of
// shared (quotaLocks; a tenant in both is locked), then
// counts the jobs not yet running of each tenant of charges, up to its
// bound plus one, in statements of their own, all in one round trip. In
// READ COMMITTED each statement reads a snapshot taken when it starts,
// after the locks are granted, so the counts see every write that held
// a lock before. It returns the refusal of the first charge whose tenant
// has no room for it (store.QuotaCharge.Refusal). A tenant's lock is
// held until tx ends, so the count stays true until its inserts commit.
// marked: a charge may pass on its tenant's mark instead (markedCount,
// quota.go), as a creation's may; a retry's counts exactly.
func (s *Store) checkQuota(ctx context.Context, tx pgx.Tx, lock, shared []string, charges []store.QuotaCharge, marked bool) error {
	locked := len(lock) > 0 || len(shared) > 0
	if !locked && len(charges) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	if locked {
		s.queueQuotaLocks(b, lock, shared)
	}
	for _, c := range charges {
		if marked {
			b.Queue(markedCount, c.Tenant, c.Adding, c.MaxQueued)
		} else {
			b.Queue(queuedCount, c.Tenant, c.MaxQueued+1)
		}
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if locked {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("take the quota locks of tenants %v: %w", slices.Concat(lock, shared), err)
		}
	}
	var marks []quotaMark
	for _, c := range charges {
		var (
			n, running int
			passed     bool
		)
		dest := []any{&n}
		if marked {
			dest = []any{&passed, &n, &running}
		}
		if err := br.QueryRow().Scan(dest...); err != nil {
			return fmt.Errorf("count the jobs of tenant %s not yet running: %w", c.Tenant, err)
		}
		if passed {
			continue
		}
		if err := c.Refusal(n); err != nil {
			return err
		}
		if marked {
			marks = append(marks, quotaMark{c.Tenant, n, running, c.Adding})
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	return writeQuotaMarks(ctx, tx, marks)
}

// readDependencies reads the jobs of ids that belong to tenant, as
// store.SettleDependencies takes them, locked FOR SHARE.
func readDependencies(ctx context.Context, tx pgx.Tx, tenant string, ids []string) (map[string]store.Dependency, error) {
	rows, err := tx.Query(ctx, "SELECT id, state, after_depth FROM jobs WHERE tenant = $1 AND id = ANY($2::text[]) FOR SHARE",
		tenant, ids)
	if err != nil {
		return nil, fmt.Errorf("read its dependencies: %w", err)
	}
	defer rows.Close()
	deps := make(map[string]store.Dependency, len(ids))
	for rows.Next() {
		var id, state string
		var depth int
		if err := rows.Scan(&id, &state, &depth); err != nil {
			return nil, fmt.Errorf("read its dependencies: %w", err)
		}
		deps[id] = store.Dependency{State: jobtype.State(state), Depth: depth}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read its dependencies: %w", err)
	}
	return deps, nil
}

// activeHolder explains a unique violation on jobs_unique_active while
// writing j: the *jobtype.ConflictError naming the holder, nil if none holds
// the key any more (the caller tries again), or the lookup's own error.
func (s *Store) activeHolder(ctx context.Context, j jobtype.Job) error {
	var id string
	err := s.reads().QueryRow(ctx, holderQuery, j.Tenant, j.UniqueKey, j.ID).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("job %s: look up the active job with unique key %q: %w", j.ID, j.UniqueKey, classify(err))
	}
	return &jobtype.ConflictError{ActiveID: id, UniqueKey: j.UniqueKey}
}

// conflictFirst is the answer to a write of jobs that its tenant's quota
// refused (refusal): the *jobtype.ConflictError of the first of jobs
// whose unique key an active job holds, if one does, as the write would
// have answered with room under the bound (see the SQLite store's
// conflictFirst). A lookup that fails leaves the refusal as it is.
func (s *Store) conflictFirst(ctx context.Context, refusal *jobtype.QuotaError, jobs ...jobtype.Job) error {
	for _, j := range jobs {
		if j.UniqueKey == "" {
			continue
		}
		var conflict *jobtype.ConflictError
		if err := s.activeHolder(ctx, j); errors.As(err, &conflict) {
			return conflict
		}
	}
	return refusal
}

func (s *Store) getJob(ctx context.Context, id string) (storedRow, error) {
	row, err := scanJob(s.reads().QueryRow(ctx, "SELECT "+columns+" FROM jobs WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return storedRow{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return storedRow{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return row, nil
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	row, err := s.getJob(ctx, id)
	return row.job, err
}

// ReadJob implements store.Store. The tenant is compared in the WHERE, so
// a row of another tenant is never returned, and its payload and result,
// stored out of line (TOAST) once they are large, are never fetched.
func (s *Store) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	selected, where, args := columns, "id = $1", []any{id}
	if r.Summary {
		selected = summaryColumns
	}
	if r.Tenant != "" {
		where, args = where+" AND tenant = $2", append(args, r.Tenant)
	}
	row, err := scanJob(s.reads().QueryRow(ctx, "SELECT "+selected+" FROM jobs WHERE "+where, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return jobtype.Job{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return row.job, nil
}

// ReadJobs implements store.Store, as ReadJob does for each id, in one
// statement.
func (s *Store) ReadJobs(ctx context.Context, ids []string, r store.JobRead) ([]jobtype.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	selected, where, args := columns, "id = ANY($1::text[])", []any{ids}
	if r.Summary {
		selected = summaryColumns
	}
	if r.Tenant != "" {
		where, args = where+" AND tenant = $2", append(args, r.Tenant)
	}
	if r.States {
		selected = "id, state, version"
	}
	rows, err := s.reads().Query(ctx, "SELECT "+selected+" FROM jobs WHERE "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
	}
	defer rows.Close()
	jobs := make([]jobtype.Job, 0, len(ids))
	for rows.Next() {
		var row storedRow
		if r.States {
			row, err = scanState(rows)
		} else {
			row, err = scanJob(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
		}
		jobs = append(jobs, row.job)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
	}
	return jobs, nil
}

// optimisticUpdates bounds how often UpdateJob tries its write without a
// lock: a job that other writers keep changing between its read and its
// write (many writers of one job at once) could otherwise starve it
// without bound. After that it reads the job FOR NO KEY UPDATE in a
// transaction of its own, so the write cannot lose, and the writers of
// one job take turns: one round trip more, and a row lock held while
// update runs, only under contention. A job holds no other lock while it
// waits for that one, so it never deadlocks.
const optimisticUpdates = 8

// updated is the outcome of one try of UpdateJob's write.
type updated struct {
	job     jobtype.Job // the committed job, or the one the write tried
	changed bool        // the write raised the version: announce it
	raced   bool        // another write came between the read and the write
	// locks: a job that comes back from an end (comesBack) or waits
	// again (store.Rewaits): only updateLocked writes it, with its
	// tenant's lock, held alone if alone (it waits again: deepenWaiters
	// needs that), else shared (quota.go: the mark counts it).
	locks, alone bool
}

// funcError carries the error of UpdateJob's func, which UpdateJob
// returns as it is.
type funcError struct{ err error }

func (e funcError) Error() string { return e.err.Error() }

// UpdateJob implements store.Store optimistically: it reads the row
// (no lock), lets update change a copy, and writes it with one UPDATE
// that holds only if the row's revision is still the one read; if
// another write came between, it reads again and calls update again, at
// most optimisticUpdates times before it locks the row for the read (see
// optimisticUpdates). So it ends after at most optimisticUpdates + 1
// reads, and conflictAttempts more when a unique key's holder ends under
// it.
func (s *Store) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	conflicts := 0
	for attempt := 1; ; attempt++ {
		var (
			u   updated
			err error
		)
		if attempt <= optimisticUpdates {
			u, err = s.updateOptimistic(ctx, id, update)
		} else {
			u, err = s.updateLocked(ctx, id, update, "", false, store.Quota{})
		}
		// A job that comes back: again, with its tenant's lock. A try
		// with it shared that finds the job waits again after all tries
		// once more with it alone, which never asks again.
		for err == nil && u.locks {
			u, err = s.updateLocked(ctx, id, update, u.job.Tenant, u.alone, store.Quota{})
		}
		var fe funcError
		switch {
		case errors.As(err, &fe):
			return jobtype.Job{}, fe.err
		case isUniqueViolation(err, "jobs_unique_active") && conflicts < conflictAttempts:
			conflicts++
			if conflict := s.activeHolder(ctx, u.job); conflict != nil {
				return jobtype.Job{}, conflict
			}
			continue
		case errors.Is(err, jobtype.ErrNotFound):
			return jobtype.Job{}, err
		case err != nil:
			return jobtype.Job{}, fmt.Errorf("update job %s: %w", id, classify(err))
		case u.raced:
			continue // written since the read: read again
		}
		if u.changed {
			s.announce(u.job)
		}
		return returned(u.job), nil
	}
}

// change lets update change old and returns what to write (with the
// version store.Versioned decides), and whether there is anything to
// write.
func change(id string, old jobtype.Job, update func(*jobtype.Job) error) (jobtype.Job, bool, error) {
	next := normalize(old)
	if err := update(&next); err != nil {
		return jobtype.Job{}, false, funcError{err}
	}
	next = normalize(next)
	if next.ID != old.ID {
		return jobtype.Job{}, false, fmt.Errorf("update job %s: the id cannot change (to %q)", id, next.ID)
	}
	next = store.Versioned(old, next)
	return next, !sameStored(next, old), nil
}

// updateOptimistic is one try of UpdateJob without a lock: the read, and
// the write if the row's revision is still the one read.
func (s *Store) updateOptimistic(ctx context.Context, id string, update func(*jobtype.Job) error) (updated, error) {
	old, err := readForWrite(ctx, s.reads(), id, false)
	if err != nil {
		return updated{}, err
	}
	next, write, err := change(id, old.job, update)
	if err != nil || !write {
		return updated{job: old.job}, err
	}
	if rewaits := store.Rewaits(old.job, next); rewaits || comesBack(old.job, next) {
		return updated{job: old.job, locks: true, alone: rewaits}, nil
	}
	var tag pgconn.CommandTag
	err = s.write(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		tag, err = conn.Exec(ctx, updateJob, append(values(next), old.rev)...)
		return err
	})
	if err != nil {
		return updated{job: next}, err
	}
	return updated{job: next, changed: next.Version > old.job.Version, raced: tag.RowsAffected() == 0}, nil
}

// updateLocked is UpdateJob's try that cannot lose: the read locks the
// row, in a transaction that also writes it. A caller that leaves while
// update runs writes nothing. With a tenant, the transaction first takes
// the tenant's quota lock: alone for UpdateJobWithin, whose change is
// counted against q before it is written (checkQuota), and for a job
// that waits again (deepenWaiters); shared for a job that only comes
// back from an end, which needs no count, only that an exact count
// comes before or after it (quota.go), so that a bulk retry's jobs of
// one tenant share commits rather than take turns through them.
func (s *Store) updateLocked(ctx context.Context, id string, update func(*jobtype.Job) error, tenant string, alone bool, q store.Quota) (updated, error) {
	var u updated
	err := s.write(ctx, func(wctx context.Context, conn *pgxpool.Conn) error {
		u = updated{}
		return pgx.BeginFunc(wctx, conn, func(tx pgx.Tx) error {
			old, err := s.lockAndRead(wctx, tx, tenant, alone, id)
			if err != nil {
				return err
			}
			next, write, err := change(id, old.job, update)
			u.job = old.job
			if err != nil || !write {
				return err
			}
			var waitFor []string
			depth := 0
			rewaits := store.Rewaits(old.job, next)
			if (rewaits || comesBack(old.job, next)) && (tenant == "" || rewaits && !alone) {
				u.locks, u.alone = true, rewaits // again, with the tenant's lock first
				return nil
			}
			if rewaits {
				deps, err := readDependencies(wctx, tx, next.Tenant, next.After)
				if err != nil {
					return err
				}
				settled, w, d, err := store.SettleRetry(next, deps)
				if err != nil {
					return funcError{err}
				}
				next, waitFor, depth = store.Versioned(old.job, settled), w, d
			}
			if tenant != "" {
				if err := s.checkQuota(wctx, tx, nil, nil, q.ChangeCharges(old.job, next), false); err != nil {
					return err
				}
			}
			u.job = next
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := writeLocked(wctx, tx, old, next); err != nil {
				return err
			}
			if rewaits {
				if err := waitAgain(wctx, tx, id, waitFor, depth); err != nil {
					return err
				}
			}
			if len(waitFor) > 0 {
				if err := deepenWaiters(wctx, tx, id, depth); err != nil {
					return err
				}
			}
			u.changed = next.Version > old.job.Version
			return nil
		})
	})
	return u, err
}

// lockAndRead takes tenant's quota lock, alone or shared, unless tenant
// is "", and reads job id locked FOR NO KEY UPDATE, in one round trip:
// the statements of a batch run in order, so the read's snapshot is
// taken once the lock is granted.
func (s *Store) lockAndRead(ctx context.Context, tx pgx.Tx, tenant string, alone bool, id string) (storedRow, error) {
	b := &pgx.Batch{}
	switch {
	case tenant == "":
	case alone:
		s.queueQuotaLocks(b, []string{tenant}, nil)
	default:
		s.queueQuotaLocks(b, nil, []string{tenant})
	}
	b.Queue(forWriteLocked, id)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if tenant != "" {
		if _, err := br.Exec(); err != nil {
			return storedRow{}, fmt.Errorf("take the quota lock of tenant %s: %w", tenant, err)
		}
	}
	old, err := scanForWrite(br.QueryRow(), id)
	if err != nil {
		return storedRow{}, err
	}
	return old, br.Close()
}

// writeLocked writes next over old, read locked in tx, and adds it to its
// tenant's quota mark if it comes back from an end (comesBack), in one
// round trip.
func writeLocked(ctx context.Context, tx pgx.Tx, old storedRow, next jobtype.Job) error {
	b := &pgx.Batch{}
	b.Queue(updateJob, append(values(next), old.rev)...)
	back := comesBack(old.job, next)
	if back {
		b.Queue(bumpQuotaMark, next.Tenant, 1)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	if back {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("count it in its tenant's quota mark: %w", err)
		}
	}
	return br.Close()
}

// waitAgain records that job id, retried, waits for the jobs of waitFor
// (store.SettleRetry; none when it is QUEUED) at depth, as a creation
// records its dependencies: their rows were read FOR SHARE in tx, so one
// that ends after finds these rows in job_deps. Rows left from an
// earlier wait (cancelled while it waited) go first.
func waitAgain(ctx context.Context, tx pgx.Tx, id string, waitFor []string, depth int) error {
	if _, err := tx.Exec(ctx, "DELETE FROM job_deps WHERE job_id = $1", id); err != nil {
		return fmt.Errorf("drop its old dependencies: %w", err)
	}
	if len(waitFor) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "UPDATE jobs SET after_depth = $2 WHERE id = $1", id, depth); err != nil {
		return fmt.Errorf("record its depth: %w", err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO job_deps (after_id, job_id) SELECT unnest($1::text[]), $2 ON CONFLICT DO NOTHING",
		waitFor, id); err != nil {
		return fmt.Errorf("record its dependencies: %w", err)
	}
	return nil
}

// waitersBelow follows the WAITING jobs that wait for job $1, through
// job_deps, at most $2 levels down (store.WaitersBelowLimit), raises the
// after_depth of each to $3 plus its farthest distance below the job,
// and answers with the farthest distance (0 for none).
const waitersBelow = `WITH RECURSIVE below (id, dist) AS (
	SELECT d.job_id, 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
	WHERE d.after_id = $1 AND w.state = 'waiting'
	UNION
	SELECT d.job_id, b.dist + 1 FROM below AS b JOIN job_deps AS d ON d.after_id = b.id
	JOIN jobs AS w ON w.id = d.job_id
	WHERE w.state = 'waiting' AND b.dist < $2
), farthest AS (SELECT id, max(dist) AS dist FROM below GROUP BY id),
raised AS (UPDATE jobs SET after_depth = $3 + f.dist FROM farthest AS f
	WHERE jobs.id = f.id AND jobs.after_depth < $3 + f.dist)
SELECT coalesce(max(dist), 0) FROM farthest`

// deepenWaiters counts job id, retried back to WAITING at depth, into the
// depth of the WAITING jobs that wait for it (store.WaitersTooDeep),
// refusing the retry (a funcError, so that tx rolls back) if they would
// hang too deep. tx holds the job's tenant's lock (tenantLock), as every
// retry that waits again does, and every create with dependencies
// shares it: two retries joining one chain from both ends, or a create
// after the chain's end, would otherwise each count the chain as its
// snapshot had it, before the other's change, and together make it too
// long.
func deepenWaiters(ctx context.Context, tx pgx.Tx, id string, depth int) error {
	var below int
	if err := tx.QueryRow(ctx, waitersBelow, id, store.WaitersBelowLimit(depth), depth).Scan(&below); err != nil {
		return fmt.Errorf("count the jobs waiting after it: %w", err)
	}
	if err := store.WaitersTooDeep(depth, below); err != nil {
		return funcError{err}
	}
	return nil
}

// UpdateJobWithin implements store.Store. The job's tenant never
// changes, so it is read first, without a lock; unless q bounds it, this
// is UpdateJob. If it does, every try is one transaction that takes the
// tenant's quota lock and then reads the row FOR NO KEY UPDATE, in that
// order, as a create with dependencies takes the lock before it reads
// its dependencies FOR SHARE, so the two never wait on each other in a
// cycle; then it lets update change the job, counts the tenant's jobs
// not yet running if the change adds one (checkQuota), and writes. Only
// retries and the like are written under a quota, so the lock's round
// trips cost no common write.
func (s *Store) UpdateJobWithin(ctx context.Context, id string, q store.Quota, update func(*jobtype.Job) error) (jobtype.Job, error) {
	if len(q.MaxQueued) == 0 {
		return s.UpdateJob(ctx, id, update)
	}
	var tenant string
	err := s.reads().QueryRow(ctx, "SELECT tenant FROM jobs WHERE id = $1", id).Scan(&tenant)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return jobtype.Job{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	case err != nil:
		return jobtype.Job{}, fmt.Errorf("get job %s: %w", id, classify(err))
	case q.MaxQueued[tenant] <= 0:
		return s.UpdateJob(ctx, id, update)
	}
	for conflicts := 0; ; conflicts++ {
		u, err := s.updateLocked(ctx, id, update, tenant, true, q)
		var (
			fe    funcError
			quota *jobtype.QuotaError
		)
		switch {
		case errors.As(err, &fe):
			return jobtype.Job{}, fe.err
		case errors.As(err, &quota):
			return jobtype.Job{}, s.conflictFirst(ctx, quota, u.job)
		case isUniqueViolation(err, "jobs_unique_active") && conflicts < conflictAttempts:
			if conflict := s.activeHolder(ctx, u.job); conflict != nil {
				return jobtype.Job{}, conflict
			}
			continue
		case errors.Is(err, jobtype.ErrNotFound):
			return jobtype.Job{}, err
		case err != nil:
			return jobtype.Job{}, fmt.Errorf("update job %s: %w", id, classify(err))
		}
		if u.changed {
			s.announce(u.job)
		}
		return returned(u.job), nil
	}
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
func (s *Store) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
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
	if len(f.Kinds) > 0 {
		where = append(where, "kind = ANY("+arg(f.Kinds)+"::text[])")
	}
	if len(f.Queues) > 0 {
		where = append(where, "queue = ANY("+arg(f.Queues)+"::text[])")
	}
	if !f.CreatedBefore.IsZero() {
		where = append(where, "created_at < "+arg(micro(f.CreatedBefore))+"::timestamptz")
	}
	if f.Batch != "" {
		// batch <> '' lets the partial index jobs_batch answer.
		where = append(where, "batch = "+arg(f.Batch)+"::text", "batch <> ''")
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
	rows, err := s.reads().Query(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	defer rows.Close()
	var (
		jobs    []jobtype.Job
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
