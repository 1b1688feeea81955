package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobtype"
)

// Exit codes of the client commands. wait, watch and submit --wait end
// with the job's outcome; every command ends 1 when the call failed (the
// server refused it or could not be reached) and 2 on a usage error.
const (
	exitSucceeded = 0
	exitError     = 1
	exitUsage     = 2
	exitFailed    = 3
	exitCancelled = 4
	exitLost      = 5
	// exitTimedOut is timeout(1)'s status: --timeout passed before the
	// job ended, while the server answered.
	exitTimedOut = 124
)

const exitCodesHelp = `Exit status (wait, watch, submit --wait):
  0  the job SUCCEEDED
  3  the job FAILED
  4  the job was CANCELLED
  5  the job was LOST (its worker stopped heartbeating)
  124  --timeout passed before the job ended (as timeout(1) says)
  1  the call failed: unknown job, refused, or the server unreachable
     until --timeout passed
  2  usage error
  130, 143  interrupted by Ctrl-C (SIGINT), by SIGTERM
With several jobs (wait ID ID..., wait or watch --batch): 0 if every job
that ended SUCCEEDED, else the status of the first, in order, that did not.`

// exitCodeError ends the command with code, printing msg (if any) to
// stderr.
type exitCodeError struct {
	code int
	msg  string
}

func (e exitCodeError) Error() string { return e.msg }

// outcome is the exit status for a terminal job.
func outcome(j *jobwatchv1.Job) error {
	code := map[jobwatchv1.JobState]int{
		jobwatchv1.JobState_JOB_STATE_SUCCEEDED: exitSucceeded,
		jobwatchv1.JobState_JOB_STATE_FAILED:    exitFailed,
		jobwatchv1.JobState_JOB_STATE_CANCELLED: exitCancelled,
		jobwatchv1.JobState_JOB_STATE_LOST:      exitLost,
	}[j.GetState()]
	if code == 0 {
		return nil
	}
	return exitCodeError{code: code}
}

// clientFlags are the flags every client command takes.
type clientFlags struct {
	server string
	token  string
	json   bool

	// answered, set by client unless its retries are quiet, records
	// whether any call of the command reached the server.
	answered *answeredCalls
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	// Not the environment's address as the default either: it may carry
	// a user and password.
	fs.StringVar(&f.server, "server", "",
		"server `URL`, or several separated by commas: the client moves to the next when one fails (default: the environment's JOBWATCH_SERVER, else "+defaultServer+")")
	// Not the environment's token as the default: -h would print it.
	fs.StringVar(&f.token, "token", "", "bearer `token`; by default the environment's JOBWATCH_TOKEN, which is better: other users of the machine can read a command line (ps), not a process's environment")
	fs.BoolVar(&f.json, "json", false, "print the answer as JSON (one object per line)")
}

// client is the client of the flags' server or servers. Unless
// quietRetries, each retry of a transient error says why on stderr; with
// several servers, each move to the next says so there too, unless an
// option of extra (applied last) hears of it instead.
func (f *clientFlags) client(stderr io.Writer, quietRetries bool, extra ...client.Option) (*client.Client, error) {
	server := f.address()
	if err := client.ValidBaseURL(server); err != nil {
		from := "--server"
		if f.server == "" {
			from = "JOBWATCH_SERVER" // the flag was not given
		}
		return nil, usageError{fmt.Sprintf("%s: %v", from, err)}
	}
	token := f.token
	if token == "" {
		token = os.Getenv("JOBWATCH_TOKEN")
	}
	moves := &retryLines{w: stderr}
	opts := []client.Option{client.WithToken(token), client.WithServerMoveNotify(func(from, to string, cause error) {
		moves.say(fmt.Sprintf("%s: %s; calls go to %s now", from, retryReason(cause), to), "")
	})}
	if !quietRetries {
		// The first refused connection says what to check, once, unless
		// the server has answered this command before: then it ran, and
		// is restarting or gone, which the hint would misread.
		var hinted atomic.Bool
		answered := &answeredCalls{}
		f.answered = answered
		said := &retryLines{w: stderr}
		opts = append(opts, client.WithConnectOptions(connect.WithInterceptors(answered)),
			client.WithRetryNotify(func(err error, d time.Duration) {
				said.say(retryReason(err), fmt.Sprintf("; retrying in %v", d.Round(10*time.Millisecond)))
				if errors.Is(err, syscall.ECONNREFUSED) && !answered.Load() && !hinted.Swap(true) {
					fmt.Fprintln(stderr, serverHint)
				}
			}))
	}
	return client.New(server, append(opts, extra...)...), nil
}

// retryRepeatEvery is how often a retry whose reason the last retry
// line gave says it again: a server that is down is retried every few
// hundred milliseconds at first, and a line for each says nothing new.
const retryRepeatEvery = 10 * time.Second

// retryLines says on w why each retry (or move to another server) is
// made, but a reason it said less than retryRepeatEvery ago only once
// that long has passed, with how many tries it left unsaid meanwhile:
// two servers that are both down, tried in turn, alternate two reasons.
type retryLines struct {
	w   io.Writer
	now func() time.Time // time.Now if nil

	mu   sync.Mutex
	said map[string]*saidLine // by reason
}

type saidLine struct {
	at     time.Time
	unsaid int
}

// say writes reason and then then, unless reason was said less than
// retryRepeatEvery ago.
func (r *retryLines) say(reason, then string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	if r.said == nil || len(r.said) > 100 {
		r.said = map[string]*saidLine{} // a bound for a command that runs for days
	}
	s := r.said[reason]
	if s != nil && now.Sub(s.at) < retryRepeatEvery {
		s.unsaid++
		return
	}
	again := ""
	if s != nil {
		again = fmt.Sprintf(" (%d more tries since the last line said so)", s.unsaid+1)
	}
	fmt.Fprintf(r.w, "jobwatch: %s%s%s\n", reason, then, again)
	r.said[reason] = &saidLine{at: now}
}

// timeoutUnanswered is err, or, when err is a --timeout that passed while
// a call was being retried (client.LastTry) and no call of the command
// ever reached the server, the same error said of the server: "--timeout
// passed before the server answered (the last try: …)". "Before the job
// ended" would say the job was seen and had not ended; it was not seen.
func (f *clientFlags) timeoutUnanswered(err error) error {
	if err == nil || f.answered == nil || f.answered.Load() || client.LastTry(err) == nil {
		return err
	}
	for _, cause := range []error{errTimeout, errTimeoutMany} {
		if errors.Is(err, cause) {
			return errors.New(strings.Replace(err.Error(), cause.Error(), "--timeout passed before the server answered", 1))
		}
	}
	return err
}

// answeredCalls records whether the server has answered any call, with
// a result or an error of its own: a client interceptor.
type answeredCalls struct{ atomic.Bool }

func (a *answeredCalls) heard(err error) {
	if err == nil || connect.IsWireError(err) {
		a.Store(true)
	}
}

func (a *answeredCalls) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		a.heard(err)
		return resp, err
	}
}

func (a *answeredCalls) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return &answeredStream{StreamingClientConn: next(ctx, spec), calls: a}
	}
}

func (a *answeredCalls) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

type answeredStream struct {
	connect.StreamingClientConn
	calls *answeredCalls
}

func (s *answeredStream) Receive(msg any) error {
	err := s.StreamingClientConn.Receive(msg)
	switch {
	case errors.Is(err, io.EOF):
	case err != nil && len(s.ResponseHeader()) > 0:
		// The server answered the call (its headers came) and then the
		// connection was cut, perhaps in the middle of its first
		// message: it ran.
		s.calls.Store(true)
	default:
		s.calls.heard(err)
	}
	return err
}

// retryReason says why a call is retried. The client retries an unknown
// or internal error only when it made it itself (connect.IsWireError is
// false): a connection cut in the middle of an answer, which connect-go
// names "internal: protocol error: incomplete envelope", words that read
// as a bug of the server's; so is a canceled one, which the client
// retries only when the caller did not cancel: a connection reset by a
// server restarting ("canceled: … connection reset by peer").
func retryReason(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) && !connect.IsWireError(ce) &&
		(ce.Code() == connect.CodeInternal || ce.Code() == connect.CodeUnknown || ce.Code() == connect.CodeCanceled) {
		return "the connection to the server was cut (" + ce.Message() + ")"
	}
	return err.Error()
}

// defaultServer is where the commands call without --server or
// JOBWATCH_SERVER: serve's default address.
const defaultServer = "http://127.0.0.1:8080"

// address is the server --server names, or JOBWATCH_SERVER, or
// defaultServer.
func (f *clientFlags) address() string {
	if f.server != "" {
		return f.server
	}
	return envOr("JOBWATCH_SERVER", defaultServer)
}

// redactedAddress is address as a log may show it: each URL's password
// replaced by xxxxx.
func (f *clientFlags) redactedAddress() string {
	addrs := splitList(f.address())
	for i, a := range addrs {
		if u, err := url.Parse(a); err == nil {
			addrs[i] = u.Redacted()
		}
	}
	return strings.Join(addrs, ",")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseArgs parses flags that may come before, between or after the
// positional arguments ("submit enrich --wait" as well as
// "submit --wait enrich"), which the flag package alone does not allow.
// It requires exactly want positional arguments, named in usage (any
// number with want -1, for a caller that checks them itself).
func parseArgs(fs *flag.FlagSet, args []string, want int, names string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if want >= 0 && len(pos) != want {
		switch {
		case want == 0:
			return nil, usageError{fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), pos)}
		case len(pos) > want:
			return nil, tooManyArgs(fs.Name()+" "+names+" [flags]", pos[want:])
		}
		return nil, usageError{fmt.Sprintf("usage: %s %s [flags]", fs.Name(), names)}
	}
	return pos, nil
}

// tooManyArgs refuses the arguments extra beyond what usage takes,
// naming them: often a value with spaces that the shell split, or more
// job IDs to a command that takes one.
func tooManyArgs(usage string, extra []string) error {
	if allJobIDs(extra) {
		return usageError{fmt.Sprintf("usage: %s: it takes one job's ID, and %q are more: run it once for each job", usage, extra)}
	}
	return usageError{fmt.Sprintf("usage: %s: %q is more than it takes (quote a value with spaces)", usage, extra)}
}

// allJobIDs reports whether every argument looks like a job's ID.
func allJobIDs(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "j_") || strings.ContainsAny(a, " \t") {
			return false
		}
	}
	return true
}

// withoutValues is the job in err if err is a *client.UndecodableJobError
// whose job decoded without its payload and result (a job stored before
// the server refused values nested too deep to decode), and only if it
// has ended when ended is set; it then says on stderr what is missing.
// Otherwise nil: err stands.
func withoutValues(err error, what string, ended bool, stderr io.Writer) *jobwatchv1.Job {
	var u *client.UndecodableJobError
	if !errors.As(err, &u) || u.Job == nil || (ended && !client.Terminal(u.Job.GetState())) {
		return nil
	}
	fmt.Fprintf(stderr, "jobwatch: %s: job %s is shown without its payload and result, which cannot be decoded: %v\n", what, u.JobID, u.Err)
	return u.Job
}

// callError describes a failed call for a person at a terminal: "WHAT:
// CODE: MESSAGE", a job not found included ("WHAT: not_found: …").
func callError(what string, err error) error {
	if errors.Is(err, client.ErrJobNotFound) {
		return fmt.Errorf("%s: %s: %w", what, connect.CodeNotFound, err)
	}
	if errors.Is(err, client.ErrJobNotStarted) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return codeError(what, err)
}

// jobCallError is callError for a call about the job id: a job not
// found reads "WHAT: not_found: ID: job not found", as the server says
// it, whoever named it (the server, the client's wait), as a script
// running several commands needs to know which one was not found.
func jobCallError(what, id string, err error) error {
	switch {
	case errors.Is(err, client.ErrJobNotFound):
		return notFoundError(what, id)
	case errors.Is(err, client.ErrJobNotStarted):
		return notStartedError(what, id)
	}
	return callError(what, err)
}

// notStartedError reads "WHAT: failed_precondition: ID: job is pending:
// start it first", as a job not found reads.
func notStartedError(what, id string) error {
	return fmt.Errorf("%s: %s: %s: %w", what, connect.CodeFailedPrecondition, id, client.ErrJobNotStarted)
}

// notFoundError reads "WHAT: not_found: ID: job not found".
func notFoundError(what, id string) error {
	return fmt.Errorf("%s: %s: %s: %w", what, connect.CodeNotFound, id, client.ErrJobNotFound)
}

// codeError is a server's answer as its code and message.
func codeError(what string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg := fmt.Sprintf("%s: %s: %s", what, ce.Code(), ce.Message())
		if ce.Code() == connect.CodeUnauthenticated {
			// The server says what is wrong with the Authorization
			// header; at a terminal the question is how to send one.
			msg += "\n" + tokenHint
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			msg += "\n" + serverHint
		}
		if client.SpeaksHTTP1(err) {
			msg += "\n" + http1Hint
		}
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// serverHint is what to check when nothing listens where a command
// called.
const serverHint = "jobwatch: nothing answers at that address: is jobwatch serve (or demo) running there? --server or JOBWATCH_SERVER names the server, http://127.0.0.1:8080 when neither is set"

// http1Hint is what to check when the address answers in HTTP/1.
const http1Hint = "jobwatch: the server at that address answered in HTTP/1, not in the HTTP/2 a jobwatch server speaks on http://: is it a jobwatch server, and does a proxy in between pass HTTP/2 on (h2c)? --server or JOBWATCH_SERVER names the server"

// tokenHint is how the client commands take a bearer token.
const tokenHint = "jobwatch: give a token the server's tokens file lists, with --token TOKEN or in the JOBWATCH_TOKEN environment variable"

// stateName is a state as people say it: "RUNNING".
func stateName(s jobwatchv1.JobState) string {
	return strings.TrimPrefix(s.String(), "JOB_STATE_")
}

// parseState accepts "running", "RUNNING" or "JOB_STATE_RUNNING".
func parseState(s string) (jobwatchv1.JobState, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "JOB_STATE_") {
		name = "JOB_STATE_" + name
	}
	v, ok := jobwatchv1.JobState_value[name]
	if !ok || v == 0 {
		return 0, usageError{fmt.Sprintf("unknown state %q: want pending, waiting, queued, running, succeeded, failed, cancelled or lost", s)}
	}
	return jobwatchv1.JobState(v), nil
}

var jsonLine = protojson.MarshalOptions{}

// printJSON prints m as one line of JSON.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := jsonLine.Marshal(m)
	if err != nil {
		return err
	}
	// protojson may add random spaces to stop people depending on its
	// output byte for byte; one object per line is all we promise.
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// valueJSON is a payload or result as compact JSON, "" for none.
func valueJSON(v *structpb.Value) string {
	if v == nil {
		return ""
	}
	b, err := protojson.Marshal(v)
	if err != nil {
		return "?"
	}
	// JSON escapes control characters but not the invisible ones a
	// terminal acts on (a right-to-left override): those are escaped
	// here, which leaves the JSON the same value.
	var out strings.Builder
	for _, r := range string(b) {
		if invisible(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
			continue
		}
		out.WriteRune(r)
	}
	return out.String()
}

// summary is one line about a job: id, state, progress and the outcome.
func summary(j *jobwatchv1.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d%%", j.GetId(), stateName(j.GetState()), j.GetPercent())
	// The step and the error's message, which a worker wrote, quoted as
	// printable text: the escapes a command printed into them are
	// dropped, as get and list drop them, not shown escaped.
	if j.GetStep() != "" {
		fmt.Fprintf(&b, " %q", plain(j.GetStep()))
	}
	if e := j.GetError(); e != nil {
		fmt.Fprintf(&b, " %s=%s", strings.ReplaceAll(errorLabel(j), " ", "_"), plain(e.GetType()))
		if e.GetMessage() != "" {
			fmt.Fprintf(&b, " %q", plain(e.GetMessage()))
		}
	}
	if r := valueJSON(j.GetResult()); r != "" {
		fmt.Fprintf(&b, " result=%s", r)
	}
	if at := readyAt(j, time.Now()); at != "" {
		fmt.Fprintf(&b, " ready at %s", at)
	}
	return b.String()
}

// printJob prints a job for a person, one field per line, or as JSON.
func printJob(w io.Writer, j *jobwatchv1.Job, asJSON bool) error {
	return printJobWith(w, j, asJSON, nil, "")
}

// printJobWith is printJob that shows beside each job j runs after its
// state in states, where it has one, and what holds a QUEUED job back
// (held, holdText), where that is known.
func printJobWith(w io.Writer, j *jobwatchv1.Job, asJSON bool, states map[string]string, held string) error {
	if asJSON {
		return printJSON(w, j)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", j.GetId())
	row("kind", j.GetKind())
	row("tenant", j.GetTenant())
	row("queue", j.GetQueue())
	row("batch", j.GetBatch())
	row("priority", fmt.Sprintf("%d (0 most urgent, 9 least)", j.GetPriority()))
	row("state", stateName(j.GetState()))
	row("ready at", readyAt(j, time.Now()))
	row("held", held)
	// The jobs it runs after, one a line, with their states when read; a
	// WAITING job waits for those of them that have not ended.
	for i, id := range j.GetAfter() {
		key := ""
		if i == 0 {
			key = "after:"
		}
		if st := states[id]; st != "" {
			id += "  " + st
		}
		fmt.Fprintf(tw, "%s\t%s\n", key, id)
	}
	row("on dependency failure", dependencyFailureName(j.GetOnDependencyFailure()))
	row("progress", strings.TrimSpace(fmt.Sprintf("%d%% %s", j.GetPercent(), plain(j.GetStep()))))
	row("attempt", fmt.Sprintf("%d of %d", j.GetAttempt(), j.GetMaxAttempts()))
	row("unique key", j.GetUniqueKey())
	row("worker", plain(j.GetWorkerId()))
	row("created", formatTime(j.GetCreatedAt().AsTime(), j.GetCreatedAt() != nil))
	row("started", formatTime(j.GetStartedAt().AsTime(), j.GetStartedAt() != nil))
	row("finished", formatTime(j.GetFinishedAt().AsTime(), j.GetFinishedAt() != nil))
	row("payload", valueJSON(j.GetPayload()))
	row("result", valueJSON(j.GetResult()))
	if e := j.GetError(); e != nil {
		row(errorLabel(j), errorText(e))
	}
	row("version", fmt.Sprint(j.GetVersion()))
	key := "history:" // one entry a line, the first labelled
	if gap := historyGap(j.GetAttempts()); gap != "" {
		fmt.Fprintf(tw, "%s\t%s\n", key, gap)
		key = ""
	}
	for _, a := range j.GetAttempts() {
		fmt.Fprintf(tw, "%s\t%s\n", key, historyLine(a))
		key = ""
	}
	return tw.Flush()
}

// historyGap says what a job's history (its attempts, oldest first, at
// most jobtype.MaxHistory entries) no longer holds, "" where nothing
// shows that anything was dropped. Attempts are numbered from 1, a retry
// keeping the count going, and each run that ended has an entry: a first
// entry about run 8 means those of runs 1 to 7 are no longer kept, and a
// first entry that is an action on the job after run 8 (a retry: it has
// no start) means run 8's is not kept either. A full history that starts
// before any run may have lost entries too (a job cancelled and retried
// before it ever ran), which the entries cannot tell. The page says the
// same (web/src/model.ts).
func historyGap(history []*jobwatchv1.JobAttempt) string {
	if len(history) == 0 {
		return ""
	}
	bound := fmt.Sprintf("(a job keeps the last %d entries of its history)", jobtype.MaxHistory)
	n := history[0].GetAttempt()
	if history[0].GetStartedAt() != nil {
		n--
	}
	if n > 0 {
		what := "attempts"
		if n == 1 {
			what = "attempt"
		}
		return fmt.Sprintf("… %d earlier %s not kept %s", n, what, bound)
	}
	if len(history) >= jobtype.MaxHistory {
		return "… earlier entries, if any, not kept " + bound
	}
	return ""
}

// errorLabel names a job's error: "error" where it is why the job ended
// (FAILED, LOST, or CANCELLED because a job it runs after failed), "last
// error" where it is only why an attempt ended: a job waiting for its
// next attempt, or one cancelled after a failed attempt, whose error
// stays as the attempt left it (an attempt of its history has it), or
// one an operator cancelled, whatever error it carried before.
func errorLabel(j *jobwatchv1.Job) string {
	switch j.GetState() {
	case jobwatchv1.JobState_JOB_STATE_FAILED, jobwatchv1.JobState_JOB_STATE_LOST:
		return "error"
	case jobwatchv1.JobState_JOB_STATE_CANCELLED:
		// An operator's cancel (the last entry, with its By) sets no
		// error: the job's came before it, from an attempt or from a
		// dependency's failure that a retry since put behind it.
		history := j.GetAttempts()
		if n := len(history); n > 0 && history[n-1].GetState() == jobwatchv1.JobState_JOB_STATE_CANCELLED && history[n-1].GetBy() != "" {
			return "last error"
		}
		if !slices.ContainsFunc(history, func(a *jobwatchv1.JobAttempt) bool { return proto.Equal(a.GetError(), j.GetError()) }) {
			return "error"
		}
	}
	return "last error"
}

// errorText is a job's error for a person: its type and message, which
// a worker wrote, so printable as a log line is (plain).
func errorText(e *jobwatchv1.JobError) string {
	return plain(strings.TrimSuffix(e.GetType()+": "+e.GetMessage(), ": "))
}

// dependencyFailureName is on_dependency_failure as submit's flag says
// it: "cancel" or "run"; "" for a job without after.
func dependencyFailureName(f jobwatchv1.DependencyFailure) string {
	if f == jobwatchv1.DependencyFailure_DEPENDENCY_FAILURE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(f.String(), "DEPENDENCY_FAILURE_"))
}

// historyLine is one entry of a job's history for a person: the
// attempt, its outcome, when, by which worker or operator, and why.
func historyLine(a *jobwatchv1.JobAttempt) string {
	var b strings.Builder
	// The entry's state is the job's after the attempt: QUEUED (or
	// WAITING) for one that failed and was retried, which reads as such.
	outcome := stateName(a.GetState())
	switch a.GetState() {
	case jobwatchv1.JobState_JOB_STATE_QUEUED, jobwatchv1.JobState_JOB_STATE_WAITING:
		outcome = "ended, retried (" + outcome + ")"
	}
	if a.GetAttempt() == 0 { // ended (cancelled) before any run
		fmt.Fprintf(&b, "before any run: %s", outcome)
	} else {
		fmt.Fprintf(&b, "#%d %s", a.GetAttempt(), outcome)
	}
	if a.GetStartedAt() != nil {
		fmt.Fprintf(&b, " %s ->", formatTime(a.GetStartedAt().AsTime(), true))
	}
	fmt.Fprintf(&b, " %s", formatTime(a.GetFinishedAt().AsTime(), a.GetFinishedAt() != nil))
	if w := a.GetWorkerId(); w != "" {
		fmt.Fprintf(&b, " worker=%s", plain(w))
	}
	if by := a.GetBy(); by != "" {
		fmt.Fprintf(&b, " by=%s", by)
	}
	if e := a.GetError(); e != nil {
		fmt.Fprintf(&b, " error=%s", errorText(e))
	}
	return b.String()
}

// readyAt is when a QUEUED job that is not ready yet (its run_at, or the
// backoff after a failed attempt) may be claimed, and how long until
// then; "" for a ready job and every other state.
func readyAt(j *jobwatchv1.Job, now time.Time) string {
	at := j.GetRunAt().AsTime()
	if j.GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED || j.GetRunAt() == nil || !at.After(now) {
		return ""
	}
	return fmt.Sprintf("%s (in %v; not claimed before)", formatTime(at, true), at.Sub(now).Round(time.Second))
}

// formatTime writes a time in the local zone of the machine the command
// runs on, with the zone's name, so a reader never has to guess which
// zone a time is in: queues and schedules print theirs in UTC with a Z.
func formatTime(t time.Time, set bool) string {
	if !set {
		return ""
	}
	return t.Local().Format(time.DateTime + " MST")
}
