package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// WriteLeases implements store.Store, in one transaction on the single
// writer: one query reads the rows of ws's jobs, store.LeaseWrite.Apply
// makes each write in order (a later write of a job sees the earlier
// ones), and one UPDATE (writeJobs) stores every row that changed.
// Nothing can change a job between that read and that write, so each
// write is checked against its lease as it is committed.
func (s *Store) WriteLeases(ctx context.Context, ws []store.LeaseWrite, r store.LeaseRules) ([]store.LeaseResult, error) {
	if len(ws) == 0 {
		return nil, nil
	}
	var results []store.LeaseResult
	// One write, or several, change rows with one statement, the last,
	// unless more than maxRowsPerUpdate jobs change.
	write := s.writeStatement
	if len(ws) > maxRowsPerUpdate {
		write = s.writeTx
	}
	err := write(ctx, "write leases", func(ctx context.Context, tx *sql.Tx) error {
		var err error
		results, err = s.writeLeases(ctx, tx, ws, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// leasedJob is one job of WriteLeases: its row as read, and as the
// writes so far made it; held: one of them held its lease.
type leasedJob struct {
	seq      int64
	old, now jobtype.Job
	held     bool
}

func (s *Store) writeLeases(ctx context.Context, tx *sql.Tx, ws []store.LeaseWrite, r store.LeaseRules) ([]store.LeaseResult, error) {
	ids := make([]string, 0, len(ws))
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		if !seen[w.JobID] {
			seen[w.JobID] = true
			ids = append(ids, w.JobID)
		}
	}
	jobs, err := readJobs(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("write leases: %w", err)
	}
	results := make([]store.LeaseResult, len(ws))
	var raised []jobtype.Job // every version a write raised, in order
	for i, w := range ws {
		j := jobs[w.JobID]
		if j == nil {
			results[i] = store.LeaseResult{Err: jobtype.ErrNotFound}
			continue
		}
		next := j.now.Clone()
		if !w.Apply(&next, r) {
			results[i] = store.LeaseResult{Job: returned(j.now)}
			continue
		}
		next = versioned(j.now, next)
		if next.Version != j.now.Version {
			raised = append(raised, returned(next))
		}
		j.now, j.held = next, true
		results[i] = store.LeaseResult{Job: returned(next), Held: true}
	}
	writes := make([]jobWrite, 0, len(jobs))
	for _, id := range ids {
		if j := jobs[id]; j != nil && j.held {
			writes = append(writes, jobWrite{seq: j.seq, old: j.old, next: j.now})
		}
	}
	if err := s.writeJobs(ctx, tx, writes); err != nil {
		return nil, err
	}
	// A listener hears every version a write made, as if each write had
	// been a transaction of its own.
	for _, j := range raised {
		s.changed(j)
	}
	return results, nil
}

// maxIDsPerRead bounds the ids of one query of readJobs.
const maxIDsPerRead = 128

// readJobs reads the jobs of ids that exist, by id: as read and, for now,
// as the same, with the start of a RUNNING job's attempt (attemptStart), with one query per maxIDsPerRead ids (a power of two of
// them, padded with NULLs, so that few statement texts exist).
func readJobs(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*leasedJob, error) {
	jobs := make(map[string]*leasedJob, len(ids))
	for start := 0; start < len(ids); start += maxIDsPerRead {
		chunk := ids[start:min(start+maxIDsPerRead, len(ids))]
		n := 1
		for n < len(chunk) {
			n *= 2
		}
		args := make([]any, n)
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := tx.QueryContext(ctx, "SELECT "+columns+", "+attemptStart+" FROM jobs WHERE id IN (?"+strings.Repeat(", ?", n-1)+")", args...)
		if err != nil {
			return nil, classify(err)
		}
		for rows.Next() {
			var started sql.NullInt64
			j, seq, err := scanJob(also(rows, &started))
			if err != nil {
				rows.Close()
				return nil, classify(err)
			}
			j.AttemptStartedAt = attemptStartedAt(j, started)
			jobs[j.ID] = &leasedJob{seq: seq, old: j, now: j}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, classify(err)
		}
	}
	return jobs, nil
}
