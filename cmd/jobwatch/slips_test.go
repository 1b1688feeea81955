package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

// A mistyped flag is said once, with the command it was given to and
// where that command's flags are listed; the exit status is 2.
func TestAnUnknownFlagIsReportedOnce(t *testing.T) {
	for _, args := range [][]string{
		{"list", "--bogus"},
		{"get", "j_00000000000000000000000000", "--bogus"},
		{"serve", "--bogus"},
		{"token", "new", "--bogus"},
		{"reload", "--bogus"},
		{"list", "--limit", "many"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, stdout, stderr := runInProcess(t, args...)
			command := strings.Join(args[:len(args)-1], " ")
			if args[0] == "get" || args[len(args)-2] == "--limit" {
				command = args[0]
			}
			problem := "flag provided but not defined: -bogus"
			if args[len(args)-2] == "--limit" {
				problem = `invalid value "many" for flag -limit`
			}
			if code != 2 || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want 2 and nothing on stdout", code, stdout)
			}
			if n := strings.Count(stderr, problem); n != 1 {
				t.Fatalf("the mistake is said %d times, want once:\n%s", n, stderr)
			}
			if !strings.HasPrefix(stderr, "jobwatch: "+command+": "+problem) || !strings.Contains(stderr, `"jobwatch `+command+` -h"`) {
				t.Fatalf("stderr %q; want the command, the mistake and where its flags are listed", stderr)
			}
		})
	}
	// Asked for, the flags are the answer.
	if code, stdout, _ := runInProcess(t, "list", "-h"); code != 0 || !strings.HasPrefix(stdout, "Usage: jobwatch list") || !strings.Contains(stdout, "-limit") {
		t.Fatalf("list -h: exit %d, %q; want 0 and the flags", code, stdout)
	}
}

// A call the server refuses for want of a (known) token says, besides
// the server's reason, how the command takes one.
func TestAnUnauthenticatedCommandSaysHowToGiveAToken(t *testing.T) {
	tokensFile := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry("jw_known-token", "role: client, tenant: acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, _, _ := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile)
	for _, tt := range []struct {
		name, token, reason string
		args                []string
	}{
		{"list without a token", "", "a bearer token is required", []string{"list"}},
		{"get with a token the server does not know", "jw_unknown-token", "the token is not known", []string{"get", "j_00000000000000000000000000"}},
		{"submit without a token", "", "a bearer token is required", []string{"submit", "enrich"}},
		{"worker without a token", "", "a bearer token is required", []string{"worker", "--kind", "enrich", "--exec", "true"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append(tt.args, "--server", base)
			if tt.token != "" {
				args = append(args, "--token", tt.token)
			}
			code, _, stderr := runJobwatch(t, args...)
			if code != 1 || !strings.Contains(stderr, "unauthenticated: "+tt.reason) {
				t.Fatalf("exit %d, %q; want 1 with the server's reason %q", code, stderr, tt.reason)
			}
			if strings.Count(stderr, "--token TOKEN or in the JOBWATCH_TOKEN environment variable") != 1 {
				t.Fatalf("stderr %q does not say once how to give a token", stderr)
			}
		})
	}
}

// demo's "try:" hint names jobwatch the way the reader started it: go
// run from the checkout (the README's first command), a binary built
// into the current directory, or jobwatch on PATH.
func TestRerunCommandMatchesHowJobwatchWasStarted(t *testing.T) {
	top, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	here := filepath.Join(top, "cmd", "jobwatch")
	elsewhere := t.TempDir()
	built := filepath.Join(elsewhere, "jobwatch")
	writeFile(t, built, "#!/bin/sh\n")
	installed := filepath.Join(t.TempDir(), "jobwatch")
	writeFile(t, installed, "#!/bin/sh\n")
	onPath := func(string) (string, error) { return installed, nil }
	notOnPath := func(string) (string, error) { return "", errors.New("not found") }
	const goRunTemp = "/tmp/go-build3847374954/b001/exe/jobwatch"
	const goRunCached = "/root/.cache/go-build/6f/6f01ae622738e618f578a58248c202680460342c0aec019cdeb878fb837d5213-d/jobwatch"
	for _, tt := range []struct {
		name, arg0, wd string
		lookPath       func(string) (string, error)
		want           string
	}{
		{"go run ./cmd/jobwatch from the top of the checkout", goRunTemp, top, notOnPath, "go run ./cmd/jobwatch"},
		{"go run, its binary from the build cache (Go 1.24 and later)", goRunCached, top, onPath, "go run ./cmd/jobwatch"},
		{"go run . in cmd/jobwatch", goRunTemp, here, notOnPath, "go run ."},
		{"go run from a directory below the top", goRunTemp, filepath.Join(top, "docs"), notOnPath, "go run ../cmd/jobwatch"},
		{"go run of the package path outside any checkout", goRunTemp, elsewhere, notOnPath, "go run github.com/jobwatch/jobwatch/cmd/jobwatch@latest"},
		{"./jobwatch after go build -o jobwatch", "./jobwatch", elsewhere, notOnPath, "./jobwatch"},
		{"a binary by its path, another jobwatch on PATH", built, elsewhere, onPath, built},
		{"the jobwatch on PATH, by its name", "jobwatch", elsewhere, onPath, "jobwatch"},
		{"the jobwatch on PATH, by its path", installed, elsewhere, onPath, "jobwatch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.arg0 == "./jobwatch" {
				t.Chdir(elsewhere) // where ./jobwatch is, for the comparison with PATH's
			}
			if got := rerunCommandFrom(tt.arg0, tt.wd, tt.lookPath); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(top, "go.mod")); err != nil {
		t.Fatalf("the test's idea of the checkout's top is wrong: %v", err)
	}
}
