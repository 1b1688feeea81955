package main

import (
	"strconv"
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
// terminal), but for conceal (shownSGR), with a reset at the end of a
// line that set one, and dropped otherwise; every other escape sequence,
// every control character but a tab, and the invisible characters that
// reorder or split a line (invisible) are dropped. Invalid UTF-8 and NUL bytes are first
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
				if seq := shownSGR(s[i+2 : i+n-1]); seq != "" {
					b.WriteString(seq)
					coloured = true
				}
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

// shownSGR is the SGR sequence whose parameters are params (what ESC [
// and m enclose) as a terminal may be given it: without parameter 8,
// conceal, which would hide the text after it on screen while the log
// holds it; "" when nothing is left of it, or when params are not an
// SGR's alone (a private marker such as ESC [ > 4 ; 2 m sets a keyboard
// mode, not a colour). Parameters are read as the page's log pane reads
// them (parseAnsi, web/src/logs.ts): the arguments of a 256-colour or RGB
// colour (38;5;8, 48;2;r;g;b) are not codes of their own, and a colon
// form (38:5:8) is one parameter.
func shownSGR(params string) string {
	if strings.Trim(params, "0123456789;:") != "" {
		return ""
	}
	ps := strings.Split(params, ";")
	kept := make([]string, 0, len(ps))
	for k := 0; k < len(ps); k++ {
		p := ps[k]
		if strings.Contains(p, ":") {
			kept = append(kept, p)
			continue
		}
		switch n, _ := strconv.Atoi(p); n {
		case 8:
			continue
		case 38, 48, 58:
			args := 0
			if k+1 < len(ps) {
				switch ps[k+1] {
				case "5":
					args = 2
				case "2":
					args = 4
				}
			}
			end := min(k+1+args, len(ps))
			kept = append(kept, ps[k:end]...)
			k = end - 1
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return ""
	}
	return "\x1b[" + strings.Join(kept, ";") + "m"
}
