package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

const waitUsage = `Usage: jobwatch wait ID [flags]

Waits until the job ends, prints it and exits with its outcome, so a shell
script can branch on it. It keeps waiting across server restarts and
dropped connections (saying so on stderr) until --timeout.

` + exitCodesHelp + `

Flags:
`

// wait runs "jobwatch wait ID".
func wait(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var timeout time.Duration
	fs := newFlagSet("wait", stderr)
	cf.register(fs)
	fs.DurationVar(&timeout, "timeout", 0, "give up after this long (exit 1); 0 waits as long as it takes")
	fs.Usage = func() { fmt.Fprint(stderr, waitUsage); fs.PrintDefaults() }
	pos, err := parseArgs(fs, args, 1, "ID")
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeout)
		defer cancel()
	}
	job, err := c.WaitForJob(ctx, pos[0])
	if j := withoutValues(err, "wait", true, stderr); j != nil {
		job, err = j, nil // its outcome is known all the same
	}
	if err != nil {
		return callError("wait", err)
	}
	if err := printOutcome(stdout, job, cf.json); err != nil {
		return err
	}
	return outcome(job)
}

var errTimeout = errors.New("--timeout passed before the job ended")
