package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// pidIn is the process id a pid file holds, 0 if it holds none.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// answers reports whether the server at base answers a call.
func answers(ctx context.Context, base string) bool {
	c := client.New(base)
	defer c.Close()
	_, err := c.JobService().GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: "j_00000000000000000000000000"})
	return connect.CodeOf(err) == connect.CodeNotFound
}

// startSleeper runs a program that is not jobwatch until the test ends:
// its id in a pid file is a stale file's. sleeping reports whether it
// still runs.
func startSleeper(t *testing.T, ctx context.Context) (cmd *exec.Cmd, sleeping func() bool) {
	t.Helper()
	cmd = exec.CommandContext(ctx, "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return cmd, func() bool {
		select {
		case <-exited:
			return false
		default:
			return true
		}
	}
}

// docs/SECURITY.md's token rotation: "jobwatch reload --pid-file FILE" makes
// the serve that wrote FILE read its tokens again, and signals no other
// jobwatch on the host (kill -HUP "$(pidof jobwatch)" would signal every
// one). A serve without --config or --tokens that gets a SIGHUP anyway (a
// systemd unit's ExecReload) says so and keeps serving. serve removes the
// file as it exits.
func TestReloadSignalsTheServeOfItsPidFileAlone(t *testing.T) {
	dir := t.TempDir()
	tokensFile, pidFile := filepath.Join(dir, "tokens.yaml"), filepath.Join(dir, "jobwatch.pid")
	const oldToken, newToken = "jw_old-token", "jw_new-token"
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(oldToken, "role: client, tenant: acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile, "--pid-file", pidFile)
	if got := pidIn(t, pidFile); got != cmd.Process.Pid {
		t.Fatalf("--pid-file holds %d, want serve's pid %d", got, cmd.Process.Pid)
	}
	bystanderBase, bystander, bystanderLogs := startServe(t, ctx, "--db", testdb.New(t)) // no --config, no --tokens

	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(oldToken, "role: client, tenant: acme")+tokensEntry(newToken, "role: client, tenant: acme"))
	code, stdout, stderr := runJobwatch(t, "reload", "--pid-file", pidFile)
	if code != 0 || stdout != "jobwatch serve (pid "+strconv.Itoa(cmd.Process.Pid)+") reloaded tokens "+tokensFile+"\n" {
		t.Fatalf("reload: exit %d, %q %q; want 0 saying serve took the files", code, stdout, stderr)
	}
	// docs/OPERATING.md shows the line as reload prints it.
	shown := strings.Replace(strings.TrimSuffix(stdout, " tokens "+tokensFile+"\n"), strconv.Itoa(cmd.Process.Pid), "N", 1)
	ops, err := os.ReadFile("../../docs/OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "`" + shown + " config FILE`"; !strings.Contains(strings.Join(strings.Fields(string(ops)), " "), want) {
		t.Errorf("docs/OPERATING.md does not show reload's line as it prints it, %s", want)
	}
	// reload returned once serve had said: the log has it already.
	if !strings.Contains(logs.String(), "tokens reloaded") {
		t.Fatalf("reload said the files were taken before serve did; its log:\n%s", logs)
	}
	c := client.New(base, client.WithToken(newToken))
	t.Cleanup(c.Close)
	if _, err := c.JobService().GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: "j_00000000000000000000000000"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("the new token after reload: %v, want not_found (let in)", err)
	}
	if !answers(ctx, bystanderBase) || strings.Contains(bystanderLogs.String(), "SIGHUP") {
		t.Fatalf("the serve without --pid-file heard of the reload; its log:\n%s", bystanderLogs)
	}
	if err := bystander.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bystander to say it has nothing to reload", func() bool {
		return strings.Contains(bystanderLogs.String(), "SIGHUP: nothing to read again")
	})
	if !answers(ctx, bystanderBase) {
		t.Fatal("a SIGHUP stopped the serve without --config or --tokens")
	}

	// A file serve refuses: reload exits 1 with serve's reason.
	writeFile(t, tokensFile, "tokens:\n  - {role: client}\n")
	code, stdout, stderr = runJobwatch(t, "reload", "--pid-file", pidFile)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "refused: tokens "+tokensFile+" refused; the tokens in effect stay: ") {
		t.Fatalf("reload of a broken tokens file: exit %d, %q %q; want 1 and serve's reason", code, stdout, stderr)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
	for _, f := range []string{pidFile, pidFile + ".reload"} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("serve left %s behind (%v)", f, err)
		}
	}
}

// A pid file names one server: a second serve given the file of one
// that runs refuses to start and leaves the file as it was; a file left
// by a serve that was killed (its id gone, or now another program's) is
// taken over.
func TestServePidFileNamesOneRunningServer(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "jobwatch.pid")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, first, _ := startServe(t, ctx, "--db", testdb.New(t), "--pid-file", pidFile)

	secondDB := filepath.Join(t.TempDir(), "second.db")
	code, _, stderr := runJobwatch(t, "serve", "--addr", "127.0.0.1:0", "--db", secondDB, "--pid-file", pidFile)
	if code != 1 || !strings.Contains(stderr, "jobwatch serve (pid "+strconv.Itoa(first.Process.Pid)+") is running with this file") {
		t.Fatalf("a second serve on a held --pid-file: exit %d, %s; want 1 naming the running serve", code, stderr)
	}
	if _, err := os.Stat(secondDB); !os.IsNotExist(err) {
		t.Fatalf("the refused serve made its database anyway (%v)", err)
	}
	if got := pidIn(t, pidFile); got != first.Process.Pid {
		t.Fatalf("after the refusal the file holds %d, want the first serve's %d", got, first.Process.Pid)
	}

	// A program that is not jobwatch serve, running under the id in a
	// stale file, does not hold it.
	sleeper, _ := startSleeper(t, ctx)
	for _, stale := range []struct{ name, pid string }{
		{"an id no process has", "2147483646"},
		{"another program's id", strconv.Itoa(sleeper.Process.Pid)},
		{"no id at all", "half-writ"},
	} {
		t.Run(stale.name, func(t *testing.T) {
			path := filepath.Join(dir, "stale-"+strings.ReplaceAll(stale.name, " ", "-")+".pid")
			writeFile(t, path, stale.pid+"\n")
			_, cmd, _ := startServe(t, ctx, "--db", testdb.New(t), "--pid-file", path)
			if got := pidIn(t, path); got != cmd.Process.Pid {
				t.Fatalf("the stale file holds %d, want the new serve's %d", got, cmd.Process.Pid)
			}
		})
	}
}

// reload signals nothing it cannot be sure of, and says why.
func TestReloadRefusesWhatItCannotSignalSafely(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sleeper, sleeping := startSleeper(t, ctx)
	stale := filepath.Join(dir, "stale.pid")
	writeFile(t, stale, strconv.Itoa(sleeper.Process.Pid)+"\n")
	plainPID := filepath.Join(dir, "plain.pid")
	plainBase, _, _ := startServe(t, ctx, "--db", testdb.New(t), "--pid-file", plainPID)

	tests := []struct {
		name      string
		args      []string
		code      int
		says      string
		untouched func() bool // the process the file names still runs
	}{
		{"no --pid-file", nil, 2, "reload needs --pid-file FILE", nil},
		{"a file that does not exist", []string{"--pid-file", filepath.Join(dir, "none.pid")}, 1,
			"does not exist: is jobwatch serve running with --pid-file", nil},
		{"a stale file naming another program", []string{"--pid-file", stale}, 1,
			"which is not a running jobwatch serve: the file is stale",
			sleeping},
		{"a serve with nothing to reload, which a SIGHUP would stop", []string{"--pid-file", plainPID}, 1,
			"was started without --config or --tokens",
			func() bool { return answers(ctx, plainBase) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runJobwatch(t, append([]string{"reload"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.says) {
				t.Fatalf("exit %d, %q; want %d saying %q", code, stderr, tt.code, tt.says)
			}
			if tt.untouched != nil && !tt.untouched() {
				t.Fatal("the process the file names was signalled")
			}
		})
	}
}

// How reload reads a serve's command line: flags as the flag package
// takes them, up to "--".
func TestHasFlagReadsFlagsAsTheFlagPackageDoes(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"--tokens", "t.yaml"}, true},
		{[]string{"-tokens=t.yaml"}, true},
		{[]string{"--db", "j.db", "--config=c.yaml"}, true},
		{[]string{"--db", "tokens"}, false},
		{[]string{"--tokens-file", "x"}, false},
		{[]string{"--", "--tokens", "x"}, false},
		{nil, false},
	} {
		if got := reloads(tt.args); got != tt.want {
			t.Errorf("reloads(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
