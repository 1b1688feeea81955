package sqlite

// The job table's own writes and reads: CreateJob and UpdateJob (each
// one statement of the writer's batch, stored by insert and updateRow),
// the unique-key conflict they report, GetJob, ReadJob, ListJobs and
// NextReady.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// insertJob takes values(j) and then the change sequence's value.
const insertJob = `INSERT INTO jobs (id, tenant, kind, queue, state, version, percent, step,
	payload, result, history, error_type, error_message, attempt, max_attempts, unique_key, created_at,
	started_at, updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, priority, batch, after, after_policy, trace_parent, trace_state, change_seq, after_depth)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insert adds j, stamped with the batch's change sequence value, at
// depth in its chain of WAITING jobs (0 unless it waits). Only the
// writer goroutine calls it.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, j jobtype.Job, depth int) error {
	if _, err := tx.ExecContext(ctx, insertJob, append(values(j), s.w.change, depth)...); err != nil {
		return err
	}
	s.changed(j)
	return nil
}

// valueColumns name the values of values(j), in order.
var valueColumns = []string{"id", "tenant", "kind", "queue", "state", "version", "percent", "step",
	"payload", "result", "history", "error_type", "error_message", "attempt", "max_attempts", "unique_key", "created_at",
	"started_at", "updated_at", "finished_at", "run_at", "worker_id", "lease_id", "lease_expires_at", "priority", "batch", "after", "after_policy", "trace_parent", "trace_state"}

// updateChanged makes the UPDATE of row seq from old to next that sets
// only the columns whose values differ, or "" if none does. SQLite rewrites the entry of every
// index on a column an UPDATE sets, whether its value changed or not, so
// setting every column rewrote all nine indexes of jobs on each heartbeat
// and completion. The few shapes of change (claim, heartbeat, complete,
// ...) each make one statement text, prepared once by the statement
// cache. Triggers on "UPDATE OF state" fire only when state is set, and
// they act only when it changes. A change of version also stamps the
// batch's change sequence value, change. old is the row as read back;
// History is encoded only if it changed (writeValues).
func updateChanged(seq int64, old, next jobtype.Job, change int64) (string, []any) {
	was, now := writeValues(old, next)
	var q strings.Builder
	q.WriteString("UPDATE jobs SET ")
	args := make([]any, 0, len(now)+1)
	for i, v := range now {
		if v == was[i] {
			continue
		}
		if len(args) > 0 {
			q.WriteString(", ")
		}
		q.WriteString(valueColumns[i])
		q.WriteString(" = ?")
		args = append(args, v)
	}
	if len(args) == 0 {
		return "", nil // nothing stored differs
	}
	if next.Version != old.Version {
		q.WriteString(", change_seq = ?")
		args = append(args, change)
	}
	q.WriteString(" WHERE seq = ?")
	return q.String(), append(args, seq)
}

// CreateJob implements store.Store.
func (s *Store) CreateJob(ctx context.Context, j jobtype.Job) (jobtype.Job, error) {
	if len(j.After) > 0 {
		// Its dependencies are read and its rows written beside it.
		jobs, err := s.CreateJobs(ctx, []jobtype.Job{j})
		if err != nil {
			return jobtype.Job{}, err
		}
		return jobs[0], nil
	}
	j = normalize(j)
	err := s.writeStatement(ctx, "create job", func(ctx context.Context, tx *sql.Tx) error {
		if err := callerLeft(ctx); err != nil {
			return leftError("create job "+j.ID, err)
		}
		return s.create(ctx, tx, &j)
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	return j, nil
}

// CreateJobs implements store.Store: CreateJobsWithin without a quota,
// one write of the writer's batch,
// inside a savepoint of its own (writeTx), so a job that cannot be
// stored undoes the ones before it and the call stores nothing.
func (s *Store) CreateJobs(ctx context.Context, jobs []jobtype.Job) ([]jobtype.Job, error) {
	return s.CreateJobsWithin(ctx, jobs, store.Quota{})
}

// CreateJobsWithin implements store.Store: CreateJobs with the count of
// each charged tenant's jobs not yet running (checkQuota) in the same
// write of the writer's batch, before its inserts. The writer's
// transaction is the only one writing the file (BEGIN IMMEDIATE), and a
// batch's writes run one after another in it, so the count sees every
// job committed or written before it and nothing can come between the
// count and the inserts: no lock of its own is needed.
func (s *Store) CreateJobsWithin(ctx context.Context, jobs []jobtype.Job, q store.Quota) ([]jobtype.Job, error) {
	charges := q.Charges(jobs) // none without a quota: checkQuota reads nothing
	out := make([]jobtype.Job, len(jobs))
	for i, j := range jobs {
		out[i] = normalize(j)
	}
	err := s.writeTx(ctx, "create jobs", func(ctx context.Context, tx *sql.Tx) error {
		if err := callerLeft(ctx); err != nil {
			return leftError(fmt.Sprintf("create %d jobs", len(out)), err)
		}
		if err := s.checkQuota(ctx, tx, charges, true); err != nil {
			return s.conflictFirst(ctx, tx, err, out...)
		}
		for i := range out {
			if err := s.create(ctx, tx, &out[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queuedCount counts a tenant's jobs not yet running
// (jobtype.QueuedStates), up to a limit, from jobs_tenant_queued alone:
// a seek per state, and at most the limit's entries read, however many
// jobs the tenant has. INDEXED BY keeps a plan that walks the tenant's
// every job (jobs_tenant_created) from being chosen.
const queuedCount = `SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY jobs_tenant_queued
	WHERE tenant = ? AND (state = 'pending' OR state = 'waiting' OR state = 'queued') LIMIT ?)`

// create stores *j in tx. A job with dependencies (After) is settled
// first (store.SettleDependencies) from their rows as tx reads them: the
// writer's transaction is the only one, so none of them can end between
// the read and the commit, and one that ends later finds this job's rows
// in job_deps. *j becomes the job as stored.
func (s *Store) create(ctx context.Context, tx *sql.Tx, j *jobtype.Job) error {
	var waitFor []string
	depth := 0
	if len(j.After) > 0 {
		deps, err := readDependencies(ctx, tx, j.Tenant, j.After)
		if err != nil {
			return fmt.Errorf("create job %s: %w", j.ID, err)
		}
		if *j, waitFor, depth, err = store.SettleDependencies(*j, deps); err != nil {
			return err
		}
	}
	err := s.insert(ctx, tx, *j, depth)
	if isUniqueViolation(err) {
		if conflict := s.activeHolder(ctx, tx, *j); conflict != nil {
			return conflict
		}
	}
	if err != nil {
		return fmt.Errorf("create job %s: %w", j.ID, classify(err))
	}
	for _, id := range waitFor {
		if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO job_deps (after_id, job_id) VALUES (?, ?)", id, j.ID); err != nil {
			return fmt.Errorf("create job %s: record its dependency %s: %w", j.ID, id, classify(err))
		}
	}
	return nil
}

// readDependencies reads the jobs of ids that belong to tenant, as
// store.SettleDependencies takes them.
func readDependencies(ctx context.Context, tx *sql.Tx, tenant string, ids []string) (map[string]store.Dependency, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, tenant)
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := tx.QueryContext(ctx, "SELECT id, state, after_depth FROM jobs WHERE tenant = ? AND id IN (?"+
		strings.Repeat(", ?", len(ids)-1)+")", args...)
	if err != nil {
		return nil, fmt.Errorf("read its dependencies: %w", classify(err))
	}
	defer rows.Close()
	deps := make(map[string]store.Dependency, len(ids))
	for rows.Next() {
		var id, state string
		var depth int
		if err := rows.Scan(&id, &state, &depth); err != nil {
			return nil, fmt.Errorf("read its dependencies: %w", classify(err))
		}
		deps[id] = store.Dependency{State: jobtype.State(state), Depth: depth}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read its dependencies: %w", classify(err))
	}
	return deps, nil
}

// holderQuery finds the active job holding a unique key; its WHERE says
// what jobs_unique_active says, so that index answers it.
const holderQuery = `SELECT id FROM jobs
	WHERE tenant = ? AND unique_key = ? AND id <> ?
	AND unique_key <> '' AND (state = 'pending' OR state = 'waiting' OR state = 'queued' OR state = 'running')`

// activeHolder explains the unique violation just seen while writing j:
// the *jobtype.ConflictError naming the active job that holds j's unique
// key, nil if no job holds it (the violation was something else, such as
// the id), or the lookup's own error, classified, if the lookup failed.
func (s *Store) activeHolder(ctx context.Context, tx *sql.Tx, j jobtype.Job) error {
	if j.UniqueKey == "" || !isActive(j.State) {
		return nil
	}
	var id string
	err := tx.QueryRowContext(ctx, s.holderQuery, j.Tenant, j.UniqueKey, j.ID).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("job %s: look up the active job with unique key %q: %w", j.ID, j.UniqueKey, classify(err))
	}
	return &jobtype.ConflictError{ActiveID: id, UniqueKey: j.UniqueKey}
}

// conflictFirst is the answer to a write of jobs that its tenant's quota
// refused (refusal, a *jobtype.QuotaError): the *jobtype.ConflictError of
// the first of jobs whose unique key an active job holds, if one does,
// as the write would have answered with room under the bound. A caller
// that submits again with the key the answer it lost asks for, the
// active job's id (docs/CLIENTS.md); at the bound, which that lost
// submission may have reached, "no room" would tell it the job was
// never made. Any other refusal, or a lookup that fails, stays as it is.
func (s *Store) conflictFirst(ctx context.Context, tx *sql.Tx, refusal error, jobs ...jobtype.Job) error {
	var quota *jobtype.QuotaError
	if !errors.As(refusal, &quota) {
		return refusal
	}
	for _, j := range jobs {
		var conflict *jobtype.ConflictError
		if err := s.activeHolder(ctx, tx, j); errors.As(err, &conflict) {
			return conflict
		}
	}
	return refusal
}

func isActive(s jobtype.State) bool {
	for _, a := range jobtype.ActiveStates {
		if s == a {
			return true
		}
	}
	return false
}

func getJob(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (jobtype.Job, int64, error) {
	j, seq, err := scanJob(q.QueryRowContext(ctx, "SELECT "+columns+" FROM jobs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return jobtype.Job{}, 0, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, 0, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return j, seq, nil
}

// writeJob stores next over the row seq, with old's id and the version
// store.Versioned decides. It skips the write when nothing changed at
// all. It is the one statement that changes anything in UpdateJob
// (writeStatement), so it asks first whether the caller is still there;
// but for a retry of a job with dependencies (store.Rewaits), settled
// first (store.SettleRetry) from their rows as tx reads them, which
// records the dependencies it waits for again in job_deps, as create
// does.
func (s *Store) writeJob(ctx context.Context, tx *sql.Tx, seq int64, old, next jobtype.Job) (jobtype.Job, error) {
	if next.ID != old.ID {
		return jobtype.Job{}, fmt.Errorf("update job %s: the id cannot change (to %q)", old.ID, next.ID)
	}
	var waitFor []string
	depth := 0
	rewaits := store.Rewaits(old, next)
	if rewaits {
		deps, err := readDependencies(ctx, tx, next.Tenant, next.After)
		if err != nil {
			return jobtype.Job{}, fmt.Errorf("update job %s: %w", old.ID, err)
		}
		if next, waitFor, depth, err = store.SettleRetry(next, deps); err != nil {
			return jobtype.Job{}, err
		}
	}
	var waiters map[string]int
	if len(waitFor) > 0 {
		// Checked before the first statement that writes: an UpdateJob
		// is a writeStatement, whose refusal must come before it.
		var err error
		if waiters, err = waitersBelow(ctx, tx, old.ID, depth); err != nil {
			return jobtype.Job{}, err
		}
	}
	next = versioned(old, next)
	if err := s.updateRow(ctx, tx, seq, old, next); err != nil {
		return jobtype.Job{}, err
	}
	if rewaits {
		// Rows left from an earlier wait (cancelled while it waited)
		// go: the job waits for waitFor alone.
		if _, err := tx.ExecContext(ctx, "DELETE FROM job_deps WHERE job_id = ?", old.ID); err != nil {
			return jobtype.Job{}, fmt.Errorf("update job %s: %w", old.ID, classify(err))
		}
	}
	if len(waitFor) > 0 {
		if _, err := tx.ExecContext(ctx, "UPDATE jobs SET after_depth = ? WHERE seq = ?", depth, seq); err != nil {
			return jobtype.Job{}, fmt.Errorf("update job %s: record its depth: %w", old.ID, classify(err))
		}
		for _, id := range waitFor {
			if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO job_deps (after_id, job_id) VALUES (?, ?)", id, old.ID); err != nil {
				return jobtype.Job{}, fmt.Errorf("update job %s: record its dependency %s: %w", old.ID, id, classify(err))
			}
		}
		for waiter, dist := range waiters {
			if _, err := tx.ExecContext(ctx, "UPDATE jobs SET after_depth = ?1 WHERE id = ?2 AND after_depth < ?1", depth+dist, waiter); err != nil {
				return jobtype.Job{}, fmt.Errorf("update job %s: record the depth of job %s, waiting after it: %w", old.ID, waiter, classify(err))
			}
		}
	}
	if next.Version != old.Version {
		s.changed(next)
	}
	return next, nil
}

// waitersBelowQuery follows the WAITING jobs that wait for job ?1,
// through job_deps, at most ?2 levels down (store.WaitersBelowLimit), and
// lists each with its farthest distance below the job.
const waitersBelowQuery = `WITH RECURSIVE below (id, dist) AS (
	SELECT d.job_id, 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
	WHERE d.after_id = ?1 AND w.state = 'waiting'
	UNION
	SELECT d.job_id, b.dist + 1 FROM below AS b JOIN job_deps AS d ON d.after_id = b.id
	JOIN jobs AS w ON w.id = d.job_id
	WHERE w.state = 'waiting' AND b.dist < ?2
)
SELECT id, max(dist) FROM below GROUP BY id`

// waitersBelow returns the WAITING jobs that wait for job id, retried back
// to WAITING at depth, each with its farthest distance below it, whose
// depth (after_depth) the retry raises to depth plus that distance; or
// the refusal of the retry if they would hang too deep
// (store.WaitersTooDeep).
func waitersBelow(ctx context.Context, tx *sql.Tx, id string, depth int) (map[string]int, error) {
	rows, err := tx.QueryContext(ctx, waitersBelowQuery, id, store.WaitersBelowLimit(depth))
	if err != nil {
		return nil, fmt.Errorf("update job %s: count the jobs waiting after it: %w", id, classify(err))
	}
	defer rows.Close()
	farthest := map[string]int{}
	below := 0
	for rows.Next() {
		var waiter string
		var dist int
		if err := rows.Scan(&waiter, &dist); err != nil {
			return nil, fmt.Errorf("update job %s: count the jobs waiting after it: %w", id, classify(err))
		}
		farthest[waiter], below = dist, max(below, dist)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("update job %s: count the jobs waiting after it: %w", id, classify(err))
	}
	return farthest, store.WaitersTooDeep(depth, below)
}

// updateRow stores next (as versioned makes it) over the row seq, which
// holds old, setting what changed; nothing if nothing did. It asks first
// whether the caller is still there.
func (s *Store) updateRow(ctx context.Context, tx *sql.Tx, seq int64, old, next jobtype.Job) error {
	query, args := updateChanged(seq, old, next, s.w.change)
	if query == "" {
		return nil
	}
	if err := callerLeft(ctx); err != nil {
		return leftError("update job "+old.ID, err)
	}
	if err := forgetQuotaMark(ctx, tx, old, next); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, query, args...)
	if isUniqueViolation(err) {
		if conflict := s.activeHolder(ctx, tx, next); conflict != nil {
			return conflict
		}
	}
	if err != nil {
		return fmt.Errorf("update job %s: %w", old.ID, classify(err))
	}
	return nil
}

// UpdateJob implements store.Store.
func (s *Store) UpdateJob(ctx context.Context, id string, update func(*jobtype.Job) error) (jobtype.Job, error) {
	var out jobtype.Job
	err := s.writeStatement(ctx, "update job", func(ctx context.Context, tx *sql.Tx) error {
		old, seq, err := getJobForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		next := old.Clone()
		if err := update(&next); err != nil {
			return err
		}
		out, err = s.writeJob(ctx, tx, seq, old, next)
		return err
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	return returned(out), nil
}

// UpdateJobWithin implements store.Store: UpdateJob, counting in the
// same write, when the change charges the job's tenant
// (store.Quota.ChangeCharges), its jobs not yet running before the
// write (checkQuota), exact for the reason CreateJobsWithin's count is.
func (s *Store) UpdateJobWithin(ctx context.Context, id string, q store.Quota, update func(*jobtype.Job) error) (jobtype.Job, error) {
	if len(q.MaxQueued) == 0 {
		return s.UpdateJob(ctx, id, update)
	}
	var out jobtype.Job
	err := s.writeStatement(ctx, "update job", func(ctx context.Context, tx *sql.Tx) error {
		old, seq, err := getJobForWrite(ctx, tx, id)
		if err != nil {
			return err
		}
		next := old.Clone()
		if err := update(&next); err != nil {
			return err
		}
		if err := s.checkQuota(ctx, tx, q.ChangeCharges(old, next), false); err != nil {
			return s.conflictFirst(ctx, tx, err, next)
		}
		out, err = s.writeJob(ctx, tx, seq, old, next)
		return err
	})
	if err != nil {
		return jobtype.Job{}, err
	}
	return returned(out), nil
}

func in[T ~string](where string, args []any, column string, values []T) (string, []any) {
	if len(values) == 0 {
		return where, args
	}
	where += " AND " + column + " IN (?" + strings.Repeat(", ?", len(values)-1) + ")"
	for _, v := range values {
		args = append(args, string(v))
	}
	return where, args
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (jobtype.Job, error) {
	j, _, err := getJob(ctx, s.read, id)
	return j, err
}

// ReadJob implements store.Store. The tenant is compared in the WHERE,
// before any column is returned; payload and result are the last columns
// of a row (migration 3), so a row that fails the comparison has its
// overflow pages, where a large payload lives, left unread.
func (s *Store) ReadJob(ctx context.Context, id string, r store.JobRead) (jobtype.Job, error) {
	selected, where, args := columns, "id = ?", []any{id}
	if r.Summary {
		selected = summaryColumns
	}
	if r.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, r.Tenant)
	}
	j, _, err := scanJob(s.read.QueryRowContext(ctx, "SELECT "+selected+" FROM jobs WHERE "+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return jobtype.Job{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return jobtype.Job{}, fmt.Errorf("get job %s: %w", id, classify(err))
	}
	return j, nil
}

// ReadJobs implements store.Store, as ReadJob does for each id, in one
// statement.
func (s *Store) ReadJobs(ctx context.Context, ids []string, r store.JobRead) ([]jobtype.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	selected := columns
	if r.Summary {
		selected = summaryColumns
	}
	args := make([]any, 0, len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	where := "id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	if r.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, r.Tenant)
	}
	if r.States {
		selected = "id, state, version"
	}
	rows, err := s.read.QueryContext(ctx, "SELECT "+selected+" FROM jobs WHERE "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
	}
	defer rows.Close()
	jobs := make([]jobtype.Job, 0, len(ids))
	for rows.Next() {
		var (
			j   jobtype.Job
			err error
		)
		if r.States {
			j, err = scanState(rows)
		} else {
			j, _, err = scanJob(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get %d jobs: %w", len(ids), classify(err))
	}
	return jobs, nil
}

// A page token is the sort key of the last job of the page behind a
// format byte, so that a later format can tell itself apart: (created_at,
// seq) for a list newest first, (change_seq, seq) for a list of changes.
const (
	tokenFormat       = 1
	changeTokenFormat = 2
)

// listRead is how listQuery reads the jobs of a filter by state or
// queue; its zero value leaves it to SQLite.
type listRead struct {
	// sorted, if set, is the index listQuery reads every job of the
	// filter's states and queues from, to sort them: for filters few
	// jobs match.
	sorted string
	// newestFirst walks the jobs newest first until the page is full:
	// for filters many jobs match.
	newestFirst bool
}

// listCountBound is as far as listReadOf counts the jobs of a filter.
const listCountBound = 10_000

// listReadOf decides how ListJobs reads the jobs of f's states or
// queues, which SQLite cannot: its plan is the same whether they hold ten
// jobs or a million. Behind a million queued jobs it sorted every one of
// them for a list of the queued jobs (0.6 s); it walked every job newest
// first for a list of a queue that had none (0.3 s), and every job of a
// tenant for its ten failed ones. So listReadOf counts the jobs of the
// states and queues (up to listCountBound, from an index led by the state
// alone) and, with the jobs in the table, weighs the rows each way reads:
// sorted, every job the filter names; newest first, about a page's worth
// of them in every (table ÷ count) jobs.
func (s *Store) listReadOf(ctx context.Context, f store.ListFilter) (listRead, error) {
	byQueue := f.Queue != "" || len(f.Queues) > 0
	if (len(f.States) == 0 && !byQueue) || f.ChangedSince != "" || f.Batch != "" || runningOnly(f) {
		return listRead{}, nil
	}
	where, args, index := narrowed(f)
	var count, span int64
	err := s.read.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM jobs INDEXED BY `+index+` WHERE `+where+` LIMIT `+strconv.Itoa(listCountBound)+`)),
		coalesce((SELECT max(seq) FROM jobs) - (SELECT min(seq) FROM jobs) + 1, 0)`, args...).Scan(&count, &span)
	if err != nil {
		return listRead{}, err
	}
	page := int64(f.Limit)
	if page <= 0 {
		page = span // every job is read either way
	}
	if count < listCountBound && count*count <= page*span {
		return listRead{sorted: index}, nil
	}
	return listRead{newestFirst: true}, nil
}

// narrowed is the part of f's WHERE that an index led by the state can
// seek, with its arguments and that index: f's states (every state if it
// names none) and its queues.
func narrowed(f store.ListFilter) (where string, args []any, index string) {
	states := f.States
	if len(states) == 0 {
		states = jobtype.AllStates
	}
	where, args = in("1 = 1", nil, "state", states)
	index = "jobs_state_run_at"
	if f.Queue != "" || len(f.Queues) > 0 {
		if f.Queue != "" {
			where, args = where+" AND queue = ?", append(args, f.Queue)
		}
		where, args = in(where, args, "queue", f.Queues)
		index = "jobs_state_queue_run_at"
	}
	return where, args, index
}

// runningOnly reports whether f lists the running jobs alone, whose own
// index listQuery reads.
func runningOnly(f store.ListFilter) bool {
	return len(f.States) == 1 && f.States[0] == jobtype.Running && f.ChangedSince == ""
}

// listQuery is ListJobs' query of f, read as r says, its arguments and
// the format of its page tokens.
func listQuery(f store.ListFilter, r listRead) (query string, args []any, format byte, err error) {
	where := "1 = 1"
	if f.Tenant != "" {
		where, args = where+" AND tenant = ?", append(args, f.Tenant)
	}
	where, args = in(where, args, "state", f.States)
	if f.Kind != "" {
		where, args = where+" AND kind = ?", append(args, f.Kind)
	}
	if f.Queue != "" {
		where, args = where+" AND queue = ?", append(args, f.Queue)
	}
	where, args = in(where, args, "kind", f.Kinds)
	where, args = in(where, args, "queue", f.Queues)
	if !f.CreatedBefore.IsZero() {
		where, args = where+" AND created_at < ?", append(args, toMicro(f.CreatedBefore))
	}
	if f.Batch != "" {
		// batch <> '' lets the partial index jobs_batch answer.
		where, args = where+" AND batch = ? AND batch <> ''", append(args, f.Batch)
	}
	// A list of changes comes in change order, which the index on
	// (tenant, change_seq, seq) gives: a feed reads only what changed.
	format, keyColumns, after, order := byte(tokenFormat), "(created_at, seq)", " < ", " ORDER BY created_at DESC, seq DESC"
	if f.ChangedSince != "" {
		change, err := decodeCursor(f.ChangedSince)
		if err != nil {
			return "", nil, 0, err
		}
		where, args = where+" AND change_seq > ?", append(args, change)
		format, keyColumns, after, order = changeTokenFormat, "(change_seq, seq)", " > ", " ORDER BY change_seq, seq"
	}
	if f.PageToken != "" {
		key, seq, err := store.DecodePageToken(format, f.PageToken)
		if err != nil {
			return "", nil, 0, err
		}
		where, args = where+" AND "+keyColumns+after+"(?, ?)", append(args, key, seq)
	}
	selected := summaryColumns
	if f.Full {
		selected = columns
	}
	from := "jobs"
	switch {
	case runningOnly(f):
		// The running jobs are as many as the workers run at once, so
		// reading them all from their own index and sorting them beats
		// walking the tenant's jobs newest first, which goes through
		// every job when few or none run (a million queued: 0.3 s). The
		// state is spelled out for SQLite to see that the index holds
		// every row the query wants.
		from, where = "jobs INDEXED BY jobs_running_tenant", where+" AND state = 'running'"
	case r.sorted != "":
		// The same filter again, every state named, for the index to
		// seek (the rest of the WHERE names no state when f names none).
		narrow, narrowArgs, _ := narrowed(f)
		from, where, args = "jobs INDEXED BY "+r.sorted, narrow+" AND "+where, append(narrowArgs, args...)
	case r.newestFirst && f.Tenant != "":
		from = "jobs INDEXED BY jobs_tenant_created"
	case r.newestFirst:
		from = "jobs INDEXED BY jobs_created"
	}
	query = "SELECT " + selected + ", change_seq FROM " + from + " WHERE " + where + order
	if f.Limit > 0 {
		// One more than asked tells whether there is a next page.
		query, args = query+" LIMIT ?", append(args, f.Limit+1)
	}
	return query, args, format, nil
}

// ListJobs implements store.Store. Pages are keyed by (created_at, seq),
// so rows created meanwhile never shift them. Rows are read one at a time
// and the query is closed as soon as the page is full by count or by
// bytes, so a page of large jobs holds at most f.MaxBytes of them, plus
// the one row that told it to stop.
func (s *Store) ListJobs(ctx context.Context, f store.ListFilter) ([]jobtype.Job, string, error) {
	r, err := s.listReadOf(ctx, f)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	query, args, format, err := listQuery(f, r)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	defer rows.Close()
	var (
		jobs             []jobtype.Job
		lastKey, lastSeq int64
		pageBytes        int
	)
	for rows.Next() {
		var change int64
		j, seq, err := scanJob(also(rows, &change))
		if err != nil {
			return nil, "", fmt.Errorf("list jobs: %w", classify(err))
		}
		full := f.Limit > 0 && len(jobs) == f.Limit
		pageBytes += j.Size()
		if full || (f.MaxBytes > 0 && pageBytes > f.MaxBytes && len(jobs) > 0) {
			// j starts the next page.
			return jobs, store.EncodePageToken(format, lastKey, lastSeq), nil
		}
		jobs, lastSeq = append(jobs, j), seq
		lastKey = toMicro(j.CreatedAt)
		if format == changeTokenFormat {
			lastKey = change
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list jobs: %w", classify(err))
	}
	return jobs, "", nil
}

// NextReady implements store.Store, with the plan of pickQuery.
func (s *Store) NextReady(ctx context.Context, f store.ClaimFilter) (time.Time, bool, error) {
	pick, args := pickQuery(f, false, "run_at")
	var runAt int64
	err := s.read.QueryRowContext(ctx, pick, args...).Scan(&runAt)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next ready: %w", classify(err))
	}
	return fromMicro(runAt), true, nil
}
