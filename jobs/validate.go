package jobs

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// validID checks a job id given by a caller. Ids this engine made match
// the name charset; anything else cannot name a job.
func validID(field, id string) error { return jobtype.CheckName(field, id) }

// validOptionalName is jobtype.CheckName where "" means "use the default".
func validOptionalName(field, v string) error {
	if v == "" {
		return nil
	}
	return jobtype.CheckName(field, v)
}

// lowerBase32 is Crockford's alphabet in lower case: no padding, no
// look-alike letters (i, l, o, u), and byte order equals sort order.
var lowerBase32 = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// newJobID returns "j_" followed by 26 base32 characters of 16 bytes: the
// creation time in milliseconds since the Unix epoch (6 bytes, big endian)
// and 10 random bytes, as in a ULID. Ids therefore sort by creation time
// to the millisecond and cannot be guessed from one another.
func newJobID(now time.Time) string {
	var b [16]byte
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli()))
	copy(b[:6], ms[2:])
	_, _ = rand.Read(b[6:]) // never fails (crypto/rand panics instead)
	return "j_" + lowerBase32.EncodeToString(b[:])
}

// newLeaseID returns "l_" followed by 26 base32 characters of 128 random
// bits: a fencing token no stale worker can guess.
func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "l_" + lowerBase32.EncodeToString(b[:])
}
