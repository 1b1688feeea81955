package jobs

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// validName checks an identifier-like field: ids, kinds, tenants, queues,
// worker ids and lease ids. The charset (ASCII letters, digits and
// "._-:/@") is wide enough for "email.send", "reports/monthly" or
// "host-1@42", and narrow enough to be safe in URLs, logs and metrics
// labels without escaping.
func validName(field, v string) error {
	if v == "" {
		return &InvalidError{Field: field, Reason: "must not be empty"}
	}
	if err := checkLen(field, v, MaxNameBytes); err != nil {
		return err
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("._-:/@", c) >= 0:
		default:
			return &InvalidError{Field: field, Reason: "may only contain letters, digits and . _ - : / @"}
		}
	}
	return nil
}

// validID checks a job id given by a caller. Ids this engine made match
// the name charset; anything else cannot name a job.
func validID(field, id string) error { return validName(field, id) }

// validOptionalName is validName where "" means "use the default".
func validOptionalName(field, v string) error {
	if v == "" {
		return nil
	}
	return validName(field, v)
}

// validUniqueKey allows any printable UTF-8 (users key jobs by things like
// "report 2024-05 für Acme"), but no control characters, which would hide
// in logs.
func validUniqueKey(v string) error {
	if err := checkLen("unique_key", v, MaxUniqueKeyBytes); err != nil {
		return err
	}
	if !utf8.ValidString(v) {
		return &InvalidError{Field: "unique_key", Reason: "must be valid UTF-8"}
	}
	for _, r := range v {
		if !unicode.IsPrint(r) {
			return &InvalidError{Field: "unique_key", Reason: "must not contain control characters"}
		}
	}
	return nil
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

// CheckName refuses v as the value of field (a queue, kind or tenant
// name) exactly as a request carrying it would be refused, so a
// configuration file cannot declare a name no request could use.
func CheckName(field, v string) error { return validName(field, v) }
