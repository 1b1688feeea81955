package main

import (
	"strings"
	"unicode/utf8"

	"github.com/jobwatch/jobwatch/jobtype"
)

// printable is a log line's text as a terminal may be given it. A job's
// output is whatever its command printed, so it may hold escape
// sequences that set a window's title, clear the screen or move the
// cursor, carriage returns that hide what came before them, or control
// characters: none of them reach the reader's terminal. Colours (SGR
// sequences, ESC [ ... m) are kept when colour is set (stdout is a
// terminal), with a reset at the end of a line that set one, and dropped
// otherwise; every other escape sequence, every control character but a
// tab, and the invisible characters that reorder or split a line
// (invisible) are dropped. Invalid UTF-8 and NUL bytes are first
// replaced with U+FFFD as the log stores a line (jobtype.CutLogLine), so
// a worker's copy of a command's output reads as jobwatch logs prints it
// later, and no stray byte reaches a terminal that would act on it (a
// lone 0x9b is an 8-bit CSI to some). The page's log pane drops the
// escape sequences and control characters too (web/src/logs.ts).
func printable(s string, colour bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f || c >= 0x80 {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = jobtype.NoNUL(s)
	var b strings.Builder
	coloured := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0x1b:
			n, sgr := escapeLen(s[i:])
			if sgr && colour {
				b.WriteString(s[i : i+n])
				coloured = true
			}
			i += n
		case c < 0x20 && c != '\t' || c == 0x7f:
			i++
		case c < 0x80:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if !invisible(r) {
				b.WriteString(s[i : i+size])
			}
			i += size
		}
	}
	if coloured {
		b.WriteString("\x1b[0m")
	}
	return b.String()
}

// invisible reports whether r is a character a terminal would act on
// rather than show: the C1 controls (U+009B, a CSI, among them), the
// bidirectional controls that reorder what follows them on the line (a
// right-to-left override can make "exe.txt" of "txt.exe"), the line and
// paragraph separators, and the byte order mark.
func invisible(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f,
		r == 0x061c, r == 0x200e, r == 0x200f, // arabic letter mark, LRM, RLM
		r >= 0x202a && r <= 0x202e, // embeddings and overrides
		r >= 0x2066 && r <= 0x2069, // isolates
		r == 0x2028, r == 0x2029, r == 0xfeff:
		return true
	}
	return false
}

// plain is s, a text a worker or its job wrote (a step, an error, a
// worker's name), as a terminal may be given it: printable, without
// colours, and with tabs as spaces so that a table's columns hold.
func plain(s string) string {
	return strings.ReplaceAll(printable(s, false), "\t", " ")
}

// escapeLen is the length of the escape sequence s starts with (s[0] is
// ESC), to its end or the end of s, and whether it sets colours (SGR).
func escapeLen(s string) (n int, sgr bool) {
	if len(s) < 2 {
		return len(s), false
	}
	switch s[1] {
	case '[': // CSI: parameters and intermediates, then one final byte
		for i := 2; i < len(s); i++ {
			if c := s[i]; c >= 0x40 && c <= 0x7e {
				return i + 1, c == 'm'
			} else if c < 0x20 || c > 0x7e {
				return i, false // not a CSI after all: drop what came so far
			}
		}
		return len(s), false
	case ']', 'P', 'X', '^', '_': // strings, to BEL or ESC \
		for i := 2; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1, false
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2, false
			}
		}
		return len(s), false
	}
	return 2, false
}
