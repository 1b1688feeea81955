package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
// against "jobwatch demo" and checks what a reader is told to expect, in
// the POSIX shell (dash, Debian's sh) as well as in bash.
func TestREADMECurlExamples(t *testing.T) {
	needTools(t, "sh", "bash", "curl", "jq")
	base := startDemo(t)
	for _, shell := range []struct{ name, prelude string }{
		{"sh", "set -eu\n"}, // dash has no pipefail
		{"bash", "set -euo pipefail\n"},
	} {
		t.Run(shell.name, func(t *testing.T) {
			script := shell.prelude + strings.Join(readmeBlocks(t, "curl"), "\n")
			script = strings.ReplaceAll(script, "http://127.0.0.1:8080", base)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, shell.name, "-c", script).CombinedOutput()
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
		})
	}
}

// jobwatchOnPath puts a "jobwatch" on PATH that runs this test binary as
// the real command, so README blocks run as a reader types them, and
// returns the environment to run them in.
func jobwatchOnPath(t *testing.T, server string) []string {
	t.Helper()
	bin := t.TempDir()
	wrapper := "#!/bin/sh\nJOBWATCH_TEST_RUN_MAIN=1 exec '" + os.Args[0] + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "jobwatch"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"JOBWATCH_SERVER="+server, "JOBWATCH_TOKEN=")
}

// TestREADMEWorkerExampleRunsTheShippedScript runs the README's worker
// block as written, from the repository's root as the README's paths
// assume: the worker runs examples/resize.sh, and the job submitted for
// it succeeds with the result the README promises.
func TestREADMEWorkerExampleRunsTheShippedScript(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	blocks := readmeBlocks(t, "worker")
	// The block leaves its worker in the background; stop it as Ctrl-C
	// would (SIGTERM: a background job of a script ignores SIGINT) and
	// let it drain.
	script := "set -eu\n" + strings.Join(blocks, "\n") + "\nkill -TERM $!\nwait $!\n"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = jobwatchOnPath(t, s.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's worker example failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCEEDED") || !strings.Contains(string(out), `"cat-small.png"`) {
		t.Fatalf("the README's worker example printed:\n%s\nwant the job SUCCEEDED with result \"cat-small.png\"", out)
	}
}

// TestREADMEGoExampleUsesAKindTheDemoRuns: the README says to run the Go
// example against jobwatch demo, so its kind must be one the demo's
// workers run, or it waits for ever.
func TestREADMEGoExampleUsesAKindTheDemoRuns(t *testing.T) {
	for _, block := range readmeBlocks(t, "go") {
		kinds := regexp.MustCompile(`Kind: "([^"]+)"`).FindAllStringSubmatch(block, -1)
		if len(kinds) == 0 {
			t.Fatalf("the README's Go example submits no kind:\n%s", block)
		}
		for _, k := range kinds {
			if !slices.Contains(demoKinds, k[1]) {
				t.Errorf("the README's Go example submits %q, which jobwatch demo does not run (it runs %v)", k[1], demoKinds)
			}
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

// The shipped example takes a file name from a caller's payload, so it
// must not let one pick an option of convert or a file outside the
// worker's directory.
func TestResizeScriptRefusesPayloadsThatAreNotAFileNameHere(t *testing.T) {
	for _, payload := range []string{`"-help.png"`, `"../secret.png"`, `"a/../../b.png"`, `"/etc/x.png"`, `".."`} {
		cmd := exec.Command("sh", "../../examples/resize.sh")
		cmd.Stdin = strings.NewReader(payload)
		out, err := cmd.Output()
		if err == nil || !strings.HasPrefix(string(out), "error BadPayload ") {
			t.Errorf("payload %s: err = %v, output %q; want a failure naming BadPayload", payload, err, out)
		}
	}
	cmd := exec.Command("sh", "../../examples/resize.sh")
	cmd.Stdin = strings.NewReader(`"sub/cat.png"`)
	if out, err := cmd.Output(); err != nil || !strings.HasSuffix(string(out), "\"sub/cat-small.png\"\n") {
		t.Errorf("payload naming a file below the directory: err = %v, output %q", err, out)
	}
}
