package sqlite

import (
	"context"
	"errors"
	"fmt"
)

// ErrSchemaTooNew: the file was written by a newer jobwatch, whose schema
// this binary does not know. Nothing was changed; run the newer binary.
var ErrSchemaTooNew = errors.New("database schema is newer than this jobwatch")

// migrations are applied in order; the number of those applied is kept in
// PRAGMA user_version. Never edit or reorder a released step: add one.
//
// Times are INTEGER microseconds since the Unix epoch, UTC (the zero
// time.Time is year 1, a large negative number, so it sorts before every
// real time and needs no NULL). seq is creation order: AUTOINCREMENT, so
// it is never reused even after retention deletes the newest row.
var migrations = []string{
	// 1: jobs and the indexes of every query the store makes.
	`
CREATE TABLE jobs (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE,
	tenant           TEXT    NOT NULL,
	kind             TEXT    NOT NULL,
	queue            TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	version          INTEGER NOT NULL,
	percent          INTEGER NOT NULL,
	step             TEXT    NOT NULL,
	payload          TEXT,
	result           TEXT,
	error_type       TEXT,
	error_message    TEXT,
	attempt          INTEGER NOT NULL,
	max_attempts     INTEGER NOT NULL,
	unique_key       TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	finished_at      INTEGER NOT NULL,
	run_at           INTEGER NOT NULL,
	worker_id        TEXT    NOT NULL,
	lease_id         TEXT    NOT NULL,
	lease_expires_at INTEGER NOT NULL
) STRICT;

-- One active job per (tenant, unique_key): the database, not a read
-- before the insert, is what refuses the second one.
CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'queued', 'running');

-- ListJobs: newest first, with or without a tenant; WatchTenant-style
-- "updated since" reads per tenant.
CREATE INDEX jobs_created ON jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, seq);
CREATE INDEX jobs_tenant_updated ON jobs (tenant, updated_at);

-- Each of these leads with state, so that the planner, which has no
-- statistics, still sees that the query's index also gives its order.
-- ClaimJob and NextReady: queued jobs in claim order.
CREATE INDEX jobs_state_run_at ON jobs (state, run_at, seq);
-- ExpiredLeases.
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);
-- DeleteFinishedBefore and CountByState.
CREATE INDEX jobs_state_finished ON jobs (state, finished_at);
`,
	// 2: QueueStats reads only this index (it covers state, queue and
	// run_at), in the order of its GROUP BY, so it needs no temp B-tree.
	// Claims and NextReady for one queue, and ListJobs by state and
	// queue, use it too: every row of one (state, queue) is in run_at and
	// then seq (the rowid) order, which is claim order.
	`
CREATE INDEX jobs_state_queue_run_at ON jobs (state, queue, run_at);
`,
	// 3: payload and result move to the end of the row. SQLite reads a
	// row's columns in order, and a large value spills into overflow
	// pages that must be walked to reach any column stored after it, so
	// a summary list (which never selects payload or result) read every
	// job's payload from disk anyway: 500 summaries of 250 KB jobs took
	// longer than a full page of the same jobs. The table is rebuilt, as
	// SQLite cannot reorder columns in place; seq keeps its values and its
	// AUTOINCREMENT high-water mark, so no seq is ever reused.
	`
CREATE TABLE jobs_new (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE,
	tenant           TEXT    NOT NULL,
	kind             TEXT    NOT NULL,
	queue            TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	version          INTEGER NOT NULL,
	percent          INTEGER NOT NULL,
	step             TEXT    NOT NULL,
	error_type       TEXT,
	error_message    TEXT,
	attempt          INTEGER NOT NULL,
	max_attempts     INTEGER NOT NULL,
	unique_key       TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	finished_at      INTEGER NOT NULL,
	run_at           INTEGER NOT NULL,
	worker_id        TEXT    NOT NULL,
	lease_id         TEXT    NOT NULL,
	lease_expires_at INTEGER NOT NULL,
	result           TEXT,
	payload          TEXT
) STRICT;
INSERT INTO jobs_new (seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, result, payload)
SELECT seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, result, payload
FROM jobs;
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'queued', 'running');
CREATE INDEX jobs_created ON jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, seq);
CREATE INDEX jobs_tenant_updated ON jobs (tenant, updated_at);
CREATE INDEX jobs_state_run_at ON jobs (state, run_at, seq);
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);
CREATE INDEX jobs_state_finished ON jobs (state, finished_at);
CREATE INDEX jobs_state_queue_run_at ON jobs (state, queue, run_at);
`,
	// 4: a serial queue that holds on failure finds the job backing off
	// before a retry (its head) without walking the queue's other jobs.
	// Few rows are in it: a QUEUED job is here only between a failed
	// attempt and the next.
	`
CREATE INDEX jobs_queued_retry ON jobs (queue, run_at) WHERE state = 'queued' AND attempt > 0;
`,
	// 5: when the current attempt of each RUNNING job began, for
	// per-queue timeouts (TimedOut), in a side table keyed by the job's
	// seq rather than a column: ADD COLUMN would land after payload (see
	// 3), and rebuilding the table again would rewrite every job on
	// upgrade. Triggers keep it, so every path that claims or ends an
	// attempt (now and later) maintains it without knowing: a job that
	// becomes RUNNING gets a row with its updated_at (the claim's time),
	// one that stops being RUNNING loses it. Jobs already RUNNING take
	// their updated_at, which is no earlier than their claim, so an
	// upgrade times nothing out before its time. queue_drains keeps when
	// each queue last drained, for alerting.
	`
CREATE TABLE running_attempts (
	seq        INTEGER PRIMARY KEY,
	started_at INTEGER NOT NULL
) STRICT;
INSERT INTO running_attempts (seq, started_at) SELECT seq, updated_at FROM jobs WHERE state = 'running';
CREATE TRIGGER jobs_attempt_started AFTER UPDATE OF state ON jobs
	WHEN NEW.state = 'running' AND OLD.state <> 'running'
BEGIN
	INSERT OR REPLACE INTO running_attempts (seq, started_at) VALUES (NEW.seq, NEW.updated_at);
END;
-- When each queue was last seen with no QUEUED or RUNNING job
-- (MarkDrained, LastDrained), for alerting; it must outlive a restart.
CREATE TABLE queue_drains (
	queue      TEXT    PRIMARY KEY,
	drained_at INTEGER NOT NULL
) STRICT;
CREATE TRIGGER jobs_attempt_ended AFTER UPDATE OF state ON jobs
	WHEN OLD.state = 'running' AND NEW.state <> 'running'
BEGIN
	DELETE FROM running_attempts WHERE seq = OLD.seq;
END;
`,
	// 6: schedules (Schedules, RunSchedules): each schedule's latest run.
	// ended_at is NULL while that run is unfinished; a trigger records
	// the end (and the state it ended in) in the transaction that ends
	// the job, whatever path ends it, so the end is known without a write
	// of the schedule's own and survives retention deleting the job. A
	// schedule's row is only ever written by RunSchedules, which starts a
	// run, and by that trigger: a sweep with nothing due writes nothing.
	`
CREATE TABLE schedules (
	name        TEXT    PRIMARY KEY,
	job_id      TEXT    NOT NULL,
	ended_at    INTEGER,
	ended_state TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE UNIQUE INDEX schedules_job ON schedules (job_id);
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
`,
	// 7: the change sequence (ChangeCursor, ListFilter.ChangedSince).
	// changes holds its last value; every batch of writes takes the next
	// one in its own transaction, so the values follow commit order even
	// with other processes writing the file, and every write in the batch
	// that raises a version stamps it on its job as change_seq. A list of
	// changes reads change_seq from every row it returns (for its page
	// token), so the column must come before payload and result (see 3):
	// the table is rebuilt once more, keeping seq and its high-water mark.
	// Jobs written before this step get 0, before every cursor. The
	// updated_at index served only the "updated since" reads this
	// replaces.
	`
CREATE TABLE changes (
	id  INTEGER PRIMARY KEY CHECK (id = 1),
	seq INTEGER NOT NULL
) STRICT;
INSERT INTO changes (id, seq) VALUES (1, 0);
CREATE TABLE jobs_new (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE,
	tenant           TEXT    NOT NULL,
	kind             TEXT    NOT NULL,
	queue            TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	version          INTEGER NOT NULL,
	percent          INTEGER NOT NULL,
	step             TEXT    NOT NULL,
	error_type       TEXT,
	error_message    TEXT,
	attempt          INTEGER NOT NULL,
	max_attempts     INTEGER NOT NULL,
	unique_key       TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	finished_at      INTEGER NOT NULL,
	run_at           INTEGER NOT NULL,
	worker_id        TEXT    NOT NULL,
	lease_id         TEXT    NOT NULL,
	lease_expires_at INTEGER NOT NULL,
	change_seq       INTEGER NOT NULL DEFAULT 0,
	result           TEXT,
	payload          TEXT
) STRICT;
INSERT INTO jobs_new (seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, result, payload)
SELECT seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, result, payload
FROM jobs;
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'queued', 'running');
CREATE INDEX jobs_created ON jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, seq);
CREATE INDEX jobs_change ON jobs (change_seq, seq);
CREATE INDEX jobs_tenant_change ON jobs (tenant, change_seq, seq);
CREATE INDEX jobs_state_run_at ON jobs (state, run_at, seq);
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);
CREATE INDEX jobs_state_finished ON jobs (state, finished_at);
CREATE INDEX jobs_state_queue_run_at ON jobs (state, queue, run_at);
CREATE INDEX jobs_queued_retry ON jobs (queue, run_at) WHERE state = 'queued' AND attempt > 0;

CREATE TRIGGER jobs_attempt_started AFTER UPDATE OF state ON jobs
	WHEN NEW.state = 'running' AND OLD.state <> 'running'
BEGIN
	INSERT OR REPLACE INTO running_attempts (seq, started_at) VALUES (NEW.seq, NEW.updated_at);
END;
CREATE TRIGGER jobs_attempt_ended AFTER UPDATE OF state ON jobs
	WHEN OLD.state = 'running' AND NEW.state <> 'running'
BEGIN
	DELETE FROM running_attempts WHERE seq = OLD.seq;
END;
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
`,
	// 8: whether each queue is alerting (SetAlerting), so that replicas
	// announce each change of it once between them.
	`
CREATE TABLE queue_alerts (
	queue      TEXT    PRIMARY KEY,
	alerting   INTEGER NOT NULL,
	changed_at INTEGER NOT NULL
) STRICT;
`,
	// 9: each kind's QUEUED jobs in each queue in claim order, so that a
	// worker that names the kinds it runs reaches its jobs with one seek
	// per kind and queue, however many jobs of other kinds wait ahead of
	// them (see the pick in claims.go). Partial: only QUEUED jobs are in
	// it, so a claim deletes an entry and adds none.
	`
CREATE INDEX jobs_queued_kind ON jobs (kind, queue, run_at) WHERE state = 'queued';
`,
	// 10: each job's priority (0 most urgent to 9) and history
	// (jobtype.HistoryEntry, as a JSON array, NULL while empty). Both
	// are read with every job, so they go before payload and result
	// (see 3): the table is rebuilt once more, as in 7. Claims take the
	// most urgent ready job first, so the QUEUED jobs are indexed by
	// priority before run_at: jobs_queued_priority (any job),
	// jobs_queued_queue (one queue's) and jobs_queued_kind (one kind's
	// in one queue) replace 9's jobs_queued_kind; a claim seeks each
	// priority's range of them (see the pick in claims.go). The indexes
	// in run_at order stay for what is in that order: the jobs due later
	// (jobs_state_run_at), a serial queue's head, the queues' stats and
	// running jobs (jobs_state_queue_run_at).
	`
CREATE TABLE jobs_new (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE,
	tenant           TEXT    NOT NULL,
	kind             TEXT    NOT NULL,
	queue            TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	version          INTEGER NOT NULL,
	percent          INTEGER NOT NULL,
	step             TEXT    NOT NULL,
	error_type       TEXT,
	error_message    TEXT,
	attempt          INTEGER NOT NULL,
	max_attempts     INTEGER NOT NULL,
	unique_key       TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	finished_at      INTEGER NOT NULL,
	run_at           INTEGER NOT NULL,
	worker_id        TEXT    NOT NULL,
	lease_id         TEXT    NOT NULL,
	lease_expires_at INTEGER NOT NULL,
	change_seq       INTEGER NOT NULL DEFAULT 0,
	priority         INTEGER NOT NULL DEFAULT 0,
	history          TEXT,
	result           TEXT,
	payload          TEXT
) STRICT;
INSERT INTO jobs_new (seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, result, payload)
SELECT seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, result, payload
FROM jobs;
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'queued', 'running');
CREATE INDEX jobs_created ON jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, seq);
CREATE INDEX jobs_change ON jobs (change_seq, seq);
CREATE INDEX jobs_tenant_change ON jobs (tenant, change_seq, seq);
CREATE INDEX jobs_state_run_at ON jobs (state, run_at, seq);
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);
CREATE INDEX jobs_state_finished ON jobs (state, finished_at);
CREATE INDEX jobs_state_queue_run_at ON jobs (state, queue, run_at);
CREATE INDEX jobs_queued_retry ON jobs (queue, run_at) WHERE state = 'queued' AND attempt > 0;
CREATE INDEX jobs_queued_priority ON jobs (priority, run_at) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue ON jobs (queue, priority, run_at) WHERE state = 'queued';
CREATE INDEX jobs_queued_kind ON jobs (kind, queue, priority, run_at) WHERE state = 'queued';

CREATE TRIGGER jobs_attempt_started AFTER UPDATE OF state ON jobs
	WHEN NEW.state = 'running' AND OLD.state <> 'running'
BEGIN
	INSERT OR REPLACE INTO running_attempts (seq, started_at) VALUES (NEW.seq, NEW.updated_at);
END;
CREATE TRIGGER jobs_attempt_ended AFTER UPDATE OF state ON jobs
	WHEN OLD.state = 'running' AND NEW.state <> 'running'
BEGIN
	DELETE FROM running_attempts WHERE seq = OLD.seq;
END;
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
`,
	// 11: paused queues (PauseQueue): a queue with a row hands out no
	// claims.
	`
CREATE TABLE queue_pauses (
	queue     TEXT    PRIMARY KEY,
	paused_at INTEGER NOT NULL,
	paused_by TEXT    NOT NULL
) STRICT;
`,
	// 12: a cron schedule is kept from the time it is first seen, before
	// its first run (store.ScheduleState): job_id NULL, ended_at that
	// time. SQLite cannot drop a NOT NULL, so the (small) table is
	// rebuilt; the trigger that writes it goes first and comes back as
	// it was, since a rename checks every trigger's tables.
	`
DROP TRIGGER jobs_schedule_run_ended;
CREATE TABLE schedules_new (
	name        TEXT    PRIMARY KEY,
	job_id      TEXT,
	ended_at    INTEGER,
	ended_state TEXT    NOT NULL DEFAULT ''
) STRICT;
INSERT INTO schedules_new (name, job_id, ended_at, ended_state)
	SELECT name, job_id, ended_at, ended_state FROM schedules;
DROP TABLE schedules;
ALTER TABLE schedules_new RENAME TO schedules;
CREATE UNIQUE INDEX schedules_job ON schedules (job_id);
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
`,
	// 13: a record of each job DeleteJob deleted, stamped with the
	// change sequence of its batch, for the feeds of changes
	// (JobsDeleted); DeleteFinishedBefore removes the old ones.
	`
CREATE TABLE job_deletions (
	seq        INTEGER PRIMARY KEY,
	tenant     TEXT    NOT NULL,
	job_id     TEXT    NOT NULL,
	change_seq INTEGER NOT NULL,
	deleted_at INTEGER NOT NULL
) STRICT;
CREATE INDEX job_deletions_tenant_change ON job_deletions (tenant, change_seq, seq);
CREATE INDEX job_deletions_deleted_at ON job_deletions (deleted_at);
`,
	// 14: jobs' logs (AppendLogs): the lines, and each job's bounds
	// (the first line kept, the last appended, the bytes kept), both
	// removed with their job by a trigger, whoever deletes it.
	`
CREATE TABLE job_logs (
	job_id  TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	at      INTEGER NOT NULL,
	stream  INTEGER NOT NULL,
	attempt INTEGER NOT NULL,
	text    TEXT    NOT NULL,
	PRIMARY KEY (job_id, seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE job_log_heads (
	job_id    TEXT    PRIMARY KEY,
	first_seq INTEGER NOT NULL,
	last_seq  INTEGER NOT NULL,
	bytes     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TRIGGER jobs_logs_deleted AFTER DELETE ON jobs
BEGIN
	DELETE FROM job_logs WHERE job_id = OLD.id;
	DELETE FROM job_log_heads WHERE job_id = OLD.id;
END;
`,
	// 15: each job's batch label (jobtype.Job.Batch, '' for none) and
	// dependencies: the jobs it runs after (after, a JSON array of ids,
	// NULL for none), what a failed one does to it (after_policy:
	// 'cancel' or 'run', '' for none) and how many WAITING jobs deep its
	// chain is (after_depth), and the trace context of the call that
	// submitted it (trace_parent, trace_state: W3C traceparent and
	// tracestate, '' for none). All are read with every job, so they go
	// before payload and result (see 3): the table is rebuilt once more,
	// as in 10, with every index and trigger on it as 14 left them.
	// jobs_batch finds a tenant's batch in ListJobs' order (newest
	// first); partial, so jobs without a batch cost it nothing, and a
	// query that uses it says batch <> '' as well. A WAITING job holds
	// its unique key (jobs_unique_active).
	//
	// job_deps holds, for each WAITING job, the dependencies that have
	// not ended. jobs_dependency_ended runs in the transaction that ends
	// a job (whatever statement ends it): it cancels the WAITING jobs
	// that may not run after a failure of it (which ends them, so the
	// trigger runs again for theirs: the writer's connection sets
	// recursive_triggers), drops its rows, queues the WAITING jobs left
	// with none, and notes every job it touched in job_releases, which
	// the writer empties into the batch's changes before it commits
	// (writer.go), so that waiters, watchers and claimers hear of them.
	`
CREATE TABLE jobs_new (
	seq              INTEGER PRIMARY KEY AUTOINCREMENT,
	id               TEXT    NOT NULL UNIQUE,
	tenant           TEXT    NOT NULL,
	kind             TEXT    NOT NULL,
	queue            TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	version          INTEGER NOT NULL,
	percent          INTEGER NOT NULL,
	step             TEXT    NOT NULL,
	error_type       TEXT,
	error_message    TEXT,
	attempt          INTEGER NOT NULL,
	max_attempts     INTEGER NOT NULL,
	unique_key       TEXT    NOT NULL,
	created_at       INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	finished_at      INTEGER NOT NULL,
	run_at           INTEGER NOT NULL,
	worker_id        TEXT    NOT NULL,
	lease_id         TEXT    NOT NULL,
	lease_expires_at INTEGER NOT NULL,
	change_seq       INTEGER NOT NULL DEFAULT 0,
	priority         INTEGER NOT NULL DEFAULT 0,
	batch            TEXT    NOT NULL DEFAULT '',
	after            TEXT,
	after_policy     TEXT    NOT NULL DEFAULT '',
	after_depth      INTEGER NOT NULL DEFAULT 0,
	trace_parent     TEXT    NOT NULL DEFAULT '',
	trace_state      TEXT    NOT NULL DEFAULT '',
	history          TEXT,
	result           TEXT,
	payload          TEXT
) STRICT;
INSERT INTO jobs_new (seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, priority,
	history, result, payload)
SELECT seq, id, tenant, kind, queue, state, version, percent, step,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, change_seq, priority,
	history, result, payload
FROM jobs;
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND state IN ('pending', 'waiting', 'queued', 'running');
CREATE INDEX jobs_created ON jobs (created_at, seq);
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at, seq);
CREATE INDEX jobs_change ON jobs (change_seq, seq);
CREATE INDEX jobs_tenant_change ON jobs (tenant, change_seq, seq);
CREATE INDEX jobs_state_run_at ON jobs (state, run_at, seq);
CREATE INDEX jobs_state_lease ON jobs (state, lease_expires_at);
CREATE INDEX jobs_state_finished ON jobs (state, finished_at);
CREATE INDEX jobs_state_queue_run_at ON jobs (state, queue, run_at);
CREATE INDEX jobs_queued_retry ON jobs (queue, run_at) WHERE state = 'queued' AND attempt > 0;
CREATE INDEX jobs_queued_priority ON jobs (priority, run_at) WHERE state = 'queued';
CREATE INDEX jobs_queued_queue ON jobs (queue, priority, run_at) WHERE state = 'queued';
CREATE INDEX jobs_queued_kind ON jobs (kind, queue, priority, run_at) WHERE state = 'queued';
CREATE INDEX jobs_batch ON jobs (tenant, batch, created_at, seq) WHERE batch <> '';

CREATE TRIGGER jobs_attempt_started AFTER UPDATE OF state ON jobs
	WHEN NEW.state = 'running' AND OLD.state <> 'running'
BEGIN
	INSERT OR REPLACE INTO running_attempts (seq, started_at) VALUES (NEW.seq, NEW.updated_at);
END;
CREATE TRIGGER jobs_attempt_ended AFTER UPDATE OF state ON jobs
	WHEN OLD.state = 'running' AND NEW.state <> 'running'
BEGIN
	DELETE FROM running_attempts WHERE seq = OLD.seq;
END;
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
CREATE TRIGGER jobs_logs_deleted AFTER DELETE ON jobs
BEGIN
	DELETE FROM job_logs WHERE job_id = OLD.id;
	DELETE FROM job_log_heads WHERE job_id = OLD.id;
END;

CREATE TABLE job_deps (
	after_id TEXT NOT NULL,
	job_id   TEXT NOT NULL,
	PRIMARY KEY (after_id, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX job_deps_job ON job_deps (job_id);
CREATE TABLE job_releases (
	job_id TEXT PRIMARY KEY
) STRICT, WITHOUT ROWID;

CREATE TRIGGER jobs_dependency_ended AFTER UPDATE OF state ON jobs
	WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
		AND EXISTS (SELECT 1 FROM job_deps WHERE after_id = NEW.id)
BEGIN
	INSERT OR IGNORE INTO job_releases (job_id) SELECT job_id FROM job_deps WHERE after_id = NEW.id;
	UPDATE jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
		error_type = 'DependencyFailed',
		error_message = 'job ' || NEW.id || ', which it runs after, ended ' || upper(NEW.state),
		version = version + 1, change_seq = NEW.change_seq
	WHERE NEW.state <> 'succeeded' AND state = 'waiting' AND after_policy = 'cancel'
		AND id IN (SELECT job_id FROM job_deps WHERE after_id = NEW.id);
	DELETE FROM job_deps WHERE after_id = NEW.id;
	UPDATE jobs SET state = 'queued', run_at = max(run_at, NEW.updated_at), updated_at = NEW.updated_at,
		version = version + 1, change_seq = NEW.change_seq
	WHERE state = 'waiting' AND id IN (SELECT job_id FROM job_releases)
		AND NOT EXISTS (SELECT 1 FROM job_deps WHERE job_deps.job_id = jobs.id);
END;
`,
	// 16: TenantDepths (ListQueues' per-tenant depth, the per-tenant
	// metrics) reads only this index, in the order of its GROUP BY, as
	// QueueStats reads jobs_state_queue_run_at (see tenantstats.go).
	// Partial: only QUEUED and RUNNING jobs are in it, so the jobs kept
	// after they end cost it nothing.
	`
CREATE INDEX jobs_unfinished_queue_tenant ON jobs (queue, tenant, state, run_at)
	WHERE state IN ('queued', 'running');
`,
	// 17: the claims of rate-limited queues (jobtype.Rate), one row per
	// job claimed, kept until it is older than the queue's window: a
	// claim counts its queue's rows in the window (rates.go).
	`
CREATE TABLE queue_starts (
	queue TEXT    NOT NULL,
	at    INTEGER NOT NULL
);
CREATE INDEX queue_starts_queue_at ON queue_starts (queue, at);
`,
	// 18: each tenant's jobs not yet running (PENDING, WAITING, QUEUED),
	// which a tenant's max_queued bounds: a submission under a quota
	// counts them (queuedCount, jobs.go) with a seek per state, reading
	// at most the bound's entries. Partial: a job leaves it when it
	// starts, so running and ended jobs cost it nothing.
	`
CREATE INDEX jobs_tenant_queued ON jobs (tenant, state)
	WHERE state IN ('pending', 'waiting', 'queued');
`,
	// 19: fair claiming (store.FairState, fair.go). A claim from a queue
	// where several tenants have ready jobs seeks one tenant's first job
	// in claim order in jobs_queued_queue_tenant, never stepping over the
	// other tenants' jobs; each such queue's virtual time and its
	// tenants' passes are kept in fair_clocks and fair_passes.
	`
CREATE INDEX jobs_queued_queue_tenant ON jobs (queue, tenant, priority, run_at) WHERE state = 'queued';
CREATE TABLE fair_clocks (
	queue TEXT PRIMARY KEY,
	clock REAL NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE fair_passes (
	queue  TEXT NOT NULL,
	tenant TEXT NOT NULL,
	pass   REAL NOT NULL,
	PRIMARY KEY (queue, tenant)
) STRICT, WITHOUT ROWID;
`,
	// 20: a tenant's RUNNING jobs across its queues, which its bound on
	// them (store.ClaimFilter.TenantMaxRunning) counts in every claim.
	// Partial: only running jobs are in it.
	`
CREATE INDEX jobs_running_tenant ON jobs (tenant) WHERE state = 'running';
`,
	// 21: each claim of a rate-limited queue notes its job's tenant, so
	// that a rate kept per tenant (jobtype.Rate.PerTenant) counts each
	// tenant's claims in the window with a seek.
	`
ALTER TABLE queue_starts ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
CREATE INDEX queue_starts_queue_tenant_at ON queue_starts (queue, tenant, at);
`,
	// 22: the lease sweep's and the retention sweep's indexes hold only
	// the jobs they read, as on PostgreSQL: RUNNING jobs by the end of
	// their lease (ExpiredLeases), ended jobs by when they ended
	// (DeleteFinishedBefore). They held every job, so each submit added
	// an entry to both and each claim moved one in both, from where the
	// queued jobs sat in the order they were submitted.
	`
DROP INDEX jobs_state_lease;
DROP INDEX jobs_state_finished;
CREATE INDEX jobs_running_lease ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');
`,
	// 23: the two triggers that act when a job ends ask whether it did
	// with comparisons, not IN lists. SQLite answers an IN of more than
	// two values by building a temporary B-tree of them, and a trigger's
	// program built its two every time it ran: for every row whose state
	// a claim or a completion sets, four B-trees opened, filled and
	// closed. One UPDATE setting 19,900 RUNNING jobs SUCCEEDED took 0.67
	// to 0.85 s with them and 0.30 s without, in memory as the writer
	// keeps temporary B-trees (temp_store), 2.2 s with them in files.
	//
	// The partial indexes whose WHERE named more than two states say
	// the same with comparisons, for the same reason: every INSERT, and
	// every UPDATE that sets state, built a B-tree of each list for the
	// old row and one for the new, once a statement, which weighs most
	// on the statements that write one job. The queries that seek them
	// say the same comparisons, as SQLite uses a partial index only for a
	// WHERE that implies the index's own.
	//
	// Also from this version on, the history entry of the attempt that
	// ended a job may be stored as {}, to be read as the entry the row's
	// own columns describe (storeHistory); binaries before it, which
	// would read {} as an entry, refuse the file as newer than they are.
	`
DROP TRIGGER jobs_schedule_run_ended;
CREATE TRIGGER jobs_schedule_run_ended AFTER UPDATE OF state ON jobs
	WHEN (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled' OR NEW.state = 'lost')
		AND NOT (OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled' OR OLD.state = 'lost')
BEGIN
	UPDATE schedules SET ended_at = NEW.finished_at, ended_state = NEW.state
		WHERE job_id = NEW.id AND ended_at IS NULL;
END;
DROP TRIGGER jobs_dependency_ended;
CREATE TRIGGER jobs_dependency_ended AFTER UPDATE OF state ON jobs
	WHEN (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled' OR NEW.state = 'lost')
		AND NOT (OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled' OR OLD.state = 'lost')
		AND EXISTS (SELECT 1 FROM job_deps WHERE after_id = NEW.id)
BEGIN
	INSERT OR IGNORE INTO job_releases (job_id) SELECT job_id FROM job_deps WHERE after_id = NEW.id;
	UPDATE jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
		error_type = 'DependencyFailed',
		error_message = 'job ' || NEW.id || ', which it runs after, ended ' || upper(NEW.state),
		version = version + 1, change_seq = NEW.change_seq
	WHERE NEW.state <> 'succeeded' AND state = 'waiting' AND after_policy = 'cancel'
		AND id IN (SELECT job_id FROM job_deps WHERE after_id = NEW.id);
	DELETE FROM job_deps WHERE after_id = NEW.id;
	UPDATE jobs SET state = 'queued', run_at = max(run_at, NEW.updated_at), updated_at = NEW.updated_at,
		version = version + 1, change_seq = NEW.change_seq
	WHERE state = 'waiting' AND id IN (SELECT job_id FROM job_releases)
		AND NOT EXISTS (SELECT 1 FROM job_deps WHERE job_deps.job_id = jobs.id);
END;
DROP INDEX jobs_unique_active;
CREATE UNIQUE INDEX jobs_unique_active ON jobs (tenant, unique_key)
	WHERE unique_key <> '' AND (state = 'pending' OR state = 'waiting' OR state = 'queued' OR state = 'running');
DROP INDEX jobs_tenant_queued;
CREATE INDEX jobs_tenant_queued ON jobs (tenant, state)
	WHERE state = 'pending' OR state = 'waiting' OR state = 'queued';
DROP INDEX jobs_finished;
CREATE INDEX jobs_finished ON jobs (finished_at)
	WHERE state = 'succeeded' OR state = 'failed' OR state = 'cancelled' OR state = 'lost';
`,
	// 24: jobs_dependency_ended queues the WAITING jobs of the job that
	// ended whose last dependency it was, read from its own job_deps
	// rows before it drops them. It read them from job_releases, which
	// holds every job any run of it touched in the transaction: a
	// failure that cascaded through a graph of N jobs ran it N times,
	// each over up to N rows, and a graph of 3,000 jobs, 30 a level,
	// each after the 30 before it, held the write lock for minutes.
	`
DROP TRIGGER jobs_dependency_ended;
CREATE TRIGGER jobs_dependency_ended AFTER UPDATE OF state ON jobs
	WHEN (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled' OR NEW.state = 'lost')
		AND NOT (OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled' OR OLD.state = 'lost')
		AND EXISTS (SELECT 1 FROM job_deps WHERE after_id = NEW.id)
BEGIN
	INSERT OR IGNORE INTO job_releases (job_id) SELECT job_id FROM job_deps WHERE after_id = NEW.id;
	UPDATE jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
		error_type = 'DependencyFailed',
		error_message = 'job ' || NEW.id || ', which it runs after, ended ' || upper(NEW.state),
		version = version + 1, change_seq = NEW.change_seq
	WHERE NEW.state <> 'succeeded' AND state = 'waiting' AND after_policy = 'cancel'
		AND id IN (SELECT job_id FROM job_deps WHERE after_id = NEW.id);
	UPDATE jobs SET state = 'queued', run_at = max(run_at, NEW.updated_at), updated_at = NEW.updated_at,
		version = version + 1, change_seq = NEW.change_seq
	WHERE state = 'waiting' AND id IN (SELECT job_id FROM job_deps WHERE after_id = NEW.id)
		AND NOT EXISTS (SELECT 1 FROM job_deps AS d WHERE d.job_id = jobs.id AND d.after_id <> NEW.id);
	DELETE FROM job_deps WHERE after_id = NEW.id;
END;
`,
	// 25: each quota-bounded tenant's mark (quota.go): at most how many
	// of its jobs had not ended when its jobs not yet running were last
	// counted, and the seq of the last job stored then, so that a
	// submission counts only the jobs stored since.
	`
CREATE TABLE quota_marks (
	tenant     TEXT    PRIMARY KEY,
	unfinished INTEGER NOT NULL,
	after_seq  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
`,
	// 26: jobs_dependency_ended settles every job a failure cascades to
	// in its own run, and notes in job_releases only the jobs it changes.
	//
	// It cancelled the jobs after a failed one with an UPDATE that fired
	// it again for each of them, so a cascade nested one run inside
	// another as deep as the graph, and SQLite, on every row and index
	// entry any of them wrote, walks every cursor the unfinished runs
	// above hold open (each one's UPDATE holds one on jobs and each of
	// its indexes): a graph of 1,770 jobs, 30 a level, each after the 30
	// before it, 60 deep, held the writer for over a second, and the
	// cost grew with jobs times depth. Its UPDATEs also asked for state =
	// 'waiting' beside id IN (the dependents), and SQLite, which has no
	// statistics, walked every WAITING job of every tenant through the
	// state index on each run. Now one run finds the whole cascade first
	// (a recursive query over job_deps: each job once, through its edges)
	// into job_cascade, with the job each cancelled one names (the job
	// that ended, if it waits for it; else the first by id of the jobs
	// the cascade cancels that it waits for) and the WAITING jobs left
	// with nothing to wait for, queued. It drops the job_deps rows of the
	// job that ended and of every job it cancels before it cancels them,
	// so the run each cancel fires finds none and does nothing: runs never
	// nest more than one deep. Jobs are reached by id, never by state.
	// What a cascade leaves is what the nested runs left: the same jobs
	// cancelled or queued, each once, with the same times, versions and
	// change_seq, and the same job_deps rows gone.
	//
	// It noted every dependent in job_releases, changed or not, so the
	// writer read each one (with its after, up to 1,000 ids) and announced
	// it at the version it had on every end of any of its dependencies:
	// 30 jobs each after the same 1,000 made each of those 1,000
	// completions read 30,000 ids. It notes the jobs of job_cascade.
	//
	// job_cascade is empty but inside a run of the trigger, which empties
	// it; a run never starts inside another (see above).
	`
CREATE TABLE job_cascade (
	job_id TEXT    PRIMARY KEY,
	cancel INTEGER NOT NULL,
	via    TEXT
) STRICT, WITHOUT ROWID;
DROP TRIGGER jobs_dependency_ended;
CREATE TRIGGER jobs_dependency_ended AFTER UPDATE OF state ON jobs
	WHEN (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled' OR NEW.state = 'lost')
		AND NOT (OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled' OR OLD.state = 'lost')
		AND EXISTS (SELECT 1 FROM job_deps WHERE after_id = NEW.id)
BEGIN
	INSERT INTO job_cascade (job_id, cancel)
	SELECT id, 1 FROM (
		WITH RECURSIVE cancelled (id) AS (
			SELECT d.job_id FROM job_deps AS d CROSS JOIN jobs AS w ON w.id = d.job_id
			WHERE NEW.state <> 'succeeded' AND d.after_id = NEW.id
				AND w.state = 'waiting' AND w.after_policy = 'cancel'
			UNION
			SELECT d.job_id FROM cancelled AS c CROSS JOIN job_deps AS d ON d.after_id = c.id
				CROSS JOIN jobs AS w ON w.id = d.job_id
			WHERE w.state = 'waiting' AND w.after_policy = 'cancel'
		)
		SELECT id FROM cancelled
	);
	UPDATE job_cascade SET via = coalesce(
		(SELECT NEW.id FROM job_deps WHERE after_id = NEW.id AND job_id = job_cascade.job_id),
		(SELECT min(d.after_id) FROM job_deps AS d CROSS JOIN job_cascade AS p ON p.job_id = d.after_id
			WHERE d.job_id = job_cascade.job_id AND p.cancel))
	WHERE cancel;
	INSERT INTO job_cascade (job_id, cancel)
	SELECT x.job_id, 0 FROM (
		SELECT job_id FROM job_deps WHERE after_id = NEW.id
		UNION
		SELECT d.job_id FROM job_cascade AS e CROSS JOIN job_deps AS d ON d.after_id = e.job_id WHERE e.cancel
	) AS x CROSS JOIN jobs AS w ON w.id = x.job_id
	WHERE w.state = 'waiting'
		AND NOT EXISTS (SELECT 1 FROM job_cascade AS k WHERE k.job_id = x.job_id)
		AND NOT EXISTS (SELECT 1 FROM job_deps AS o WHERE o.job_id = x.job_id AND o.after_id <> NEW.id
			AND NOT EXISTS (SELECT 1 FROM job_cascade AS k WHERE k.job_id = o.after_id AND k.cancel));
	DELETE FROM job_deps WHERE after_id = NEW.id;
	DELETE FROM job_deps WHERE after_id IN (SELECT job_id FROM job_cascade WHERE cancel);
	INSERT OR IGNORE INTO job_releases (job_id) SELECT job_id FROM job_cascade;
	UPDATE jobs SET state = 'cancelled', finished_at = NEW.updated_at, updated_at = NEW.updated_at,
		error_type = 'DependencyFailed',
		error_message = (SELECT 'job ' || k.via || ', which it runs after, ended ' ||
			CASE WHEN k.via = NEW.id THEN upper(NEW.state) ELSE 'CANCELLED' END
			FROM job_cascade AS k WHERE k.job_id = jobs.id),
		version = version + 1, change_seq = NEW.change_seq
	WHERE id IN (SELECT job_id FROM job_cascade WHERE cancel);
	UPDATE jobs SET state = 'queued', run_at = max(run_at, NEW.updated_at), updated_at = NEW.updated_at,
		version = version + 1, change_seq = NEW.change_seq
	WHERE id IN (SELECT job_id FROM job_cascade WHERE NOT cancel);
	DELETE FROM job_cascade;
END;
`,
	// 27: fair claiming's look and pick of one tenant's jobs for a
	// worker that names its kinds seek them by kind (tenantKindWalk,
	// claims.go), never walking the tenant's jobs of other kinds.
	`
CREATE INDEX jobs_queued_queue_tenant_kind ON jobs (queue, tenant, kind, priority, run_at) WHERE state = 'queued';
`,
	// 28: running_attempts keeps the lease each attempt's claim granted
	// (lease_us, microseconds), so that a server started after a crash
	// tells a claim never answered (its lease still where the claim set
	// it) from one whose worker heartbeated, whatever lease timeout it
	// now gives (jobs/lostclaims.go). Attempts begun before this
	// migration have none, and are judged by the lease timeout in
	// effect, as before.
	`
ALTER TABLE running_attempts ADD COLUMN lease_us INTEGER;
DROP TRIGGER jobs_attempt_started;
CREATE TRIGGER jobs_attempt_started AFTER UPDATE OF state ON jobs
	WHEN NEW.state = 'running' AND OLD.state <> 'running'
BEGIN
	INSERT OR REPLACE INTO running_attempts (seq, started_at, lease_us)
		VALUES (NEW.seq, NEW.updated_at, NEW.lease_expires_at - NEW.updated_at);
END;
`,
	// 29: the database's identity, drawn when it is made (or first
	// migrated): a copy of the file (a backup) has it too, another
	// database has its own. Change cursors carry it (ChangeCursor), so
	// that a cursor of another database is never read as one of this.
	`
CREATE TABLE db_identity (
	id TEXT NOT NULL
);
INSERT INTO db_identity (id) VALUES (lower(hex(randomblob(8))));
`,
	// 30: a deletion's record keeps its job's batch, so that a feed of
	// one batch's changes (WatchJobs with a batch) lists only the
	// deletions of that batch ('' for a job in none). Records made
	// before have NULL, which such a feed lists, as it did.
	`
ALTER TABLE job_deletions ADD COLUMN batch TEXT;
`,
	// 31: a schedule's latest run retried (terminal to QUEUED or WAITING)
	// is unfinished again: its end is forgotten, so that the next run
	// waits for it and counts from its new end. Runs retried before
	// this migration are made so too.
	`
CREATE TRIGGER jobs_schedule_run_retried AFTER UPDATE OF state ON jobs
	WHEN (OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled' OR OLD.state = 'lost')
		AND NOT (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled' OR NEW.state = 'lost')
BEGIN
	UPDATE schedules SET ended_at = NULL, ended_state = '' WHERE job_id = NEW.id;
END;
UPDATE schedules SET ended_at = NULL, ended_state = ''
	WHERE job_id IN (SELECT id FROM jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled', 'lost'));
`,
}

// migrate brings the file to the latest schema in one transaction, so a
// crash part way leaves the file at its old version, not half migrated.
// Like every write it waits at most the lock timeout for the database.
func (s *Store) migrate(ctx context.Context) error {
	conn, tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("migrate: read schema version: %w", classify(err))
	}
	if version > len(migrations) {
		return fmt.Errorf("%w: the file is at schema version %d, this binary knows up to %d",
			ErrSchemaTooNew, version, len(migrations))
	}
	if version == len(migrations) {
		return nil
	}
	for i := version; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("migrate to schema version %d: %w", i+1, classify(err))
		}
	}
	// PRAGMA takes no parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
		return fmt.Errorf("migrate: record schema version: %w", classify(err))
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", classify(err))
	}
	// An upgrade leaves its mark in the log (a new file, made at version
	// 0, needs none).
	if version > 0 {
		s.cfg.Logger.Info("migrated the database's schema", "from_version", version, "to_version", len(migrations))
	}
	return nil
}
