package main

import (
	"context"
	"io"
)

// start runs "jobwatch start ID": a PENDING (held) job becomes QUEUED.
func start(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("start", stderr)
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
	job, err := c.Start(ctx, pos[0])
	if err != nil {
		return callError("start", err)
	}
	return printOutcome(stdout, job, cf.json)
}
