package sqlite

// Jobs' logs: AppendLogs and JobLogs (migration 14).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// lineSize is LogLine.Size in SQL: length() counts a TEXT's characters,
// the blob its bytes.
const lineSize = "length(CAST(text AS BLOB)) + 16"

// AppendLogs implements store.Store: one statement of the writer's batch
// that reads the job and its log's bounds, inserts the lines, and drops
// the oldest lines past a.MaxBytes.
func (s *Store) AppendLogs(ctx context.Context, a store.LogAppend) (store.LogAppended, error) {
	var out store.LogAppended
	err := s.writeStatement(ctx, "append logs", func(ctx context.Context, tx *sql.Tx) error {
		out = store.LogAppended{}
		j, _, err := scanJob(tx.QueryRowContext(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id = ?", a.JobID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("job %s: %w", a.JobID, jobtype.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
		}
		out.Job = j
		first, last, bytes := int64(1), int64(0), int64(0)
		err = tx.QueryRowContext(ctx, "SELECT first_seq, last_seq, bytes FROM job_log_heads WHERE job_id = ?", a.JobID).
			Scan(&first, &last, &bytes)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
		}
		out.LastSeq = last
		if j.State != jobtype.Running || j.LeaseID != a.LeaseID || len(a.Lines) == 0 {
			out.Held = j.State == jobtype.Running && j.LeaseID == a.LeaseID
			return nil
		}
		if err := callerLeft(ctx); err != nil {
			return leftError("append logs of "+a.JobID, err)
		}
		if again, err := repeated(ctx, tx, a, j.Attempt, first, last); err != nil {
			return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
		} else if again {
			out.Held, out.Repeated = true, true
			return nil
		}
		ins, err := tx.PrepareContext(ctx, "INSERT INTO job_logs (job_id, seq, at, stream, attempt, text) VALUES (?, ?, ?, ?, ?, ?)")
		if err != nil {
			return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
		}
		defer ins.Close()
		for _, l := range a.Lines {
			last++
			bytes += l.Size()
			if _, err := ins.ExecContext(ctx, a.JobID, last, toMicro(l.Time), int(l.Stream), j.Attempt, l.Text); err != nil {
				return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
			}
		}
		if limit := a.MaxBytes(j.Queue); bytes > limit {
			if first, bytes, err = dropOldestLines(ctx, tx, a.JobID, first, last, bytes, limit); err != nil {
				return fmt.Errorf("append logs of %s: drop the oldest lines: %w", a.JobID, classify(err))
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_log_heads (job_id, first_seq, last_seq, bytes) VALUES (?, ?, ?, ?)
			ON CONFLICT (job_id) DO UPDATE SET first_seq = excluded.first_seq, last_seq = excluded.last_seq, bytes = excluded.bytes`,
			a.JobID, first, last, bytes); err != nil {
			return fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
		}
		out.Held, out.LastSeq = true, last
		if s.w.collect {
			s.w.changes = append(s.w.changes, store.Change{JobID: j.ID, Tenant: j.Tenant, LogChange: true, LogSeq: last})
		}
		return nil
	})
	if err != nil {
		return store.LogAppended{}, err
	}
	return out, nil
}

// repeated says whether a is an append sent again of a log whose kept
// lines are first to last (store.LogAppend.Repeats), of the lines the
// log's bound kept of it (store.LogAppend.Kept): the log's last line is
// read first, the others only when it is a's last.
func repeated(ctx context.Context, tx *sql.Tx, a store.LogAppend, attempt int32, first, last int64) (bool, error) {
	a, ok := a.Kept(first, last)
	if !a.Resendable || !ok {
		return false, nil
	}
	n := int64(len(a.Lines))
	lastLine, err := readLines(ctx, tx, a.JobID, last-1, 1)
	if err != nil || len(lastLine) != 1 || !a.EndsLike(lastLine[0], attempt) {
		return false, err
	}
	tail, err := readLines(ctx, tx, a.JobID, last-n, int(n))
	return err == nil && a.Repeats(tail, attempt), err
}

// readLines reads up to limit lines of job id's log after afterSeq.
func readLines(ctx context.Context, tx *sql.Tx, id string, afterSeq int64, limit int) ([]jobtype.LogLine, error) {
	rows, err := tx.QueryContext(ctx, "SELECT seq, at, stream, attempt, text FROM job_logs WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
		id, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []jobtype.LogLine
	for rows.Next() {
		var (
			l      jobtype.LogLine
			at     int64
			stream int
		)
		if err := rows.Scan(&l.Seq, &at, &stream, &l.Attempt, &l.Text); err != nil {
			return nil, err
		}
		l.Time, l.Stream = fromMicro(at), jobtype.LogStream(stream)
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

// dropOldestLines deletes job id's oldest lines, from first on, until
// the bytes kept are at most limit (the newest line stays, however
// large), and returns the new first line and bytes kept.
func dropOldestLines(ctx context.Context, tx *sql.Tx, id string, first, last, bytes, limit int64) (int64, int64, error) {
	for bytes > limit {
		rows, err := tx.QueryContext(ctx, "SELECT seq, "+lineSize+" FROM job_logs WHERE job_id = ? AND seq >= ? AND seq < ? ORDER BY seq LIMIT 256", id, first, last)
		if err != nil {
			return 0, 0, err
		}
		n := 0
		for rows.Next() && bytes > limit {
			var seq, size int64
			if err := rows.Scan(&seq, &size); err != nil {
				rows.Close()
				return 0, 0, err
			}
			first, bytes, n = seq+1, bytes-size, n+1
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return 0, 0, err
		}
		if n == 0 {
			break // only the newest line is left
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM job_logs WHERE job_id = ? AND seq < ?", id, first); err != nil {
		return 0, 0, err
	}
	return first, max(bytes, 0), nil
}

// JobLogs implements store.Store in one read transaction: the job, its
// log's bounds and the lines, from one snapshot.
func (s *Store) JobLogs(ctx context.Context, id string, afterSeq int64, limit int) (store.LogPage, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.LogPage{}, fmt.Errorf("read logs of %s: %w", id, classify(err))
	}
	defer tx.Rollback()
	j, _, err := scanJob(tx.QueryRowContext(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.LogPage{}, fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
	}
	if err != nil {
		return store.LogPage{}, fmt.Errorf("read logs of %s: %w", id, classify(err))
	}
	p := store.LogPage{Job: j, FirstSeq: 1}
	err = tx.QueryRowContext(ctx, "SELECT first_seq, last_seq FROM job_log_heads WHERE job_id = ?", id).Scan(&p.FirstSeq, &p.LastSeq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return store.LogPage{}, fmt.Errorf("read logs of %s: %w", id, classify(err))
	}
	if p.Lines, err = readLines(ctx, tx, id, afterSeq, limit); err != nil {
		return store.LogPage{}, fmt.Errorf("read logs of %s: %w", id, classify(err))
	}
	return p, nil
}
