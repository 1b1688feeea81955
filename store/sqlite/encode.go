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
	updated_at, finished_at, run_at, worker_id, lease_id, lease_expires_at, priority, batch, after, after_policy, trace_parent, trace_state, seq`

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
	j = normalizeColumns(j)
	j.History = fromHistory(toHistory(j.History))
	return j
}

// normalizeOver is normalize(j) for a write of j over old, a job as read
// back: History's entries that old holds as they are stored are taken
// from old, so only new ones (the one an attempt's end appends) are
// encoded and decoded to read as they will. A claim or a heartbeat of a
// job with a full history (jobtype.MaxHistory entries) so costs no JSON,
// and neither does the entry of an attempt that ends its job when the
// row's columns describe it (splitHistory).
func normalizeOver(old, j jobtype.Job) jobtype.Job {
	j = normalizeColumns(j)
	kept, row := splitHistory(j)
	j.History = historyOver(old.History, kept)
	if row {
		// Read back from the columns (storeHistory): no JSON either.
		j.History = append(j.History, rowEntry(j))
	}
	return j
}

// normalizeColumns is normalize but for History.
func normalizeColumns(j jobtype.Job) jobtype.Job {
	for _, t := range []*time.Time{&j.CreatedAt, &j.StartedAt, &j.UpdatedAt, &j.FinishedAt, &j.RunAt, &j.LeaseExpiresAt} {
		*t = fromMicro(toMicro(*t))
	}
	j.Payload = fromNullJSON(nullJSON(j.Payload))
	j.Result = fromNullJSON(nullJSON(j.Result))
	if j.Error != nil {
		e := *j.Error
		j.Error = &e
	}
	return j
}

// historyOver is h as it will read back, in entries of its own, where
// old is a history as read back: an entry of h that is stored as one of
// old's is a copy of it; the others make the trip through JSON together.
// Entries are looked for where h's first one is in old, which finds
// every kept entry of an append, and of an append that dropped the
// oldest.
func historyOver(old, h []jobtype.HistoryEntry) []jobtype.HistoryEntry {
	if len(h) == 0 {
		return nil
	}
	from := slices.IndexFunc(old, func(e jobtype.HistoryEntry) bool { return sameEntry(e, h[0]) })
	out := make([]jobtype.HistoryEntry, len(h))
	var fresh []int // indexes of h's entries not in old
	for i, e := range h {
		if from >= 0 && from+i < len(old) && sameEntry(old[from+i], e) {
			out[i] = old[from+i]
			if out[i].Error != nil {
				je := *out[i].Error
				out[i].Error = &je
			}
			continue
		}
		fresh = append(fresh, i)
	}
	if len(fresh) == 0 {
		return out
	}
	entries := make([]jobtype.HistoryEntry, len(fresh))
	for k, i := range fresh {
		entries[k] = h[i]
	}
	back := fromHistory(toHistory(entries))
	if len(back) != len(fresh) {
		return fromHistory(toHistory(h)) // as normalize has it, whatever that is
	}
	for k, i := range fresh {
		out[i] = back[k]
	}
	return out
}

// sameHistory reports whether histories a and b are stored alike:
// sameEntry entry by entry. A write stores History only when it changed.
func sameHistory(a, b []jobtype.HistoryEntry) bool {
	return slices.EqualFunc(a, b, sameEntry)
}

// sameEntry reports whether a and b are stored alike: equal errors and
// times to the microsecond, and every other field equal. It may say no
// for two entries that store alike (times within a microsecond of the
// zero time, strings that JSON makes valid UTF-8), never yes for two
// that do not; the entries of a history as read back it compares
// exactly. Comparing the rest of the struct with == keeps that true of
// any field HistoryEntry gains.
func sameEntry(a, b jobtype.HistoryEntry) bool {
	if (a.Error == nil) != (b.Error == nil) || a.Error != nil && *a.Error != *b.Error {
		return false
	}
	a.Error, b.Error = nil, nil
	a.StartedAt, b.StartedAt = fromMicroOrZero(a.StartedAt), fromMicroOrZero(b.StartedAt)
	a.FinishedAt, b.FinishedAt = fromMicroOrZero(a.FinishedAt), fromMicroOrZero(b.FinishedAt)
	return a == b
}

// storeHistory is how j's History is stored: toHistory of its entries,
// except that an ended job's last entry, when it is the one the row's
// own columns describe (rowEntry), is stored as {}, which no entry is
// (every entry has a state): a job that succeeded at its first attempt
// stores [{}], 4 bytes, not about 150 bytes of JSON, so its row grows
// by that little when it completes and the completion encodes nothing.
// The entry is stored in full wherever it differs from the columns (an
// operator's cancel, a retried attempt's start), and a write that
// changes the columns so that they no longer describe it stores it in
// full again (writeValues compares what is stored, sameStored).
func storeHistory(j jobtype.Job) sql.NullString {
	kept, row := splitHistory(j)
	if !row {
		return toHistory(kept)
	}
	if len(kept) == 0 {
		return sql.NullString{String: rowOnlyHistory, Valid: true}
	}
	s := toHistory(kept)
	s.String = s.String[:len(s.String)-1] + ",{}]"
	return s
}

// rowOnlyHistory is the stored History of one entry, the row's.
const rowOnlyHistory = "[{}]"

// splitHistory is j's History as storeHistory stores it: the entries
// kept in JSON, and whether the row's entry follows them.
func splitHistory(j jobtype.Job) (kept []jobtype.HistoryEntry, row bool) {
	n := len(j.History)
	if n > 0 && j.State.Terminal() && sameEntry(j.History[n-1], rowEntry(j)) {
		return j.History[:n-1], true
	}
	return j.History, false
}

// sameStored reports whether a and b store their History alike.
func sameStored(a, b jobtype.Job) bool {
	aKept, aRow := splitHistory(a)
	bKept, bRow := splitHistory(b)
	return aRow == bRow && sameHistory(aKept, bKept)
}

// rowEntry is the history entry that j's columns describe: the end of
// its last attempt as jobtype.Job.EndAttempt records an attempt that
// ended the job, by its worker, with the job's start, end, state and
// error.
func rowEntry(j jobtype.Job) jobtype.HistoryEntry {
	e := jobtype.HistoryEntry{Attempt: j.Attempt, WorkerID: j.WorkerID, StartedAt: j.StartedAt,
		FinishedAt: j.FinishedAt, State: j.State}
	if j.Error != nil && j.State != jobtype.Succeeded && j.State != jobtype.Cancelled {
		je := *j.Error
		e.Error = &je
	}
	return e
}

// readHistory is the History that storeHistory stored as s, where j has
// every other column of the row read.
func readHistory(s sql.NullString, j jobtype.Job) []jobtype.HistoryEntry {
	if s.Valid && s.String == rowOnlyHistory {
		return []jobtype.HistoryEntry{rowEntry(j)}
	}
	h := fromHistory(s)
	if n := len(h); n > 0 && h[n-1].State == "" {
		h[n-1] = rowEntry(j)
	}
	return h
}

// toHistory is how History's entries are stored: a JSON array, NULL
// while empty. Its times go to the microsecond, as every stored time
// does.
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
	return valuesWith(j, storeHistory(j))
}

// historyColumn is where History is in values and valueColumns.
var historyColumn = slices.Index(valueColumns, "history")

// storedHistory stands, in writeValues, for the History a row holds.
type storedHistory struct{}

// writeValues are values(old) and values(next) to compare column by
// column for a write of next over old, a job as read back, except that
// History is compared as stored, entry by entry (sameStored), and
// encoded, for next only, when that changed: encoding a full history
// costs more than all the other values, and most writes (claims,
// heartbeats) leave it as it is.
// Where History is what the row holds it is storedHistory{}, which is
// never to be bound: in was always, in now when it did not change.
func writeValues(old, next jobtype.Job) (was, now []any) {
	var history any = storedHistory{}
	if !sameStored(old, next) {
		history = storeHistory(next)
	}
	return valuesWith(old, storedHistory{}), valuesWith(next, history)
}

// valuesWith is values with history as History's value.
func valuesWith(j jobtype.Job, history any) []any {
	var errType, errMsg sql.NullString
	if j.Error != nil {
		errType = sql.NullString{String: j.Error.Type, Valid: true}
		errMsg = sql.NullString{String: j.Error.Message, Valid: true}
	}
	return []any{
		j.ID, j.Tenant, j.Kind, j.Queue, string(j.State), j.Version, j.Percent, j.Step,
		nullJSON(j.Payload), nullJSON(j.Result), history, errType, errMsg, j.Attempt, j.MaxAttempts,
		j.UniqueKey, toMicro(j.CreatedAt), toMicro(j.StartedAt), toMicro(j.UpdatedAt),
		toMicro(j.FinishedAt), toMicro(j.RunAt), j.WorkerID, j.LeaseID, toMicro(j.LeaseExpiresAt),
		j.Priority, j.Batch, toAfter(j.After), string(j.OnDependencyFailure), j.TraceParent, j.TraceState,
	}
}

// toAfter is how After is stored: a JSON array of ids, NULL for none.
func toAfter(ids []string) sql.NullString {
	if len(ids) == 0 {
		return sql.NullString{}
	}
	b, err := json.Marshal(ids)
	if err != nil {
		panic("sqlite: encode after: " + err.Error()) // strings: cannot fail
	}
	return sql.NullString{String: string(b), Valid: true}
}

// fromAfter reads what toAfter stored.
func fromAfter(s sql.NullString) []string {
	var ids []string
	if s.Valid && json.Unmarshal([]byte(s.String), &ids) != nil {
		return nil
	}
	return ids
}

type scanner interface{ Scan(dest ...any) error }

// scanAlso scans the columns a query selects after a job's.
type scanAlso struct {
	r     scanner
	extra []any
}

// also scans r's columns, then extra.
func also(r scanner, extra ...any) scanAlso { return scanAlso{r, extra} }

func (s scanAlso) Scan(dest ...any) error { return s.r.Scan(append(dest, s.extra...)...) }

func scanJob(r scanner) (jobtype.Job, int64, error) {
	var (
		j                                                 jobtype.Job
		state                                             string
		payload, result, history, errType, errMsg, after  sql.NullString
		afterPolicy                                       string
		created, started, updated, finished, runAt, lease int64
		seq                                               int64
	)
	err := r.Scan(&j.ID, &j.Tenant, &j.Kind, &j.Queue, &state, &j.Version, &j.Percent, &j.Step,
		&payload, &result, &history, &errType, &errMsg, &j.Attempt, &j.MaxAttempts, &j.UniqueKey,
		&created, &started, &updated, &finished, &runAt, &j.WorkerID, &j.LeaseID, &lease, &j.Priority, &j.Batch, &after, &afterPolicy, &j.TraceParent, &j.TraceState, &seq)
	if err != nil {
		return jobtype.Job{}, 0, err
	}
	j.State = jobtype.State(state)
	j.Payload, j.Result = fromNullJSON(payload), fromNullJSON(result)
	j.After, j.OnDependencyFailure = fromAfter(after), jobtype.DependencyFailure(afterPolicy)
	if errType.Valid {
		j.Error = &jobtype.JobError{Type: errType.String, Message: errMsg.String}
	}
	j.CreatedAt, j.StartedAt, j.UpdatedAt = fromMicro(created), fromMicro(started), fromMicro(updated)
	j.FinishedAt, j.RunAt, j.LeaseExpiresAt = fromMicro(finished), fromMicro(runAt), fromMicro(lease)
	j.History = readHistory(history, j)
	return j, seq, nil
}

// scanState scans the columns "id, state, version" (store.JobRead's
// States) into a job that has only those.
func scanState(r scanner) (jobtype.Job, error) {
	var (
		j     jobtype.Job
		state string
	)
	err := r.Scan(&j.ID, &state, &j.Version)
	j.State = jobtype.State(state)
	return j, err
}

// summaryColumns are columns with NULL for payload, result and history,
// so that a summary list never copies them out of the database.
var summaryColumns = strings.Replace(columns, "payload, result, history", "NULL, NULL, NULL", 1)
