// Package jobtype holds the job as every layer of jobwatch sees it: the
// Job record, its states, the errors a store returns, which the engine
// and the server branch on, the limits of what a caller may hand the
// engine with the checks of names, text and JSON that enforce them, and
// the queue rules and schedules the engine is given. It imports nothing
// of jobwatch, so that store/, jobs/, server/, client/ and the files read
// without the engine (config/, auth/) can all share it without reaching
// into each other (River keeps such types in rivertype). What the rules
// mean in practice, and how a job moves, is package jobs' to decide.
package jobtype

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// State is a job's place in its life cycle. The string values are stored
// as they are.
type State string

const (
	Pending   State = "pending"
	Queued    State = "queued"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
	Lost      State = "lost"
	// Waiting: submitted with After, until those jobs have ended.
	Waiting State = "waiting"
)

// Terminal reports whether s never changes again.
func (s State) Terminal() bool {
	switch s {
	case Succeeded, Failed, Cancelled, Lost:
		return true
	}
	return false
}

// AllStates are every state a job can be in.
var AllStates = []State{Pending, Waiting, Queued, Running, Succeeded, Failed, Cancelled, Lost}

// ActiveStates are the states in which a job holds its unique key.
var ActiveStates = []State{Pending, Waiting, Queued, Running}

// JobError is why a job, or its last attempt, failed.
type JobError struct {
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
}

// Job is one stored job. Times are UTC; a zero time means "not set".
// Backends keep times to the microsecond (PostgreSQL's precision) and
// return what they stored, so publish the returned job, not the input.
type Job struct {
	ID          string
	Tenant      string
	Kind        string
	Queue       string
	State       State
	Version     int64 // starts at 1; +1 on every change a watcher could see
	Percent     int32
	Step        string
	Payload     json.RawMessage // nil: none
	Result      json.RawMessage // nil: none
	Error       *JobError       // nil: none
	Attempt     int32
	MaxAttempts int32
	UniqueKey   string // "" : none
	// Batch is the label the job was submitted with ("": none), a name
	// (CheckName) that groups a tenant's jobs for WaitJobs, WatchJobs and
	// ListJobs. It never changes.
	Batch string
	// After are the jobs this one runs after, of its tenant, as
	// submitted; nil for none. While one of them has not ended the job
	// is Waiting. OnDependencyFailure says what one that ends other than
	// Succeeded does to it ("" without After).
	After               []string
	OnDependencyFailure DependencyFailure
	// TraceParent and TraceState are the W3C trace context of the traced
	// call that submitted the job ("" when it was not traced), which the
	// worker that runs it continues. They never change.
	TraceParent, TraceState string
	CreatedAt               time.Time
	StartedAt               time.Time
	UpdatedAt               time.Time
	FinishedAt              time.Time
	RunAt                   time.Time // not claimable before this
	WorkerID                string

	// The lease of the worker running the job; empty unless RUNNING.
	LeaseID        string
	LeaseExpiresAt time.Time

	// Priority is 0 (most urgent) to 9: a claim takes a queue's most
	// urgent ready job first, then the oldest.
	Priority int32
	// History is the job's past, oldest first, at most MaxHistory
	// entries: attempts that ended and operators' actions.
	History []HistoryEntry

	// AttemptStartedAt is when the current attempt of a RUNNING job
	// began (the commit that made it RUNNING), for the history entry its
	// end appends (EndAttempt). It is not a column of its own: a store
	// sets it only on the job it hands a write that may end the attempt
	// (UpdateJob's update, LeaseWrite.Apply), from what it keeps for
	// TimedOut, and leaves it zero in every job it returns.
	AttemptStartedAt time.Time
	// AttemptLease is the lease the claim of the current attempt of a
	// RUNNING job granted, where the store keeps it (SQLite, for
	// attempts begun since its migration 28), else 0. Like
	// AttemptStartedAt, a store sets it only on the job UpdateJob hands
	// its update.
	AttemptLease time.Duration
}

// DependencyFailure is what a job's dependency (Job.After) that ends
// other than Succeeded does to it.
type DependencyFailure string

const (
	// CancelOnDependencyFailure cancels the job at once, with an error
	// of type DependencyFailedError naming the dependency.
	CancelOnDependencyFailure DependencyFailure = "cancel"
	// RunOnDependencyFailure runs the job once every dependency has
	// ended, however.
	RunOnDependencyFailure DependencyFailure = "run"
)

// DependencyFailedError is the error type of a job cancelled because a
// job it ran after ended other than Succeeded.
const DependencyFailedError = "DependencyFailed"

// MaxHistory is how many entries a job's History keeps: the oldest go
// first.
const MaxHistory = 20

// HistoryEntry is one entry of a job's History: an attempt that ended,
// or an operator's action on the job.
type HistoryEntry struct {
	Attempt    int32     `json:"attempt"`
	WorkerID   string    `json:"worker_id,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// State is what the entry left the job in.
	State State     `json:"state"`
	Error *JobError `json:"error,omitempty"`
	// By names the operator who acted; empty for what workers and the
	// server did on their own.
	By string `json:"by,omitempty"`
}

// SameVisible reports whether a watcher would see no difference between j
// and o: the fields whose change bumps Version are equal.
func (j *Job) SameVisible(o *Job) bool {
	return j.State == o.State &&
		j.Percent == o.Percent &&
		j.Step == o.Step &&
		string(j.Result) == string(o.Result) &&
		sameError(j.Error, o.Error) &&
		j.Attempt == o.Attempt &&
		j.WorkerID == o.WorkerID &&
		j.RunAt.Equal(o.RunAt)
}

// SizeOverhead is what Size adds to every job for the fields it does not
// measure (numbers, times, field names): about what they take in a JSON
// response, more than in protobuf.
const SizeOverhead = 256

// Summarize leaves out of j what a summary leaves out (a summary read of
// the store, a job list, a summary WaitJobs answer): Payload, Result and
// History.
func (j *Job) Summarize() { j.Payload, j.Result, j.History = nil, nil, nil }

// Size is what j counts against a page's ListFilter.MaxBytes: the bytes of
// its text and JSON fields plus SizeOverhead. It is close to the job's size
// in a response without encoding it; every backend counts with it, so a
// bound means the same on each. A summary (no payload or result) is small.
func (j *Job) Size() int {
	n := SizeOverhead + len(j.ID) + len(j.Tenant) + len(j.Kind) + len(j.Queue) + len(j.State) +
		len(j.Step) + len(j.Payload) + len(j.Result) + len(j.UniqueKey) + len(j.WorkerID) + len(j.Batch)
	for _, id := range j.After {
		n += len(id)
	}
	if j.Error != nil {
		n += len(j.Error.Type) + len(j.Error.Message)
	}
	return n
}

// Clone returns a copy of j deep enough that changing the copy, even
// its bytes, cannot change j. An empty payload or result becomes none.
func (j Job) Clone() Job {
	j.Payload = append(json.RawMessage(nil), j.Payload...)
	j.Result = append(json.RawMessage(nil), j.Result...)
	if len(j.Payload) == 0 {
		j.Payload = nil
	}
	if len(j.Result) == 0 {
		j.Result = nil
	}
	if j.Error != nil {
		e := *j.Error
		j.Error = &e
	}
	if j.History != nil {
		h := make([]HistoryEntry, len(j.History))
		for i, e := range j.History {
			if e.Error != nil {
				je := *e.Error
				e.Error = &je
			}
			h[i] = e
		}
		j.History = h
	}
	return j
}

func sameError(a, b *JobError) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Errors every backend returns, possibly wrapped.
var (
	// ErrNotFound: no job has that id (never did, or retention deleted it).
	ErrNotFound = errors.New("job not found")
	// ErrNoJob: ClaimJob found nothing ready to run.
	ErrNoJob = errors.New("no job ready")
	// ErrUnavailable: the database cannot be reached or is busy beyond its
	// timeout; nothing was written. Backends log each episode of it once
	// (when it begins and when it ends), so callers need not.
	ErrUnavailable = errors.New("store unavailable")
	// ErrInvalidPageToken: ListJobs got a page token it did not issue.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// MissingError is a job a request names (a dependency in After) that
// does not exist for the caller: not found, deleted, expired, or
// another tenant's, which read alike. It wraps ErrNotFound.
type MissingError struct {
	Field string // as named in the API, e.g. "after"
	ID    string
}

func (e *MissingError) Error() string { return e.Field + ": job " + e.ID + " not found" }
func (e *MissingError) Unwrap() error { return ErrNotFound }

// BatchNotFoundError is a batch a request names (WaitJobs) that holds no
// job of the caller's tenant. It wraps ErrNotFound.
type BatchNotFoundError struct {
	Tenant string
	Batch  string
}

func (e *BatchNotFoundError) Error() string {
	// Ends as "j_…: job not found" does, which clients parse.
	return fmt.Sprintf("batch %q holds no job of tenant %q: %v", e.Batch, e.Tenant, ErrNotFound)
}
func (e *BatchNotFoundError) Unwrap() error { return ErrNotFound }

// WaitedForError is DeleteJob's refusal of a terminal job that a WAITING
// job waits for (one retried to run after it: store.SettleRetry).
type WaitedForError struct {
	ID     string // the job to delete
	Waiter string // a WAITING job that runs after it
}

func (e *WaitedForError) Error() string { return "job " + e.Waiter + " waits for job " + e.ID }

// ConflictError is returned by CreateJob when the tenant already has an
// active job with the same unique key.
type ConflictError struct {
	ActiveID  string // the id of the job holding the key
	UniqueKey string
	// Field names the request of a batch that carried the key
	// ("jobs[700]"), "" for a single job.
	Field string
}

func (e *ConflictError) Error() string {
	msg := "job " + e.ActiveID + " is already active with unique key " + e.UniqueKey
	if e.Field != "" {
		return e.Field + ": " + msg
	}
	return msg
}
