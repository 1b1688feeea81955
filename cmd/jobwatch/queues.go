package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// pause runs "jobwatch pause QUEUE": the queue hands out no claims, on
// any replica, until "jobwatch resume QUEUE". Admin token only.
func pause(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return queueCommand(ctx, "pause", args, stdout, stderr, (*client.Client).PauseQueue)
}

// resume runs "jobwatch resume QUEUE": the queue hands out claims again,
// and workers waiting on it are woken at once.
func resume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return queueCommand(ctx, "resume", args, stdout, stderr, (*client.Client).ResumeQueue)
}

// queueCommand runs a command that takes one queue name and prints the
// queue's row the server answers with.
func queueCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	op func(*client.Client, context.Context, string) (*jobwatchv1.Queue, error),
) error {
	var cf clientFlags
	fs := newFlagSet(name, stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: jobwatch %s QUEUE [flags]\n\nFlags:\n", name)
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, "QUEUE")
	if err != nil {
		return err
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	q, err := op(c, ctx, pos[0])
	if err != nil {
		return callError(name+" "+pos[0], err)
	}
	if cf.json {
		return printJSON(stdout, q)
	}
	_, err = fmt.Fprintln(stdout, queueState(q))
	return err
}

// queueState is a queue's pause as a person reads it.
func queueState(q *jobwatchv1.Queue) string {
	if !q.GetPaused() {
		return q.GetName() + ": running (not paused)"
	}
	return fmt.Sprintf("%s: paused since %s by %s", q.GetName(),
		q.GetPausedAt().AsTime().UTC().Format(time.RFC3339), q.GetPausedBy())
}

// queues runs "jobwatch queues": every queue with its counts and whether
// it is paused, as a table or, with --json, one JSON object per line.
func queues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("queues", stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: jobwatch queues [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	qs, err := c.ListQueues(ctx)
	if err != nil {
		return callError("queues", err)
	}
	if cf.json {
		for _, q := range qs {
			if err := printJSON(stdout, q); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tQUEUED\tRUNNING\tPAUSED\tPAUSED BY")
	for _, q := range qs {
		paused, by := "no", ""
		if q.GetPaused() {
			paused = "since " + q.GetPausedAt().AsTime().UTC().Format(time.RFC3339)
			by = q.GetPausedBy()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", q.GetName(), strconv.FormatInt(q.GetQueued(), 10),
			strconv.FormatInt(q.GetRunning(), 10), paused, by)
	}
	return tw.Flush()
}
