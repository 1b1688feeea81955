package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestEveryDocLinkLeadsSomewhere: a link of README.md or docs/*.md to a
// file of the repository names one that exists, and a link to a section
// (#anchor, here or in another Markdown file) names a heading there, by
// the anchors GitHub makes of headings. An outside probe followed one to
// a bold paragraph, which has no anchor.
func TestEveryDocLinkLeadsSomewhere(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^()\s]+)\)`)
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	for _, doc := range docFiles(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, "``"), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := filepath.Clean(doc)
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link to %s: no such file", strings.TrimPrefix(doc, "../../"), i+1, target)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if !anchorsOf(path)[anchor] {
					t.Errorf("%s:%d: link to %s: %s has no heading with that anchor", strings.TrimPrefix(doc, "../../"), i+1, target, strings.TrimPrefix(path, "../../"))
				}
			}
		}
	}
}

// inlineCode is a span of inline code, where a link's shape is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// proseLines are text's lines with those of fenced code blocks blanked,
// so that a heading's or a link's shape inside one is not read as one;
// line numbers stay.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors are the anchors GitHub gives text's headings: the
// heading in lower case, without what is neither a letter, a digit, a
// space, a hyphen nor an underscore, spaces made hyphens, and "-1",
// "-2" after a repeated one.
func headingAnchors(text string) map[string]bool {
	seen := map[string]int{}
	anchors := map[string]bool{}
	for _, l := range proseLines(text) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
