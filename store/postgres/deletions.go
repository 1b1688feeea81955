package postgres

import (
	"context"
	"fmt"

	"github.com/jobwatch/jobwatch/store"
)

// deletedFormat marks a page token of JobsDeleted: (change_seq, seq) of
// the page's last record.
const deletedFormat = 3

// JobsDeleted implements store.Store. A deletion's record is stamped as
// jobs_stamp stamps a change (job_deletions' defaults), so the cursor
// finds it as ListFilter.ChangedSince finds a change (see cursor).
func (s *Store) JobsDeleted(ctx context.Context, f store.DeletedFilter) ([]string, string, error) {
	c, err := decodeCursor(f.Since)
	if err != nil {
		return nil, "", err
	}
	var afterChange, afterSeq int64
	if f.PageToken != "" {
		if afterChange, afterSeq, err = store.DecodePageToken(deletedFormat, f.PageToken); err != nil {
			return nil, "", err
		}
	}
	rows, err := s.reads().Query(ctx, `SELECT job_id, change_seq, seq FROM job_deletions
		WHERE tenant = $1 AND change_xid >= $2::text::xid8 AND (change_seq, seq) > ($3::bigint, $4::bigint)
			AND ($6 = '' OR batch = $6 OR batch IS NULL)
		ORDER BY change_seq, seq LIMIT $5`, f.Tenant, fmt.Sprint(c.xmin), afterChange, afterSeq, f.Limit+1, f.Batch)
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
			return ids, store.EncodePageToken(deletedFormat, lastChange, lastSeq), nil
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
