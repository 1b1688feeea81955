package store

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	"github.com/jobwatch/jobwatch/jobtype"
)

// EncodePageToken makes the page token that backends hand out from
// ListJobs: the sort key of the page's last job behind a format byte,
// which says which order the key is of (newest first, or change order),
// so that a token of one order is refused in the other. key is the
// order's first column, seq the job's creation sequence (above 0).
func EncodePageToken(format byte, key, seq int64) string {
	b := make([]byte, 17)
	b[0] = format
	binary.BigEndian.PutUint64(b[1:], uint64(key))
	binary.BigEndian.PutUint64(b[9:], uint64(seq))
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken reads a token EncodePageToken made with format; any
// other returns ErrInvalidPageToken.
func DecodePageToken(format byte, token string) (key, seq int64, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != 17 || b[0] != format {
		return 0, 0, fmt.Errorf("list jobs: %w", jobtype.ErrInvalidPageToken)
	}
	key, seq = int64(binary.BigEndian.Uint64(b[1:])), int64(binary.BigEndian.Uint64(b[9:]))
	if seq <= 0 {
		return 0, 0, fmt.Errorf("list jobs: %w", jobtype.ErrInvalidPageToken)
	}
	return key, seq, nil
}
