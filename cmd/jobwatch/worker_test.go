package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// startWorker runs "jobwatch worker" as its own process with extraEnv
// added to the test's environment, and returns its stderr.
func startWorker(t *testing.T, ctx context.Context, extraEnv []string, args ...string) (*lockedBuffer, func() error, func(os.Signal)) {
	t.Helper()
	cmd := jobwatchCmd(ctx, append([]string{"worker"}, args...)...)
	cmd.Env = append(cmd.Env, extraEnv...)
	var logs lockedBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &logs, cmd.Wait, func(s os.Signal) {
		if err := cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond until it holds; the deadline only fails a broken
// build.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, 20*time.Second, what, cond)
}

// waitForWithin is waitFor with its own bound.
func waitForWithin(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func TestWorkerExecGivesCommandsAMinimalEnvironment(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, _, _ := startWorker(t, ctx, []string{
		"JOBWATCH_TOKEN=s3cret-worker-token", "AWS_SECRET_ACCESS_KEY=also-secret",
		"FOO=bar", "LC_TIME=C.UTF-8", "TZ=UTC",
	}, "--server", s.URL, "--token", "s3cret-worker-token", "--kind", "env", "--exec", "env", "--env", "FOO", "--env", "BAZ=qux")

	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "env", MaxAttempts: 3})
	j, err := s.Client.WaitForJob(ctx, id)
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("env job = %v, %v; logs:\n%s", j, err, logs)
	}
	// "env" prints NAME=VALUE lines; the worker copies them as "ID: line".
	got := map[string]string{}
	for _, line := range strings.Split(logs.String(), "\n") {
		if kv, ok := strings.CutPrefix(line, id+": "); ok {
			name, value, _ := strings.Cut(kv, "=")
			got[name] = value
		}
	}
	for name, want := range map[string]string{
		"JOBWATCH_JOB_ID": id, "JOBWATCH_KIND": "env", "JOBWATCH_TENANT": "default", "JOBWATCH_ATTEMPT": "1",
		"JOBWATCH_MAX_ATTEMPTS": "3", "FOO": "bar", "BAZ": "qux", "LC_TIME": "C.UTF-8", "TZ": "UTC", "PATH": os.Getenv("PATH"),
	} {
		if got[name] != want {
			t.Errorf("the command's %s = %q, want %q", name, got[name], want)
		}
	}
	// Anything else is one of the documented variables, or one the shell
	// sets for itself.
	allowed := append(slices.Clone(passedEnv), "PWD", "OLDPWD", "SHLVL", "_")
	for name := range got {
		if strings.HasPrefix(name, "JOBWATCH_") && name != "JOBWATCH_TOKEN" && name != "JOBWATCH_SERVER" && name != "JOBWATCH_TEST_RUN_MAIN" {
			continue
		}
		if !slices.Contains(allowed, name) && !strings.HasPrefix(name, "LC_") && name != "FOO" && name != "BAZ" {
			t.Errorf("the command got %s=%q from the worker's environment", name, got[name])
		}
	}
	if len(got) == 0 {
		t.Fatalf("no environment copied from the command; logs:\n%s", logs)
	}
}

func TestWorkerEnvFlagRefusesTheJobsOwnVariables(t *testing.T) {
	code, _, errOut := runInProcess(t, "worker", "--kind", "k", "--exec", "true", "--env", "JOBWATCH_JOB_ID=j_1")
	if code != 2 || !strings.Contains(errOut, "set by the worker for each job") {
		t.Fatalf("worker --env JOBWATCH_JOB_ID=… = exit %d, %q; want 2 and why", code, errOut)
	}
}

func TestExecHandlerCopiesALongStderrLineInPieces(t *testing.T) {
	var stderr lockedBuffer
	stop := filepath.Join(t.TempDir(), "stop")
	const size = 1 << 20
	// A MiB without a newline, then the command runs on until told.
	h := execHandler(`head -c 1048576 /dev/zero | tr '\0' x >&2; while [ ! -e "$STOP" ]; do sleep 0.02; done`,
		commandEnv(os.Environ(), envFlag{"STOP=" + stop}), textOutput(&stderr), time.Second, nil)
	done := make(chan error, 1)
	go func() {
		_, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(int, string) {})
		done <- err
	}()
	// While the command still runs, the worker has copied all but at most
	// one piece: it does not hold the line until the command ends.
	waitFor(t, "the long line to be copied while the command runs", func() bool {
		return strings.Count(stderr.String(), "x") >= size-maxStderrLine
	})
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := stderr.String()
	if n := strings.Count(out, "x"); n != size {
		t.Fatalf("copied %d of %d bytes", n, size)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if !strings.HasPrefix(line, "j_1: ") || len(line) > len("j_1: ")+maxStderrLine {
			t.Fatalf("a copied line of %d bytes (prefix %q); want every piece prefixed and at most %d", len(line), line[:min(len(line), 8)], maxStderrLine)
		}
	}
}

// linesOut collects the lines a worker copies.
type linesOut struct {
	mu    sync.Mutex
	lines []string
}

func (o *linesOut) line(_, _, text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, text)
}

// A line too long to hold is copied, and logged, in pieces that end on
// whole characters: a character of several bytes that straddles a cut
// goes whole into the next piece, where it became U+FFFD in both.
func TestALongLineIsCopiedInPiecesOfWholeCharacters(t *testing.T) {
	var (
		out linesOut
		log bytes.Buffer
	)
	p := &lineSplitter{out: &out, jobID: "j_1", stream: "stdout", log: &log}
	text := strings.Repeat("€", maxStderrLine/3+1000) // 3 bytes each, no newline
	for rest := []byte(text); len(rest) > 0; {
		n := min(len(rest), 4093) // writes that end mid-character
		if _, err := p.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	p.flush()
	if len(out.lines) < 2 || strings.Join(out.lines, "") != text {
		t.Fatalf("%d pieces that join to %d bytes; want the %d bytes in pieces", len(out.lines), len(strings.Join(out.lines, "")), len(text))
	}
	for i, piece := range out.lines {
		if !utf8.ValidString(piece) || len(piece) > maxStderrLine {
			t.Errorf("piece %d of %d: %d bytes, valid UTF-8 %v; want whole characters, at most %d", i, len(out.lines), len(piece), utf8.ValidString(piece), maxStderrLine)
		}
	}
	if logged := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n"); !slices.Equal(logged, out.lines) {
		t.Errorf("the job's log got %d lines, not the %d pieces copied", len(logged), len(out.lines))
	}
}

// On Ctrl-C the worker says which jobs it waits for, and drains them.
// So it does on SIGHUP, which it hears when the terminal it runs in
// closes: it does not die at once and leave its jobs to be LOST.
func TestWorkerSaysWhatItWaitsForOnCtrlC(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startCLIServer(t, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			finish := filepath.Join(t.TempDir(), "finish")
			logs, wait, signal := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "slow", "--heartbeat", "200ms",
				"--env", "FINISH="+finish, "--exec", `echo "progress 10 working"; while [ ! -e "$FINISH" ]; do sleep 0.02; done; echo '"finished"'`)

			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "slow"})
			s.watchUntilStep(t, ctx, id, "working")
			signal(sig)
			waitFor(t, "the worker to say which job it waits for", func() bool {
				return strings.Contains(logs.String(), "waiting for the running jobs") && strings.Contains(logs.String(), id+" (slow)")
			})
			if err := os.WriteFile(finish, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := wait(); err != nil {
				t.Fatalf("worker exited with %v after %v, want 0; logs:\n%s", err, sig, logs)
			}
			if j, err := s.Client.Get(ctx, id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
				t.Fatalf("the drained job = %v, %v; want SUCCEEDED", j, err)
			}
		})
	}
}

// A second Ctrl-C during the drain ends the worker at once, as the drain
// message promises: it says so, exits 130, and its command goes with it.
func TestASecondCtrlCQuitsTheWorkerAtOnce(t *testing.T) {
	// The first may be the SIGHUP of a closed terminal: a Ctrl-C after it
	// is the second.
	for _, first := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(first.String(), func(t *testing.T) {
			s := startCLIServer(t, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pids := filepath.Join(t.TempDir(), "pids")
			logs, wait, signal := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "slow", "--heartbeat", "200ms",
				"--exec", `echo $$ > `+pids+`; echo "progress 10 working"; sleep 60`)

			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "slow"})
			s.watchUntilStep(t, ctx, id, "working")
			signal(first)
			waitFor(t, "the worker to say which job it waits for", func() bool {
				return strings.Contains(logs.String(), "waiting for the running jobs")
			})
			signal(syscall.SIGINT)
			var exit *exec.ExitError
			if err := wait(); !errors.As(err, &exit) || exit.ExitCode() != 130 {
				t.Fatalf("worker exited with %v after a second Ctrl-C, want exit status 130; logs:\n%s", err, logs)
			}
			if !strings.Contains(logs.String(), "SIGINT (Ctrl-C) again: quitting at once") && !strings.Contains(logs.String(), "SIGINT (Ctrl-C) after SIGHUP") {
				t.Errorf("the worker did not say it quit at once:\n%s", logs)
			}
			b, err := os.ReadFile(pids)
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			waitForWithin(t, 6*time.Second, "the command to be gone", func() bool { return !alive(pid) })
		})
	}
}

// The drain message says what happens to a job still running at
// --drain-timeout, and it happens: a job without attempts left fails, it
// is not retried.
func TestWorkerSaysARunningJobFailsAtTheDrainTimeout(t *testing.T) {
	s := startCLIServer(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, wait, signal := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "slow", "--heartbeat", "200ms",
		"--drain-timeout", "200ms", "--exec", `echo "progress 10 working"; sleep 60`)

	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "slow"}) // one attempt
	s.watchUntilStep(t, ctx, id, "working")
	signal(syscall.SIGINT)
	if err := wait(); err != nil {
		t.Fatalf("worker exited with %v after Ctrl-C, want 0; logs:\n%s", err, logs)
	}
	j, err := s.Client.Get(ctx, id)
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_FAILED || j.GetError().GetType() != "WorkerStopped" {
		t.Fatalf("the job stopped at the drain timeout = %v, %v; want FAILED with WorkerStopped", j, err)
	}
	if !strings.Contains(logs.String(), "stopped and fail with WorkerStopped (retried if they have attempts left)") {
		t.Fatalf("the drain message does not say the job fails:\n%s", logs)
	}
	// The command ends on its SIGTERM: the worker does not say that its
	// handler would not return.
	if strings.Contains(logs.String(), "did not return") {
		t.Fatalf("the worker says a command that ended on its SIGTERM did not return:\n%s", logs)
	}
}

// A command that ignores SIGTERM and outlives the drain timeout does not
// outlive the worker: its job is failed, and the worker kills its process
// group as it exits (the SIGKILL ten seconds after the SIGTERM would have
// come from the worker, which is gone by then).
//
// Also when the shell died of the drain's SIGTERM and left a process that
// ignores it (a script run by name: "sh -c ./script.sh"): the SIGKILL
// comes as the worker exits, not at the kill delay (10 s after the
// SIGTERM), by which time the job's next attempt may run.
func TestAWorkerLeavesNoCommandRunningAfterItsDrain(t *testing.T) {
	for _, tc := range []struct{ name, command string }{
		{"a shell that ignores SIGTERM", `echo $$ > PIDS; trap "" TERM; sleep 60 & echo $! >> PIDS; echo "progress 10 working"; wait`},
		{"a shell that dies of it, its child that ignores it", `sh -c 'trap "" TERM; echo $$ > PIDS; echo "progress 10 working"; while :; do sleep 1; done'; echo unreached`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startCLIServer(t, 5*time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pids := filepath.Join(t.TempDir(), "pids")
			logs, wait, signal := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "stubborn", "--heartbeat", "200ms",
				"--drain-timeout", "200ms", "--exec", strings.ReplaceAll(tc.command, "PIDS", pids))
			id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "stubborn"})
			s.watchUntilStep(t, ctx, id, "working")
			signal(syscall.SIGINT)
			if err := wait(); err != nil {
				t.Fatalf("worker exited with %v after Ctrl-C; logs:\n%s", err, logs)
			}
			b, err := os.ReadFile(pids)
			if err != nil {
				t.Fatal(err)
			}
			// Well before the kill delay's SIGKILL, nearly 9 s away.
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				waitForWithin(t, 6*time.Second, "process "+f+" of the command to be gone", func() bool { return !alive(pid) })
			}
			if !strings.Contains(logs.String(), "killed the commands still running at exit") {
				t.Errorf("the worker did not say it killed the command:\n%s", logs)
			}
		})
	}
}

// alive reports whether process pid runs (a zombie, ended and not yet
// reaped, does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// A stdout line too long to be a result is copied out, and the progress
// and result lines after it still count.
func TestExecHandlerReadsTheLinesAfterAHugeStdoutLine(t *testing.T) {
	var stderr lockedBuffer
	size := maxStdoutLine + 1<<20
	h := execHandler(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x; echo; echo "progress 90 after the dump"; echo '"the result"'`, size),
		commandEnv(os.Environ(), nil), textOutput(&stderr), time.Second, nil)
	var step string
	result, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(_ int, s string) { step = s })
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(result); string(raw) != `"the result"` || step != "after the dump" {
		t.Fatalf("result %s, step %q; want the JSON line and the progress line that came after the long line", raw, step)
	}
	if n := strings.Count(stderr.String(), "x"); n != size {
		t.Fatalf("copied %d of the long line's %d bytes", n, size)
	}
}

// worker --exec adds each stdout line that is not progress, an error or
// the result to the job's log as stdout, JSON lines before the last
// among them (a probe's numbers and JSON records were lost), and every
// stderr line as stderr (the last one without its newline too), before
// the job ends.
func TestWorkerExecAddsTheCommandsOutputToTheJobsLog(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := `echo "hello from stdout"; echo "progress 50 half"; echo oops >&2; echo; ` +
		`echo "error NotReally this is not reported"; seq 1 2; echo '{"level":"info"}'; echo '{"ok":true}'; ` +
		`printf 'no newline on stderr' >&2`
	logs, _, _ := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "talk", "--exec", script)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "talk"})
	j, err := s.Client.WaitForJob(ctx, id)
	if err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED || j.GetStep() != "half" {
		t.Fatalf("talk job = %v, %v; want SUCCEEDED at step half; worker:\n%s", j, err, logs)
	}
	page, err := s.Client.Logs(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[jobwatchv1.LogStream][]string{}
	for _, l := range page.GetLines() {
		got[l.GetStream()] = append(got[l.GetStream()], l.GetText())
	}
	// The two pipes are read apart: only each stream's own order holds.
	if strings.Join(got[jobwatchv1.LogStream_LOG_STREAM_STDOUT], "|") != `hello from stdout||1|2|{"level":"info"}` ||
		strings.Join(got[jobwatchv1.LogStream_LOG_STREAM_STDERR], "|") != "oops|no newline on stderr" || len(got) != 2 {
		t.Fatalf("the job's log by stream is %q; want stdout's plain and JSON lines but the result, and stderr's lines", got)
	}
	if !j.GetResult().GetStructValue().GetFields()["ok"].GetBoolValue() {
		t.Fatalf("result %v; want the last JSON line", j.GetResult())
	}
}

// A stdout line under its 4 MiB bound is one line of the log, cut at
// 16 KiB with its marker, not pieces of 64 KiB (stderr's lines, which
// are not read whole, are).
func TestWorkerExecLogsALongStdoutLineAsOneCutLine(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, _, _ := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "long", "--exec",
		`printf '%100000s' '' | tr ' ' A; echo END`)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "long"})
	if j, err := s.Client.WaitForJob(ctx, id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("long job = %v, %v; want SUCCEEDED; worker:\n%s", j, err, logs)
	}
	page, err := s.Client.Logs(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range page.GetLines() {
		lines = append(lines, l.GetText())
	}
	want := strings.Repeat("A", jobtype.MaxLogLineBytes-32) + "…[" + strconv.Itoa(100003-(jobtype.MaxLogLineBytes-32)) + " bytes cut]"
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("the log of a 100,003-byte stdout line has %d lines (first 40 bytes of each: %q); want one, cut at 16 KiB", len(lines), firstBytes(lines, 40))
	}
}

func firstBytes(lines []string, n int) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l[:min(n, len(l))])
	}
	return out
}

// A command's output reaches the worker's stderr as text, since it may
// come of a caller's payload: no escape sequence of it (a title set, a
// line rewritten) reaches the operator's terminal. The job's log keeps
// it as written; its readers make it printable in their turn.
func TestWorkerExecCopiesOutputAsText(t *testing.T) {
	var stderr lockedBuffer
	h := execHandler(`printf '\033]0;title\007after-title\n'; printf 'hidden\rshown\033[31m red\033[0m\n' >&2`,
		commandEnv(os.Environ(), nil), textOutput(&stderr), time.Second, nil)
	var logged lockedBuffer
	// A Progress made by hand receives the log's output as calls with a
	// percent below zero (client.Progress).
	_, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(percent int, text string) {
		if percent < 0 {
			_, _ = logged.Write([]byte(text))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out := stderr.String()
	if strings.ContainsAny(out, "\x1b\x07\r") || !strings.Contains(out, "j_1: after-title\n") || !strings.Contains(out, "j_1: hiddenshown red\n") {
		t.Fatalf("the worker's stderr got %q; want the command's lines as text, prefixed with the job", out)
	}
	if !strings.Contains(logged.String(), "\x1b[31m") {
		t.Fatalf("the job's log got %q; want the command's output as it wrote it", logged.String())
	}
}

// The worker's copy of a command's output is printed as jobwatch logs
// prints the job's log: bytes that are not UTF-8 (a lone 0x9b among
// them, which some terminals take for ESC [) show as U+FFFD in both,
// never raw.
func TestWorkerExecCopiesOutputAsJobwatchLogsPrintsIt(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, _, _ := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "raw", "--exec",
		`printf 'raw9b \2332J after\n'; printf 'bad \377\376 bytes\n' >&2`)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "raw"})
	if j, err := s.Client.WaitForJob(ctx, id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("raw job = %v, %v; want SUCCEEDED; worker:\n%s", j, err, logs)
	}
	code, printed, errOut := runInProcess(t, "logs", id, "--server", s.URL)
	if code != 0 {
		t.Fatalf("logs = exit %d:\n%s%s", code, printed, errOut)
	}
	for _, want := range []string{"raw9b \ufffd2J after", "bad \ufffd bytes"} {
		if !strings.Contains(printed, want+"\n") {
			t.Errorf("jobwatch logs printed %q; want the line %q", printed, want)
		}
		waitFor(t, "the worker's copy of "+want, func() bool { return strings.Contains(logs.String(), id+": "+want+"\n") })
	}
	if copied := logs.String(); !utf8.ValidString(copied) {
		t.Errorf("the worker's stderr got %q; want the command's lines as jobwatch logs prints them, valid UTF-8 with no raw 0x9b", copied)
	}
}

// worker --json logs as JSON lines, one object a line: its own records
// and its commands' output, each line of it with its job and stream.
func TestWorkerJSONLogsEveryLineAsAnObject(t *testing.T) {
	s := startCLIServer(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs, _, _ := startWorker(t, ctx, nil, "--json", "--server", s.URL, "--kind", "talk",
		"--exec", `echo "to stdout"; printf '\033[31mto stderr\n' >&2`)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "talk"})
	if j, err := s.Client.WaitForJob(ctx, id); err != nil || j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("talk job = %v, %v; want SUCCEEDED", j, err)
	}
	waitFor(t, "the worker to log both lines", func() bool { return strings.Count(logs.String(), `"msg":"output"`) == 2 })
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Msg, Stream, Text string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("worker --json wrote %q, not a JSON object: %v\n%s", line, err, logs)
		}
		if rec.Msg == "output" {
			seen[rec.Stream] = rec.Text
		}
	}
	if seen["stdout"] != "to stdout" || seen["stderr"] != "\x1b[31mto stderr" {
		t.Fatalf("worker --json output records by stream: %q; want each line as the command wrote it\n%s", seen, logs)
	}
	if !strings.Contains(logs.String(), `"job_id":"`+id+`"`) {
		t.Fatalf("worker --json output records do not name the job %s:\n%s", id, logs)
	}
}

// A worker killed outright (kill -9) does not leave its job's command
// running beside the job's next attempt, nor anything the command
// started: on Linux the command's guard hears of the worker's death and
// stops the command's process group. The process watched here is a
// child of the command's shell, which the shell neither waits on by exec
// nor passes a signal to.
func TestAKilledWorkerLeavesNoCommandRunning(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	s := startCLIServer(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, _, signal := startWorker(t, ctx, nil, "--server", s.URL, "--kind", "orphan", "--env", "PIDFILE="+pidFile,
		"--exec", `sh -c 'echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; echo "progress 10 started"; exec sleep 60'; echo "the shell outlived its worker"`)
	id := s.submit(t, &jobwatchv1.SubmitJobRequest{Kind: "orphan"})
	s.watchUntilStep(t, ctx, id, "started")
	pid := readPID(t, pidFile)
	if !running(pid) {
		t.Fatalf("the command's child (pid %d) is not running while its job is", pid)
	}
	signal(syscall.SIGKILL)
	waitFor(t, "the command's child to end with its worker", func() bool { return !running(pid) })
}

// The guard of a command whose worker died stops the command's whole
// process group, and what the command started in a session of its own:
// SIGTERM, then SIGKILL for what ignores it, the kill delay later; and
// the guard ends with them. The worker is played by a
// process of the test binary that starts the command as the worker does
// and is then killed (guardParent).
func TestTheGuardOfAnOrphanedCommandKillsWhatIgnoresSIGTERM(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	dir := t.TempDir()
	pidFile, sessionPIDFile := filepath.Join(dir, "pid"), filepath.Join(dir, "session-pid")
	// The command ignores SIGTERM, and so do the processes it starts:
	// one in its process group, one in a session of its own.
	parent, guard := startGuardParent(t, `trap "" TERM; `+
		`setsid sh -c 'echo $$ > "$SESSION_PIDFILE.tmp" && mv "$SESSION_PIDFILE.tmp" "$SESSION_PIDFILE"; exec sleep 60' & `+
		`sh -c 'echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; exec sleep 60'`,
		"PIDFILE="+pidFile, "SESSION_PIDFILE="+sessionPIDFile)
	waitFor(t, "the command's children to start", func() bool {
		_, err := os.Stat(pidFile)
		_, err2 := os.Stat(sessionPIDFile)
		return err == nil && err2 == nil
	})
	pid, sessionPID := readPID(t, pidFile), readPID(t, sessionPIDFile)
	t.Cleanup(func() { _ = syscall.Kill(sessionPID, syscall.SIGKILL) })
	// A cancel's SIGTERM to the group is the command's: this one ignores
	// it, and the guard waits on.
	if err := syscall.Kill(-guard, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command's child to be killed", func() bool { return !running(pid) })
	waitFor(t, "the command's child in a session of its own to be killed", func() bool { return !running(sessionPID) })
	waitFor(t, "the guard to end", func() bool { return !running(guard) })
}

// startGuardParent starts the worker's stand-in (guardParent) of command,
// with env added to its environment, and returns it and its command's
// guard's process id.
func startGuardParent(t *testing.T, command string, env ...string) (parent *exec.Cmd, guard int) {
	t.Helper()
	parent = exec.Command(os.Args[0])
	parent.Env = append(append(os.Environ(), env...), "JOBWATCH_TEST_GUARD_PARENT="+command)
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	if _, err := fmt.Fscan(out, &guard); err != nil {
		t.Fatalf("the worker's stand-in did not say its command's guard: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-guard, syscall.SIGKILL) })
	return parent, guard
}

// guardParent is the worker's stand-in of
// TestTheGuardOfAnOrphanedCommandKillsWhatIgnoresSIGTERM: it starts
// command as worker --exec does, with a kill delay of 300 ms, and its
// output on pipes it reads, prints its guard's process id and waits to
// be killed.
func guardParent(command string) int {
	cmd := commandCmd(context.Background(), command, 300*time.Millisecond)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(cmd.Process.Pid)
	_ = cmd.Wait()
	return 0
}

// A command whose worker died may clean up on its SIGTERM, and write as
// it does: the guard reads on what it writes to the dead worker's pipes
// (a shell's trap that wrote died of SIGPIPE, its clean-up undone).
func TestTheGuardOfAnOrphanedCommandLetsItsCleanUpWrite(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	dir := t.TempDir()
	pidFile, cleaned := filepath.Join(dir, "pid"), filepath.Join(dir, "cleaned")
	parent, guard := startGuardParent(t, `trap 'echo cleaning up >&2; echo cleaning up; echo done > "$CLEANED"; exit 0' TERM; `+
		`echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; sleep 60 & wait`,
		"PIDFILE="+pidFile, "CLEANED="+cleaned)
	waitFor(t, "the command to start", func() bool { _, err := os.Stat(pidFile); return err == nil })
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the guard to end", func() bool { return !running(guard) })
	if b, err := os.ReadFile(cleaned); err != nil || string(b) != "done\n" {
		t.Fatalf("the command's clean-up on its SIGTERM wrote %q, %v; want it done after writing to its output", b, err)
	}
}

// A command that a signal ends fails its job saying which signal: the
// guard is killed by the same one, and the worker reads it.
func TestACommandEndedByASignalSaysWhich(t *testing.T) {
	var stderr lockedBuffer
	h := execHandler(`kill -KILL $$`, commandEnv(os.Environ(), nil), textOutput(&stderr), time.Second, nil)
	_, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(int, string) {})
	if err == nil || err.Error() != "signal: killed" {
		t.Fatalf("a command killed with SIGKILL failed its job with %v, want \"signal: killed\"", err)
	}
	h = execHandler(`exit 3`, commandEnv(os.Environ(), nil), textOutput(&stderr), time.Second, nil)
	if _, err := h(context.Background(), &jobwatchv1.Job{Id: "j_2"}, func(int, string) {}); err == nil || err.Error() != "exit status 3" {
		t.Fatalf("a command that exited 3 failed its job with %v, want \"exit status 3\"", err)
	}
}

// What a command leaves running when it ends, ends with it: a child
// holding the command's stdout does not hold the job, and neither it nor
// one in a session of its own, which ignores SIGTERM, runs on after the
// job has ended. The guard SIGTERMs them, SIGKILLs the one that stays
// the kill delay later (300 ms here), and the job ends with the last of
// them.
func TestWhatACommandLeavesRunningEndsWithIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	dir := t.TempDir()
	pidFile, sessionPIDFile := filepath.Join(dir, "pid"), filepath.Join(dir, "session-pid")
	var stderr lockedBuffer
	h := execHandler(`sleep 60 & echo $! > "$PIDFILE"; `+
		`setsid sh -c 'trap "" TERM; echo $$ > "$SESSION_PIDFILE.tmp" && mv "$SESSION_PIDFILE.tmp" "$SESSION_PIDFILE"; exec sleep 60' >/dev/null 2>&1 & `+
		`while [ ! -e "$SESSION_PIDFILE" ]; do sleep 0.01; done; echo '{"done":true}'`,
		commandEnv(os.Environ(), envFlag{"PIDFILE=" + pidFile, "SESSION_PIDFILE=" + sessionPIDFile}), textOutput(&stderr), 300*time.Millisecond, nil)
	type outcome struct {
		result any
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := h(context.Background(), &jobwatchv1.Job{Id: "j_1"}, func(int, string) {})
		done <- outcome{r, err}
	}()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(30 * time.Second): // the sleeps take 60 s
		t.Fatal("the job is held by what its command left running")
	}
	pid, sessionPID := readPID(t, pidFile), readPID(t, sessionPIDFile)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = syscall.Kill(sessionPID, syscall.SIGKILL) })
	if b, _ := json.Marshal(o.result); o.err != nil || string(b) != `{"done":true}` {
		t.Fatalf("the job ended with %s, %v; want its command's result", b, o.err)
	}
	if running(pid) || running(sessionPID) {
		t.Fatalf("after its job ended, what the command left is running: pid %d %v, pid %d (own session) %v",
			pid, running(pid), sessionPID, running(sessionPID))
	}
}

// A cancel reaches what the command started in a session of its own too,
// which a signal to the command's process group misses: SIGTERM, then
// SIGKILL the kill delay later for what ignores it.
func TestACancelReachesWhatLeftTheCommandsGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	dir := t.TempDir()
	sessionPIDFile := filepath.Join(dir, "session-pid")
	var stderr lockedBuffer
	h := execHandler(`setsid sh -c 'trap "" TERM; echo $$ > "$SESSION_PIDFILE.tmp" && mv "$SESSION_PIDFILE.tmp" "$SESSION_PIDFILE"; exec sleep 60' >/dev/null 2>&1 & `+
		`echo "progress 10 started"; exec sleep 60`,
		commandEnv(os.Environ(), envFlag{"SESSION_PIDFILE=" + sessionPIDFile}), textOutput(&stderr), 300*time.Millisecond, nil)
	cancel, done := runUntilStarted(t, h)
	waitFor(t, "the command's child in a session of its own to start", func() bool {
		_, err := os.Stat(sessionPIDFile)
		return err == nil
	})
	sessionPID := readPID(t, sessionPIDFile)
	t.Cleanup(func() { _ = syscall.Kill(sessionPID, syscall.SIGKILL) })
	cancel(errors.New("cancelled by the test"))
	select {
	case err := <-done:
		if err == nil || err.Error() != "cancelled by the test" {
			t.Fatalf("the cancelled command's handler returned %v, want the cancel's cause", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled command's handler did not return")
	}
	waitFor(t, "the command's child in a session of its own to be killed", func() bool { return !running(sessionPID) })
}

// A cancel's SIGTERM reaches each of the command's processes once: when
// the command's shell dies of it and leaves a child that traps it, the
// guard does not send that child a second one (it used to, which ended
// the clean-up the first had begun), and SIGKILLs it the kill delay after
// the first.
func TestACancelSendsEachProcessOneSIGTERM(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the command's guard is Linux's")
	}
	terms := filepath.Join(t.TempDir(), "terms")
	var stderr lockedBuffer
	h := execHandler(`sh -c 'trap "echo term >> \"$TERMS\"" TERM; echo "progress 10 started"; while :; do sleep 0.05; done' & wait`,
		commandEnv(os.Environ(), envFlag{"TERMS=" + terms}), textOutput(&stderr), 500*time.Millisecond, nil)
	cancel, done := runUntilStarted(t, h)
	cancel(errors.New("cancelled by the test"))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled command's handler did not return")
	}
	b, _ := os.ReadFile(terms)
	if n := strings.Count(string(b), "term"); n != 1 {
		t.Fatalf("the command's child that traps SIGTERM heard it %d times, want once", n)
	}
}

// runUntilStarted runs h for a job in a goroutine until its command
// reports the step "started", and returns the cancel of the handler's
// context and where the handler's error comes.
func runUntilStarted(t *testing.T, h client.Handler) (context.CancelCauseFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := h(ctx, &jobwatchv1.Job{Id: "j_1"}, func(_ int, step string) {
			if step == "started" {
				once.Do(func() { close(started) })
			}
		})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start")
	}
	return cancel, done
}

// readPID reads the process id a command wrote to path.
func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// running reports whether process pid is alive: neither gone nor a
// zombie that nobody has reaped yet.
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's name in parentheses: "pid (sh) S ...".
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// watchUntilStep watches job id until a worker reports step.
func (s *cliServer) watchUntilStep(t *testing.T, ctx context.Context, id, step string) {
	t.Helper()
	for j, err := range s.Client.Watch(ctx, id) {
		if err != nil {
			t.Fatal(err)
		}
		if j.GetStep() == step {
			return
		}
	}
	t.Fatalf("job %s ended before its worker reported step %q", id, step)
}
