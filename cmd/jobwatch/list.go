package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// list runs "jobwatch list": jobs newest first, as a table or JSON lines.
func list(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var tenant, states, kind, queue string
	var limit int
	fs := newFlagSet("list", stderr)
	cf.register(fs)
	fs.StringVar(&tenant, "tenant", "", "only this `tenant`'s jobs")
	fs.StringVar(&states, "state", "", "only jobs in these `states` (comma-separated, e.g. running,queued)")
	fs.StringVar(&kind, "kind", "", "only jobs of this `kind`")
	fs.StringVar(&queue, "queue", "", "only jobs in this `queue`")
	fs.IntVar(&limit, "limit", 50, "at most this many jobs (at most 500)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	req := &jobwatchv1.ListJobsRequest{Tenant: tenant, Kind: kind, Queue: queue, PageSize: int32(limit)}
	for _, s := range splitList(states) {
		st, err := parseState(s)
		if err != nil {
			return err
		}
		req.States = append(req.States, st)
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.JobService().ListJobs(ctx, req)
	if err != nil {
		return callError("list", err)
	}
	if cf.json {
		for _, j := range resp.GetJobs() {
			if err := printJSON(stdout, j); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tPROGRESS\tSTEP\tCREATED")
	for _, j := range resp.GetJobs() {
		step := j.GetStep()
		// An ended job's error says why; an active one's error is only
		// why its last attempt ended, while the current one is fine.
		if e := j.GetError(); e != nil && client.Terminal(j.GetState()) {
			step = strings.TrimSpace(e.GetType() + " " + e.GetMessage())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%s\t%s\n", j.GetId(), j.GetKind(), stateName(j.GetState()),
			j.GetPercent(), step, formatTime(j.GetCreatedAt().AsTime(), j.GetCreatedAt() != nil))
	}
	return tw.Flush()
}
