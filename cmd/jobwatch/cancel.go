package main

import (
	"context"
	"io"
)

// cancel runs "jobwatch cancel ID": the job becomes CANCELLED at once; a
// worker running it learns so from its next heartbeat.
func cancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("cancel", stderr)
	cf.register(fs)
	pos, err := parseArgs(fs, args, 1, "ID")
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	job, err := c.Cancel(ctx, pos[0])
	if err != nil {
		return callError("cancel", err)
	}
	return printOutcome(stdout, job, cf.json)
}
