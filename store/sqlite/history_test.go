package sqlite

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// TestEndedJobsStoreTheirLastAttemptAsTheRow: the entry of the attempt
// that ended a job is stored as {} (storeHistory), read back as the
// entry the row's columns describe, and stored in full again once the
// columns no longer describe it; a history stored in full, as binaries
// before this form wrote it, reads the same.
func TestEndedJobsStoreTheirLastAttemptAsTheRow(t *testing.T) {
	s := openTemp(t, tempPath(t))
	defer s.Close()
	ctx := t.Context()
	at := func(sec int) time.Time { return depthStart.Add(time.Duration(sec) * time.Second) }
	stored := func(id string) string {
		t.Helper()
		var h *string
		if err := s.read.QueryRowContext(ctx, "SELECT history FROM jobs WHERE id = ?", id).Scan(&h); err != nil {
			t.Fatal(err)
		}
		if h == nil {
			return "NULL"
		}
		return *h
	}
	claim := func(id string, sec int) {
		t.Helper()
		c, _, err := store.ClaimOne(ctx, s, store.ClaimFilter{Now: at(sec)},
			store.Claim{WorkerID: "w-" + id, LeaseID: id + "-lease", Now: at(sec), Lease: time.Minute})
		if err != nil || c.ID != id {
			t.Fatalf("claim of %s: %s, %v", id, c.ID, err)
		}
	}
	write := func(w store.LeaseWrite, sec int) jobtype.Job {
		t.Helper()
		w.LeaseID = w.JobID + "-lease"
		res, err := s.WriteLeases(ctx, []store.LeaseWrite{w}, store.LeaseRules{Now: at(sec), Lease: time.Minute})
		if err != nil || !res[0].Held {
			t.Fatalf("write to %s: %+v, %v", w.JobID, res, err)
		}
		return res[0].Job
	}
	// check reads id back and wants its history, as the write returned it.
	check := func(id string, returned jobtype.Job, want []jobtype.HistoryEntry) {
		t.Helper()
		got, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.History, want) || !reflect.DeepEqual(returned.History, want) {
			t.Errorf("%s's history\nread     %+v\nreturned %+v\nwant     %+v", id, got.History, returned.History, want)
		}
	}
	boom := &jobtype.JobError{Type: "Boom", Message: "it broke"}

	// Succeeded at its first attempt: the whole history is the row's.
	a := benchJob(1)
	if _, err := s.CreateJob(ctx, a); err != nil {
		t.Fatal(err)
	}
	claim(a.ID, 10)
	done := write(store.LeaseWrite{Op: store.Complete, JobID: a.ID}, 20)
	first := []jobtype.HistoryEntry{{Attempt: 1, WorkerID: "w-" + a.ID, StartedAt: at(10), FinishedAt: at(20), State: jobtype.Succeeded}}
	check(a.ID, done, first)
	if got := stored(a.ID); got != "[{}]" {
		t.Errorf("a job that succeeded at its first attempt stores history %s, want [{}]", got)
	}

	// Retried, then failed for good: the row's start is the job's first,
	// so the entry of its second attempt is stored in full as well.
	b := benchJob(2)
	b.MaxAttempts = 2
	if _, err := s.CreateJob(ctx, b); err != nil {
		t.Fatal(err)
	}
	claim(b.ID, 30)
	write(store.LeaseWrite{Op: store.Fail, JobID: b.ID, Error: boom, Retry: true}, 40)
	claim(b.ID, 50)
	failed := write(store.LeaseWrite{Op: store.Fail, JobID: b.ID, Error: boom}, 60)
	twice := []jobtype.HistoryEntry{
		{Attempt: 1, WorkerID: "w-" + b.ID, StartedAt: at(30), FinishedAt: at(40), State: jobtype.Queued, Error: boom},
		{Attempt: 2, WorkerID: "w-" + b.ID, StartedAt: at(50), FinishedAt: at(60), State: jobtype.Failed, Error: boom},
	}
	check(b.ID, failed, twice)
	if got, want := stored(b.ID), toHistory(twice).String; got != want {
		t.Errorf("a job failed at its second attempt stores history %s, want %s", got, want)
	}

	// Cancelled while queued, retried, then failed at its first attempt:
	// the operator's entries in full, then the row's, with its error.
	c := benchJob(3)
	if _, err := s.CreateJob(ctx, c); err != nil {
		t.Fatal(err)
	}
	operator := func(sec int, state jobtype.State, by string) (jobtype.Job, jobtype.HistoryEntry) {
		t.Helper()
		e := jobtype.HistoryEntry{FinishedAt: at(sec), State: state, By: by}
		j, err := s.UpdateJob(ctx, c.ID, func(j *jobtype.Job) error {
			j.State, j.FinishedAt = state, at(sec)
			if state == jobtype.Queued {
				j.FinishedAt = time.Time{}
			}
			j.AddHistory(e)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return j, e
	}
	cancelled, cancel := operator(70, jobtype.Cancelled, "")
	// A cancel by the server describes the row too.
	check(c.ID, cancelled, []jobtype.HistoryEntry{cancel})
	if got := stored(c.ID); got != "[{}]" {
		t.Errorf("a job cancelled while queued stores history %s, want [{}]", got)
	}
	_, retry := operator(80, jobtype.Queued, "admin")
	claim(c.ID, 90)
	failed = write(store.LeaseWrite{Op: store.Fail, JobID: c.ID, Error: boom}, 100)
	thrice := []jobtype.HistoryEntry{cancel, retry,
		{Attempt: 1, WorkerID: "w-" + c.ID, StartedAt: at(90), FinishedAt: at(100), State: jobtype.Failed, Error: boom}}
	check(c.ID, failed, thrice)
	if got, want := stored(c.ID), toHistory(thrice[:2]).String; got != want[:len(want)-1]+",{}]" {
		t.Errorf("a job failed at its first attempt after an operator's retry stores history %s, want the two entries before it and {}", got)
	}

	// Its columns changed without a new entry: the entry they no longer
	// describe is stored in full.
	moved, err := s.UpdateJob(ctx, c.ID, func(j *jobtype.Job) error {
		j.WorkerID = "someone-else"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check(c.ID, moved, thrice)
	if got, want := stored(c.ID), toHistory(thrice).String; got != want {
		t.Errorf("after its worker changed, the history stored is %s, want %s", got, want)
	}

	// Stored in full by an older binary: read alike, and kept by a
	// write that leaves it as it is.
	if _, err := s.write.ExecContext(ctx, "UPDATE jobs SET history = ? WHERE id = ?", toHistory(first).String, a.ID); err != nil {
		t.Fatal(err)
	}
	stepped, err := s.UpdateJob(ctx, a.ID, func(j *jobtype.Job) error {
		j.Step = "archived"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check(a.ID, stepped, first)
	// Then an operator's retry appends its entry after the full one.
	retried, err := s.UpdateJob(ctx, a.ID, func(j *jobtype.Job) error {
		j.State, j.FinishedAt = jobtype.Queued, time.Time{}
		j.AddHistory(jobtype.HistoryEntry{Attempt: j.Attempt, FinishedAt: at(70), State: jobtype.Queued, By: "admin"})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check(a.ID, retried, append(slices.Clone(first), jobtype.HistoryEntry{Attempt: 1, FinishedAt: at(70), State: jobtype.Queued, By: "admin"}))
}
