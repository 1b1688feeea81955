package sqlite

import (
	"context"
	"fmt"

	"github.com/jobwatch/jobwatch/store"
)

// recordDeletion records, in DeleteJob's statement, that a job of a
// tenant and a batch (jobtype.Job.Batch) was deleted in the writer's
// batch of a change sequence value, at a time.
const recordDeletion = "INSERT INTO job_deletions (tenant, batch, job_id, change_seq, deleted_at) VALUES (?, ?, ?, ?, ?)"

// deletedTokenFormat marks a page token of JobsDeleted: (change_seq,
// seq) of the page's last record.
const deletedTokenFormat = 3

// JobsDeleted implements store.Store. It reads the index
// job_deletions_tenant_change from the cursor's change sequence value on.
func (s *Store) JobsDeleted(ctx context.Context, f store.DeletedFilter) ([]string, string, error) {
	change, err := decodeCursor(f.Since)
	if err != nil {
		return nil, "", err
	}
	afterChange, afterSeq := change, int64(0)
	if f.PageToken != "" {
		if afterChange, afterSeq, err = store.DecodePageToken(deletedTokenFormat, f.PageToken); err != nil {
			return nil, "", err
		}
	}
	rows, err := s.read.QueryContext(ctx, `SELECT job_id, change_seq, seq FROM job_deletions
		WHERE tenant = ? AND change_seq > ? AND (change_seq, seq) > (?, ?) AND (? = '' OR batch = ? OR batch IS NULL)
		ORDER BY change_seq, seq LIMIT ?`, f.Tenant, change, afterChange, afterSeq, f.Batch, f.Batch, f.Limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("jobs deleted: %w", classify(err))
	}
	defer rows.Close()
	var (
		ids                 []string
		lastChange, lastSeq int64
	)
	for rows.Next() {
		if len(ids) == f.Limit {
			return ids, store.EncodePageToken(deletedTokenFormat, lastChange, lastSeq), nil
		}
		var id string
		if err := rows.Scan(&id, &lastChange, &lastSeq); err != nil {
			return nil, "", fmt.Errorf("jobs deleted: %w", classify(err))
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("jobs deleted: %w", classify(err))
	}
	return ids, "", nil
}
