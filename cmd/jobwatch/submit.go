package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/wire"
)

const submitUsage = `Usage: jobwatch submit KIND [flags]
       jobwatch submit --file FILE [flags]

Submits a job and prints its id (or, with --json, the job). With --wait it
waits for the job to end, prints it, and exits with its outcome.

With --file it submits many jobs: each line of FILE (- for stdin) is a
SubmitJobRequest in its JSON form, as curl sends it, such as
{"kind": "thumbnail", "payload": {"image": "cat.png"}}; --batch, --queue
and --tenant apply to the lines that do not set their own (all the jobs
of one file are of one tenant: a line naming another is refused). Every line is
read and checked before any job is sent. The jobs go in SubmitJobs calls
of up to --chunk (1,000) jobs and 768 KiB, each one commit that creates
all its jobs or none: a file of up to 1,000 small jobs is submitted all
or nothing, a longer or larger one in several commits. If a call is refused, the ids of the jobs
submitted before it are printed and no later line is sent. It prints the
ids, one per line in the file's order (with --json, the jobs). Wait for
them with "jobwatch wait --batch NAME".

With --after the job runs only after other jobs of the tenant: it is
WAITING until every one of them has SUCCEEDED, then QUEUED. If one ends
any other way the job is CANCELLED (error DependencyFailed), unless
--on-dependency-failure run, which runs it once all have ended. On a
line of --file, set "after": ["ID", ...] and "onDependencyFailure":
"DEPENDENCY_FAILURE_RUN".

`

// submit runs "jobwatch submit".
func submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var tenant, queue, payload, uniqueKey, batch, file string
	var hold, wait bool
	var maxAttempts, chunk int
	var timeout time.Duration
	var after []string
	var onDependencyFailure jobwatchv1.DependencyFailure
	fs := newFlagSet("submit", stderr)
	cf.register(fs)
	fs.StringVar(&tenant, "tenant", "", "`tenant` of the job (default: the server's \"default\")")
	fs.StringVar(&queue, "queue", "", "`queue` to run it in (default: \"default\")")
	fs.StringVar(&batch, "batch", "", "label the job with this batch `name` (ASCII letters, digits and . _ - : / @), to wait for,\nlist or watch the batch's jobs together (jobwatch wait --batch NAME)")
	fs.StringVar(&file, "file", "", "submit a job for each line of this `file` (- for stdin): a SubmitJobRequest as JSON")
	fs.IntVar(&chunk, "chunk", client.MaxBatchJobs, "with --file, at most this many jobs per SubmitJobs call (one commit each); a call also holds at most 768 KiB of jobs")
	fs.StringVar(&payload, "payload", "", "payload as `JSON`, or @file to read it from a file (@- for stdin)")
	fs.StringVar(&uniqueKey, "unique-key", "", "refuse the job while another active job of the tenant has this `key`")
	fs.BoolVar(&hold, "hold", false, "create the job PENDING: it runs only after \"jobwatch start\"")
	fs.BoolVar(&wait, "wait", false, "wait for the job to end and exit with its outcome (see \"jobwatch wait -h\"); with --json, a wait stopped early (--timeout, Ctrl-C) prints the job as submitted")
	fs.DurationVar(&timeout, "timeout", 0, "with --wait, stop waiting after this long (exit 124; the job goes on); 0 waits as long as it takes")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "attempts allowed, counting the first (0: the queue's default)")
	var priority *int32
	fs.Func("priority", "`N` from 0 (most urgent) to 9: claims take the most urgent ready job first, then the oldest;\nserial queues ignore it (default: the queue's priority rule, else 0)", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 || n > 9 {
			return errors.New("must be a whole number from 0 to 9")
		}
		p := int32(n)
		priority = &p
		return nil
	})
	fs.Func("after", "run the job only after these jobs (`ID[,ID...]`, repeatable) have SUCCEEDED;\nuntil then it is WAITING", func(s string) error {
		ids := splitList(s)
		if len(ids) == 0 {
			return errors.New("want one or more job ids, comma-separated")
		}
		after = append(after, ids...)
		return nil
	})
	fs.Func("on-dependency-failure", "what a job of --after that ends other than SUCCEEDED does to this one: `cancel|run`\n(cancel it, the default; or run it once every one has ended)", func(s string) error {
		f, ok := dependencyFailures[strings.ToLower(strings.TrimSpace(s))]
		if !ok {
			return errors.New(`must be "cancel" or "run"`)
		}
		onDependencyFailure = f
		return nil
	})
	fs.Usage = func() { fmt.Fprint(stderr, submitUsage); fs.PrintDefaults() }
	pos, err := parseAnyArgs(fs, args)
	if err != nil {
		return err
	}
	if file != "" {
		if len(pos) > 0 {
			return usageError{fmt.Sprintf("submit --file takes no KIND (each line names its kind), got %q", pos)}
		}
		return submitFile(ctx, fs, cf, file, chunk, &jobwatchv1.SubmitJobRequest{Tenant: tenant, Queue: queue, Batch: batch}, stdout, stderr)
	}
	if len(pos) > 1 {
		return tooManyArgs("submit KIND [flags]", pos[1:])
	}
	if len(pos) != 1 {
		return usageError{"usage: jobwatch submit KIND [flags], or jobwatch submit --file FILE [flags]"}
	}
	if chunk != client.MaxBatchJobs {
		return usageError{"--chunk goes with --file: it bounds the jobs of one SubmitJobs call"}
	}
	value, err := readPayload(payload)
	if err != nil {
		return err
	}
	if timeout != 0 && !wait {
		return usageError{"--timeout goes with --wait: it bounds the wait, not the submit"}
	}
	if hold && wait {
		return usageError{"--hold and --wait together would wait for ever: a held job needs \"jobwatch start\""}
	}
	// Refused here, before any call, as the server would refuse them
	// (invalid_argument): a held job waits for StartJob, one with after
	// for its dependencies, never both.
	if hold && len(after) > 0 {
		return usageError{"--hold and --after do not go together: a held job waits for \"jobwatch start\", one with --after for its dependencies"}
	}
	if onDependencyFailure != 0 && len(after) == 0 {
		return usageError{"--on-dependency-failure goes with --after: it says what a failed dependency does to the job"}
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()

	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{
		Tenant: tenant, Kind: pos[0], Queue: queue, Payload: value,
		UniqueKey: uniqueKey, Hold: hold, MaxAttempts: int32(maxAttempts), Priority: priority, Batch: batch,
		After: after, OnDependencyFailure: onDependencyFailure,
	})
	if err != nil {
		return submitError(err)
	}
	if client.Terminal(job.GetState()) {
		// A job --after one that had already failed or been cancelled
		// is cancelled as it is made (or, with run, may end at once).
		fmt.Fprintf(stderr, "jobwatch: submit: the job ended as it was submitted: %s\n", summary(job))
	}
	if !wait {
		if cf.json {
			return printJSON(stdout, job)
		}
		_, err := fmt.Fprintln(stdout, job.GetId())
		return err
	}
	id := job.GetId()
	if isTerminal(stderr) {
		// A person at a terminal learns the id before a wait that may be
		// long (a kind no worker runs waits for ever), and how to stop it.
		fmt.Fprintf(stderr, "jobwatch: submitted %s; waiting for it to end (Ctrl-C stops the wait, not the job)\n", id)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeout)
		defer cancel()
	}
	submitted := job
	stop := hintWhileQueued(ctx, c, id, stderr)
	job, err = c.WaitForJob(ctx, id)
	stop()
	if j := withoutValues(err, "wait", true, stderr); j != nil {
		job, err = j, nil
	}
	if err != nil {
		// The job goes on: name it, so that the caller can wait again;
		// with --json, as submitted, on stdout, where a script reads it.
		if cf.json {
			_ = printJSON(stdout, submitted)
		}
		return callError("wait for "+id, err)
	}
	if err := printOutcome(stdout, job, cf.json); err != nil {
		return err
	}
	return outcome(job)
}

// parseAnyArgs is parseArgs for a command whose positional arguments
// depend on its flags (submit KIND or --file, wait ID... or --batch): it
// returns them all, for the command to check.
func parseAnyArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// dependencyFailures are --on-dependency-failure's words.
var dependencyFailures = map[string]jobwatchv1.DependencyFailure{
	"cancel": jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_CANCEL,
	"run":    jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_RUN,
}

// perLineFlags are the submit flags about one job only, each with the
// field that sets it on a line of --file.
var perLineFlags = map[string]string{
	"payload": "payload", "unique-key": "uniqueKey", "hold": "hold",
	"max-attempts": "maxAttempts", "priority": "priority",
	"after": "after", "on-dependency-failure": "onDependencyFailure",
}

// maxJobLine bounds a line of --file: a payload is at most 256 KiB, which
// JSON's escapes can make a few times longer.
const maxJobLine = 4 << 20

// submitFile runs "jobwatch submit --file FILE". defaults holds what the
// flags say of every job (tenant, queue, batch), for the lines that do
// not say otherwise.
func submitFile(ctx context.Context, fs *flag.FlagSet, cf clientFlags, file string, chunk int,
	defaults *jobwatchv1.SubmitJobRequest, stdout, stderr io.Writer) error {
	var refused error
	fs.Visit(func(f *flag.Flag) {
		field, perLine := perLineFlags[f.Name]
		switch {
		case refused != nil:
		case f.Name == "wait":
			refused = usageError{"--wait does not go with --file: label the jobs with --batch NAME and wait for them with \"jobwatch wait --batch NAME\""}
		case perLine:
			refused = usageError{fmt.Sprintf("--%s does not go with --file: set %q on each line that needs it", f.Name, field)}
		}
	})
	if refused != nil {
		return refused
	}
	if chunk < 1 || chunk > client.MaxBatchJobs {
		return usageError{fmt.Sprintf("--chunk must be from 1 to %d, got %d", client.MaxBatchJobs, chunk)}
	}
	encoded, lines, err := readJobLines(file, defaults)
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()
	for start, end := 0, 0; start < len(encoded); start = end {
		end = chunkEnd(encoded, start, chunk)
		reqs, err := decodeJobs(encoded[start:end])
		if err != nil {
			return err
		}
		jobs, err := c.SubmitJobs(ctx, reqs)
		if err != nil {
			return chunkError(err, fileName(file), reqs, lines, start, end)
		}
		// Printed as each commit is made: if a later one is refused,
		// these jobs exist all the same.
		for _, j := range jobs {
			if cf.json {
				err = printJSON(stdout, j)
			} else {
				_, err = fmt.Fprintln(stdout, j.GetId())
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// chunkBytes bounds the jobs of one SubmitJobs call of --file by their
// size too: three quarters of serve's default --max-request-bytes
// (1 MiB), so that a chunk of large payloads is not refused whole. A job
// larger than that goes alone (a payload is at most 256 KiB).
const chunkBytes = 768 << 10

// chunkEnd is where the SubmitJobs call of encoded's jobs from start
// ends: after chunk jobs, or before the job that would take the call
// past chunkBytes, whichever comes first; at least one job.
func chunkEnd(encoded [][]byte, start, chunk int) int {
	end, size := start, 0
	for end < len(encoded) && end-start < chunk {
		// Each job is a field of the request: its bytes and a few of
		// framing.
		size += len(encoded[end]) + 8
		if size > chunkBytes && end > start {
			break
		}
		end++
	}
	return end
}

func fileName(file string) string {
	if file == "-" {
		return "stdin"
	}
	return file
}

// readJobLines reads --file: a SubmitJobRequest in JSON on each line that
// is not blank, given defaults' tenant, queue and batch where it sets
// none. Each is kept in protobuf's binary form, a small fraction of the
// memory of a decoded request (a million small jobs: about 100 MB, not
// 1 GB), and decoded again a chunk at a time (decodeJobs). lines[i] is
// the line number of encoded[i].
func readJobLines(file string, defaults *jobwatchv1.SubmitJobRequest) (encoded [][]byte, lines []int, err error) {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, nil, usageError{fmt.Sprintf("--file: %v", err)}
		}
		defer f.Close()
		r = f
	}
	name := fileName(file)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxJobLine)
	n := 0
	for sc.Scan() {
		n++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		req := &jobwatchv1.SubmitJobRequest{}
		if err := protojson.Unmarshal(text, req); err != nil {
			return nil, nil, usageError{fmt.Sprintf("--file: line %d of %s is not a SubmitJobRequest as JSON: %s", n, name, wire.DecodeMistake(err, text))}
		}
		var line struct{ Payload json.RawMessage }
		if err := json.Unmarshal(text, &line); err == nil && len(line.Payload) > 0 {
			if err := wire.CheckExactJSON(line.Payload, "payload"); err != nil {
				return nil, nil, usageError{fmt.Sprintf("--file: line %d of %s: %v", n, name, err)}
			}
		}
		if req.Tenant == "" {
			req.Tenant = defaults.Tenant
		}
		if req.Queue == "" {
			req.Queue = defaults.Queue
		}
		if req.Batch == "" {
			req.Batch = defaults.Batch
		}
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, nil, usageError{fmt.Sprintf("--file: line %d of %s: %v", n, name, err)}
		}
		encoded = append(encoded, b)
		lines = append(lines, n)
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return nil, nil, usageError{fmt.Sprintf("--file: line %d of %s is longer than %d MiB", n+1, name, maxJobLine>>20)}
	case err != nil:
		return nil, nil, usageError{fmt.Sprintf("--file: read %s: %v", name, err)}
	case len(encoded) == 0:
		return nil, nil, usageError{fmt.Sprintf("--file: %s holds no job: want a SubmitJobRequest as JSON on each line", name)}
	}
	return encoded, lines, nil
}

// decodeJobs decodes the requests readJobLines kept.
func decodeJobs(encoded [][]byte) ([]*jobwatchv1.SubmitJobRequest, error) {
	reqs := make([]*jobwatchv1.SubmitJobRequest, len(encoded))
	for i, b := range encoded {
		reqs[i] = &jobwatchv1.SubmitJobRequest{}
		if err := proto.Unmarshal(b, reqs[i]); err != nil {
			return nil, fmt.Errorf("submit: decode a job read from the file: %w", err)
		}
	}
	return reqs, nil
}

// jobIndex finds the job a SubmitJobs refusal is about: "jobs[3].kind: ...".
var jobIndex = regexp.MustCompile(`^jobs\[(\d+)\]`)

// missingDependency finds the job of after a refusal says is missing.
var missingDependency = regexp.MustCompile(`^after: job (\S+) not found$`)

// refusedJob is the index in reqs of the job a SubmitJobs refusal is
// about, or -1: the one it names as jobs[i], or for a missing dependency
// (which it names by id only) the first job that runs after it.
func refusedJob(code connect.Code, text string, reqs []*jobwatchv1.SubmitJobRequest) int {
	if m := jobIndex.FindStringSubmatch(text); m != nil {
		if i, err := strconv.Atoi(m[1]); err == nil && i < len(reqs) {
			return i
		}
		return -1
	}
	if m := missingDependency.FindStringSubmatch(text); code == connect.CodeNotFound && m != nil {
		for i, r := range reqs {
			if slices.Contains(r.GetAfter(), m[1]) {
				return i
			}
		}
	}
	return -1
}

// chunkError describes a SubmitJobs call for reqs, the jobs of the lines
// lines[start:end], that failed: the line of the file the refusal is
// about (the server names the job as jobs[i] of the call, or the
// missing job of an after), and what was submitted before.
func chunkError(err error, file string, reqs []*jobwatchv1.SubmitJobRequest, lines []int, start, end int) error {
	msg := submitError(err).Error()
	code, text, answered := refusal(err)
	if i := refusedJob(code, text, reqs); answered && i >= 0 {
		msg = fmt.Sprintf("submit: line %d of %s: %s: %s", lines[start+i], file, code, text)
	}
	this := fmt.Sprintf("lines %d to %d", lines[start], lines[end-1])
	if start == end-1 {
		this = fmt.Sprintf("line %d", lines[start])
	}
	// The server answered, or was not there to ask: the call's one
	// commit was not made.
	notMade := answered || errors.Is(err, syscall.ECONNREFUSED)
	switch {
	case notMade && start == 0 && end == len(lines):
		// The whole file: one sentence says it, with why.
		return errors.New("submit: no job was submitted: " + strings.TrimPrefix(msg, "submit: "))
	case notMade && start == end-1:
		msg += fmt.Sprintf("\njobwatch: the job of %s was not submitted", this)
	case notMade:
		msg += fmt.Sprintf("\njobwatch: none of the jobs of %s was submitted", this)
	default:
		msg += fmt.Sprintf("\njobwatch: the call for %s failed on the way: whether its jobs were submitted is unknown (look with \"jobwatch list\")", this)
	}
	if start > 0 {
		msg += fmt.Sprintf("\njobwatch: the jobs of lines %d to %d were submitted (their ids are above)", lines[0], lines[start-1])
	}
	if end < len(lines) {
		msg += fmt.Sprintf("\njobwatch: nothing from line %d on was sent", lines[end])
	}
	return errors.New(msg)
}

// refusal is the code and message of a submit the server refused; ok is
// false for a call that failed on the way (its outcome unknown). The
// client turns not_found, which a submit answers only for a job of after
// that the tenant does not have, into client.ErrJobNotFound followed by
// the server's message.
func refusal(err error) (code connect.Code, msg string, ok bool) {
	if errors.Is(err, client.ErrJobNotFound) {
		return connect.CodeNotFound, strings.TrimPrefix(err.Error(), client.ErrJobNotFound.Error()+": "), true
	}
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(err) {
		return ce.Code(), ce.Message(), true
	}
	return 0, "", false
}

// submitError describes a refused submit as callError does, a missing
// dependency included: "submit: not_found: after: job j_… not found".
func submitError(err error) error {
	if code, msg, ok := refusal(err); ok && code == connect.CodeNotFound {
		return fmt.Errorf("submit: %s: %s", code, msg)
	}
	return callError("submit", err)
}

// readPayload parses --payload: inline JSON, @file or @- for stdin.
func readPayload(s string) (*structpb.Value, error) {
	if s == "" {
		return nil, nil
	}
	text := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		if name == "" {
			return nil, usageError{"--payload @FILE needs the file's name (@- for stdin)"}
		}
		var err error
		if name == "-" {
			text, err = io.ReadAll(os.Stdin)
		} else {
			text, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, usageError{fmt.Sprintf("--payload: %v", err)}
		}
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(text, v); err != nil {
		msg := "--payload is not JSON: " + wire.DecodeMistake(err, text)
		if t := strings.TrimSpace(string(text)); t != "" && !strings.ContainsAny(t[:1], "{[\"-0123456789tfn") {
			// A bare word: most likely a string meant as one.
			msg += fmt.Sprintf("; a string is JSON in double quotes: --payload '%q'", t)
		}
		if t := strings.TrimSpace(string(text)); !strings.HasPrefix(s, "@") && t != "" && strings.ContainsAny(t[:1], "{[") && !strings.Contains(t, `"`) {
			// An object or array without a double quote: most likely
			// typed unquoted, and the shell took its quotes out.
			msg += "; if the shell took its double quotes out, quote the whole JSON in single quotes: --payload '" +
				requoted(t) + "'"
		}
		return nil, usageError{msg}
	}
	if err := wire.CheckExactJSON(text, "--payload"); err != nil {
		return nil, usageError{err.Error()}
	}
	return v, nil
}

// requoted is t, JSON whose double quotes a shell took out ({batches:5}),
// with them put back around each bare word ({"batches":5}) when that
// makes it JSON; else an example of an object.
func requoted(t string) string {
	back := bareWord.ReplaceAllStringFunc(t, func(w string) string {
		if w == "true" || w == "false" || w == "null" {
			return w
		}
		return `"` + w + `"`
	})
	if json.Valid([]byte(back)) && !strings.Contains(back, "'") {
		return back
	}
	return `{"key":"value"}`
}

// bareWord is a word a shell may have taken the double quotes from, as
// a JSON key or string: not a number.
var bareWord = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_.-]*`)

// printOutcome prints a finished job: its summary line, or JSON.
func printOutcome(w io.Writer, j *jobwatchv1.Job, asJSON bool) error {
	if asJSON {
		return printJSON(w, j)
	}
	_, err := fmt.Fprintln(w, summary(j))
	return err
}
