package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestEveryCommandExplainsItself: "jobwatch help CMD" and "CMD -h" print
// the command's own usage (never Go's "Usage of …" line) on stdout, so
// that it pipes, and exit 0.
func TestEveryCommandExplainsItself(t *testing.T) {
	for _, name := range []string{"serve", "demo", "submit", "get", "list", "cancel", "start", "wait", "watch", "worker", "bench"} {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(usage, "\n  "+name+" ") {
				t.Errorf("jobwatch's usage does not list %s", name)
			}
			code, out, errOut := runJobwatch(t, "help", name)
			if code != 0 || !strings.HasPrefix(out, "Usage: jobwatch "+name) || strings.Contains(out, "Usage of") {
				t.Fatalf("jobwatch help %s = exit %d, stdout %q, stderr %q; want 0 and its usage on stdout", name, code, out, errOut)
			}
			for _, h := range []string{"-h", "--help"} {
				code, out, errOut = runJobwatch(t, name, h)
				if code != 0 || !strings.HasPrefix(out, "Usage: jobwatch "+name) || errOut != "" {
					t.Fatalf("jobwatch %s %s = exit %d, stdout %q, stderr %q; want 0 and its usage on stdout, as help %s gives it", name, h, code, out, errOut, name)
				}
			}
		})
	}
	for _, name := range []string{"get", "cancel", "start", "wait", "watch"} {
		if _, out, _ := runJobwatch(t, "help", name); !strings.HasPrefix(out, "Usage: jobwatch "+name+" ID ") {
			t.Errorf("jobwatch help %s begins %.40q; want it to show the ID it takes", name, out)
		}
	}
	if code, _, errOut := runJobwatch(t, "help", "frobnicate"); code != 2 || !strings.Contains(errOut, "no such command") {
		t.Fatalf("jobwatch help frobnicate = exit %d, %q; want 2 and no such command", code, errOut)
	}
	for _, args := range [][]string{{"help", "version"}, {"version", "-h"}, {"version", "--help"}} {
		if code, out, _ := runJobwatch(t, args...); code != 0 || !strings.HasPrefix(out, "Usage: jobwatch version") {
			t.Errorf("jobwatch %s = exit %d, %q; want 0 and its usage", strings.Join(args, " "), code, out)
		}
	}
	// The usage lists help as a command: it explains itself too.
	if code, out, _ := runJobwatch(t, "help", "help"); code != 0 || !strings.HasPrefix(out, "Usage: jobwatch help [COMMAND]") {
		t.Errorf("jobwatch help help = exit %d, %q; want 0 and its usage", code, out)
	}
}

// The mistakes a new user makes on the command line are answered with
// what to do instead: exit 2 and a sentence, never the flag package's
// bare "parse error".
func TestCommandLineMistakesSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "http://127.0.0.1:1", "submit", "k"}, "--server comes after the command: jobwatch submit --server http://127.0.0.1:1 k\n"},
		{[]string{"serve", "--wait-cap", "5"}, `--wait-cap "5": a duration needs a unit, such as 30s`},
		{[]string{"wait", "j_1", "--timeout", "10"}, `--timeout "10": a duration needs a unit`},
		{[]string{"submit", "k", "--payload", "{bogus"}, "--payload is not JSON: syntax error"},
		{[]string{"submit", "k", "--payload", "  "}, "--payload is not JSON: it is empty: JSON has at least a value"},
		// --payload {"batches":5} typed without single quotes.
		{[]string{"submit", "k", "--payload", "{batches:5}"}, "--payload is not JSON: syntax error (line 1:2): invalid value batches; " +
			"if the shell took its double quotes out, quote the whole JSON in single quotes: --payload '{\"batches\":5}'\n"},
		{[]string{"submit", "k", "--payload", "[a,{b:true}]"}, `quote the whole JSON in single quotes: --payload '["a",{"b":true}]'`},
		{[]string{"submit", "k", "--payload", "{a:}"}, `quote the whole JSON in single quotes: --payload '{"key":"value"}'`},
		{[]string{"submit", "k", "--payload", `{"id":9007199254740993}`}, "--payload.id: 9007199254740993 is an integer beyond ±2^53"},
		{[]string{"submit", "k", "--payload", "@"}, "--payload @FILE needs the file's name"},
		{[]string{"help", "submit", "extra"}, "help takes one command: jobwatch help submit\n"},
		{[]string{"version", "--bogus"}, "version takes no arguments"},
		{[]string{"demo", "--concurrency", "0"}, "--concurrency must be at least 1"},
		{[]string{"demo", "--lease-timeout", "0s"}, "--lease-timeout must be at least 1s"},
		{[]string{"worker", "--kind", "a b", "--exec", "true"}, `--kind "a b": may only contain`},
		{[]string{"worker", "--kind", "a", "--id", "x y", "--exec", "true"}, `--id "x y": may only contain`},
		{[]string{"worker", "--kind", "a", "--exec", "true", "--heartbeat", "0s"}, "--heartbeat must be at least 100ms"},
		{[]string{"worker", "--kind", "a", "--exec", "true", "--heartbeat", "1ms"}, "--heartbeat must be at least 100ms"},
		{[]string{"submit", "--file", jobsFile(t, `{"kind":"k","frob":1}`)}, `jobs.jsonl is not a SubmitJobRequest as JSON: (line 1:13): unknown field "frob"`},
		{[]string{"submit", "--file", jobsFile(t, `{"kind":"k","payload":"\ud800"}`)}, "jobs.jsonl is not a SubmitJobRequest as JSON: a JSON string holds an escaped half of a UTF-16 surrogate pair"},
		{[]string{"submit", "--file", jobsFile(t, `{"kind":"k"}`+"\n"+`{"kind":"k","payload":{"q":9007199254740995}}`)}, "jobs.jsonl: payload.q: 9007199254740995 is an integer beyond ±2^53"},
	} {
		if code, _, errOut := runJobwatch(t, tc.args...); code != 2 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "parse error") ||
			strings.Contains(errOut, "proto:") {
			t.Errorf("jobwatch %s = exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	// JSON with its double quotes, only wrong, is not blamed on the shell.
	if code, _, errOut := runJobwatch(t, "submit", "k", "--payload", `{"a":}`); code != 2 || strings.Contains(errOut, "single quotes") {
		t.Errorf(`jobwatch submit k --payload '{"a":}' = exit %d, stderr %q; want 2 without a word of the shell's quotes`, code, errOut)
	}
}

// A mistyped command or flag a letter or two from one that exists names
// the one meant, alone (exit 2); one near nothing gets the list of
// commands, and a flag the command's -h.
func TestAMistypedCommandOrFlagNamesTheOneMeant(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sumbit", "enrich"}, "jobwatch: unknown command \"sumbit\"; did you mean \"submit\"?\n"},
		{[]string{"lst"}, "jobwatch: unknown command \"lst\"; did you mean \"list\"?\n"},
		{[]string{"sched"}, "jobwatch: unknown command \"sched\"; did you mean \"schedules\"?\n"},
		{[]string{"help", "sumbit"}, "jobwatch: help sumbit: no such command; did you mean \"submit\"?\n"},
		{[]string{"submit", "enrich", "--paylod", "{}"},
			"jobwatch: submit: flag provided but not defined: -paylod; did you mean --payload?\nRun \"jobwatch submit -h\" for its flags.\n"},
		{[]string{"list", "--sate", "running"},
			"jobwatch: list: flag provided but not defined: -sate; did you mean --state?\nRun \"jobwatch list -h\" for its flags.\n"},
		{[]string{"list", "--bogus"}, "jobwatch: list: flag provided but not defined: -bogus\nRun \"jobwatch list -h\" for its flags.\n"},
	} {
		if code, out, errOut := runInProcess(t, tc.args...); code != 2 || out != "" || errOut != tc.want {
			t.Errorf("jobwatch %s = exit %d, stdout %q, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if code, _, errOut := runInProcess(t, "frobnicate"); code != 2 || !strings.HasPrefix(errOut, "jobwatch: unknown command \"frobnicate\"\n\n"+usage[:40]) {
		t.Errorf("jobwatch frobnicate = exit %d, stderr %q; want 2 and the list of commands", code, errOut)
	}
	// The names suggested are those the usage lists, each a command.
	names := commandNames()
	for _, name := range names {
		if command(name) == nil && name != "version" && name != "help" {
			t.Errorf("the usage lists %q, which is no command", name)
		}
	}
	if len(names) < 20 || names[0] != "serve" {
		t.Errorf("the commands read from the usage are %q; want every one listed, serve first", names)
	}
}

// jobsFile is a file of job lines for submit --file, named jobs.jsonl.
func jobsFile(t *testing.T, lines string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(name, []byte(lines+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestServeHelpShowsTheLogLevelAsTheREADMESpellsIt(t *testing.T) {
	code, out, _ := runJobwatch(t, "help", "serve")
	if code != 0 || !strings.Contains(out, "(default info)") || strings.Contains(out, "INFO") {
		t.Fatalf("jobwatch help serve = exit %d:\n%s\nwant the --log-level default as \"info\"", code, out)
	}
}

func TestVersionSaysWhatTheBinaryWasBuiltFrom(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"-v"}, {"version"}} {
		code, out, errOut := runJobwatch(t, args...)
		// The test binary carries no module version or VCS stamp.
		if code != 0 || out != "jobwatch dev\n" {
			t.Fatalf("jobwatch %v = exit %d, %q (stderr %q); want 0 and \"jobwatch dev\"", args, code, out, errOut)
		}
	}
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "dev"},
		{"go run, go test", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"go install …@v1.2.0", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "v1.2.0"},
		{"a build that stamped the revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "0123456789ab"},
		{"a build of a modified checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "0123456789ab-dirty"},
	} {
		if got := versionFrom(tt.bi); got != tt.want {
			t.Errorf("%s: version %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestDemoStopsWhenServingFails: the demo's workers and submitter stop
// with the server, so a failed server returns its error instead of
// hanging until Ctrl-C.
func TestDemoStopsWhenServingFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // Serve's first Accept fails
	done := make(chan error, 1)
	go func() {
		done <- serveDemo(context.Background(), ln, demoOptions{
			db: filepath.Join(t.TempDir(), "demo.db"), every: 10 * time.Millisecond,
			leaseTimeout: 5 * time.Second, concurrency: 2,
		}, io.Discard, io.Discard)
	}()
	select {
	case err := <-done:
		if err == nil || !regexp.MustCompile(`serve: .*closed`).MatchString(err.Error()) {
			t.Fatalf("demo returned %v, want the serve error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("demo still runs after its server failed")
	}
}
