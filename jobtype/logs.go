package jobtype

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// LogStream says where a line of a job's log came from.
type LogStream int8

const (
	// LogHandler: the handler logged it (or the client did not say).
	LogHandler LogStream = iota
	// LogStdout and LogStderr: a command's output (worker --exec).
	LogStdout
	LogStderr
)

// LogLine is one line of a job's log. The store numbers lines per job
// (Seq, from 1, never reused) and stamps each with the attempt that
// logged it.
type LogLine struct {
	Seq     int64
	Time    time.Time
	Stream  LogStream
	Attempt int32
	Text    string
}

// Bounds of a job's log.
const (
	// MaxLogLineBytes bounds one line's text: a longer line is cut
	// (CutLogLine), not refused, so a worker never loses a job for
	// printing a long line.
	MaxLogLineBytes = 16 << 10
	// MaxLogLinesPerAppend bounds the lines of one append.
	MaxLogLinesPerAppend = 1000
	// DefaultMaxLogBytes is the bytes of lines a job keeps when its
	// queue sets no max_log_bytes: past it the oldest lines go.
	DefaultMaxLogBytes = 1 << 20
	// MinMaxLogBytes and MaxMaxLogBytes bound a queue's max_log_bytes:
	// at least a few of the longest lines, at most what a page can
	// page through in reasonable time.
	MinMaxLogBytes = 64 << 10
	MaxMaxLogBytes = 64 << 20
)

// Size is what l counts toward its job's bound: its text and a few bytes
// for its number, time and stream.
func (l LogLine) Size() int64 { return int64(len(l.Text)) + 16 }

// CutLogLine returns text cut to MaxLogLineBytes on a character boundary,
// ending with "…[N bytes cut]", or text itself if it fits. Invalid UTF-8
// is replaced, as a protobuf string must be valid.
func CutLogLine(text string) string {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	text = NoNUL(text)
	if len(text) <= MaxLogLineBytes {
		return text
	}
	const room = 32 // for the marker
	keep := MaxLogLineBytes - room
	for keep > 0 && !utf8.RuneStart(text[keep]) {
		keep--
	}
	return text[:keep] + "…[" + strconv.Itoa(len(text)-keep) + " bytes cut]"
}

// PieceEnd is where a piece of a line that is cut for its length ends in
// b, the bytes held: after the last whole character, so that a character
// of several bytes that straddles the cut goes whole into the next
// piece instead of becoming U+FFFD in both. Bytes that are no UTF-8
// stay where they fall (len(b)).
func PieceEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// NoNUL is text with each NUL byte (U+0000) replaced by U+FFFD, as an
// invalid byte is: PostgreSQL's text cannot hold one ("invalid byte
// sequence for encoding UTF8: 0x00"), so a worker's line, step or error
// that carries one (binary output, a C string) is stored alike on every
// backend instead of being refused.
func NoNUL(text string) string {
	if strings.IndexByte(text, 0) < 0 {
		return text
	}
	return strings.ReplaceAll(text, "\x00", "\uFFFD")
}

// NoNULWithin is NoNUL for a text already checked against its limit of
// limit bytes: each replacement adds two bytes, so what they push past
// the limit is cut, at a character's start, and the stored text keeps
// within it as the text sent did.
func NoNULWithin(text string, limit int) string {
	text = NoNUL(text)
	if len(text) <= limit {
		return text
	}
	for limit > 0 && !utf8.RuneStart(text[limit]) {
		limit--
	}
	return text[:limit]
}
