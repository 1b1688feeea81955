package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrSchemaTooNew: the database was migrated by a newer jobwatch, whose
// schema this binary does not know. Nothing was changed; run the newer
// binary.
var ErrSchemaTooNew = errors.New("database schema is newer than this jobwatch")

// migrations are applied in order, each in a transaction of its own that
// also records its number in schema_migrations. Never edit or reorder a
// released step: add one.
//
// {{schema}} is the quoted schema the store lives in and {{channel}} its
// NOTIFY channel (see channelFor; only step 1 used it): the trigger
// functions name them outright, so they mean the same whatever
// search_path the writing session has.
//
// Times are timestamptz to the microsecond. A zero time.Time is NULL,
// except in created_at and run_at, which order lists and claims: there it
// is '-infinity', which sorts before every real time, as the zero time
// does. seq is creation order (never reused); rev counts every write of a
// row (UpdateJob's optimistic check); change_seq and change_xid stamp
// every write that raised version (ChangeCursor).
var migrations = []string{
	// 1: jobs, their triggers, schedules and queue drains.
	`
CREATE SEQUENCE {{schema}}.job_changes;

CREATE TABLE {{schema}}.jobs (
	seq                bigserial   PRIMARY KEY,
	id                 text        NOT NULL UNIQUE,
	tenant             text        NOT NULL,
	kind               text        NOT NULL,
	queue              text        NOT NULL,
	state              text        NOT NULL,
	version            bigint      NOT NULL,
	rev                bigint      NOT NULL DEFAULT 1,
	percent            integer     NOT NULL,
	step               text        NOT NULL,
	error_type         text,
	error_message      text,
	attempt            integer     NOT NULL,
	max_attempts       integer     NOT NULL,
	unique_key         text        NOT NULL,
	created_at         timestamptz NOT NULL,
	started_at         timestamptz,
	updated_at         timestamptz,
	finished_at        timestamptz,
	run_at             timestamptz NOT NULL,
	worker_id          text        NOT NULL,
	lease_id           text        NOT NULL,
	lease_expires_at   timestamptz,
	-- When the current attempt began (the updated_at of the write that
	-- made the job RUNNING), for TimedOut; set by jobs_stamp.
	attempt_started_at timestamptz,
	change_seq         bigint      NOT NULL,
	change_xid         xid8        NOT NULL,
	-- json, not jsonb: jsonb refuses "\u0000" inside strings, which the
	-- API accepts, and json keeps the text exactly as given.
	result             json,
	payload            json
);

-- One active job per (tenant, unique_key): the database, not a read
-- before the insert, is what refuses the second one.
CREATE UNIQUE INDEX jobs_unique_active ON {{schema}}.jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'queued', 'running');
-- ListJobs, newest first, with or without a tenant.
CREATE INDEX jobs_created ON {{schema}}.jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON {{schema}}.jobs (tenant, created_at, seq);
-- ListJobs with ChangedSince (a tenant's feed resuming).
CREATE INDEX jobs_tenant_change ON {{schema}}.jobs (tenant, change_xid);
-- Claims, NextReady and ScheduledJobs: queued jobs in claim order, of
-- every queue and of one; a serial queue's head backing off.
CREATE INDEX jobs_queued ON {{schema}}.jobs (run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue ON {{schema}}.jobs (queue, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_retry ON {{schema}}.jobs (queue, run_at, seq) WHERE state = 'queued' AND attempt > 0;
-- Room in queues and pools, TimedOut, ExpiredLeases.
CREATE INDEX jobs_running_queue ON {{schema}}.jobs (queue, attempt_started_at) WHERE state = 'running';
CREATE INDEX jobs_running_lease ON {{schema}}.jobs (lease_expires_at) WHERE state = 'running';
-- DeleteFinishedBefore.
CREATE INDEX jobs_finished ON {{schema}}.jobs (finished_at)
	WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');
-- CountByState.
CREATE INDEX jobs_state ON {{schema}}.jobs (state);

-- jobs_stamp stamps every write that raises version with the next
-- change_seq and the writing transaction's id, and every write that
-- makes a job RUNNING with when its attempt began. A trigger, so that no
-- statement that writes jobs can forget it.
CREATE FUNCTION {{schema}}.jobs_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' OR NEW.version <> OLD.version THEN
		NEW.change_seq := nextval('{{schema}}.job_changes');
		NEW.change_xid := pg_current_xact_id();
	END IF;
	IF NEW.state = 'running' AND (TG_OP = 'INSERT' OR OLD.state <> 'running') THEN
		NEW.attempt_started_at := NEW.updated_at;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER jobs_stamp_insert BEFORE INSERT ON {{schema}}.jobs
	FOR EACH ROW EXECUTE FUNCTION {{schema}}.jobs_stamp();
CREATE TRIGGER jobs_stamp_update BEFORE UPDATE ON {{schema}}.jobs
	FOR EACH ROW WHEN (NEW.version <> OLD.version OR (NEW.state = 'running' AND OLD.state <> 'running'))
	EXECUTE FUNCTION {{schema}}.jobs_stamp();

-- jobs_notify tells every listener of the change, at commit (NOTIFY is
-- transactional): a JSON array [id, version, tenant, kind, queue, state,
-- run_at in microseconds since 1970 or null for the zero time], at most
-- a few KB as names are bounded, well under NOTIFY's 8000 bytes.
CREATE FUNCTION {{schema}}.jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('{{channel}}', json_build_array(NEW.id, NEW.version, NEW.tenant, NEW.kind,
		NEW.queue, NEW.state, CASE WHEN isfinite(NEW.run_at)
			THEN (extract(epoch FROM NEW.run_at) * 1000000)::bigint END)::text);
	RETURN NULL;
END $$;
CREATE TRIGGER jobs_notify_insert AFTER INSERT ON {{schema}}.jobs
	FOR EACH ROW EXECUTE FUNCTION {{schema}}.jobs_notify();
CREATE TRIGGER jobs_notify_update AFTER UPDATE ON {{schema}}.jobs
	FOR EACH ROW WHEN (NEW.version <> OLD.version) EXECUTE FUNCTION {{schema}}.jobs_notify();

-- Schedules: each schedule's latest run. ended_at is NULL while that run
-- is unfinished; jobs_schedule_run_ended records its end (and the state
-- it ended in) in the transaction that ends the job, whatever statement
-- ends it, so the end survives retention deleting the job.
CREATE TABLE {{schema}}.schedules (
	name        text        PRIMARY KEY,
	job_id      text        NOT NULL UNIQUE,
	ended_at    timestamptz,
	ended_state text        NOT NULL DEFAULT ''
);
CREATE FUNCTION {{schema}}.jobs_schedule_run_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE {{schema}}.schedules
		SET ended_at = coalesce(NEW.finished_at, '-infinity'), ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
	RETURN NULL;
END $$;
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON {{schema}}.jobs
	FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost'))
	EXECUTE FUNCTION {{schema}}.jobs_schedule_run_ended();

-- When each queue was last seen with no QUEUED or RUNNING job.
CREATE TABLE {{schema}}.queue_drains (
	queue      text        PRIMARY KEY,
	drained_at timestamptz NOT NULL
);

-- Whether each queue is alerting (SetAlerting), so replicas announce each
-- change of it once between them.
CREATE TABLE {{schema}}.queue_alerts (
	queue      text        PRIMARY KEY,
	alerting   boolean     NOT NULL,
	changed_at timestamptz NOT NULL
);
`,
	// 2: writes no longer NOTIFY in their transaction (PostgreSQL commits
	// notifying transactions one at a time): the Store notifies after the
	// commit (notify.go), and listeners catch up from change_xid, over
	// every tenant, by jobs_change.
	`
DROP TRIGGER jobs_notify_insert ON {{schema}}.jobs;
DROP TRIGGER jobs_notify_update ON {{schema}}.jobs;
DROP FUNCTION {{schema}}.jobs_notify();
CREATE INDEX jobs_change ON {{schema}}.jobs (change_xid);
`,
	// 3: claims seek one kind's queued jobs, or one queue's of one kind,
	// in claim order (claims.go), so that a worker's kinds never make a
	// claim walk the jobs of other kinds. The indexes are partial: a job
	// is in them only while QUEUED, so they cost a write only when a job
	// is queued.
	`
CREATE INDEX jobs_queued_kind ON {{schema}}.jobs (kind, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue_kind ON {{schema}}.jobs (queue, kind, run_at, seq) WHERE state = 'queued';
`,
	// 4: each job's priority (0 most urgent to 9) and history
	// (jobtype.HistoryEntry, as a JSON array, NULL while empty). Claims
	// take the most urgent ready job first, then the oldest, so the
	// indexes they seek in claim order hold priority before run_at
	// (claims.go): jobs_queued_priority (any job) and
	// jobs_queued_queue_priority (one queue's) are new, 3's kind indexes
	// are replaced. jobs_queued and jobs_queued_queue stay, in run_at
	// order, for what is in that order: the jobs due later, a serial
	// queue's head, the queues' stats.
	`
ALTER TABLE {{schema}}.jobs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.jobs ADD COLUMN history json;
DROP INDEX {{schema}}.jobs_queued_kind;
DROP INDEX {{schema}}.jobs_queued_queue_kind;
CREATE INDEX jobs_queued_priority ON {{schema}}.jobs (priority, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue_priority ON {{schema}}.jobs (queue, priority, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_kind ON {{schema}}.jobs (kind, priority, run_at, seq) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue_kind ON {{schema}}.jobs (queue, kind, priority, run_at, seq) WHERE state = 'queued';
`,
	// 5: paused queues (PauseQueue): a queue with a row hands out no
	// claims.
	`
CREATE TABLE {{schema}}.queue_pauses (
	queue     text        PRIMARY KEY,
	paused_at timestamptz NOT NULL,
	paused_by text        NOT NULL
);
`,
	// 6: a cron schedule is kept from the time it is first seen, before
	// its first run (store.ScheduleState): job_id NULL, ended_at that
	// time.
	`
ALTER TABLE {{schema}}.schedules ALTER COLUMN job_id DROP NOT NULL;
`,
	// 7: a record of each job DeleteJob deleted, stamped as jobs_stamp
	// stamps a change, for the feeds of changes (JobsDeleted);
	// DeleteFinishedBefore removes the old ones.
	`
CREATE TABLE {{schema}}.job_deletions (
	seq        bigserial   PRIMARY KEY,
	tenant     text        NOT NULL,
	job_id     text        NOT NULL,
	change_seq bigint      NOT NULL DEFAULT nextval('{{schema}}.job_changes'),
	change_xid xid8        NOT NULL DEFAULT pg_current_xact_id(),
	deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_deletions_tenant_change ON {{schema}}.job_deletions (tenant, change_xid);
CREATE INDEX job_deletions_deleted_at ON {{schema}}.job_deletions (deleted_at);
`,
	// 8: jobs' logs (AppendLogs): each job's bounds (the first line kept,
	// the last appended, the bytes kept) and its lines, removed with
	// their job, whoever deletes it, by the cascade.
	`
CREATE TABLE {{schema}}.job_log_heads (
	job_id    text   PRIMARY KEY REFERENCES {{schema}}.jobs (id) ON DELETE CASCADE,
	first_seq bigint NOT NULL,
	last_seq  bigint NOT NULL,
	bytes     bigint NOT NULL
);
CREATE TABLE {{schema}}.job_logs (
	job_id  text        NOT NULL REFERENCES {{schema}}.job_log_heads (job_id) ON DELETE CASCADE,
	seq     bigint      NOT NULL,
	at      timestamptz NOT NULL,
	stream  smallint    NOT NULL,
	attempt integer     NOT NULL,
	text    text        NOT NULL,
	PRIMARY KEY (job_id, seq)
);
`,
	// 9: each job's batch label (jobtype.Job.Batch, '' for none; a
	// constant default adds the column without rewriting the table).
	// jobs_batch finds a tenant's batch in ListJobs' order (newest
	// first); partial, so jobs without a batch cost it nothing, and a
	// query that uses it says batch <> '' as well.
	`
ALTER TABLE {{schema}}.jobs ADD COLUMN batch text NOT NULL DEFAULT '';
CREATE INDEX jobs_batch ON {{schema}}.jobs (tenant, batch, created_at, seq) WHERE batch <> '';
`,
	// 10: dependencies. Each job keeps the jobs it runs after (after, as
	// submitted), what a failed one does to it (after_policy: 'cancel'
	// or 'run', '' for none) and how many WAITING jobs deep its chain is
	// (after_depth); a WAITING job holds its unique key. job_deps holds,
	// for each WAITING job, the dependencies that have not ended.
	// jobs_dependency_ended runs in the transaction that ends a job
	// (whatever statement ends it): it cancels the WAITING jobs that may
	// not run after a failure of it (which ends them, so it runs again
	// for theirs, one level deeper: after_depth bounds the nesting),
	// drops its rows, queues the WAITING jobs left with none, and
	// notifies each job it touched in the same transaction, marked
	// "released", so that every replica (this one too: the writer does
	// not know of them) hears of them. A job without dependents costs an
	// index probe of job_deps.
	`
ALTER TABLE {{schema}}.jobs ADD COLUMN after text[],
	ADD COLUMN after_policy text NOT NULL DEFAULT '',
	ADD COLUMN after_depth integer NOT NULL DEFAULT 0;
DROP INDEX {{schema}}.jobs_unique_active;
CREATE UNIQUE INDEX jobs_unique_active ON {{schema}}.jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'waiting', 'queued', 'running');
CREATE TABLE {{schema}}.job_deps (
	after_id text NOT NULL,
	job_id   text NOT NULL,
	PRIMARY KEY (after_id, job_id)
);
CREATE INDEX job_deps_job ON {{schema}}.job_deps (job_id);
CREATE FUNCTION {{schema}}.jobs_release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	ids text[];
BEGIN
	IF NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps WHERE after_id = NEW.id) THEN
		RETURN NULL;
	END IF;
	IF NEW.state <> 'succeeded' THEN
		UPDATE {{schema}}.jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
			error_type = 'DependencyFailed',
			error_message = 'job ' || NEW.id || ', which it runs after, ended ' || upper(NEW.state),
			version = version + 1, rev = rev + 1
		WHERE state = 'waiting' AND after_policy = 'cancel'
			AND id IN (SELECT job_id FROM {{schema}}.job_deps WHERE after_id = NEW.id);
	END IF;
	WITH d AS (DELETE FROM {{schema}}.job_deps WHERE after_id = NEW.id RETURNING job_id)
	SELECT array_agg(job_id) INTO ids FROM d;
	UPDATE {{schema}}.jobs AS j SET state = 'queued', run_at = greatest(j.run_at, NEW.updated_at),
		updated_at = NEW.updated_at, version = j.version + 1, rev = j.rev + 1
	WHERE j.id = ANY(ids) AND j.state = 'waiting'
		AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps AS d WHERE d.job_id = j.id);
	PERFORM pg_notify('{{channel}}', json_build_object('released', json_build_array(j.id, j.version, j.tenant,
		j.kind, j.queue, j.state, (extract(epoch FROM j.run_at) * 1000000)::bigint))::text)
	FROM {{schema}}.jobs AS j WHERE j.id = ANY(ids);
	RETURN NULL;
END
$$;
CREATE TRIGGER jobs_dependency_ended AFTER UPDATE OF state ON {{schema}}.jobs FOR EACH ROW
	WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost'))
	EXECUTE FUNCTION {{schema}}.jobs_release_dependents();
`,
	// 11: the trace context of the call that submitted a job
	// (trace_parent, trace_state: W3C traceparent and tracestate, '' for
	// none). Migrations only add: a release's migration must not break
	// the release before it, which may still run beside it (see
	// docs/OPERATING.md, "Upgrading a release"). IF NOT EXISTS: one
	// commit of the history added these columns in migration 10.
	`
ALTER TABLE {{schema}}.jobs ADD COLUMN IF NOT EXISTS trace_parent text NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS trace_state text NOT NULL DEFAULT '';
`,
	// 12: TenantDepths (ListQueues' per-tenant depth, the per-tenant
	// metrics) reads only this index, in the order of its GROUP BY, as
	// QueueStats reads the partial indexes of queued and running jobs
	// (see tenantstats.go). Partial: the jobs kept after they end cost it
	// nothing. It only adds, so the release before runs beside it.
	`
CREATE INDEX jobs_unfinished_queue_tenant ON {{schema}}.jobs (queue, tenant, state, run_at)
	WHERE state IN ('queued', 'running');
`,
	// 13: the claims of rate-limited queues (jobtype.Rate), one row per
	// job claimed, kept until it is older than the queue's window: a
	// claim counts its queue's rows in the window (rates.go). It only
	// adds; a release before it claims from such a queue without a cap.
	`
CREATE TABLE {{schema}}.queue_starts (
	queue text        NOT NULL,
	at    timestamptz NOT NULL
);
CREATE INDEX queue_starts_queue_at ON {{schema}}.queue_starts (queue, at);
`,
	// 14: each tenant's jobs not yet running (PENDING, WAITING, QUEUED),
	// which a tenant's max_queued bounds: a submission under a quota
	// counts them (queuedCount, jobs.go) with a seek per state, reading
	// at most the bound's entries. Partial: a job leaves it when it
	// starts, so running and ended jobs cost it nothing. It only adds,
	// so the release before runs beside it.
	`
CREATE INDEX IF NOT EXISTS jobs_tenant_queued ON {{schema}}.jobs (tenant, state)
	WHERE state IN ('pending', 'waiting', 'queued');
`,
	// 15: fair claiming (store.FairState, fair.go). A claim from a queue
	// where several tenants have ready jobs seeks one tenant's first job
	// in claim order in jobs_queued_queue_tenant, never stepping over the
	// other tenants' jobs; a serial queue's head is each tenant's, sought
	// in jobs_unfinished_queue_tenant, which gains seq so that its jobs
	// of one run_at are in creation order too. Each contested queue's
	// virtual time and its tenants' passes are kept in fair_clocks and
	// fair_passes. The release before reads the rebuilt index as it read
	// the old one.
	`
CREATE INDEX jobs_queued_queue_tenant ON {{schema}}.jobs (queue, tenant, priority, run_at, seq) WHERE state = 'queued';
DROP INDEX {{schema}}.jobs_unfinished_queue_tenant;
CREATE INDEX jobs_unfinished_queue_tenant ON {{schema}}.jobs (queue, tenant, state, run_at, seq)
	WHERE state IN ('queued', 'running');
CREATE TABLE {{schema}}.fair_clocks (
	queue text PRIMARY KEY,
	clock double precision NOT NULL
);
CREATE TABLE {{schema}}.fair_passes (
	queue  text NOT NULL,
	tenant text NOT NULL,
	pass   double precision NOT NULL,
	PRIMARY KEY (queue, tenant)
);
`,
	// 16: a tenant's RUNNING jobs across its queues, which its bound on
	// them (store.ClaimFilter.TenantMaxRunning) counts in every claim.
	// Partial: only running jobs are in it. It only adds.
	`
CREATE INDEX jobs_running_tenant ON {{schema}}.jobs (tenant) WHERE state = 'running';
`,
	// 17: each claim of a rate-limited queue notes its job's tenant, so
	// that a rate kept per tenant (jobtype.Rate.PerTenant) counts each
	// tenant's claims in the window with a seek. The release before
	// writes rows without one ('').
	`
ALTER TABLE {{schema}}.queue_starts ADD COLUMN tenant text NOT NULL DEFAULT '';
CREATE INDEX queue_starts_queue_tenant_at ON {{schema}}.queue_starts (queue, tenant, at);
`,
	// 18: each quota-bounded tenant's mark (quota.go): at least how many
	// of its jobs have not ended, kept up by the writes that add one
	// under the tenant's lock, so that a creation that fits under the
	// bound by it need not count. The release before neither reads nor
	// keeps it: Open deletes every mark.
	`
CREATE TABLE {{schema}}.quota_marks (
	tenant     text   PRIMARY KEY,
	unfinished bigint NOT NULL
);
`,
	// 19: fair claiming's look and pick of one tenant's jobs for a
	// worker that names its kinds seek them by kind (readyOfKinds,
	// pickQuery), never walking the tenant's jobs of other kinds: a
	// worker of a kind one tenant submits walked another tenant's whole
	// backlog of other kinds in the queue at every claim. It only adds.
	`
CREATE INDEX jobs_queued_queue_tenant_kind ON {{schema}}.jobs (queue, tenant, kind, priority, run_at, seq) WHERE state = 'queued';
`,
	// 20: jobs_release_dependents without a write skew. Two writes that
	// each ended one of a WAITING job's last two dependencies each
	// deleted their own row of job_deps and then looked for the job's
	// other rows, each in a snapshot where the other's row was still
	// there, so neither queued the job, and nothing ever did (an outside
	// probe left 98 of 200 such jobs WAITING with two replicas, and some
	// with one). Now a write that leaves a job WAITING for other
	// dependencies locks the job's row (in id order, FOR UPDATE) and
	// looks again, in a snapshot taken once the lock is granted: of two
	// such writes the second waits for the first to commit and then sees
	// its row gone. Only such jobs are locked, so a job whose last
	// dependency ends costs what it did. The release before keeps
	// working with it: the function and its trigger keep their names.
	`
CREATE OR REPLACE FUNCTION {{schema}}.jobs_release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	ids text[];
	others text[];
BEGIN
	IF NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps WHERE after_id = NEW.id) THEN
		RETURN NULL;
	END IF;
	IF NEW.state <> 'succeeded' THEN
		UPDATE {{schema}}.jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
			error_type = 'DependencyFailed',
			error_message = 'job ' || NEW.id || ', which it runs after, ended ' || upper(NEW.state),
			version = version + 1, rev = rev + 1
		WHERE state = 'waiting' AND after_policy = 'cancel'
			AND id IN (SELECT job_id FROM {{schema}}.job_deps WHERE after_id = NEW.id);
	END IF;
	WITH d AS (DELETE FROM {{schema}}.job_deps WHERE after_id = NEW.id RETURNING job_id)
	SELECT array_agg(job_id) INTO ids FROM d;
	UPDATE {{schema}}.jobs AS j SET state = 'queued', run_at = greatest(j.run_at, NEW.updated_at),
		updated_at = NEW.updated_at, version = j.version + 1, rev = j.rev + 1
	WHERE j.id = ANY(ids) AND j.state = 'waiting'
		AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps AS d WHERE d.job_id = j.id);
	SELECT array_agg(w.id) INTO others FROM (SELECT j.id FROM {{schema}}.jobs AS j
		WHERE j.id = ANY(ids) AND j.state = 'waiting' ORDER BY j.id FOR UPDATE) AS w;
	IF others IS NOT NULL THEN
		UPDATE {{schema}}.jobs AS j SET state = 'queued', run_at = greatest(j.run_at, NEW.updated_at),
			updated_at = NEW.updated_at, version = j.version + 1, rev = j.rev + 1
		WHERE j.id = ANY(others) AND j.state = 'waiting'
			AND NOT EXISTS (SELECT 1 FROM {{schema}}.job_deps AS d WHERE d.job_id = j.id);
	END IF;
	PERFORM pg_notify('{{channel}}', json_build_object('released', json_build_array(j.id, j.version, j.tenant,
		j.kind, j.queue, j.state, (extract(epoch FROM j.run_at) * 1000000)::bigint))::text)
	FROM {{schema}}.jobs AS j WHERE j.id = ANY(ids);
	RETURN NULL;
END
$$;
`,
	// 21: the database's identity, drawn when the schema is made (or
	// first migrated): a copy of it (pg_dump and a restore) has it too,
	// another schema or database has its own. Change cursors carry it
	// (ChangeCursor), so that a cursor of another database is never read
	// as one of this.
	`
CREATE TABLE {{schema}}.db_identity (
	id bigint NOT NULL
);
INSERT INTO {{schema}}.db_identity (id)
	VALUES (('x' || substr(md5(random()::text || clock_timestamp()::text), 1, 16))::bit(64)::bigint);
`,
	// 22: a deletion's record keeps its job's batch, so that a feed of
	// one batch's changes (WatchJobs with a batch) lists only the
	// deletions of that batch ('' for a job in none). Records made
	// before have NULL, which such a feed lists, as it did.
	`
ALTER TABLE {{schema}}.job_deletions ADD COLUMN batch text;
`,
	// 23: a schedule's latest run retried (terminal to QUEUED or
	// WAITING) is unfinished again: its end is forgotten, so that the
	// next run waits for it and counts from its new end. Runs retried
	// before this migration are made so too.
	`
CREATE FUNCTION {{schema}}.jobs_schedule_run_retried() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE {{schema}}.schedules SET ended_at = NULL, ended_state = '' WHERE job_id = NEW.id;
	RETURN NULL;
END $$;
CREATE TRIGGER jobs_schedule_run_retried AFTER UPDATE OF state ON {{schema}}.jobs
	FOR EACH ROW WHEN (OLD.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND NEW.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost'))
	EXECUTE FUNCTION {{schema}}.jobs_schedule_run_retried();
UPDATE {{schema}}.schedules AS s SET ended_at = NULL, ended_state = ''
	FROM {{schema}}.jobs AS j
	WHERE j.id = s.job_id AND j.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost');
`,
}

// channelFor is the NOTIFY channel of the store in schema: one per schema,
// so that stores in different schemas of one database (tests, or two
// installations) never hear each other. A channel name is an identifier,
// at most 63 bytes.
func channelFor(schema string) string {
	if schema == "public" {
		return "jobwatch_changes"
	}
	ch := "jobwatch_changes_" + schema
	if len(ch) > 63 {
		ch = fmt.Sprintf("jobwatch_changes_%016x", lockKey(schema, "channel", ""))
	}
	return ch
}

// lockKey is the advisory lock key of one thing (a queue, a pool, the
// migrations) of the store in schema. Every replica computes the same
// key from the same names.
func lockKey(schema, what, name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("jobwatch\x00" + schema + "\x00" + what + "\x00" + name))
	return int64(h.Sum64())
}

// qualifiedName matches a quoted schema before a dot, as migrationSQL
// writes {{schema}}.
var qualifiedName = regexp.MustCompile(`"((?:[^"]|"")+)"\.`)

// checkFunctionsSchema refuses a schema whose trigger functions were
// written for another: the migrations name the schema (and its NOTIFY
// channel) outright, so a schema renamed, or a dump restored under
// another name, keeps the old name in them. Its writes would then fail
// ("schema … does not exist") or reach the other schema's tables, and its
// changes would be announced on the other's channel.
func (s *Store) checkFunctionsSchema(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, `SELECT prosrc FROM pg_proc
		WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1) AND proname LIKE 'jobs\_%'`, s.schema)
	if err != nil {
		return fmt.Errorf("read the trigger functions: %w", classify(err))
	}
	sources, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the trigger functions: %w", classify(err))
	}
	for _, src := range sources {
		for _, m := range qualifiedName.FindAllStringSubmatch(src, -1) {
			if other := strings.ReplaceAll(m[1], `""`, `"`); other != s.schema {
				return fmt.Errorf("schema %s holds jobwatch's trigger functions as written for schema %s: it was renamed, or restored from a dump "+
					"under another name, and its writes would fail or reach that schema's tables; rename it back (ALTER SCHEMA %s RENAME TO %s), "+
					"or restore the dump under its own name (docs/OPERATING.md, \"Backing up\")",
					pgx.Identifier{s.schema}.Sanitize(), pgx.Identifier{other}.Sanitize(), pgx.Identifier{s.schema}.Sanitize(), pgx.Identifier{other}.Sanitize())
			}
		}
	}
	return nil
}

func (s *Store) migrationSQL(i int) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{s.schema}.Sanitize(),
		"{{channel}}", strings.ReplaceAll(s.channel, "'", "''"),
	).Replace(migrations[i])
}

// migrate brings the schema up to date. It holds a session advisory lock
// (one key per schema) throughout, so replicas starting together take
// turns: the first applies what is missing, the others then find nothing
// to do. Each step commits with its number, so a crash part way leaves
// the schema at a version it records.
func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", classify(err))
	}
	defer conn.Release()
	key := lockKey(s.schema, "migrate", "")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", classify(err))
	}
	defer func() {
		// An unlock that fails leaves the lock to end with the session;
		// the pool then closes the connection.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			conn.Conn().Close(context.Background())
		}
	}()
	table := pgx.Identifier{s.schema, "schema_migrations"}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		version    integer     PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return fmt.Errorf("migrate: %w", classify(err))
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&version); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", classify(err))
	}
	if version > len(migrations) {
		return fmt.Errorf("%w: schema %s is at version %d, this binary knows up to %d",
			ErrSchemaTooNew, s.schema, version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.migrationSQL(i)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (version) VALUES ($1)", i+1)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", i+1, classify(err))
		}
	}
	if version > 0 && version < len(migrations) {
		// An upgrade leaves its mark in the log (a new schema, at 0, needs none).
		s.log.Info("migrated the database's schema", "schema", s.schema, "from_version", version, "to_version", len(migrations))
	}
	return nil
}
