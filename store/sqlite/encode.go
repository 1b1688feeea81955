package sqlite

// How a job is stored in a row of jobs and read back: the column list,
// the bind values of a job, times as microseconds, payloads as nullable
// text, and the scan of a row into a job.

import (
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

const columns = `id, tenant, kind, queue, state, version, percent, step, payload, result, history,
	error_type, error_message, attempt, max_attempts, unique_key, created_at, started_at,
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, priority, seq`

func toMicro(t time.Time) int64 { return t.UnixMicro() }

func fromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullJSON(m json.RawMessage) sql.NullString {
	return sql.NullString{String: string(m), Valid: len(m) > 0}
}

func fromNullJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// normalize returns j as it will read back: times in UTC to the
// microsecond, an empty payload or result as none, its own copies of
// slices and the error.
func normalize(j jobtype.Job) jobtype.Job {
	for _, t := range []*time.Time{&j.CreatedAt, &j.StartedAt, &j.UpdatedAt, &j.FinishedAt, &j.RunAt, &j.LeaseExpiresAt} {
		*t = fromMicro(toMicro(*t))
	}
	j.Payload = fromNullJSON(nullJSON(j.Payload))
	j.Result = fromNullJSON(nullJSON(j.Result))
	if j.Error != nil {
		e := *j.Error
		j.Error = &e
	}
	j.History = fromHistory(toHistory(j.History))
	return j
}

// toHistory is how History is stored: a JSON array, NULL while empty.
// Its times go to the microsecond, as every stored time does.
func toHistory(h []jobtype.HistoryEntry) sql.NullString {
	if len(h) == 0 {
		return sql.NullString{}
	}
	h = slices.Clone(h)
	for i := range h {
		h[i].StartedAt = fromMicroOrZero(h[i].StartedAt)
		h[i].FinishedAt = fromMicroOrZero(h[i].FinishedAt)
	}
	b, err := json.Marshal(h)
	if err != nil {
		panic("sqlite: encode history: " + err.Error()) // plain data: cannot fail
	}
	return sql.NullString{String: string(b), Valid: true}
}

// fromHistory reads what toHistory stored; what it cannot read (no
// binary writes it) reads as no history rather than failing the job.
func fromHistory(s sql.NullString) []jobtype.HistoryEntry {
	if !s.Valid {
		return nil
	}
	var h []jobtype.HistoryEntry
	if json.Unmarshal([]byte(s.String), &h) != nil {
		return nil
	}
	return h
}

// fromMicroOrZero is t to the microsecond in UTC, the zero time kept
// zero (so that omitzero leaves it out).
func fromMicroOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return fromMicro(toMicro(t))
}

// values are the bind values of every column but seq, in columns' order.
func values(j jobtype.Job) []any {
	var errType, errMsg sql.NullString
	if j.Error != nil {
		errType = sql.NullString{String: j.Error.Type, Valid: true}
		errMsg = sql.NullString{String: j.Error.Message, Valid: true}
	}
	return []any{
		j.ID, j.Tenant, j.Kind, j.Queue, string(j.State), j.Version, j.Percent, j.Step,
		nullJSON(j.Payload), nullJSON(j.Result), toHistory(j.History), errType, errMsg, j.Attempt, j.MaxAttempts,
		j.UniqueKey, toMicro(j.CreatedAt), toMicro(j.StartedAt), toMicro(j.UpdatedAt),
		toMicro(j.FinishedAt), toMicro(j.RunAt), j.WorkerID, j.LeaseID, toMicro(j.LeaseExpiresAt),
		j.Priority,
	}
}

type scanner interface{ Scan(dest ...any) error }

// scanAlso scans the columns a query selects after a job's.
type scanAlso struct {
	r     scanner
	extra any
}

func (s scanAlso) Scan(dest ...any) error { return s.r.Scan(append(dest, s.extra)...) }

func scanJob(r scanner) (jobtype.Job, int64, error) {
	var (
		j                                                 jobtype.Job
		state                                             string
		payload, result, history, errType, errMsg         sql.NullString
		created, started, updated, finished, runAt, lease int64
		seq                                               int64
	)
	err := r.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &state, &j.Version, &j.Percent, &j.Step,
		&payload, &result, &history, &errType, &errMsg, &j.Attempt, &j.MaxAttempts, &j.UniqueKey,
		&created, &started, &updated, &finished, &runAt, &j.WorkerID, &j.LeaseID, &lease, &j.Priority, &seq)
	if err != nil {
		return jobtype.Job{}, 0, err
	}
	j.State = jobtype.State(state)
	j.Payload, j.Result = fromNullJSON(payload), fromNullJSON(result)
	j.History = fromHistory(history)
	if errType.Valid {
		j.Error = &jobtype.JobError{Type: errType.String, Message: errMsg.String}
	}
	j.CreatedAt, j.StartedAt, j.UpdatedAt = fromMicro(created), fromMicro(started), fromMicro(updated)
	j.FinishedAt, j.RunAt, j.LeaseExpiresAt = fromMicro(finished), fromMicro(runAt), fromMicro(lease)
	return j, seq, nil
}

// summaryColumns are columns with NULL for payload, result and history,
// so that a summary list never copies them out of the database.
var summaryColumns = strings.Replace(columns, "payload, result, history", "NULL, NULL, NULL", 1)
