package yamlread_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jobwatch/jobwatch/internal/yamlread"
)

func TestASyntaxErrorIsReportedAtItsLineAndColumn(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{"a key indented under a scalar", "a: 1\nb: 2\n  c: 3\n", "f.yaml:3:4: not valid YAML: mapping values are not allowed in this context"},
		{"an unclosed flow list", "a: 1\nb: [1, 2\n", "f.yaml:2:5: not valid YAML: did not find expected ',' or ']'"},
		{"a tab for indentation", "a:\n\t- b\n", "f.yaml:2:1: not valid YAML: found character that cannot start any token"},
		{"a mapping key after a list at the same level", "- a\nb: c\n", "f.yaml:2:"},
		{"an unknown escape in a quoted string", "a: 1\nb: \"\\q\"\n", "f.yaml:2:5: not valid YAML: found unknown escape character"},
		{"an alias to no anchor, named on line 2", "a: &x 1\nb: *secret_name\n", "f.yaml:2:"},
		{"a mistake in a second document", "a: 1\n---\nb: [\n", "f.yaml:3:"},
		{"a cron expression not quoted", "schedules:\n  nightly:\n    cron: */5 * * * *\n",
			`f.yaml:3:11: not valid YAML: did not find expected alphabetic or numeric character; a value that begins with '*' is YAML syntax unless it is quoted, as a cron expression must be: cron: "*/5 * * * *"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := yamlread.Read("f.yaml", []byte(tt.text))
			var e *yamlread.Error
			if !errors.As(err, &e) || e.Line == 0 || e.Column == 0 || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant an *Error starting %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret_name") {
				t.Errorf("the error %q repeats the anchor's name", err)
			}
		})
	}
}

func TestAFileThatDeclaresNothingHasNoRoot(t *testing.T) {
	for _, text := range []string{"", "# a comment\n", "---\n", "~\n", "null\n"} {
		r, root, err := yamlread.Read("f.yaml", []byte(text))
		if err != nil || root != nil || r == nil {
			t.Errorf("%q: root %v, %v; want no root and no error", text, root, err)
		}
	}
	if _, _, err := yamlread.Read("f.yaml", []byte("a: 1\n---\nb: 2\n")); err == nil || err.Error() != "f.yaml:2:1: the file holds one YAML document; remove the second" {
		t.Errorf("two documents: %v", err)
	}
}

// read walks text as a mapping with the one key "v", read by field.
func read(t *testing.T, text string, field func(r *yamlread.Reader, key string, v *yaml.Node)) error {
	t.Helper()
	r, root, err := yamlread.Read("f.yaml", []byte(text))
	if err != nil {
		t.Fatalf("read %q: %v", text, err)
	}
	r.Mapping(root, "", yamlread.Fields{
		"v":      func(k string, v *yaml.Node) { field(r, k, v) },
		"anchor": func(string, *yaml.Node) {},
	})
	return r.Err()
}

func TestEveryMistakeSaysWhatItFoundWithoutRepeatingIt(t *testing.T) {
	noName := func(s string) string {
		if strings.Contains(s, " ") {
			return "may not contain a space"
		}
		return ""
	}
	str := func(r *yamlread.Reader, k string, v *yaml.Node) { r.String(v, k) }
	tests := []struct {
		name  string
		text  string
		field func(r *yamlread.Reader, key string, v *yaml.Node)
		want  string
	}{
		{"a number for a string", "v: 1234567\n", str, "f.yaml:1:4: v: must be a string (quote it if it looks like a number), got a whole number"},
		{"a list for a string", "v: [secret]\n", str, "f.yaml:1:4: v: must be a string (quote it if it looks like a number), got a list"},
		{"a mapping for a list", "v: {secret: 1}\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.List(v, k, func(string, *yaml.Node) {}) },
			"f.yaml:1:4: v: must be a list (lines starting with -, or [a, b]), got a mapping"},
		{"a name the rule refuses", "v: my secret\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Name(v, k, noName) }, "f.yaml:1:4: v: may not contain a space"},
		{"an empty name", "v: \"\"\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Name(v, k, noName) }, "f.yaml:1:4: v: must not be empty"},
		{"a name in a list", "v: [a, my secret]\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Names(v, k, noName) }, "f.yaml:1:8: v[1]: may not contain a space"},
		{"a word that is not one of the choices", "v: secret\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.OneOf(v, k, "a", "b", "c") }, "f.yaml:1:4: v: must be a, b or c"},
		{"a word for a number", "v: secret\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Int(v, k, 1, 10) }, "f.yaml:1:4: v: must be a whole number, got a string"},
		{"a number out of range", "v: 11\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Int(v, k, 1, 10) }, "f.yaml:1:4: v: must be from 1 to 10, got 11"},
		{"a whole number too large for an int", "v: 99999999999999999999\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Int(v, k, 1, 10) }, "f.yaml:1:4: v: must be from 1 to 10"},
		{"a fraction for a whole number", "v: 1.5\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Int(v, k, 1, 10) }, "f.yaml:1:4: v: must be a whole number, got a floating-point number"},
		{"a word for true or false", "v: secret\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Bool(v, k) }, "f.yaml:1:4: v: must be true or false, got a string"},
		{"a word for a duration", "v: secret\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Duration(v, k) }, "f.yaml:1:4: v: is not a duration such as 30s, 5m or 24h"},
		{"a duration without a unit", "v: 30\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Duration(v, k) }, "f.yaml:1:4: v: a number needs a unit: write it as 30s, 5m or 1h30m"},
		{"a negative duration", "v: -1m\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.Duration(v, k) }, "f.yaml:1:4: v: must be positive, got -1m0s"},
		{"an unknown key", "v: a\nw: 2\n", str, "f.yaml:2:1: w: unknown key (known here: anchor v)"},
		{"an unknown key that looks like a token", "v: a\njw_secret: 2\n", str, "f.yaml:2:1: an unknown key that looks like a token (not shown) (known here: anchor v)"},
		{"a key given twice", "v: a\nv: b\n", str, "f.yaml:2:1: v: given twice"},
		{"a key with no value", "v:\n", str, "f.yaml:1:1: v: has no value"},
		{"a merge key", "anchor: &a {x: 1}\n<<: *a\nv: a\n", str, "f.yaml:2:1: merge keys (<<) are not read here; write the keys out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := read(t, tt.text, tt.field)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error %q repeats what the file holds", err)
			}
		})
	}
}

func TestAliasesAreFollowedWhereverAValueMayStand(t *testing.T) {
	var got []string
	var every time.Duration
	err := read(t, "anchor: {names: &n [a, b], every: &e 5m}\nv: {names: *n, every: *e}\n", func(r *yamlread.Reader, k string, v *yaml.Node) {
		r.Mapping(v, k, yamlread.Fields{
			"names": func(k string, v *yaml.Node) { got, _ = r.Names(v, k, func(string) string { return "" }) },
			"every": func(k string, v *yaml.Node) { every, _ = r.Duration(v, k) },
		})
	})
	if err != nil || strings.Join(got, ",") != "a,b" || every != 5*time.Minute {
		t.Fatalf("read names %v, every %v, %v; want a,b and 5m through the aliases", got, every, err)
	}
	// A mistake in what an alias names is reported where the text is.
	err = read(t, "anchor: &x [1]\nv: *x\n", func(r *yamlread.Reader, k string, v *yaml.Node) { r.String(v, k) })
	if err == nil || err.Error() != "f.yaml:1:9: v: must be a string (quote it if it looks like a number), got a list" {
		t.Errorf("a mistake through an alias: %v", err)
	}
}

func TestEntriesReadKeysTheFileChooses(t *testing.T) {
	r, root, err := yamlread.Read("f.yaml", []byte("db: 4\ncache: 2\ndb: 1\n\"a b\": 3\nempty:\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	r.Entries(root, "pools", func(s string) string {
		if strings.Contains(s, " ") {
			return "may not contain a space"
		}
		return ""
	}, func(k, name string, v *yaml.Node) { got[name], _ = r.Int(v, k, 1, 10) })
	want := "f.yaml:3:1: pools.db: given twice\nf.yaml:4:1: pools: may not contain a space\nf.yaml:5:1: pools.empty: has no value"
	if err := r.Err(); err == nil || err.Error() != want || got["db"] != 4 || got["cache"] != 2 {
		t.Fatalf("read %v, error\n%v\nwant\n%s", got, err, want)
	}
	if !r.Has("pools.cache") || r.Has("pools.redis") {
		t.Error("Has does not know which keys the walk met")
	}
}

func TestFailAtReportsWhereTheWalkMetTheKey(t *testing.T) {
	r, root, err := yamlread.Read("f.yaml", []byte("queues:\n  - name: a\n  - name: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	r.Mapping(root, "", yamlread.Fields{"queues": func(k string, v *yaml.Node) {
		r.List(v, k, func(k string, v *yaml.Node) {
			r.Mapping(v, k, yamlread.Fields{"name": func(k string, v *yaml.Node) { r.String(v, k) }})
		})
	}})
	r.FailAt("queues[1].name", "declared twice")
	r.FailAt("queues[1]", "needs more")
	if err := r.Err(); err == nil || err.Error() != "f.yaml:3:5: queues[1].name: declared twice\nf.yaml:3:5: queues[1]: needs more" {
		t.Fatalf("errors %v", err)
	}
}

// TestASyntaxErrorDeepInALongFileIsFoundWhereItIs: the parser names the
// start of the construct it was reading (here the list on line 1), or
// no line at all; the reader reports the line and column of the mistake.
func TestASyntaxErrorDeepInALongFileIsFoundWhereItIs(t *testing.T) {
	var file strings.Builder
	file.WriteString("tokens:\n")
	for i := range 400 {
		fmt.Fprintf(&file, "  - {sha256: %064d, role: admin}\n", i)
	}
	for _, tt := range []struct{ tail, want string }{
		{"  x: 1\n", "f.yaml:402:4: not valid YAML: did not find expected '-' indicator"},
		{"  - {sha256: \"\\q\"}\n", "f.yaml:402:15: not valid YAML: found unknown escape character"},
		{"  - {sha256: *secret}\n", "f.yaml:402:"},
		{"  - \"secret\n", "f.yaml:402:"},
	} {
		_, _, err := yamlread.Read("f.yaml", []byte(file.String()+tt.tail))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%q at the end of a long file: %v; want %s…, without the file's text", tt.tail, err, tt.want)
		}
	}
}

// FuzzRead: no file makes the reader panic, a refusal is an *Error at a
// place inside the file (or none), and it never repeats a name the file
// gives an anchor.
func FuzzRead(f *testing.F) {
	f.Add("a: 1\nb: [1, 2\n")
	f.Add("a: &jw_secret 1\nb: *jw_secret\nc: *jw_secret_missing\n")
	f.Add("- a\nb: c\n")
	f.Add("a: 'jw_secret\n")
	f.Add("a: 1\n---\nb: [\n")
	f.Fuzz(func(t *testing.T, data string) {
		_, _, err := yamlread.Read("f.yaml", []byte(data))
		if err == nil {
			return
		}
		var e *yamlread.Error
		if !errors.As(err, &e) {
			t.Fatalf("refused with %T %v, want an *Error", err, err)
		}
		// YAML breaks lines at "\r\n", "\n" and a lone "\r" alike.
		breaks := strings.ReplaceAll(data, "\r\n", "\n")
		if lines := strings.Count(breaks, "\n") + strings.Count(breaks, "\r") + 1; e.Line < 0 || e.Line > lines || (e.Line == 0) != (e.Column == 0) {
			t.Fatalf("refused at %d:%d, outside a file of %d lines: %v", e.Line, e.Column, lines, err)
		}
		if strings.Contains(err.Error(), "jw_secret") {
			t.Fatalf("the refusal repeats the file's text: %v", err)
		}
	})
}
