package main

import (
	"bufio"
	"context"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/internal/ci"
)

// The README and the documents under docs/ are checked by the tests in
// this file, so that none of their examples can rot. Every fenced code
// block in README.md and docs/*.md has an info string:
//
//   - "text": output or a table as a program prints it; not run.
//   - a language ("sh", "go", "ts", "yaml", …) preceded by the line
//     "<!-- readme-test: NAME -->": run or checked by the test that
//     docTests names for NAME (curl, cli and worker blocks are run as
//     written; go and ts blocks must be, line for line, code the suite
//     runs; config and tokens blocks must be files serve accepts).
//   - a language followed by "no-run" ("```sh no-run"): a block that
//     cannot run in a test, such as a server that runs until stopped, a
//     minute-long measurement, a second machine or `make test` itself.
//     The block still names real commands; it is only not run here.
//
// TestEveryDocBlockIsRunOrMarkedNoRun holds every block to this.

// docTests maps each "readme-test" name to the test that runs or checks
// its blocks.
var docTests = map[string]string{
	"curl":      "TestREADMECurlExamples",
	"cli":       "TestREADMECommandLineTour",
	"worker":    "TestREADMEWorkerExampleRunsTheShippedScript",
	"go":        "TestREADMEGoExampleUsesAKindTheDemoRuns, TestREADMESnippetsAreTheTestedCode",
	"ts":        "TestREADMESnippetsAreTheTestedCode",
	"ts-client": "TestREADMESnippetsAreTheTestedCode",
	"ts-worker": "TestREADMESnippetsAreTheTestedCode",
	"ts-logs":   "TestREADMESnippetsAreTheTestedCode",
	"config":    "config.TestTheREADMEAndDocsDocumentTheWholeFormat",
	"tokens":    "TestREADMETokensFilesAreFilesServeAccepts",
}

// docBlock is one fenced code block of README.md or docs/*.md.
type docBlock struct {
	file string // relative to the repository's root
	line int    // of the opening fence
	info string // the info string: a language, then "no-run" if so marked
	test string // the NAME of a preceding "<!-- readme-test: NAME -->", or ""
	body string
}

// docFiles are README.md and every Markdown file under docs/, relative to
// this package's directory.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// allDocBlocks returns every fenced code block of README.md and docs/*.md.
func allDocBlocks(t *testing.T) []docBlock {
	t.Helper()
	marker := regexp.MustCompile(`^<!-- readme-test: (\S+) -->$`)
	var blocks []docBlock
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(path, "../../")
		lines := strings.Split(string(b), "\n")
		prev := "" // the last non-blank line outside a block
		for i := 0; i < len(lines); i++ {
			if !strings.HasPrefix(lines[i], "```") {
				if strings.TrimSpace(lines[i]) != "" {
					prev = lines[i]
				}
				continue
			}
			blk := docBlock{file: name, line: i + 1, info: strings.TrimSpace(strings.TrimPrefix(lines[i], "```"))}
			if m := marker.FindStringSubmatch(prev); m != nil {
				blk.test = m[1]
			}
			var body []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				body = append(body, lines[i])
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: a code block that is never closed", name, blk.line)
			}
			blk.body = strings.Join(body, "\n") + "\n"
			blocks = append(blocks, blk)
			prev = ""
		}
	}
	return blocks
}

// readmeBlocks returns the code blocks of README.md and docs/*.md marked
// with "<!-- readme-test: NAME -->".
func readmeBlocks(t *testing.T, name string) []string {
	t.Helper()
	var blocks []string
	for _, b := range allDocBlocks(t) {
		if b.test == name {
			blocks = append(blocks, b.body)
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md and docs/*.md have no %q blocks", name)
	}
	return blocks
}

// TestEveryDocBlockIsRunOrMarkedNoRun: a block a reader could run or
// paste is either run or checked by a test, or says it is not.
func TestEveryDocBlockIsRunOrMarkedNoRun(t *testing.T) {
	blocks := allDocBlocks(t)
	if len(blocks) == 0 {
		t.Fatal("found no code blocks in README.md and docs/*.md")
	}
	for _, b := range blocks {
		words := strings.Fields(b.info)
		noRun := slices.Contains(words, "no-run")
		switch {
		case len(words) == 0:
			t.Errorf("%s:%d: a code block without an info string: give it a language, or \"text\" for output", b.file, b.line)
		case words[0] == "text":
			if b.test != "" {
				t.Errorf("%s:%d: a \"text\" block marked readme-test: %s; text is not run", b.file, b.line, b.test)
			}
		case b.test != "" && noRun:
			t.Errorf("%s:%d: a block both marked readme-test: %s and no-run", b.file, b.line, b.test)
		case b.test != "":
			if _, ok := docTests[b.test]; !ok {
				t.Errorf("%s:%d: readme-test: %s names no test (known: %v)", b.file, b.line, b.test, slices.Sorted(maps.Keys(docTests)))
			}
		case !noRun:
			t.Errorf("%s:%d: a %s block that no test runs: mark it <!-- readme-test: NAME --> with a test that runs it, or \"%s no-run\" if it cannot run in a test", b.file, b.line, words[0], words[0])
		}
	}
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
func startDemo(t *testing.T, flags ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		args := append([]string{"demo", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "demo.db"), "--every", "0"}, flags...)
		done <- run(ctx, args, pw, io.Discard)
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

// TestREADMECommandLineTour runs the README's command-line tour as
// written, with the built command on PATH, against "jobwatch demo": every
// command exits 0 (so wait and submit --wait saw the job succeed), the
// job watched and waited for succeeded, and the hang job was cancelled.
func TestREADMECommandLineTour(t *testing.T) {
	needTools(t, "sh")
	base := startDemo(t)
	script := "set -eu\n" + strings.Join(readmeBlocks(t, "cli"), "\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = jobwatchOnPath(t, base)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's command-line tour failed: %v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		// watch printed progress: a watch starts at the job's latest
		// version, so on a loaded machine the first batches may have
		// passed before it did
		regexp.MustCompile(` RUNNING .* "batch [1-5] of 5"`),
		regexp.MustCompile(`(?m)^state: +SUCCEEDED$`),     // get showed the job's end
		regexp.MustCompile(`(?m)^j_[0-9a-z]+ CANCELLED `), // cancel ended the hang job
	} {
		if !want.Match(out) {
			t.Errorf("the README's command-line tour printed no match for %s:\n%s", want, out)
		}
	}
}

// TestREADMETokensFilesAreFilesServeAccepts: every tokens file the docs
// show is one serve --tokens accepts, and a token a comment names
// (`# of "TOKEN"`) is one the file lists.
func TestREADMETokensFilesAreFilesServeAccepts(t *testing.T) {
	of := regexp.MustCompile(`# of "([^"]+)"`)
	for _, block := range readmeBlocks(t, "tokens") {
		tokens, err := auth.ParseTokens("tokens.yaml", []byte(block))
		if err != nil {
			t.Errorf("serve refuses the docs' tokens file: %v\n%s", err, block)
			continue
		}
		for _, m := range of.FindAllStringSubmatch(block, -1) {
			if _, ok := tokens.Lookup(m[1]); !ok {
				t.Errorf("the docs' tokens file says it lists %q, but that token is not known:\n%s", m[1], block)
			}
		}
	}
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
		{"the TypeScript client example is ts/client/examples/client.ts", "ts-client", "../../ts/client/examples/client.ts",
			map[string]string{`"@jobwatch/client"`: `"../src/node.js"`}},
		{"the TypeScript worker example is ts/client/examples/worker.ts", "ts-worker", "../../ts/client/examples/worker.ts",
			map[string]string{`"@jobwatch/client"`: `"../src/node.js"`}},
		{"the TypeScript log example is printLog in ts/client/test/logs.test.ts", "ts-logs", "../../ts/client/test/logs.test.ts", nil},
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
