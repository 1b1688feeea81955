// Command jobwatch is the one binary of jobwatch: the server and the
// command-line tools that talk to it. Each subcommand lives in its own
// file (bench in package internal/bench); main only dispatches. It must hold no logic a library user would
// need: that belongs in server, client or jobs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobwatch/jobwatch/internal/bench"
)

const usage = `jobwatch: a job service you can wait for and watch.

Usage:
  jobwatch <command> [flags]

Commands:
  serve      run the server (HTTP/1.1 and h2c on one port)
  reload     make a serve read its config and tokens again: jobwatch reload --pid-file FILE
  demo       run a server with demo workers and jobs; prints the page's URL
  submit     submit a job: jobwatch submit KIND [--payload JSON] [--wait] [--batch B], or many: --file JOBS.jsonl
  get        show a job: jobwatch get ID
  list       list jobs, newest first
  cancel     cancel a job: jobwatch cancel ID, or every job a filter matches: --queue Q --state S ...
  retry      run a failed, cancelled or lost job again: jobwatch retry ID, or --state failed --queue Q ...
  delete     remove an ended job: jobwatch delete ID, or every ended job a filter matches
  start      start a held (PENDING) job: jobwatch start ID
  wait       wait for a job (or several, or a --batch) to end; the exit status says how it ended
  watch      follow a job's progress live (--logs: and its log), or a whole --batch
  logs       print a job's log, or follow it with -f: jobwatch logs ID
  worker     run a shell command for each job of a kind
  queues     list the queues with their counts and whether each is paused
  pause      stop a queue handing out jobs, on every replica: jobwatch pause QUEUE
  resume     let a paused queue hand out jobs again: jobwatch resume QUEUE
  schedules  list the configuration's schedules with their next and last runs
  bench      measure jobwatch against an in-memory floor: throughput, fan-out, parked calls
  token      make a bearer token: jobwatch token new --role client --tenant acme
  version    print the version jobwatch was built from (or -v, --version)
  help       print this text, or "jobwatch help <command>" for a command's flags

Run "jobwatch help <command>" or "jobwatch <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == guardArg {
		os.Exit(guard(os.Args[2:]))
	}
	// SIGINT and SIGTERM end ctx, with the signal as its cause: serve
	// then shuts down gracefully, a wait exits 128 plus the signal's
	// number, and a second signal ends the process at once, saying so.
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		var first os.Signal
		select {
		case first = <-sigs:
		case first = <-hangups:
		}
		cancel(signalCause{first})
		c := signalCause{<-sigs}
		if c.sig == first {
			fmt.Fprintf(os.Stderr, "jobwatch: %s again: quitting at once\n", c.sigName())
		} else {
			fmt.Fprintf(os.Stderr, "jobwatch: %s after %s: quitting at once\n", c.sigName(), signalCause{first}.sigName())
		}
		os.Exit(c.code())
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(code)
}

// hangups carries a SIGHUP that stops the command (stopOnHangup) to
// main's handler, where it is the first signal, as a SIGINT or SIGTERM
// is: main's context ends with it as the cause, and the next SIGINT or
// SIGTERM quits at once.
var hangups = make(chan os.Signal, 1)

// stopOnHangup is ctx, ended by a SIGHUP too, with the signal as its
// cause as main's SIGINT and SIGTERM are: a worker or a demo started
// from a terminal that then closes drains and stops instead of dying at
// once with its jobs (serve reads its files again instead:
// reloadOnHangup). Under main the SIGHUP goes through main's handler
// (hangups), so that a Ctrl-C after it quits at once as the drain's
// message says. stop lets SIGHUP go; call it once the command is done.
func stopOnHangup(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		select {
		case sig := <-hup:
			select {
			case hangups <- sig:
			default:
			}
			cancel(signalCause{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(hup)
		cancel(nil)
	}
}

// signalCause is the cause of main's context when a signal ended it.
type signalCause struct{ sig os.Signal }

func (c signalCause) Error() string { return "stopped by " + c.sigName() }

func (c signalCause) sigName() string {
	switch c.sig {
	case os.Interrupt:
		return "SIGINT (Ctrl-C)"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP (its terminal closed?)"
	}
	return c.sig.String()
}

// code is 128 plus the signal's number, as shells report it (130 for
// Ctrl-C, 143 for SIGTERM).
func (c signalCause) code() int {
	if n, ok := c.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// interrupted is the exit status of a command that failed because a
// signal ended ctx (signalCause.code).
func interrupted(ctx context.Context) (int, bool) {
	var c signalCause
	if !errors.As(context.Cause(ctx), &c) {
		return 0, false
	}
	return c.code(), true
}

// commandFunc runs one subcommand with its arguments.
type commandFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// command is the subcommand called name, or nil if there is none.
func command(name string) commandFunc {
	switch name {
	case "serve":
		return func(ctx context.Context, args []string, _, stderr io.Writer) error { return serve(ctx, args, stderr) }
	case "reload":
		return reload
	case "demo":
		return demo
	case "submit":
		return submit
	case "get":
		return get
	case "list":
		return list
	case "cancel":
		return cancel
	case "retry":
		return retry
	case "delete":
		return deleteJob
	case "start":
		return start
	case "wait":
		return wait
	case "watch":
		return watch
	case "logs":
		return logs
	case "worker":
		return worker
	case "bench":
		// Its bad flags are reported, and exit 2, as every command's.
		cli := bench.CLI{ParseFlags: parseFlags, UsageError: func(msg string) error { return usageError{msg} }}
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return bench.Run(ctx, args, stdout, stderr, cli)
		}
	case "token":
		return token
	case "pause":
		return pause
	case "resume":
		return resume
	case "queues":
		return queues
	case "schedules":
		return schedules
	}
	return nil
}

// run dispatches to a subcommand and turns its error into an exit code:
// 0 on success or -h, 2 on a usage error, 1 on anything else.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "version", "-v", "-version", "--version":
		// -v too: no command has a -v, and it is what most tools take.
		if len(rest) == 1 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			return run(ctx, []string{"help", "version"}, stdout, stderr)
		}
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "jobwatch: version takes no arguments, got %q\n", rest)
			return 2
		}
		fmt.Fprintf(stdout, "jobwatch %s\n", version())
		return 0
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usage)
			return 0
		}
		if len(rest) == 1 && rest[0] == "version" {
			fmt.Fprint(stdout, "Usage: jobwatch version\n\nPrints the version of this binary: a release's version, commit and build time;\nfor a build from a checkout, the commit it was built from (\"dev\" when Go\nrecorded none, as with -buildvcs=false).\n")
			return 0
		}
		if len(rest) == 1 && (rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help") {
			fmt.Fprint(stdout, "Usage: jobwatch help [COMMAND]\n\nLists the commands, or prints one command's usage and flags.\n")
			return 0
		}
		if command(rest[0]) == nil {
			if hint := didYouMean(nearMisses(rest[0], commandNames()), strconv.Quote); hint != "" {
				fmt.Fprintf(stderr, "jobwatch: help %s: no such command%s\n", rest[0], hint)
				return 2
			}
			fmt.Fprintf(stderr, "jobwatch: help %s: no such command\n\n%s", rest[0], usage)
			return 2
		}
		if len(rest) > 1 {
			fmt.Fprintf(stderr, "jobwatch: help takes one command: jobwatch help %s\n", rest[0])
			return 2
		}
		return run(ctx, []string{rest[0], "-h"}, stdout, stderr)
	}
	cmd := command(name)
	if cmd == nil && strings.HasPrefix(name, "-") {
		// jobwatch --server URL submit …: the flags belong to the
		// command, after its name.
		// With the command found, the line to type is the whole answer;
		// without, the commands to choose from.
		fixed, found := commandFirst(args)
		fmt.Fprintf(stderr, "jobwatch: %s comes after the command: %s\n", name, fixed)
		if !found {
			fmt.Fprintf(stderr, "\n%s", usage)
		}
		return 2
	}
	if cmd == nil {
		// A near miss is answered with the command meant alone: the
		// whole list would bury it.
		if hint := didYouMean(nearMisses(name, commandNames()), strconv.Quote); hint != "" {
			fmt.Fprintf(stderr, "jobwatch: unknown command %q%s\n", name, hint)
			return 2
		}
		fmt.Fprintf(stderr, "jobwatch: unknown command %q\n\n%s", name, usage)
		return 2
	}
	if asksForHelp(rest) {
		// The usage asked for is the answer: stdout, as for "jobwatch
		// help CMD", so that it pipes (jobwatch submit -h | grep payload).
		stderr = stdout
	}
	// A command's calls may report retries from goroutines of their own
	// while the command writes to stderr too.
	stderr = &lockedWriter{w: stderr}
	err := cmd(ctx, rest, stdout, stderr)
	var exit exitCodeError // a job's outcome (wait, watch): its own exit status
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		if exit.msg != "" {
			fmt.Fprintln(stderr, "jobwatch:", exit.msg)
		}
		return exit.code
	case errors.As(err, new(usageError)):
		fmt.Fprintln(stderr, "jobwatch:", err)
		return 2
	case timedOut(err):
		fmt.Fprintln(stderr, "jobwatch:", err)
		return exitTimedOut
	default:
		fmt.Fprintln(stderr, "jobwatch:", err)
		if code, ok := interrupted(ctx); ok {
			return code
		}
		return 1
	}
}

// asksForHelp reports whether a command's arguments ask for its usage:
// -h, -help or --help among them, before any "--".
func asksForHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// usageError is a bad flag or argument: the exit code is 2, as for flag
// parse errors.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// newFlagSet returns a flag set that reports errors instead of exiting, so
// run decides the exit code. Its usage starts "Usage: jobwatch NAME", as
// every command's does; commands with more to say set their own.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("jobwatch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobwatch %s [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs. A parse error becomes a usageError that
// run prints once, naming the command and where its flags are listed:
// the flag package's own print of it (and of the whole usage, which
// buried the one line that mattered) is silenced. -h prints the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		err = negativeDuration(fs)
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	default:
		err = withFlagSuggestion(fs, withDurationHint(fs, err))
	}
	if err == nil {
		return nil
	}
	name := strings.TrimPrefix(fs.Name(), "jobwatch ")
	return usageError{fmt.Sprintf("%s: %v\nRun \"jobwatch %s -h\" for its flags.", name, err, name)}
}

// negativeDuration refuses a duration flag set below zero: none means
// anything by one, and taken as it is a --timeout of -1s would wait for
// ever, as 0 does (a script passing what is left of its own budget).
func negativeDuration(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if d, ok := g.Get().(time.Duration); ok && d < 0 {
			err = fmt.Errorf("--%s must not be negative, got %v", f.Name, d)
		}
	})
	return err
}

// withDurationHint is err, the flag package's error, or for a duration
// flag's value it could not parse (it says only "parse error") one that
// says what a duration is: a number needs a unit, and "1d" is none.
func withDurationHint(fs *flag.FlagSet, err error) error {
	m := badFlagValue.FindStringSubmatch(err.Error())
	if m == nil || fs.Lookup(m[2]) == nil {
		return err
	}
	g, ok := fs.Lookup(m[2]).Value.(flag.Getter)
	if !ok {
		return err
	}
	if _, ok := g.Get().(time.Duration); !ok {
		return err
	}
	if _, number := strconv.ParseFloat(m[1], 64); number == nil {
		return fmt.Errorf("--%s %q: a duration needs a unit, such as 30s, 5m or 1h30m", m[2], m[1])
	}
	return fmt.Errorf("--%s %q is not a duration: a number and a unit (ns, us, ms, s, m, h; a day is 24h), such as 30s, 5m or 1h30m", m[2], m[1])
}

// badFlagValue is the flag package's error for a value its flag cannot
// parse: the value and the flag's name.
var badFlagValue = regexp.MustCompile(`^invalid value "(.*)" for flag -(\S+): parse error$`)

// commandFirst is args written as they should have been: the first
// command's name, then the flags that came before it, then the rest; found
// is false when args name no command.
func commandFirst(args []string) (fixed string, found bool) {
	for i, arg := range args {
		if command(arg) != nil {
			line := append([]string{"jobwatch", arg}, args[:i]...)
			return strings.Join(append(line, args[i+1:]...), " "), true
		}
	}
	return "jobwatch COMMAND " + strings.Join(args, " "), false
}
