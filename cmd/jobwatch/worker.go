package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

const workerUsage = `Usage: jobwatch worker --kind KIND --exec 'COMMAND' [flags]

Claims jobs of the given kinds and runs COMMAND with /bin/sh -c for each,
until interrupted; then it stops claiming and lets running commands finish
(up to --drain-timeout).

The command's protocol:
  stdin    the job's payload as JSON ("null" when there is none)
  env      JOBWATCH_JOB_ID, JOBWATCH_KIND, JOBWATCH_TENANT, JOBWATCH_ATTEMPT
  stdout   "progress 45 batch 5 of 11" sets percent 45 and step "batch 5 of 11";
           "error TYPE message" sets the error reported if the command fails
           (TYPE and message are shown to callers);
           the last line that is JSON becomes the job's result;
           other lines are copied to the worker's stderr
  exit 0   the job SUCCEEDED
  exit 75  the attempt failed and may be retried (EX_TEMPFAIL)
  other    the job FAILED, with error type ExitError ("exit status N")
           unless an "error" line said otherwise
  When the job is cancelled or its lease is lost, the command's process
  group gets SIGTERM, and SIGKILL 10 seconds later.

Flags:
`

// worker runs "jobwatch worker".
func worker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var kinds, queues, command, id string
	var concurrency int
	var heartbeat, drain time.Duration
	fs := newFlagSet("worker", stderr)
	cf.register(fs)
	fs.StringVar(&kinds, "kind", "", "job `kinds` to run, comma-separated (required)")
	fs.StringVar(&command, "exec", "", "shell `command` to run per job (required)")
	fs.StringVar(&queues, "queue", "", "only claim from these `queues`, comma-separated (default: any)")
	fs.IntVar(&concurrency, "concurrency", 1, "jobs to run at once")
	fs.StringVar(&id, "id", "", "worker `id` shown on its jobs (default: host-pid-random)")
	fs.DurationVar(&heartbeat, "heartbeat", 10*time.Second, "heartbeat interval (kept under a third of the lease timeout)")
	fs.DurationVar(&drain, "drain-timeout", time.Minute, "on interrupt, how long running commands may take to finish before they are stopped")
	fs.Usage = func() { fmt.Fprint(stderr, workerUsage); fs.PrintDefaults() }
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if kinds == "" || command == "" {
		return usageError{"worker needs --kind and --exec"}
	}
	if concurrency < 1 {
		return usageError{fmt.Sprintf("--concurrency must be at least 1, got %d", concurrency)}
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w := client.NewWorker(c.WorkerBackend(), client.WorkerConfig{
		ID:                id,
		Concurrency:       concurrency,
		Queues:            splitList(queues),
		HeartbeatInterval: heartbeat,
		DrainTimeout:      drain,
		Logger:            log,
	})
	out := &lockedWriter{w: stderr}
	for _, k := range splitList(kinds) {
		w.Handle(k, execHandler(command, out, killDelay))
	}
	log.Info("worker started", "id", w.ID(), "kinds", kinds, "server", cf.server)
	err = w.Run(ctx)
	log.Info("worker stopped")
	return err
}

// killDelay is how long a cancelled command's process group has between
// SIGTERM and SIGKILL.
const killDelay = 10 * time.Second

// execHandler runs command for each job as the usage text describes; a
// cancelled command's process group gets SIGTERM, and SIGKILL after kill.
func execHandler(command string, out io.Writer, kill time.Duration) client.Handler {
	return func(ctx context.Context, job *jobwatchv1.Job, progress client.Progress) (any, error) {
		stdin := []byte("null")
		if p := job.GetPayload(); p != nil {
			b, err := protojson.Marshal(p)
			if err != nil {
				return nil, fmt.Errorf("encode payload: %w", err)
			}
			stdin = b
		}
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
		cmd.Stdin = strings.NewReader(string(stdin) + "\n")
		cmd.Env = append(os.Environ(),
			"JOBWATCH_JOB_ID="+job.GetId(),
			"JOBWATCH_KIND="+job.GetKind(),
			"JOBWATCH_TENANT="+job.GetTenant(),
			"JOBWATCH_ATTEMPT="+strconv.Itoa(int(job.GetAttempt())),
		)
		errOut := &prefixWriter{w: out, prefix: job.GetId() + ": "}
		defer errOut.flush()
		cmd.Stderr = errOut
		// Its own process group, so a Ctrl-C at the worker's terminal
		// (which drains) does not reach the command, and a cancel stops
		// the whole pipeline the command may have started.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// SIGKILL goes to the group too (exec's WaitDelay would kill only
		// the shell, and a child holding stdout would keep the job's slot).
		var killer *time.Timer // read after Wait, which orders it after Cancel
		cmd.Cancel = func() error {
			pgid := cmd.Process.Pid
			killer = time.AfterFunc(kill, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
			return syscall.Kill(-pgid, syscall.SIGTERM)
		}
		cmd.WaitDelay = kill + time.Second
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start command: %w", err)
		}
		var result json.RawMessage
		var declared *declaredError
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64*1024), 4<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case strings.HasPrefix(line, "progress "):
				if pct, step, ok := parseProgress(line); ok {
					progress(pct, step)
					continue
				}
			case strings.HasPrefix(line, "error "):
				f := strings.SplitN(line, " ", 3)
				declared = &declaredError{typ: f[1]}
				if len(f) == 3 {
					declared.msg = f[2]
				}
				continue
			case line != "" && json.Valid([]byte(line)):
				result = json.RawMessage(line)
				continue
			}
			fmt.Fprintf(out, "%s: %s\n", job.GetId(), sc.Text())
		}
		_, _ = io.Copy(io.Discard, pipe) // a line over 4 MiB: drain so the command can exit
		err = cmd.Wait()
		if killer != nil {
			killer.Stop() // the group is gone; its id may be reused
		}
		errOut.flush()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return result, nil
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case errors.As(err, &exit):
			var jerr error = &ExitError{Code: exit.ExitCode()}
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

// ExitError is a command that exited with a non-zero status. Its message
// is ours, not the command's, so it is safe to show.
type ExitError struct{ Code int }

func (e *ExitError) Error() string         { return "exit status " + strconv.Itoa(e.Code) }
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

// prefixWriter prefixes each line with the job id; flush writes out a
// last line that has no newline.
type prefixWriter struct {
	w      io.Writer
	prefix string
	mu     sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]); err != nil {
			return 0, err
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf)
		p.buf = nil
	}
}
