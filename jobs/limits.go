package jobs

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The limits of what a caller or a worker may hand the engine. They are
// defined here, once, so that every way in (the server, an in-process
// worker, an embedder calling the engine) meets the same rule; the server
// only maps the refusals to Connect codes, and the client trims what it
// sends to them.
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
	// MaxFilterItems bounds the kinds or queues of one claim.
	MaxFilterItems = 100
	// MaxJSONDepth bounds how deeply arrays and objects may nest in a
	// payload or result: `[[1]]` is 2 deep. Every reader must be able to
	// decode what the engine stores, and protobuf decoders give up at
	// 10,000 nested messages, of which one JSON level costs two in a
	// google.protobuf.Value (a Value and its ListValue or Struct). 128,
	// serde_json's own default, is deeper than any document people
	// write and leaves decoders a margin of almost forty times.
	MaxJSONDepth = 128
	// DefaultMaxPayloadBytes is Config.MaxPayloadBytes when unset.
	DefaultMaxPayloadBytes = 256 << 10
)

// DefaultErrorType is the error type of a failure reported without one:
// callers see only the class of an error, so it must never be empty.
const DefaultErrorType = "Error"

// TooLargeError is a payload or result over Config.MaxPayloadBytes.
// resource_exhausted. It is returned unwrapped.
type TooLargeError struct {
	Field string // "payload" or "result"
	Bytes int    // its size as JSON
	Limit int
}

func (e *TooLargeError) Error() string {
	return e.Field + ": " + strconv.Itoa(e.Bytes) + " bytes as JSON is over the limit of " + strconv.Itoa(e.Limit)
}

// checkLen refuses a value longer than limit bytes.
func checkLen(field, v string, limit int) error {
	if len(v) > limit {
		return &InvalidError{Field: field, Reason: "must be at most " + strconv.Itoa(limit) + " bytes, got " + strconv.Itoa(len(v))}
	}
	return nil
}

// checkText refuses free text (a step, an error's type or message) that
// is too long or not UTF-8: protobuf strings must be UTF-8, so one such
// value stored would make the job unreadable to every client.
func checkText(field, v string, limit int) error {
	if err := checkLen(field, v, limit); err != nil {
		return err
	}
	if !utf8.ValidString(v) {
		return &InvalidError{Field: field, Reason: "must be valid UTF-8"}
	}
	return nil
}

// checkJSON checks a payload or result: nil means none, anything else
// must be one JSON value, at most limit bytes and MaxJSONDepth deep.
func checkJSON(field string, v json.RawMessage, limit int) error {
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
	return nil
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
