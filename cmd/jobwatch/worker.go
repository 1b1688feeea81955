package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/tracing"
	"github.com/jobwatch/jobwatch/jobtype"
)

const workerUsage = `Usage: jobwatch worker --kind KIND --exec 'COMMAND' [flags]

Claims jobs of the given kinds and runs COMMAND with /bin/sh -c for each,
until interrupted; then it stops claiming and lets running commands finish
(up to --drain-timeout).

The command's protocol:
  stdin    the job's payload as JSON ("null" when there is none)
  env      JOBWATCH_JOB_ID, JOBWATCH_KIND, JOBWATCH_TENANT, JOBWATCH_ATTEMPT,
           JOBWATCH_MAX_ATTEMPTS; from the worker's own environment only
           PATH, HOME, USER, LOGNAME, LANG, LC_*, TZ and TMPDIR, plus what
           --env names (never JOBWATCH_TOKEN unless --env names it)
  stdout   "progress 45 batch 5 of 11" sets percent 45 and step "batch 5 of 11";
           "error TYPE message" sets the error reported if the command fails
           (TYPE and message are shown to callers);
           the last line that is JSON becomes the job's result;
           other lines, JSON ones among them, are copied to the worker's
           stderr and added to the job's log (jobwatch logs) as stdout
           (the result too, if a line follows it)
  stderr   copied to the worker's stderr, each line prefixed with the job id
           (a line longer than 64 KiB is copied in pieces), and added to the
           job's log as stderr (a log line over 16 KiB is cut there); the
           copies keep colours only for a terminal and no other escape
           sequence, and with --json are JSON records (msg "output",
           job_id, stream, text) beside the worker's own
  exit 0   the job SUCCEEDED
  exit 75  the attempt failed and may be retried (EX_TEMPFAIL), if the job
           has attempts left: submit it with --max-attempts 2 or more
  other    the job FAILED, with error type ExitError ("exit status N", or
           "signal: killed" if a signal ended it) unless an "error" line
           said otherwise
  When the job is cancelled, its queue's timeout passes or its lease is
  lost, the command's process group gets SIGTERM once the worker hears of
  it (at its next heartbeat), and SIGKILL 10 seconds later. On Linux the
  same happens when the worker itself is killed outright (kill -9, the
  OOM killer): each command has a small guard process, the worker's own
  binary, which stops the command's process group then.

Flags:
`

// worker runs "jobwatch worker".
func worker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var kinds, queues, command, id string
	var concurrency int
	var heartbeat, drain time.Duration
	var env envFlag
	fs := newFlagSet("worker", stderr)
	cf.register(fs)
	fs.Lookup("json").Usage = "log as JSON records, one a line (the commands' output too), not as text"
	fs.Var(listFlag{&kinds}, "kind", "job `kinds` to run, comma-separated or the flag again (required)")
	fs.StringVar(&command, "exec", "", "shell `command` to run per job (required)")
	fs.Var(listFlag{&queues}, "queue", "only claim from these `queues`, comma-separated or the flag again (default: any)")
	fs.IntVar(&concurrency, "concurrency", 1, "jobs to run at once")
	fs.StringVar(&id, "id", "", "worker `id` shown on its jobs (default: host-pid-random)")
	fs.DurationVar(&heartbeat, "heartbeat", 10*time.Second, "heartbeat interval (kept under a third of the lease timeout)")
	fs.DurationVar(&drain, "drain-timeout", time.Minute, "on interrupt, how long running commands may take to finish before they are stopped")
	fs.Var(&env, "env", "pass `NAME` from the worker's environment to commands, or set NAME=VALUE (repeatable)")
	fs.Usage = func() { fmt.Fprint(stderr, workerUsage); fs.PrintDefaults() }
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	switch {
	case kinds == "" && command == "":
		return usageError{"worker needs --kind KIND (the jobs it takes) and --exec COMMAND (what it runs for each)"}
	case kinds == "":
		return usageError{"worker needs --kind KIND: the kinds of job to run --exec for"}
	case command == "":
		return usageError{"worker needs --exec COMMAND: what to run for each job of --kind " + kinds}
	}
	if concurrency < 1 {
		return usageError{fmt.Sprintf("--concurrency must be at least 1, got %d", concurrency)}
	}
	if heartbeat < minHeartbeat {
		return usageError{fmt.Sprintf("--heartbeat must be at least %v (it is kept under a third of the lease anyway), got %v", minHeartbeat, heartbeat)}
	}
	// Names the server would refuse at the first claim, refused here,
	// before "worker started".
	for _, k := range splitList(kinds) {
		if reason := jobtype.NameReason(k); reason != "" {
			return usageError{fmt.Sprintf("--kind %q: %s", k, reason)}
		}
	}
	if reason := jobtype.NameReason(id); id != "" && reason != "" {
		return usageError{fmt.Sprintf("--id %q: %s", id, reason)}
	}
	// --json: the worker's log, and its commands' output, as JSON lines.
	var log *slog.Logger
	var out output
	if cf.json {
		log = slog.New(slog.NewJSONHandler(&lockedWriter{w: stderr}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		out = jsonOutput{log: log}
	} else {
		log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		out = textOutput(stderr)
	}
	c, err := cf.client(stderr, true, client.WithServerMoveNotify(func(from, to string, cause error) {
		log.Warn("calls go to the next server", "from", from, "to", to, "because", retryReason(cause))
	}))
	if err != nil {
		return err
	}
	defer c.Close()
	tp, stopTracing, err := startTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{
		TracerProvider:    providerOf(tp),
		ID:                id,
		Concurrency:       concurrency,
		Queues:            splitList(queues),
		HeartbeatInterval: heartbeat,
		DrainTimeout:      drain,
		Logger:            log,
	})
	base := commandEnv(os.Environ(), env)
	running := &runningJobs{log: log, drain: drain}
	groups := &commandGroups{}
	for _, k := range splitList(kinds) {
		w.Handle(k, running.track(execHandler(command, base, out, killDelay, groups)))
	}
	if err := checkGuard(); err != nil {
		log.Warn("commands run without their guard: if this worker is killed outright, what a command started may run on beside its job's next attempt", "err", err)
	}
	ctx, stopHangups := stopOnHangup(ctx)
	defer stopHangups()
	log.Info("worker started", "id", w.ID(), "kinds", kinds, "server", cf.redactedAddress())
	told := make(chan struct{})
	stopTelling := context.AfterFunc(ctx, func() { running.draining(); close(told) })
	err = w.Run(ctx)
	if !stopTelling() { // ctx ended: its message comes before "stopped"
		<-told
	}
	// A command that outlived the drain timeout (it ignores SIGTERM) has
	// had its job failed already: it must not outlive the worker either,
	// as its SIGKILL would have come from this process.
	if n := groups.kill(); n > 0 {
		log.Warn("killed the commands still running at exit (SIGKILL to their process groups)", "commands", n)
	}
	log.Info("worker stopped")
	if err != nil {
		return callError("worker", err)
	}
	return nil
}

// commandGroups holds the process groups of the commands running, so
// that the worker can kill what is left of them when it exits. nil holds
// nothing.
type commandGroups struct {
	mu    sync.Mutex
	pgids map[int]bool
}

func (g *commandGroups) add(pgid int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pgids == nil {
		g.pgids = map[int]bool{}
	}
	g.pgids[pgid] = true
}

func (g *commandGroups) remove(pgid int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pgids, pgid)
}

// kill kills every command still held, with all it started
// (killCommand), and returns how many.
func (g *commandGroups) kill() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pgid := range g.pgids {
		killCommand(pgid)
	}
	return len(g.pgids)
}

// runningJobs knows which jobs the worker's commands are running, so that
// on Ctrl-C the worker says what it is waiting for instead of sitting
// silent for up to --drain-timeout.
type runningJobs struct {
	log   *slog.Logger
	drain time.Duration

	mu       sync.Mutex
	jobs     map[string]string // job id → kind
	stopping bool
}

// track wraps h so the job is counted while h runs.
func (r *runningJobs) track(h client.Handler) client.Handler {
	return func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		r.mu.Lock()
		if r.jobs == nil {
			r.jobs = make(map[string]string)
		}
		r.jobs[job.GetId()] = job.GetKind()
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			delete(r.jobs, job.GetId())
			if r.stopping && len(r.jobs) > 0 {
				r.log.Info("still waiting for running jobs", "jobs", r.list())
			}
		}()
		return h(ctx, job, progress)
	}
}

// draining says, once the worker stops claiming, which jobs it waits for.
func (r *runningJobs) draining() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
	if len(r.jobs) == 0 {
		r.log.Info("stopping: no new jobs are claimed; none is running")
		return
	}
	limit := "as long as they take"
	if r.drain > 0 {
		// Stopped jobs fail as retryable: another attempt only if they
		// have one left (--max-attempts), so say both.
		limit = fmt.Sprintf("up to %v (--drain-timeout), then they are stopped and fail with WorkerStopped (retried if they have attempts left)", r.drain)
	}
	r.log.Info("stopping: no new jobs are claimed; waiting for the running jobs to finish, "+limit+
		" (a second Ctrl-C quits at once and leaves them to be retried or LOST when their lease expires)", "jobs", r.list())
}

// list is "j_1 (kind), j_2 (kind)" in a stable order; r.mu is held.
func (r *runningJobs) list() string {
	ids := slices.Sorted(maps.Keys(r.jobs))
	for i, id := range ids {
		ids[i] = id + " (" + r.jobs[id] + ")"
	}
	return strings.Join(ids, ", ")
}

// commandEnv is the environment every command starts from: the variables
// named in passedEnv and prefixed in passedEnvPrefixes, taken from the
// worker's environ, then what --env names or sets. Everything else the
// worker has (JOBWATCH_TOKEN above all, which would let any job command
// act as this worker) stays out.
func commandEnv(environ []string, extra envFlag) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(passedEnv, name) || slices.ContainsFunc(passedEnvPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			env = append(env, kv)
		}
	}
	for _, e := range extra {
		if _, _, set := strings.Cut(e, "="); set {
			env = append(env, e)
			continue
		}
		for _, kv := range environ {
			if strings.HasPrefix(kv, e+"=") {
				env = append(env, kv)
			}
		}
	}
	return env
}

// passedEnv and passedEnvPrefixes are what a command gets from the
// worker's environment without asking: what programs need to find other
// programs, files, the user, language and time zone.
var (
	passedEnv         = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR"}
	passedEnvPrefixes = []string{"LC_"}
)

// envFlag is the repeatable --env NAME or --env NAME=VALUE.
type envFlag []string

func (f *envFlag) String() string { return strings.Join(*f, ",") }

func (f *envFlag) Set(s string) error {
	name, _, _ := strings.Cut(s, "=")
	switch {
	case name == "" || strings.ContainsAny(name, " \t\n\x00"):
		return fmt.Errorf("%q is not NAME or NAME=VALUE", s)
	case strings.HasPrefix(name, "JOBWATCH_") && name != "JOBWATCH_TOKEN" && name != "JOBWATCH_SERVER":
		return fmt.Errorf("%s is set by the worker for each job", name)
	}
	*f = append(*f, s)
	return nil
}

// minHeartbeat bounds --heartbeat from below: a running job's heartbeats
// are calls to the server, ten a second at most.
const minHeartbeat = 100 * time.Millisecond

// killDelay is how long a cancelled command's process group has between
// SIGTERM and SIGKILL.
const killDelay = 10 * time.Second

// execHandler runs command for each job as the usage text describes, in
// env plus the job's variables; a cancelled command's process group gets
// SIGTERM, and SIGKILL after kill.
func execHandler(command string, env []string, out output, kill time.Duration, groups *commandGroups) client.Handler {
	return func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		stdin := []byte("null")
		if p := job.GetPayload(); p != nil {
			b, err := protojson.Marshal(p)
			if err != nil {
				return nil, fmt.Errorf("encode payload: %w", err)
			}
			stdin = b
		}
		cmd := commandCmd(ctx, command, kill)
		cmd.Stdin = strings.NewReader(string(stdin) + "\n")
		// The job's variables come last, so they win over any the
		// operator passed.
		cmd.Env = append(slices.Clip(env),
			"JOBWATCH_JOB_ID="+job.GetId(),
			"JOBWATCH_KIND="+job.GetKind(),
			"JOBWATCH_TENANT="+job.GetTenant(),
			"JOBWATCH_ATTEMPT="+strconv.Itoa(int(job.GetAttempt())),
			"JOBWATCH_MAX_ATTEMPTS="+strconv.Itoa(int(job.GetMaxAttempts())),
		)
		// The command continues the job's trace: its handler span's
		// context, or without tracing here, the submitter's.
		if tc := traceContext(ctx, job); tc.Parent != "" {
			cmd.Env = append(cmd.Env, "TRACEPARENT="+tc.Parent)
			if tc.State != "" {
				cmd.Env = append(cmd.Env, "TRACESTATE="+tc.State)
			}
		}
		// Output that is not the protocol's goes to the worker's stderr
		// and to the job's log, tagged with the stream it came from.
		stdoutLog := progress.LogTo(jobwatchv1.LogStream_LOG_STREAM_STDOUT)
		errOut := &lineSplitter{out: out, jobID: job.GetId(), stream: "stderr", log: progress.LogTo(jobwatchv1.LogStream_LOG_STREAM_STDERR)}
		defer errOut.flush()
		cmd.Stderr = errOut
		// The SIGKILL reaches all the command started too (exec's
		// WaitDelay would kill only the guard or the shell, and a child
		// holding stdout would keep the job's slot); a second later the
		// group gets one of its own, in case the guard could not.
		var killers []*time.Timer // read after Wait, which orders it after Cancel
		cmd.Cancel = func() error {
			pid := cmd.Process.Pid
			killers = []*time.Timer{
				time.AfterFunc(kill, func() { killCommand(pid) }),
				time.AfterFunc(kill+time.Second, func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }),
			}
			return syscall.Kill(-pid, syscall.SIGTERM)
		}
		cmd.WaitDelay = kill + 2*time.Second
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start command: %w", err)
		}
		groups.add(cmd.Process.Pid)
		defer groups.remove(cmd.Process.Pid)
		var result json.RawMessage
		var declared *declaredError
		copied := &lineSplitter{out: out, jobID: job.GetId(), stream: "stdout", log: stdoutLog}
		logLine := func(raw string) {
			out.line(job.GetId(), "stdout", raw)
			// One line of the log, cut to a log line's bound here: the
			// writer would add a line over 64 KiB in pieces, which only
			// a line without its end (stderr's) should be.
			fmt.Fprintf(stdoutLog, "%s\n", jobtype.CutLogLine(raw))
		}
		// A JSON line is the result so far, and is logged as the others
		// are once another line follows it: a command that prints JSON
		// records, or numbers (seq), loses none of them, and its result
		// printed last is not logged twice.
		var unlogged *string
		_ = readLines(pipe, maxStdoutLine, copied, func(raw string) {
			if unlogged != nil {
				logLine(*unlogged)
				unlogged = nil
			}
			raw = strings.TrimSuffix(raw, "\r")
			line := strings.TrimSpace(raw)
			switch {
			case strings.HasPrefix(line, "progress "):
				if pct, step, ok := parseProgress(line); ok {
					progress(pct, step)
					return
				}
			case strings.HasPrefix(line, "error "):
				f := strings.SplitN(line, " ", 3)
				declared = &declaredError{typ: f[1]}
				if len(f) == 3 {
					declared.msg = f[2]
				}
				return
			case line != "" && json.Valid([]byte(line)):
				result = json.RawMessage(line)
				unlogged = &raw
				return
			}
			logLine(raw)
		})
		_, _ = io.Copy(io.Discard, pipe) // after a read error: drain so the command can exit
		err = cmd.Wait()
		for _, k := range killers {
			k.Stop() // the group is gone; its id may be reused
		}
		errOut.flush()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return result, nil
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.As(err, &exit):
			var jerr error = commandExit(exit)
			if declared != nil {
				jerr = declared
			}
			if exit.ExitCode() == 75 {
				jerr = client.Retryable(jerr)
			}
			return nil, jerr
		}
		return nil, fmt.Errorf("run command: %w", err)
	}
}

// maxStdoutLine is the longest stdout line the worker reads as a progress,
// error or result line; a result is far smaller (jobtype.DefaultMaxPayloadBytes).
// A longer line is only output: it is copied to stderr in pieces, and the
// lines after it are still read.
const maxStdoutLine = 4 << 20

// readLines calls line for each line of r (without its newline) of at most
// max bytes, and copies a longer one to long, which writes it in pieces
// (lineSplitter), so a huge line neither grows the worker's memory nor
// hides the progress and result lines that follow it.
func readLines(r io.Reader, max int, long *lineSplitter, line func(string)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		ended := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if ended {
			chunk = chunk[:len(chunk)-1]
		}
		if !tooLong && len(buf)+len(chunk) > max {
			tooLong = true
			_, _ = long.Write(buf)
			buf = buf[:0]
		}
		if tooLong {
			_, _ = long.Write(chunk)
		} else {
			buf = append(buf, chunk...)
		}
		if ended || (err != nil && err != bufio.ErrBufferFull) {
			switch {
			case tooLong:
				long.flush()
			case ended || len(buf) > 0:
				line(string(buf))
			}
			buf, tooLong = buf[:0], false
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil && err != bufio.ErrBufferFull:
			return err
		}
	}
}

// parseProgress reads "progress 45 batch 5 of 11".
func parseProgress(line string) (int, string, bool) {
	f := strings.SplitN(strings.TrimPrefix(line, "progress "), " ", 2)
	pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
	if err != nil {
		return 0, "", false
	}
	step := ""
	if len(f) == 2 {
		step = strings.TrimSpace(f[1])
	}
	return int(pct), step, true
}

// ExitError is a command that exited with a non-zero status, or that a
// signal ended. Its message is ours, not the command's, so it is safe to
// show.
type ExitError struct {
	Code   int    // the exit status, or -1 if a signal ended the command
	Signal string // the signal's name if one did ("killed", "terminated")
}

// commandExit is the ExitError of a command that ended as exit says.
func commandExit(exit *exec.ExitError) *ExitError {
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &ExitError{Code: -1, Signal: ws.Signal().String()}
	}
	return &ExitError{Code: exit.ExitCode()}
}

func (e *ExitError) Error() string {
	switch {
	case e.Signal != "":
		return "signal: " + e.Signal
	case e.Code == 127: // the shell's own: see the job's log for its words
		return "exit status 127 (the shell found no such command)"
	case e.Code == 126:
		return "exit status 126 (the shell could not run the command: not executable)"
	}
	return "exit status " + strconv.Itoa(e.Code)
}
func (e *ExitError) PublicMessage() string { return e.Error() }

// declaredError is what an "error TYPE message" line said; the command
// chose to send it, so callers see it.
type declaredError struct{ typ, msg string }

func (e *declaredError) Error() string         { return e.typ + ": " + e.msg }
func (e *declaredError) ErrorType() string     { return e.typ }
func (e *declaredError) PublicMessage() string { return e.msg }

// lockedWriter serialises writes from concurrent jobs so their lines do
// not interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// maxStderrLine is the most of one stderr line a worker holds: a command
// that writes without newlines is copied in pieces of this size rather
// than held in memory until it ends.
const maxStderrLine = 64 << 10

// output is where a worker copies its commands' output lines (not the
// protocol's): textOutput, or jsonOutput for --json.
type output interface {
	line(jobID, stream, text string)
}

// textOutput writes each line to w prefixed with its job's id, printable
// (colours only to a terminal), as jobwatch logs prints a line: a
// command's output may come of a caller's payload, and must not reach the
// operator's terminal as escape sequences. Writes to w are serialized.
func textOutput(w io.Writer) output {
	return &textLines{w: &lockedWriter{w: w}, colour: isTerminal(w)}
}

type textLines struct {
	w      io.Writer
	colour bool
}

func (t *textLines) line(jobID, _, text string) {
	fmt.Fprintf(t.w, "%s: %s\n", jobID, printable(text, t.colour))
}

// jsonOutput logs each line as a record of log (the worker's JSON log):
// msg "output", with the job's id, the stream and the text.
type jsonOutput struct{ log *slog.Logger }

func (j jsonOutput) line(jobID, stream, text string) {
	j.log.Info("output", "job_id", jobID, "stream", stream, "text", text)
}

// lineSplitter hands each line of what is written to it to out as a
// line of the job's stream; flush hands on a last line that has no
// newline. It holds at most maxStderrLine bytes. Each line (or piece of
// one) also goes, as the command wrote it, to log if set: the job's log.
type lineSplitter struct {
	out    output
	jobID  string
	stream string
	log    io.Writer
	mu     sync.Mutex
	buf    []byte
}

func (p *lineSplitter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			// No end of line yet: keep it, up to the limit.
			room := maxStderrLine - len(p.buf)
			take := min(room, len(b))
			p.buf = append(p.buf, b[:take]...)
			b = b[take:]
			if len(p.buf) == maxStderrLine {
				if err := p.emitPiece(); err != nil {
					return 0, err
				}
			}
			continue
		}
		p.buf = append(p.buf, b[:i]...)
		b = b[i+1:]
		if err := p.emit(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// emit hands on the held line (or piece of one); p.mu is held.
func (p *lineSplitter) emit() error {
	p.out.line(p.jobID, p.stream, string(p.buf))
	if p.log != nil {
		_, _ = fmt.Fprintf(p.log, "%s\n", p.buf)
	}
	p.buf = p.buf[:0]
	return nil
}

// emitPiece hands on a piece of a line too long to hold, up to its last
// whole character: the bytes of one cut in two begin the next piece.
// p.mu is held.
func (p *lineSplitter) emitPiece() error {
	end := jobtype.PieceEnd(p.buf)
	rest := append([]byte(nil), p.buf[end:]...)
	p.buf = p.buf[:end]
	err := p.emit()
	p.buf = append(p.buf, rest...)
	return err
}

func (p *lineSplitter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		_ = p.emit()
	}
}

// traceContext is the trace context a command runs job in: that of the
// span ctx holds (the worker's handler span), else the one the job was
// submitted with.
func traceContext(ctx context.Context, job *jobwatchv1.Job) tracing.Context {
	if tc := tracing.FromSpan(ctx); tc.Parent != "" {
		return tc
	}
	return tracing.Context{Parent: job.GetTraceparent(), State: job.GetTracestate()}
}
