// Package yamlread reads the YAML files jobwatch is given (the serve
// configuration, the tokens file) one way: each mistake, syntax errors
// included, as file:line:col: key: reason, every mistake of a file at
// once. It knows the shape of YAML, not what any file means; the caller
// says which keys a mapping holds and checks what their values mean.
//
// What it decides once, for every file:
//
//   - A refusal never repeats text of the file it could not read as what
//     the key wants: a value in the wrong place may be a token pasted by
//     mistake, and refusals go to logs. It says what it found ("got a
//     number"), and the line and column say where. A key that looks like
//     a token is not shown either. Numbers and durations it did read are
//     shown ("must be from 1 to 10, got 0").
//   - Aliases (*name) are followed wherever a value may stand; a mistake
//     in what an alias names is reported where the anchored text is.
//     Merge keys (<<) are refused: write the keys out.
//   - A key given twice, a key with nothing after it and an unknown key
//     are each a mistake.
//   - A syntax error is placed at the line and column past which the
//     parser could not go on. The YAML library names only a line, often
//     that of the enclosing construct, so the place is found by parsing
//     prefixes of the file again (a few dozen parses, bounded).
package yamlread

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is one mistake in a file: where it is and what is wrong.
type Error struct {
	Path   string // the file
	Line   int    // 1-based; 0 when the mistake has no place
	Column int    // 1-based, in characters
	Key    string // the key at fault as a path, such as "queues[0].retry.max_backoff"; "" for the file
	Reason string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Column, e.Reason)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.Path, e.Line, e.Column, e.Key, e.Reason)
}

// Fields maps each key a mapping may hold to what reads its value. key
// is the path of the key ("queues[0].name"); v is never null nor an
// alias.
type Fields map[string]func(key string, v *yaml.Node)

// Reader walks the tree of one file, collecting every mistake. It is
// not safe for concurrent use.
type Reader struct {
	path string
	errs []error
	at   map[string]*yaml.Node // where each key and list item the walk met was, by path
}

// Read parses data as the file path, which must hold at most one YAML
// document. root is nil when the file declares nothing: it is empty,
// holds only comments, or is null (~). A syntax error or a second
// document is returned as an *Error, with the line and column where the
// parser could not go on.
func Read(path string, data []byte) (r *Reader, root *yaml.Node, err error) {
	r = &Reader{path: path, at: map[string]*yaml.Node{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return r, nil, nil
	case err != nil:
		return nil, nil, syntaxError(path, data, err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, nil, syntaxError(path, data, err)
	default:
		return nil, nil, &Error{Path: path, Line: more.Line, Column: more.Column, Reason: "the file holds one YAML document; remove the second"}
	}
	root = doc.Content[0]
	if resolve(root).ShortTag() == "!!null" {
		return r, nil, nil
	}
	return r, root, nil
}

// lineRE is how the YAML parser gives the line of a syntax error.
var lineRE = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)

// quotedRE is what the YAML parser's messages quote: of the file (an
// anchor's name), or the one character they expected (",", "]").
var quotedRE = regexp.MustCompile(`'[^']*'`)

// unquoted is msg without what it quotes of the file: a quoted single
// character stays, since it cannot hold a secret and says what to type.
func unquoted(msg string) string {
	return quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		if utf8.RuneCountInString(q) <= 3 {
			return q
		}
		return "'…'"
	})
}

// maxSearchBytes bounds the bytes syntaxError parses again to find
// where a syntax error is; past it, the parser's own line is given.
const maxSearchBytes = 16 << 20

// syntaxError is err, a YAML syntax error in data, as an *Error with a
// line and column. The parser gives no column, and its line is the
// start of the construct it was reading, or one past it, or none, so the
// place is found again: the shortest prefix of data, from about that
// line on, that the parser refuses with the same message. What the
// message quotes of the file is left out.
func syntaxError(path string, data []byte, err error) error {
	msg := err.Error()
	m := lineRE.FindStringSubmatch(msg)
	from := 0 // the parser gave no line
	if m != nil && m[1] != "" {
		from, _ = strconv.Atoi(m[1])
	}
	// A scanner error's line may be one past the line it began on.
	line, column := locate(data, withoutLine(msg), from-1)
	reason := "not valid YAML: " + unquoted(withoutLine(msg))
	if c := unquotedMark(data, line); c != 0 {
		reason += fmt.Sprintf("; a value that begins with %q is YAML syntax unless it is quoted, as a cron expression must be: cron: \"*/5 * * * *\"", c)
	}
	return &Error{Path: path, Line: line, Column: column, Reason: reason}
}

// unquotedMarkRE is a key whose value begins with a character that YAML
// reads as syntax (an alias, a reserved mark), not as text.
var unquotedMarkRE = regexp.MustCompile(`^\s*(?:-\s+)?[\w.-]+:\s+([*@` + "`" + `])`)

// unquotedMark returns that character if line n of data (from 1) gives a
// key such a value, or 0.
func unquotedMark(data []byte, n int) byte {
	if n < 1 {
		return 0
	}
	lines := bytes.SplitN(data, []byte("\n"), n+1)
	if len(lines) < n {
		return 0
	}
	if m := unquotedMarkRE.FindSubmatch(lines[n-1]); m != nil {
		return m[1][0]
	}
	return 0
}

// locate finds the line and column at which the parser first refuses
// data with msg (without its line), looking from line from on (0: the parser gave none, so
// from the first). The parser refuses every prefix of data that holds
// the mistake, and almost never a shorter one with the same message, so
// a binary search over prefixes finds the line, then the column: the
// character past which the parser could not go on. When the search
// would parse more than maxSearchBytes, it gives from and the first
// character of that line, or 0, 0.
func locate(data []byte, msg string, from int) (line, column int) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if len(lines) == 0 {
		return 0, 0
	}
	from = min(max(from, 1), len(lines))
	searched := 0
	refused := func(end int) bool {
		if searched += end; searched > maxSearchBytes {
			return true // out of budget: end the search at once
		}
		return refusal(data[:end]) == msg
	}
	// ends[i] is the offset just past line from+i.
	var ends []int
	offset := 0
	for i, text := range lines {
		offset += len(text)
		if i+1 >= from {
			ends = append(ends, offset)
		}
	}
	i := sort.Search(len(ends), func(i int) bool { return refused(ends[i]) })
	if searched > maxSearchBytes || i == len(ends) {
		text := lines[from-1]
		return from, utf8.RuneCount(text[:len(text)-len(bytes.TrimLeft(text, " \t"))]) + 1
	}
	line = from + i
	start := ends[i] - len(lines[line-1])
	c := sort.Search(ends[i]-start, func(c int) bool { return refused(start + c + 1) })
	if searched > maxSearchBytes || c == ends[i]-start {
		return line, 1
	}
	return line, utf8.RuneCount(data[start : start+c+1])
}

// refusal is the parser's first error for data, without its line, ""
// for none.
func refusal(data []byte) string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return withoutLine(err.Error())
		}
	}
}

// withoutLine is a YAML parser's message without "yaml: line N: ".
func withoutLine(msg string) string {
	if m := lineRE.FindString(msg); m != "" {
		return msg[len(m):]
	}
	return msg
}

// Err returns every mistake found, joined (errors.Join) in the order of
// their lines and columns in the file (those without a place last, in
// the order they were found), or nil.
func (r *Reader) Err() error {
	errs := slices.Clone(r.errs)
	slices.SortStableFunc(errs, func(a, b error) int {
		pa, pb := place(a), place(b)
		if c := cmp.Compare(pa[0], pb[0]); c != 0 {
			return c
		}
		return cmp.Compare(pa[1], pb[1])
	})
	return errors.Join(errs...)
}

// place is where in the file err is, as line and column; past every line
// for a mistake without one.
func place(err error) [2]int {
	var e *Error
	if !errors.As(err, &e) || e.Line == 0 {
		return [2]int{math.MaxInt, 0}
	}
	return [2]int{e.Line, e.Column}
}

// Mistakes is how many mistakes were found so far.
func (r *Reader) Mistakes() int { return len(r.errs) }

// Fail records a mistake at n, the node the mistake is in, for key.
func (r *Reader) Fail(n *yaml.Node, key, format string, args ...any) {
	r.errs = append(r.errs, &Error{Path: r.path, Line: n.Line, Column: n.Column, Key: key, Reason: fmt.Sprintf(format, args...)})
}

// FailAt records a mistake at the key path key, which the walk has met
// (Has reports true).
func (r *Reader) FailAt(key, format string, args ...any) {
	n, ok := r.at[key]
	if !ok {
		n = &yaml.Node{}
	}
	r.Fail(n, key, format, args...)
}

// Has reports whether the walk met the key path key, such as
// "queues[0].name" or "queues[0]".
func (r *Reader) Has(key string) bool {
	_, ok := r.at[key]
	return ok
}

// resolve follows an alias (*name) to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// Mapping reads the mapping n at the key path prefix ("" for the file):
// each key must be one of fields, given once, with a value. It reports
// false when n is no mapping.
func (r *Reader) Mapping(n *yaml.Node, prefix string, fields Fields) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.Fail(n, prefix, "must be a mapping (key: value lines), got %s", describe(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		key := join(prefix, k.Value)
		field, ok := fields[k.Value]
		switch {
		case k.ShortTag() == "!!merge":
			r.Fail(k, prefix, "merge keys (<<) are not read here; write the keys out")
			continue
		case !ok && looksLikeToken(k.Value):
			r.Fail(k, prefix, "an unknown key that looks like a token (not shown)%s", knownKeys(fields))
			continue
		case !ok:
			r.Fail(k, key, "unknown key%s", knownKeys(fields))
			continue
		case seen[k.Value]:
			r.Fail(k, key, "given twice")
			continue
		}
		seen[k.Value] = true
		r.at[key] = k
		if v.ShortTag() == "!!null" {
			r.Fail(k, key, "has no value")
			continue
		}
		field(key, v)
	}
	return true
}

// looksLikeToken reports whether a key may be a secret pasted in the
// wrong place: one with jobwatch token new's prefix, or longer than any
// key of a jobwatch file.
func looksLikeToken(key string) bool {
	return strings.Contains(key, "jw_") || len(key) > 32
}

func knownKeys(fields Fields) string {
	if len(fields) == 0 {
		return ""
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	return " (known here: " + strings.Join(names, " ") + ")"
}

// describe says what n is without quoting it.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a floating-point number"
	case "!!bool":
		return "true or false"
	case "!!null":
		return "nothing"
	}
	return "a value"
}

// List calls item for each entry of the list n at key, with the entry's
// key path ("queues[0]") and the entry, aliases followed. It reports
// false when n is no list.
func (r *Reader) List(n *yaml.Node, key string, item func(key string, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		r.Fail(n, key, "must be a list (lines starting with -, or [a, b]), got %s", describe(n))
		return false
	}
	for i, v := range n.Content {
		k := fmt.Sprintf("%s[%d]", key, i)
		r.at[k] = v
		item(k, resolve(v))
	}
	return true
}

// scalar reports whether n is a scalar of tag, and records a mistake
// saying it must be want otherwise.
func (r *Reader) scalar(n *yaml.Node, key, tag, want string) bool {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		r.Fail(n, key, "must be %s, got %s", want, describe(n))
		return false
	}
	return true
}

// String reads a string, "" included.
func (r *Reader) String(n *yaml.Node, key string) (string, bool) {
	if !r.scalar(n, key, "!!str", "a string (quote it if it looks like a number)") {
		return "", false
	}
	return resolve(n).Value, true
}

// Name reads a non-empty string that check accepts: check returns why a
// string cannot be a name, or "" (jobtype.NameReason is one). The value
// is not shown.
func (r *Reader) Name(n *yaml.Node, key string, check func(string) string) (string, bool) {
	s, ok := r.String(n, key)
	if !ok {
		return "", false
	}
	if s == "" {
		r.Fail(resolve(n), key, "must not be empty")
		return "", false
	}
	if reason := check(s); reason != "" {
		r.Fail(resolve(n), key, "%s", reason)
		return "", false
	}
	return s, true
}

// Names reads a list of names, each as Name reads it, in the file's
// order; what a name listed twice means is the caller's to decide.
func (r *Reader) Names(n *yaml.Node, key string, check func(string) string) ([]string, bool) {
	var names []string
	ok := r.List(n, key, func(k string, v *yaml.Node) {
		if s, ok := r.Name(v, k, check); ok {
			names = append(names, s)
		}
	})
	return names, ok
}

// OneOf reads a string that is one of allowed.
func (r *Reader) OneOf(n *yaml.Node, key string, allowed ...string) (string, bool) {
	s, ok := r.String(n, key)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		r.Fail(resolve(n), key, "must be %s", orList(allowed))
		return "", false
	}
	return s, true
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Bool reads true or false.
func (r *Reader) Bool(n *yaml.Node, key string) (v, ok bool) {
	if !r.scalar(n, key, "!!bool", "true or false") {
		return false, false
	}
	if err := resolve(n).Decode(&v); err != nil {
		r.Fail(resolve(n), key, "must be true or false")
		return false, false
	}
	return v, true
}

// Int reads a whole number from least to most.
func (r *Reader) Int(n *yaml.Node, key string, least, most int) (int, bool) {
	if m := resolve(n); m.Kind == yaml.ScalarNode && m.ShortTag() == "!!float" && wholeDigits(m.Value) {
		// A whole number too large for an int, which YAML reads as a float.
		r.Fail(m, key, "must be from %d to %d", least, most)
		return 0, false
	}
	if !r.scalar(n, key, "!!int", "a whole number") {
		return 0, false
	}
	n = resolve(n)
	var v int
	if err := n.Decode(&v); err != nil {
		r.Fail(n, key, "must be from %d to %d", least, most)
		return 0, false
	}
	if v < least || v > most {
		r.Fail(n, key, "must be from %d to %d, got %d", least, most, v)
		return 0, false
	}
	return v, true
}

// wholeDigits reports whether s is digits alone, after an optional sign.
func wholeDigits(s string) bool {
	s = strings.TrimLeft(s, "+-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// durationSyntax is what time.ParseDuration reads, whatever the size:
// a value of this form that it refuses overflowed.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*$`)

// Duration reads a positive Go duration with a unit: 30s, 5m, 24h.
func (r *Reader) Duration(n *yaml.Node, key string) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		r.Fail(n, key, "a number needs a unit: write it as 30s, 5m or 1h30m")
		return 0, false
	}
	if !r.scalar(n, key, "!!str", "a duration such as 30s, 5m or 24h") {
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	switch {
	case err != nil && durationSyntax.MatchString(n.Value):
		r.Fail(n, key, "is longer than a duration can be (about 292 years, 2562047h)")
		return 0, false
	case err != nil:
		r.Fail(n, key, "is not a duration such as 30s, 5m or 24h")
		return 0, false
	case d <= 0:
		r.Fail(n, key, "must be positive, got %v", d)
		return 0, false
	}
	return d, true
}

// Entries reads the mapping n at key whose keys the file chooses (such
// as pool names): each key must be a name check accepts, given once, with
// a value. entry is called with the key's path ("pools.db"), the name and
// the value, aliases followed. It reports false when n is no mapping.
func (r *Reader) Entries(n *yaml.Node, key string, check func(string) string, entry func(key, name string, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.Fail(n, key, "must be a mapping (key: value lines), got %s", describe(n))
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.ShortTag() == "!!merge" {
			r.Fail(k, key, "merge keys (<<) are not read here; write the keys out")
			continue
		}
		if k.Kind == yaml.ScalarNode && k.Value == "" {
			// Name would say the mapping itself "must not be empty".
			r.Fail(k, key, `has an empty key (""): each key must be a name`)
			continue
		}
		name, ok := r.Name(k, key, check)
		if !ok {
			continue
		}
		path := join(key, name)
		if r.Has(path) {
			r.Fail(k, path, "given twice")
			continue
		}
		r.at[path] = k
		if v.ShortTag() == "!!null" {
			r.Fail(k, path, "has no value")
			continue
		}
		entry(path, name, v)
	}
	return true
}
