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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "jobwatch: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
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
