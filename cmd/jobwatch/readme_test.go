package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/ci"
)

// readmeBlocks returns the code blocks of README.md marked with
// "<!-- readme-test: NAME -->".
func readmeBlocks(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- readme-test: " + regexp.QuoteMeta(name) + " -->\n```\\w+\n(.*?)```")
	var blocks []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no %q blocks", name)
	}
	return blocks
}

// needTools fails under CI (where .ci/run installs them) and skips
// elsewhere when a command the test drives is missing.
func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		ci.Require(t, err, "the README's examples need "+n)
	}
}

// startDemo runs "jobwatch demo" in-process on a free port, as the README
// tells a newcomer to, and returns its base URL.
func startDemo(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "demo.db"), "--every", "0"}, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("demo did not stop")
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := regexp.MustCompile(`open (http://\S+)/`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("demo printed no URL")
		return ""
	}
}

// TestREADMECurlExamples runs the README's curl examples, as written,
// against "jobwatch demo" and checks what a reader is told to expect.
func TestREADMECurlExamples(t *testing.T) {
	needTools(t, "bash", "curl", "jq")
	base := startDemo(t)
	script := "set -euo pipefail\n" + strings.Join(readmeBlocks(t, "curl"), "\n")
	script = strings.ReplaceAll(script, "http://127.0.0.1:8080", base)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("README examples failed: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^j_[0-9a-z]+$`),                            // submit printed the id
		regexp.MustCompile(`"state": "JOB_STATE_SUCCEEDED"`),               // wait returned the end
		regexp.MustCompile(`"rows_enriched"`),                              // with the result inline
		regexp.MustCompile(`(?m)^\{"job":\{.*"state":"JOB_STATE_RUNNING"`), // watch streamed progress
		regexp.MustCompile(`(?m)^\{"job":\{.*"state":"JOB_STATE_SUCCEEDED"`),
		regexp.MustCompile(`"code":"not_found"`),
	} {
		if !want.MatchString(got) {
			t.Errorf("README examples' output lacks %s:\n%s", want, got)
		}
	}
}

// TestREADMESnippetsAreTheTestedCode checks that the Go and TypeScript
// examples the README shows are, line for line and in order, in the files
// that the test suite runs, so the README cannot drift from working code.
func TestREADMESnippetsAreTheTestedCode(t *testing.T) {
	tests := []struct {
		name, block, file string
		// rewrite maps README text to the tested file's text, where the
		// example must differ (the tested one starts its own server).
		rewrite map[string]string
	}{
		{"the Go client example runs in client/example_test.go", "go", "../../client/example_test.go",
			map[string]string{`client.New("http://127.0.0.1:8080")`: "client.New(serverURL)"}},
		{"the Node example is in web/examples/node-client.ts", "ts", "../../web/examples/node-client.ts", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(src), "\n")
			for _, block := range readmeBlocks(t, tt.block) {
				for old, repl := range tt.rewrite {
					block = strings.ReplaceAll(block, old, repl)
				}
				at := 0
				for _, want := range strings.Split(block, "\n") {
					want = strings.TrimSpace(want)
					if want == "" {
						continue
					}
					for at < len(lines) && strings.TrimSpace(lines[at]) != want {
						at++
					}
					if at == len(lines) {
						t.Fatalf("README line %q is not in %s (in this order)", want, tt.file)
					}
				}
			}
		})
	}
}
