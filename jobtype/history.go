package jobtype

import "time"

// AddHistory appends e to j's History, dropping the oldest entries
// beyond MaxHistory.
func (j *Job) AddHistory(e HistoryEntry) {
	h := append(j.History, e)
	if len(h) > MaxHistory {
		h = append([]HistoryEntry(nil), h[len(h)-MaxHistory:]...)
	}
	j.History = h
}

// EndAttempt records the end of j's current attempt in its History, as
// the write that ends it (completion, failure, lease expiry, timeout, a
// cancel of a RUNNING job) leaves j: the attempt's number, worker and
// start (AttemptStartedAt), now as its end, j's new state and error.
// by names the operator who ended it ("" when the worker or the server
// did). The entry is the whole cost of the history on the hot path: it
// is appended in the write that ends the attempt, never in a statement
// of its own.
func (j *Job) EndAttempt(now time.Time, by string) {
	e := HistoryEntry{Attempt: j.Attempt, WorkerID: j.WorkerID, StartedAt: j.AttemptStartedAt,
		FinishedAt: now, State: j.State, By: by}
	if j.Error != nil && j.State != Succeeded && j.State != Cancelled {
		je := *j.Error
		e.Error = &je
	}
	j.AddHistory(e)
	j.AttemptStartedAt = time.Time{}
}
