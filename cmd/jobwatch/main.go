// Command jobwatch is the one binary of jobwatch: the server and the
// command-line tools that talk to it. Each subcommand lives in its own
// file; main only dispatches. It must hold no logic a library user would
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
	"syscall"
)

const usage = `jobwatch: a job service you can wait for and watch.

Usage:
  jobwatch <command> [flags]

Commands:
  serve    run the server (HTTP/1.1 and h2c on one port)
  demo     run a server with demo workers and jobs; prints the page's URL
  submit   submit a job: jobwatch submit KIND [--payload JSON] [--wait]
  get      show a job: jobwatch get ID
  list     list jobs, newest first
  cancel   cancel a job: jobwatch cancel ID
  start    start a held (PENDING) job: jobwatch start ID
  wait     wait for a job to end; the exit status says how it ended
  watch    follow a job's progress live
  worker   run a shell command for each job of a kind
  bench    measure how soon waits and watches learn that a job ended
  help     print this text

Run "jobwatch <command> -h" for a command's flags.
`

func main() {
	// SIGINT and SIGTERM end ctx: serve then shuts down gracefully, and a
	// second signal kills the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and turns its error into an exit code:
// 0 on success or -h, 2 on a usage error, 1 on anything else.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		err = serve(ctx, rest, stderr)
	case "demo":
		err = demo(ctx, rest, stdout, stderr)
	case "submit":
		err = submit(ctx, rest, stdout, stderr)
	case "get":
		err = get(ctx, rest, stdout, stderr)
	case "list":
		err = list(ctx, rest, stdout, stderr)
	case "cancel":
		err = cancel(ctx, rest, stdout, stderr)
	case "start":
		err = start(ctx, rest, stdout, stderr)
	case "wait":
		err = wait(ctx, rest, stdout, stderr)
	case "watch":
		err = watch(ctx, rest, stdout, stderr)
	case "worker":
		err = worker(ctx, rest, stdout, stderr)
	case "bench":
		err = bench(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "jobwatch: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
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
	default:
		fmt.Fprintln(stderr, "jobwatch:", err)
		return 1
	}
}

// usageError is a bad flag or argument: the exit code is 2, as for flag
// parse errors.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// newFlagSet returns a flag set that reports errors instead of exiting, so
// run decides the exit code.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("jobwatch "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args into fs; a parse error (already printed by the
// flag package) becomes a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}
