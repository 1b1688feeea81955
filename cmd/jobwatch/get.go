package main

import (
	"context"
	"io"
)

// get runs "jobwatch get ID": the job, one field per line.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("get", stderr)
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
	job, err := c.Get(ctx, pos[0])
	if err != nil {
		return callError("get", err)
	}
	return printJob(stdout, job, cf.json)
}
