package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// derivedDefaults are serve's flags whose default is not one value: it
// is computed from this machine (its open-file limit, its memory) or
// from another flag (0 in --help). The flag table says how, in words.
var derivedDefaults = map[string]bool{
	"max-connections":             true,
	"max-pending-send-bytes":      true,
	"max-new-connections":         true,
	"max-parked-calls-per-conn":   true,
	"max-parked-calls-per-tenant": true,
}

// flagRow is one row of a flag table: | `--name` | default | meaning |.
type flagRow struct {
	file, def string
	line      int
}

// serveFlagTable finds the table of serve's flags: the first table of
// `--flag` rows under a heading "Serving", in README.md or, once the
// operator's manual moves there, in a page of docs/. It returns the rows
// by flag name (without the dashes), the file it read and the rows
// listed twice.
func serveFlagTable(t *testing.T) (rows map[string]flagRow, file string, twice []string) {
	t.Helper()
	files := []string{"../../README.md"}
	docs, _ := filepath.Glob("../../docs/*.md")
	files = append(files, docs...)
	rowRE := regexp.MustCompile("^\\|\\s*`--([a-z0-9-]+)`\\s*\\|([^|]*)\\|")
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rows = map[string]flagRow{}
		inSection, inTable, fenced := false, false, false
	lines:
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fenced = !fenced
				continue
			}
			switch {
			case fenced:
				continue
			case strings.HasPrefix(line, "#"):
				if len(rows) > 0 {
					break lines // the table ended with its section
				}
				inSection = strings.TrimSpace(strings.TrimLeft(line, "#")) == "Serving"
				continue
			case !inSection:
				continue
			}
			m := rowRE.FindStringSubmatch(line)
			if m == nil {
				if inTable && !strings.HasPrefix(line, "|") {
					break lines // the first table of flags has ended
				}
				continue
			}
			inTable = true
			if _, ok := rows[m[1]]; ok {
				twice = append(twice, m[1])
			}
			rows[m[1]] = flagRow{file: filepath.Base(path), def: strings.TrimSpace(m[2]), line: i + 1}
		}
		if len(rows) > 0 {
			return rows, filepath.Base(path), twice
		}
	}
	t.Fatalf("no table of `--flag` rows under a heading \"Serving\" in %v", files)
	return nil, "", nil
}

// sameDefault reports whether the table's literal default lit is the
// flag's default: the same text, or the same duration or number written
// another way ("60s" for 1m0s, "10,000" for 10000).
func sameDefault(lit string, f *flag.Flag) bool {
	if lit == f.DefValue {
		return true
	}
	if want, err := time.ParseDuration(f.DefValue); err == nil {
		got, err := time.ParseDuration(lit)
		return err == nil && got == want
	}
	if want, err := strconv.ParseInt(f.DefValue, 10, 64); err == nil {
		got, err := strconv.ParseInt(strings.NewReplacer(",", "", "_", "").Replace(lit), 10, 64)
		return err == nil && got == want
	}
	return false
}

// TestTheServeFlagTableInTheDocsIsServes holds the table of serve's
// flags (README.md, or the docs/ page it moved to) to the flags serve
// declares (the defaults --help prints): every flag is listed once,
// nothing else is, and each default is the one serve takes, or, for a
// default computed on the machine or from another flag, says so in
// words. It reports every row that disagrees.
func TestTheServeFlagTableInTheDocsIsServes(t *testing.T) {
	var f serveFlags
	fs := newServeFlagSet(&f, io.Discard)
	rows, file, twice := serveFlagTable(t)
	for _, name := range twice {
		t.Errorf("%s lists --%s twice", file, name)
	}
	fs.VisitAll(func(fl *flag.Flag) {
		row, ok := rows[fl.Name]
		switch {
		case !ok:
			t.Errorf("%s's flag table lacks --%s (default %q): add | `--%s` | ... | %s |", file, fl.Name, fl.DefValue, fl.Name, fl.Usage)
			return
		case derivedDefaults[fl.Name]:
			if row.def == "" {
				t.Errorf("%s:%d: --%s: the default column is empty; say how the default is computed", row.file, row.line, fl.Name)
			}
			return
		}
		lit, isLiteral := strings.CutPrefix(row.def, "`")
		lit, closed := strings.CutSuffix(lit, "`")
		switch {
		case fl.DefValue == "" && row.def != "":
			t.Errorf("%s:%d: --%s: the table gives the default %s, serve has none (leave the column empty)", row.file, row.line, fl.Name, row.def)
		case fl.DefValue == "":
		case !isLiteral || !closed || strings.Contains(lit, "`"):
			t.Errorf("%s:%d: --%s: the default column says %q; write serve's default as code: `%s`", row.file, row.line, fl.Name, row.def, fl.DefValue)
		case !sameDefault(lit, fl):
			t.Errorf("%s:%d: --%s: the table's default is `%s`, serve's is %q", row.file, row.line, fl.Name, lit, fl.DefValue)
		}
	})
	for name, row := range rows {
		if fs.Lookup(name) == nil {
			t.Errorf("%s:%d: the table lists --%s, which serve does not have", row.file, row.line, name)
		}
	}
	for name := range derivedDefaults {
		if fs.Lookup(name) == nil {
			t.Errorf("derivedDefaults names --%s, which serve does not have", name)
		}
	}
}

// The comparison itself: a table that drifted is caught.
func TestTheFlagTableCheckCatchesADriftedDefault(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("wait-cap", time.Minute, "")
	fs.Int("max-request-bytes", 1<<20, "")
	fs.String("addr", "127.0.0.1:8080", "")
	for _, tt := range []struct {
		flag, lit string
		same      bool
	}{
		{"wait-cap", "60s", true},
		{"wait-cap", "1m", true},
		{"wait-cap", "30s", false},
		{"max-request-bytes", "1048576", true},
		{"max-request-bytes", "1,048,576", true},
		{"max-request-bytes", "1048577", false},
		{"addr", "127.0.0.1:8080", true},
		{"addr", "0.0.0.0:8080", false},
	} {
		if got := sameDefault(tt.lit, fs.Lookup(tt.flag)); got != tt.same {
			t.Errorf("sameDefault(%q, --%s) = %v, want %v", tt.lit, tt.flag, got, tt.same)
		}
	}
}
