package postgres

// Jobs' logs: AppendLogs and JobLogs (migration 8).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// logNotice is the payload of an append's notification: a JSON object,
// as a pauseNotice is, told apart by its "log" key.
type logNotice struct {
	Log    string `json:"log"`
	Tenant string `json:"tenant"`
	Seq    int64  `json:"seq"`
}

// AppendLogs implements store.Store in one transaction. The job's row is
// read FOR SHARE, so a write that ends the attempt waits for the append
// to commit: no line is kept after the job was seen to end. The head's
// upsert numbers the lines and serializes appends to one job; the
// notification goes at commit, as NOTIFY does.
func (s *Store) AppendLogs(ctx context.Context, a store.LogAppend) (store.LogAppended, error) {
	var out store.LogAppended
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = store.LogAppended{}
		row, err := scanJob(tx.QueryRow(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id = $1 FOR SHARE", a.JobID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", a.JobID, jobtype.ErrNotFound)
		}
		if err != nil {
			return err
		}
		j := row.job
		out.Job = j
		if j.State != jobtype.Running || j.LeaseID != a.LeaseID || len(a.Lines) == 0 {
			out.Held = j.State == jobtype.Running && j.LeaseID == a.LeaseID
			err := tx.QueryRow(ctx, "SELECT last_seq FROM job_log_heads WHERE job_id = $1", a.JobID).Scan(&out.LastSeq)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		if last, again, err := repeated(ctx, tx, a, j.Attempt); err != nil || again {
			out.Held, out.Repeated, out.LastSeq = again, again, last
			return err
		}
		var (
			n       = int64(len(a.Lines))
			size    int64
			times   = make([]time.Time, n)
			streams = make([]int16, n)
			texts   = make([]string, n)
		)
		for i, l := range a.Lines {
			size += l.Size()
			times[i], streams[i], texts[i] = micro(l.Time), int16(l.Stream), l.Text
		}
		var first, last, bytes int64
		err = tx.QueryRow(ctx, `INSERT INTO job_log_heads AS h (job_id, first_seq, last_seq, bytes) VALUES ($1, 1, $2, $3)
			ON CONFLICT (job_id) DO UPDATE SET last_seq = h.last_seq + $2, bytes = h.bytes + $3
			RETURNING first_seq, last_seq, bytes`, a.JobID, n, size).Scan(&first, &last, &bytes)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO job_logs (job_id, seq, at, stream, attempt, text)
			SELECT $1, $2 + u.o, u.at, u.stream, $3, u.text
			FROM unnest($4::timestamptz[], $5::smallint[], $6::text[]) WITH ORDINALITY AS u(at, stream, text, o)`,
			a.JobID, last-n, j.Attempt, times, streams, texts)
		if err != nil {
			return err
		}
		if limit := a.MaxBytes(j.Queue); bytes > limit {
			if err := dropOldestLines(ctx, tx, a.JobID, first, last, bytes, limit); err != nil {
				return fmt.Errorf("drop the oldest lines: %w", err)
			}
		}
		payload, err := json.Marshal(logNotice{Log: j.ID, Tenant: j.Tenant, Seq: last})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, string(payload)); err != nil {
			return err
		}
		out.Held, out.LastSeq = true, last
		return nil
	})
	if err != nil {
		if errors.Is(err, jobtype.ErrNotFound) {
			return store.LogAppended{}, err
		}
		return store.LogAppended{}, fmt.Errorf("append logs of %s: %w", a.JobID, classify(err))
	}
	return out, nil
}

// repeated says whether a is an append sent again of job a.JobID's log
// (store.LogAppend.Repeats), and then the seq of the log's last line. It
// holds the log's head until the append commits, so that an append and
// the same sent again never both add their lines: one statement reads
// the head and the log's last line, and the other lines are read only
// when it is a's last.
func repeated(ctx context.Context, tx pgx.Tx, a store.LogAppend, attempt int32) (last int64, again bool, err error) {
	n := int64(len(a.Lines))
	if !a.Resendable || n == 0 {
		return 0, false, nil
	}
	var (
		first       int64
		l           jobtype.LogLine
		at          pgtype.Timestamptz
		stream      pgtype.Int2
		lineAttempt pgtype.Int4
		text        pgtype.Text
	)
	err = tx.QueryRow(ctx, `SELECT h.first_seq, h.last_seq, l.at, l.stream, l.attempt, l.text
		FROM job_log_heads h LEFT JOIN job_logs l ON l.job_id = h.job_id AND l.seq = h.last_seq
		WHERE h.job_id = $1 FOR UPDATE OF h`, a.JobID).Scan(&first, &last, &at, &stream, &lineAttempt, &text)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !text.Valid {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	// Of the lines the log's bound kept of a (store.LogAppend.Kept).
	a, ok := a.Kept(first, last)
	if !ok {
		return 0, false, nil
	}
	n = int64(len(a.Lines))
	l.Time, l.Stream, l.Attempt, l.Text = fromTime(at), jobtype.LogStream(stream.Int16), lineAttempt.Int32, text.String
	if !a.EndsLike(l, attempt) {
		return 0, false, nil
	}
	tail, err := readLines(ctx, tx, a.JobID, last-n, int(n))
	return last, err == nil && a.Repeats(tail, attempt), err
}

// readLines reads up to limit lines of job id's log after afterSeq.
func readLines(ctx context.Context, tx pgx.Tx, id string, afterSeq int64, limit int) ([]jobtype.LogLine, error) {
	rows, err := tx.Query(ctx, `SELECT seq, at, stream, attempt, text FROM job_logs
		WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []jobtype.LogLine
	for rows.Next() {
		var (
			l      jobtype.LogLine
			at     pgtype.Timestamptz
			stream int16
		)
		if err := rows.Scan(&l.Seq, &at, &stream, &l.Attempt, &l.Text); err != nil {
			return nil, err
		}
		l.Time, l.Stream = fromTime(at), jobtype.LogStream(stream)
		lines = append(lines, l)
	}
	return lines, rows.Err()
}

// dropOldestLines deletes job id's oldest lines, from first on and never
// the last, until the bytes kept are at most limit, and records the new
// bounds in its head.
func dropOldestLines(ctx context.Context, tx pgx.Tx, id string, first, last, bytes, limit int64) error {
	for bytes > limit {
		rows, err := tx.Query(ctx, `SELECT seq, octet_length(text) + 16 FROM job_logs
			WHERE job_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq LIMIT 256`, id, first, last)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() && bytes > limit {
			var seq, size int64
			if err := rows.Scan(&seq, &size); err != nil {
				rows.Close()
				return err
			}
			first, bytes, n = seq+1, bytes-size, n+1
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			break // only the newest line is left
		}
	}
	if _, err := tx.Exec(ctx, "DELETE FROM job_logs WHERE job_id = $1 AND seq < $2", id, first); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "UPDATE job_log_heads SET first_seq = $2, bytes = $3 WHERE job_id = $1", id, first, max(bytes, 0))
	return err
}

// JobLogs implements store.Store in one REPEATABLE READ transaction: the
// job, its log's bounds and the lines, from one snapshot.
func (s *Store) JobLogs(ctx context.Context, id string, afterSeq int64, limit int) (store.LogPage, error) {
	var p store.LogPage
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		p = store.LogPage{FirstSeq: 1}
		row, err := scanJob(tx.QueryRow(ctx, "SELECT "+summaryColumns+" FROM jobs WHERE id = $1", id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", id, jobtype.ErrNotFound)
		}
		if err != nil {
			return err
		}
		p.Job = row.job
		err = tx.QueryRow(ctx, "SELECT first_seq, last_seq FROM job_log_heads WHERE job_id = $1", id).Scan(&p.FirstSeq, &p.LastSeq)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		p.Lines, err = readLines(ctx, tx, id, afterSeq, limit)
		return err
	})
	if err != nil {
		if errors.Is(err, jobtype.ErrNotFound) {
			return store.LogPage{}, err
		}
		return store.LogPage{}, fmt.Errorf("read logs of %s: %w", id, classify(err))
	}
	return p, nil
}

// parseLogNotice reads an object notice (isPauseNotice) that is an
// append's as the change a listener hands on; ok is false for another
// notice.
func parseLogNotice(payload string) (c store.Change, ok bool, err error) {
	var n logNotice
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		return store.Change{}, false, fmt.Errorf("read a notice: %w", err)
	}
	if n.Log == "" {
		return store.Change{}, false, nil
	}
	return store.Change{JobID: n.Log, Tenant: n.Tenant, LogChange: true, LogSeq: n.Seq}, true, nil
}
