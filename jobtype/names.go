package jobtype

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// NameReason says why v cannot be an identifier-like field (an id, kind,
// tenant, queue, pool, schedule, worker id or lease id), or returns "".
// The charset (ASCII letters, digits and "._-:/@") is wide enough for
// "email.send", "reports/monthly" or "host-1@42", and narrow enough to be
// safe in URLs, logs and metrics labels without escaping. The files read
// without the engine (configuration, tokens) report the reason at the
// key at fault.
func NameReason(v string) string {
	if v == "" {
		return "must not be empty"
	}
	if len(v) > MaxNameBytes {
		return tooLong(len(v), MaxNameBytes)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("._-:/@", c) >= 0:
		default:
			return "may only contain ASCII letters, digits and . _ - : / @"
		}
	}
	return ""
}

// CheckName refuses v as the value of field, as an *InvalidError, when
// NameReason finds fault with it: exactly as a request carrying it would
// be refused, so a configuration file cannot declare a name no request
// could use.
func CheckName(field, v string) error {
	if reason := NameReason(v); reason != "" {
		return &InvalidError{Field: field, Reason: reason}
	}
	return nil
}

// CheckUniqueKey refuses a submission's unique key, as an *InvalidError,
// unless it is at most MaxUniqueKeyBytes of printable UTF-8. Users key
// jobs by things like "report 2024-05 für Acme", so any printable text
// goes, but no control characters, which would hide in logs.
func CheckUniqueKey(v string) error {
	if err := CheckLen("unique_key", v, MaxUniqueKeyBytes); err != nil {
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
