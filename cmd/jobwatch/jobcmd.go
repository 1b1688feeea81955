package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// get runs "jobwatch get ID": the job, one field per line.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return jobCommand(ctx, "get", args, stdout, stderr, (*client.Client).Get, printJob)
}

// cancel runs "jobwatch cancel ID": the job becomes CANCELLED at once; a
// worker running it learns so from its next heartbeat.
func cancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return jobCommand(ctx, "cancel", args, stdout, stderr, (*client.Client).Cancel, printOutcome)
}

// start runs "jobwatch start ID": a PENDING (held) job becomes QUEUED.
func start(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return jobCommand(ctx, "start", args, stdout, stderr, (*client.Client).Start, printOutcome)
}

// jobCommand runs a command that takes one job id: it calls op on the
// server and prints the job it answers with.
func jobCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	op func(*client.Client, context.Context, string) (*jobwatchv1.Job, error),
	print func(io.Writer, *jobwatchv1.Job, bool) error,
) error {
	var cf clientFlags
	fs := newFlagSet(name, stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobwatch %s ID [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, "ID")
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	job, err := op(c, ctx, pos[0])
	if j := withoutValues(err, name, false, stderr); j != nil {
		job, err = j, nil
	}
	if err != nil {
		return callError(name, err)
	}
	return print(stdout, job, cf.json)
}
