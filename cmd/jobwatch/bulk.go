package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// The commands that act on jobs (cancel, retry, delete) take either one
// job id or a filter: "jobwatch retry --state failed --queue q" acts on
// every job it matches, a page at a time, and asks first when run at a
// terminal (unless --yes).

// filterFlags are the flags of a bulk action.
type filterFlags struct {
	tenant, queues, kinds, states, before, batch string
	all, yes                                     bool
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	onceVar(fs, &f.tenant, "tenant", "act on this `tenant`'s jobs (\"*\": every tenant; admin tokens only) instead of one job")
	fs.Var(listFlag{&f.queues}, "queue", "act on the jobs of these `queues` (comma-separated, or the flag again) instead of one job")
	fs.Var(listFlag{&f.kinds}, "kind", "act on the jobs of these `kinds` (comma-separated, or the flag again) instead of one job")
	fs.Var(listFlag{&f.states}, "state", "act on the jobs in these `states` (comma-separated, or the flag again) instead of one job")
	onceVar(fs, &f.batch, "batch", "act on the jobs of this `batch` instead of one job")
	onceVar(fs, &f.before, "created-before", "act on the jobs created before this `time` (RFC 3339, or a duration such as 24h: that long ago)")
	fs.BoolVar(&f.all, "all", false, "act on every job of the tenant that the action applies to")
	fs.BoolVar(&f.yes, "yes", false, "do not ask before a bulk action")
}

// filter is the JobFilter the flags say, as of now.
func (f *filterFlags) filter(now time.Time) (*jobwatchv1.JobFilter, error) {
	pf := &jobwatchv1.JobFilter{Tenant: f.tenant, Queues: splitList(f.queues), Kinds: splitList(f.kinds), Batch: f.batch, All: f.all}
	for _, s := range splitList(f.states) {
		st, err := parseState(s)
		if err != nil {
			return nil, err
		}
		pf.States = append(pf.States, st)
	}
	if f.before != "" {
		t, err := time.Parse(time.RFC3339Nano, f.before)
		if err != nil {
			d, derr := time.ParseDuration(f.before)
			if derr != nil || d <= 0 {
				return nil, usageError{fmt.Sprintf("--created-before %q is neither an RFC 3339 time nor a positive duration", f.before)}
			}
			t = now.Add(-d)
		}
		pf.CreatedBefore = timestamppb.New(t)
	}
	return pf, nil
}

// describe says what the filter selects, for the prompt.
func describe(pf *jobwatchv1.JobFilter) string {
	var parts []string
	add := func(name string, vs []string) {
		if len(vs) > 0 {
			parts = append(parts, name+" "+strings.Join(vs, " or "))
		}
	}
	tenant := pf.GetTenant()
	switch tenant {
	case "":
		tenant = "your token's tenant (\"default\" for an admin)"
	case "*":
		tenant = "every tenant"
	default:
		tenant = "tenant " + tenant
	}
	add("queue", pf.GetQueues())
	add("kind", pf.GetKinds())
	var states []string
	for _, s := range pf.GetStates() {
		states = append(states, stateName(s))
	}
	add("state", states)
	if pf.GetBatch() != "" {
		parts = append(parts, "batch "+pf.GetBatch())
	}
	if pf.GetCreatedBefore() != nil {
		parts = append(parts, "created before "+pf.GetCreatedBefore().AsTime().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "every job of " + tenant
	}
	return "every job of " + tenant + " with " + strings.Join(parts, ", ")
}

// callerTenant is the tenant the server reads an empty tenant as for
// this caller: a client token's own, "default" for an admin token or a
// server without tokens; "" when the server does not say.
func callerTenant(ctx context.Context, c *client.Client) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := c.JobService().GetServerInfo(ctx, &jobwatchv1.GetServerInfoRequest{})
	switch {
	case err != nil:
		return ""
	case info.GetCaller().GetTenant() != "":
		return info.GetCaller().GetTenant()
	case info.GetCaller() == nil || info.GetCaller().GetRole() == "admin":
		return "default"
	}
	return ""
}

// stdin is where a bulk action's confirmation is read, and stdinIsTerminal
// whether to ask at all; tests replace them.
var (
	stdin           io.Reader = os.Stdin
	stdinIsTerminal           = func() bool { return isTerminal(os.Stdin) }
)

// ask reads the answer to a question from stdin, a line; a signal (ctx
// ends) ends the wait at once, with ctx's error: a Ctrl-C at the
// question is the answer no, where the read would go on until a line
// came (and a "y" then would start the action only to stop it).
func ask(ctx context.Context) (string, error) {
	line, in := make(chan string, 1), stdin
	go func() { // left blocked in the read if ctx ends: the command is ending
		answer, _ := bufio.NewReader(in).ReadString('\n')
		line <- answer
	}()
	select {
	case answer := <-line:
		return answer, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// nothingDone is the error of a bulk action whose ctx ended before it
// asked the server to change a job, saying why when a signal ended it
// ("delete: stopped by SIGINT (Ctrl-C): nothing done"); nil while ctx
// is live.
func nothingDone(ctx context.Context, name string) error {
	if ctx.Err() == nil {
		return nil
	}
	var c signalCause
	if errors.As(context.Cause(ctx), &c) {
		return fmt.Errorf("%s: %v: nothing done", name, c)
	}
	return fmt.Errorf("%s: stopped before it began (%v): nothing done", name, context.Cause(ctx))
}

// bulkCall is one of the client's bulk methods.
type bulkCall func(c *client.Client, ctx context.Context, f *jobwatchv1.JobFilter, onPage func(client.BulkResult)) (client.BulkResult, error)

// oneOrMany runs a command that acts on one job (its id as the one
// argument) or on the jobs a filter matches (bulk): one prints the job
// as printOutcome does, many prints how many jobs matched and changed.
func oneOrMany(ctx context.Context, name, verb string, args []string, stdout, stderr io.Writer,
	single func(*client.Client, context.Context, string) (*jobwatchv1.Job, error), bulk bulkCall,
) error {
	return actOnJobs(ctx, name, verb, args, stdout, stderr, single, printOutcome, bulk)
}

// singleAbout says what a command of one job's ID does, for its -h;
// the bulk commands say it with their filter flags.
var singleAbout = map[string]string{
	"get": "Prints the job, a field a line: its kind, tenant, queue, state, progress,\n" +
		"attempts, times, payload, result, error and the history of its attempts;\n" +
		"for a WAITING job, the state of each job it runs after (the first 20);\n" +
		"for a QUEUED job, when it is ready and, for a token that may read the\n" +
		"queues, what of its queue holds it back (held: paused, its rate, its\n" +
		"max_running, a pool, the tenant's max_running_per_tenant, a serial\n" +
		"queue's turn); with --json the whole job, as the API answers it.",
	"start": "Starts a held job (submitted with --hold, PENDING): it becomes QUEUED\n" +
		"and runs when a worker takes it. Its state is printed.",
}

// actOnJobs runs a command that takes one job id and calls single with
// it, printing the job it answers with (or that it was deleted: single
// answered no job), or, with bulk set, that takes a filter instead and
// calls bulk with it.
func actOnJobs(ctx context.Context, name, verb string, args []string, stdout, stderr io.Writer,
	single func(*client.Client, context.Context, string) (*jobwatchv1.Job, error),
	print func(io.Writer, *jobwatchv1.Job, bool) error, bulk bulkCall,
) error {
	var cf clientFlags
	var ff filterFlags
	fs := newFlagSet(name, stderr)
	cf.register(fs)
	want := 1
	if bulk != nil {
		ff.register(fs)
		if hasFilterFlag(args) {
			want = 0
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobwatch %s ID [flags]\n", name)
		if about := singleAbout[name]; about != "" {
			fmt.Fprintf(stderr, "\n%s\n", about)
		}
		if bulk != nil {
			fmt.Fprintf(stderr, "       jobwatch %s --queue Q --kind K --state S --created-before T --batch B [--all] [--yes] [flags]\n\n"+
				"With an ID it %s that job; with filter flags, every job they match, a page of 1,000 at a time.\n", name, thirdPerson(verb))
		}
		fmt.Fprint(stderr, "\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, -1, "ID") // the count is checked here
	switch {
	case err != nil:
		return err
	case want == 0 && len(pos) > 0:
		return usageError{fmt.Sprintf("%s takes one job's ID or filter flags, not both", name)}
	case want == 1 && len(pos) > 1 && bulk != nil && allJobIDs(pos):
		return usageError{fmt.Sprintf("usage: %s ID [flags]: it takes one job's ID, and %q are more: run it once for each job, "+
			"or select the jobs with filter flags (--queue, --kind, --state, --created-before, --batch); jobwatch help %s says more", fs.Name(), pos[1:], name)}
	case want == 1 && len(pos) > 1:
		return tooManyArgs(fs.Name()+" ID [flags]", pos[1:])
	case want == 1 && len(pos) != 1 && bulk != nil:
		return usageError{fmt.Sprintf("usage: %s ID [flags], or %s with filter flags (--queue, --kind, --state, --created-before, --batch, or --all); jobwatch help %s says more",
			fs.Name(), fs.Name(), name)}
	case want == 1 && len(pos) != 1:
		return usageError{fmt.Sprintf("usage: %s ID [flags]", fs.Name())}
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	if len(pos) == 1 {
		job, err := single(c, ctx, pos[0])
		if j := withoutValues(err, name, false, stderr); j != nil {
			job, err = j, nil
		}
		if err != nil {
			return jobCallError(name, pos[0], err)
		}
		if job == nil { // deleted: nothing left to show
			if cf.json {
				return json.NewEncoder(stdout).Encode(map[string]string{"deleted": pos[0]})
			}
			_, err := fmt.Fprintf(stdout, "%s deleted\n", pos[0])
			return err
		}
		return print(stdout, job, cf.json)
	}
	pf, err := ff.filter(time.Now())
	if err != nil {
		return err
	}
	if !narrows(pf) {
		// The server refuses it too; say so before asking.
		return usageError{fmt.Sprintf("%s of %s needs --queue, --kind, --state, --created-before or --batch, or --all to %s every one",
			name, strings.TrimPrefix(describe(pf), "every job of "), verb)}
	}
	if !ff.yes && stdinIsTerminal() {
		// A question the server would then refuse the answer to wastes
		// the reader's "y": ask it first whether this token may act on
		// these jobs.
		if err := mayActOn(ctx, c, pf); err != nil {
			if stopped := nothingDone(ctx, name); stopped != nil {
				return stopped
			}
			return callError(name, err)
		}
		asked := pf
		if pf.GetTenant() == "" {
			// The question names the tenant the server reads "" as.
			asked = proto.Clone(pf).(*jobwatchv1.JobFilter)
			asked.Tenant = callerTenant(ctx, c)
		}
		fmt.Fprintf(stderr, "%s %s? [y/N] ", verb, describe(asked))
		answer, err := ask(ctx)
		if err != nil {
			fmt.Fprintln(stderr) // the message starts a line of its own, not after the question
			return nothingDone(ctx, name)
		}
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return fmt.Errorf("%s: nothing done", name)
		}
	}
	// A Ctrl-C before the first page was asked for leaves every job as it
	// was, which is what to say, not the call's "context canceled".
	if stopped := nothingDone(ctx, name); stopped != nil {
		return stopped
	}
	r, err := bulk(c, ctx, pf, func(r client.BulkResult) {
		if !cf.json {
			fmt.Fprintf(stderr, "jobwatch: %s: %d matched, %d %s so far\n", name, r.Matched, r.Changed, pastTense(verb))
		}
	})
	inDoubt := false
	if err != nil {
		code, _, answered := refusal(err)
		inDoubt = !answered && !errors.Is(err, syscall.ECONNREFUSED) || code == connect.CodeUnavailable || code == connect.CodeDeadlineExceeded ||
			code == connect.CodeInternal || code == connect.CodeUnknown
		err = callError(name, err)
	}
	switch {
	case cf.json:
		// What was done, and the error that stopped it if one did: a
		// script reads both from one place.
		// inDoubt: the counts are of the pages answered; the page asked
		// for when the call failed may have been done too.
		out := struct {
			Matched int64  `json:"matched"`
			Changed int64  `json:"changed"`
			Error   string `json:"error,omitempty"`
			InDoubt bool   `json:"inDoubt,omitempty"`
		}{Matched: r.Matched, Changed: r.Changed, InDoubt: inDoubt}
		if err != nil {
			out.Error = err.Error()
		}
		if jerr := json.NewEncoder(stdout).Encode(out); jerr != nil && err == nil {
			err = jerr
		}
	case err == nil:
		fmt.Fprintf(stdout, "%d matched, %d %s\n", r.Matched, r.Changed, pastTense(verb))
		if r.Matched == 0 && pf.GetTenant() == "" {
			// Nothing matched: perhaps the jobs are another tenant's.
			in := "your token's tenant (\"default\" for an admin token)"
			if t := callerTenant(ctx, c); t != "" {
				in = "tenant " + t
			}
			fmt.Fprintf(stderr, "jobwatch: the filter was read in %s; --tenant T names another, --tenant '*' every tenant (admin)\n", in)
		}
		if left := r.Matched - r.Changed; left > 0 {
			fmt.Fprintf(stderr, "jobwatch: %s: %d left as they were: %s\n", name, left, leftBecause[name])
		}
	case r.Matched > 0 || inDoubt:
		// Stopped partway: what stands is said beside the error, not as
		// the summary of a call that went through. A page whose answer
		// was lost may have been done, wholly or in part; doing the
		// rest is the same command again, which finds only what is left.
		var doubt string
		if inDoubt {
			doubt = "; the page asked for when it stopped may have been done in part: run the same command again to do the rest"
		}
		fmt.Fprintf(stderr, "jobwatch: %s: stopped after %d matched, %d %s%s\n", name, r.Matched, r.Changed, pastTense(verb), doubt)
	}
	return err
}

// leftBecause says, by bulk command, why a job it matched may have been
// left as it was (the server counts them, without saying which).
var leftBecause = map[string]string{
	"retry":  "ended or removed since the page was read, or a retry would make a second active job with its unique key; `jobwatch retry ID` of one says which",
	"cancel": "ended or removed since the page was read",
	"delete": "removed since the page was read, or a WAITING job waits for it (retried after it failed); `jobwatch delete ID` of one says which",
}

// mayActOn asks the server whether the caller may act on the jobs pf
// selects, before the question: a ListJobs of the same tenant (and batch,
// states, first queue and kind) for one job, which the server refuses as
// it would refuse the bulk action (a client token of another tenant:
// permission_denied; a name it refuses: invalid_argument; no token or
// an unknown one: unauthenticated), and which changes nothing.
func mayActOn(ctx context.Context, c *client.Client, pf *jobwatchv1.JobFilter) error {
	req := &jobwatchv1.ListJobsRequest{Tenant: pf.GetTenant(), Batch: pf.GetBatch(), States: pf.GetStates(), PageSize: 1}
	if qs := pf.GetQueues(); len(qs) > 0 {
		req.Queue = qs[0]
	}
	if ks := pf.GetKinds(); len(ks) > 0 {
		req.Kind = ks[0]
	}
	_, err := c.JobService().ListJobs(ctx, req)
	return err
}

// narrows reports whether pf says which jobs to act on, as the server
// requires: by queue, kind, state or time, or all of them on purpose.
func narrows(pf *jobwatchv1.JobFilter) bool {
	return pf.GetAll() || len(pf.GetQueues()) > 0 || len(pf.GetKinds()) > 0 || len(pf.GetStates()) > 0 || pf.GetCreatedBefore() != nil ||
		pf.GetBatch() != ""
}

// hasFilterFlag reports whether args name a filter flag, which makes the
// command a bulk action that takes no ID.
func hasFilterFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") {
			switch name {
			case "tenant", "queue", "kind", "state", "created-before", "batch", "all":
				return true
			}
		}
	}
	return false
}

// thirdPerson is "it retries", "it cancels".
func thirdPerson(verb string) string {
	if v, ok := strings.CutSuffix(verb, "y"); ok {
		return v + "ies"
	}
	return verb + "s"
}

func pastTense(verb string) string {
	switch verb {
	case "cancel":
		return "cancelled"
	case "retry":
		return "retried"
	}
	return verb + "d"
}
