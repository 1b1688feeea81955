package jobtype

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The limits of what a caller or a worker may hand the engine. They are
// defined here, once, so that every way in (the server, an in-process
// worker, an embedder calling the engine) meets the same rule, and so
// that the files read without the engine (the configuration, the tokens)
// check names by it too; the server only maps the refusals to Connect
// codes, and the client trims what it sends to them.
const (
	// MaxNameBytes bounds every id, kind, tenant, queue, worker id and
	// lease id.
	MaxNameBytes = 128
	// MaxUniqueKeyBytes bounds a submission's unique key.
	MaxUniqueKeyBytes = 128
	// MaxStepBytes bounds the step text of a heartbeat.
	MaxStepBytes = 1024
	// MaxErrorTypeBytes and MaxErrorMessageBytes bound the error a worker
	// fails a job with.
	MaxErrorTypeBytes    = 256
	MaxErrorMessageBytes = 4096
	// MaxFilterItems bounds the kinds or queues of one claim, and the
	// states of one list.
	MaxFilterItems = 100
	// MaxClaimJobs bounds the jobs one claim may take (ClaimJobs): a
	// worker's free slots, River's MaxWorkers default.
	MaxClaimJobs = 100
	// MaxBatchJobs bounds the jobs of one SubmitJobs and of one WaitJobs
	// (its ids, or the jobs of its batch), and the dependencies (After)
	// of one job.
	MaxBatchJobs = 1000
	// MaxDependencyDepth bounds a chain of WAITING jobs, each after the
	// next: a failure at its end cancels the whole chain in the
	// transaction that ends it, one nested trigger per link.
	MaxDependencyDepth = 100
	// MaxTokenBytes bounds a page token or resume token handed back.
	// Tokens this engine and its stores issue are far shorter.
	MaxTokenBytes = 1024
	// MaxJSONDepth bounds how deeply arrays and objects may nest in a
	// payload or result: `[[1]]` is 2 deep. Every reader must be able to
	// decode what the engine stores, and protobuf decoders give up at
	// 10,000 nested messages, of which one JSON level costs two in a
	// google.protobuf.Value (a Value and its ListValue or Struct). 128,
	// serde_json's own default, is deeper than any document people
	// write and leaves decoders a margin of almost forty times.
	MaxJSONDepth = 128
	// DefaultMaxPayloadBytes is the engine's payload limit
	// (jobs.Config.MaxPayloadBytes) when unset.
	DefaultMaxPayloadBytes = 256 << 10
)

// MaxTimeOffset bounds how far from now, either way, a time a caller
// gives (a submission's run_at) may be: 100 years of 365.25 days, on the
// engine's clock. A time.Duration spans ±292 years, so every duration
// the engine derives from a stored time and now (a queue's oldest queued
// age, a job's wait until its run_at) stays representable, and exact,
// for the next 190 years; and every such time is a valid wire timestamp
// (years 1 to 9999). No job waits a century; a time outside the range is
// a mistake, such as an unset date sent as 0001-01-01 (which once read
// as "now") or a sentinel like 1700-01-01 (which once made a queue's
// oldest queued age the largest duration there is).
const MaxTimeOffset = 36525 * 24 * time.Hour

// DefaultErrorType is the error type of a failure reported without one:
// callers see only the class of an error, so it must never be empty.
const DefaultErrorType = "Error"

// InvalidError is a request the engine refuses because of one field.
// It is returned unwrapped.
type InvalidError struct {
	Field  string // as named in the API, e.g. "kind"
	Reason string // e.g. "must not be empty"
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// TooLargeError is a payload or result over the engine's payload limit
// (jobs.Config.MaxPayloadBytes). resource_exhausted. It is returned
// unwrapped.
type TooLargeError struct {
	Field string // "payload" or "result"
	Bytes int    // its size as JSON
	Limit int
}

func (e *TooLargeError) Error() string {
	return e.Field + ": " + strconv.Itoa(e.Bytes) + " bytes as JSON is over the limit of " + strconv.Itoa(e.Limit) +
		": keep large data elsewhere (a file, an object store) and pass a reference to it"
}

// CheckLen refuses v as the value of field, as an *InvalidError, when it
// is longer than limit bytes.
func CheckLen(field, v string, limit int) error {
	if len(v) > limit {
		return &InvalidError{Field: field, Reason: tooLong(len(v), limit)}
	}
	return nil
}

func tooLong(n, limit int) string {
	return "must be at most " + strconv.Itoa(limit) + " bytes, got " + strconv.Itoa(n)
}

// CheckText refuses free text (a step, an error's type or message) that
// is too long or not UTF-8, as an *InvalidError: protobuf strings must be UTF-8, so one such
// value stored would make the job unreadable to every client.
func CheckText(field, v string, limit int) error {
	if err := CheckLen(field, v, limit); err != nil {
		return err
	}
	if !utf8.ValidString(v) {
		return &InvalidError{Field: field, Reason: "must be valid UTF-8"}
	}
	return nil
}

// CheckJSON checks a payload or result exactly as the engine does: nil
// means none; anything else must be one JSON value, at most limit bytes
// (else a *TooLargeError) and MaxJSONDepth deep, that a
// google.protobuf.Value can hold (else an *InvalidError naming field).
// The configuration file checks a schedule's payload with it.
func CheckJSON(field string, v json.RawMessage, limit int) error {
	if v == nil {
		return nil
	}
	if len(v) > limit {
		return &TooLargeError{Field: field, Bytes: len(v), Limit: limit}
	}
	if !json.Valid(v) {
		return &InvalidError{Field: field, Reason: "must be valid JSON"}
	}
	if jsonDepth(v) > MaxJSONDepth {
		return &InvalidError{Field: field, Reason: "nests arrays and objects more than " +
			strconv.Itoa(MaxJSONDepth) + " levels deep (the limit)"}
	}
	if reason := notAValue(v); reason != "" {
		return &InvalidError{Field: field, Reason: reason}
	}
	return nil
}

// notAValue says why valid JSON v cannot become a google.protobuf.Value,
// the form every reader gets it in, or returns "". JSON allows what that
// form does not: invalid UTF-8, an escaped half of a surrogate pair, a
// number beyond a 64-bit float, an object key given twice. Stored, any of
// them would make the job unreadable to every client: each GetJob, full
// ListJobs page and ClaimJob of it would fail. The server's decoder
// refuses them already; this is for in-process callers.
//
// It scans bytes, like jsonDepth, rather than decoding tokens, which
// would cost ten times as long for a payload of many small values.
func notAValue(v []byte) string {
	if !utf8.Valid(v) {
		return "must be valid UTF-8"
	}
	// levels holds, for each array or object enclosing the scan, the keys
	// an object has given so far (nil for an array) and whether its next
	// string is a key.
	type level struct {
		keys map[string]bool
		key  bool
	}
	var levels []level
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '{':
			levels = append(levels, level{keys: map[string]bool{}, key: true})
		case c == '[':
			levels = append(levels, level{})
		case c == '}' || c == ']':
			levels = levels[:len(levels)-1]
		case c == ',' && len(levels) > 0 && levels[len(levels)-1].keys != nil:
			levels[len(levels)-1].key = true
		case c == '"':
			end, lone := scanString(v, i)
			if lone {
				return "must not escape half of a UTF-16 surrogate pair (\\ud800 to \\udfff) alone"
			}
			if n := len(levels); n > 0 && levels[n-1].keys != nil && levels[n-1].key {
				top := &levels[n-1]
				key := unquote(v[i : end+1])
				if top.keys[key] {
					return "gives the object key " + strconv.Quote(key) + " more than once"
				}
				top.keys[key], top.key = true, false
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end := i
			exponent := false
			for end+1 < len(v) && strings.IndexByte("0123456789+-.eE", v[end+1]) >= 0 {
				end++
				exponent = exponent || v[end] == 'e' || v[end] == 'E'
			}
			// Without an exponent, only more than 308 digits can overflow.
			if n := v[i : end+1]; exponent || len(n) > 300 {
				if f, err := strconv.ParseFloat(string(n), 64); err != nil && math.IsInf(f, 0) {
					return "has the number " + truncate(string(n), 40) + ", beyond the range of a 64-bit float"
				}
			}
			i = end
		}
	}
	return ""
}

// scanString reads the string of valid JSON v that starts with the quote
// at v[start]. It returns the index of its closing quote, and whether it
// escapes a UTF-16 surrogate (\ud800 to \udfff) that is not part of a
// pair: a high one followed at once by an escaped low one.
func scanString(v []byte, start int) (end int, lone bool) {
	for i := start + 1; i < len(v); i++ {
		switch v[i] {
		case '"':
			return i, lone
		case '\\':
			if v[i+1] != 'u' {
				i++ // a one-letter escape
				continue
			}
			r := hex4(v[i+2 : i+6])
			i += 5
			switch {
			case 0xdc00 <= r && r <= 0xdfff:
				lone = true // a low half with no high one before it
			case 0xd800 <= r && r <= 0xdbff:
				if i+6 >= len(v) || v[i+1] != '\\' || v[i+2] != 'u' {
					lone = true
					continue
				}
				if low := hex4(v[i+3 : i+7]); low < 0xdc00 || low > 0xdfff {
					lone = true
					continue
				}
				i += 6
			}
		}
	}
	return len(v) - 1, lone // not reached: v is valid
}

// unquote decodes a JSON string; most keys need no decoding.
func unquote(quoted []byte) string {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1 : len(quoted)-1])
	}
	var s string
	_ = json.Unmarshal(quoted, &s) // valid: it was scanned as a string
	return s
}

// hex4 reads four hex digits, which valid JSON has after \u.
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// jsonDepth returns how deeply arrays and objects nest in valid JSON. It
// scans bytes instead of decoding, so a deep value costs no recursion.
func jsonDepth(v []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range v {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped = true
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}
