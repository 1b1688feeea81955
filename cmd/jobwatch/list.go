package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/jobs"
)

// list runs "jobwatch list": a tenant's jobs newest first, as a table or
// JSON lines. It asks for summaries (no payload or result, which the table
// does not show) unless --full, and follows next_page_token, since the
// server ends a page early at its byte bound.
func list(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var tenant, states, kind, queue, batch string
	var limit int
	var full bool
	fs := newFlagSet("list", stderr)
	cf.register(fs)
	fs.StringVar(&tenant, "tenant", "", "list this `tenant`'s jobs (empty: your token's tenant, or \"default\" with an admin token or none; '*': every tenant's, with an admin token or none)")
	fs.Var(listFlag{&states}, "state", "only jobs in these `states` (comma-separated, e.g. running,queued, or the flag again)")
	fs.StringVar(&kind, "kind", "", "only jobs of this `kind`")
	fs.StringVar(&queue, "queue", "", "only jobs in this `queue`")
	fs.StringVar(&batch, "batch", "", "only the jobs of this batch `name` (jobwatch submit --batch)")
	fs.IntVar(&limit, "limit", 50, "at most this many jobs (asked for 500 a call)")
	fs.BoolVar(&full, "full", false, "with --json, also fetch and print each job's payload and result")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: jobwatch list [flags]

Lists jobs, newest first, a row each: ID, KIND, STATE, PROGRESS, STEP (an
ended job's error instead) and CREATED; the flags narrow it. With --json,
a job a line as the API answers it.

Flags:
`)
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if full && !cf.json {
		return usageError{"--full needs --json: the table shows no payload or result"}
	}
	if limit <= 0 {
		return usageError{fmt.Sprintf("--limit must be at least 1, got %d", limit)}
	}
	req := &jobwatchv1.ListJobsRequest{Tenant: tenant, Kind: kind, Queue: queue, Batch: batch}
	if full {
		req.View = jobwatchv1.JobView_JOB_VIEW_FULL
	}
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
	listed := 0
	var rows []*jobwatchv1.Job // the table's: its columns fit every row
	for listed < limit {
		req.PageSize = int32(min(limit-listed, jobs.MaxPageSize))
		resp, err := c.JobService().ListJobs(ctx, req)
		if err != nil {
			return callError("list", err)
		}
		listed += len(resp.GetJobs())
		if cf.json {
			// Printed page by page: full jobs are never all held at once.
			for _, j := range resp.GetJobs() {
				if err := printJSON(stdout, j); err != nil {
					return err
				}
			}
		} else {
			rows = append(rows, resp.GetJobs()...)
		}
		if resp.GetNextPageToken() == "" || len(resp.GetJobs()) == 0 {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if cf.json {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	// Every tenant's jobs say whose each is.
	everyTenant := tenant == jobs.AllTenants
	if everyTenant {
		fmt.Fprint(tw, "TENANT\t")
	}
	fmt.Fprintln(tw, "ID\tKIND\tSTATE\tPROGRESS\tSTEP\tCREATED")
	for _, j := range rows {
		if everyTenant {
			fmt.Fprintf(tw, "%s\t", j.GetTenant())
		}
		step := plain(j.GetStep())
		// An ended job's error says why; an active one's error is only
		// why its last attempt ended, while the current one is fine.
		if e := j.GetError(); e != nil && client.Terminal(j.GetState()) {
			step = plain(strings.TrimSpace(e.GetType() + " " + e.GetMessage()))
		}
		if j.GetState() == jobwatchv1.JobState_JOB_STATE_WAITING && step == "" {
			step = waitingFor(j.GetAfter())
		}
		if r := []rune(step); len(r) > listStepRunes {
			step = string(r[:listStepRunes-1]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%%\t%s\t%s\n", j.GetId(), j.GetKind(), stateName(j.GetState()),
			j.GetPercent(), step, formatTime(j.GetCreatedAt().AsTime(), j.GetCreatedAt() != nil))
	}
	return tw.Flush()
}

// listStepRunes bounds the step column: a job's 4,000-character error
// would pad every row of the table to its width. jobwatch get, and list
// --json, show it whole.
const listStepRunes = 80

// waitingFor is the step column of a WAITING job: the jobs it runs after,
// "after j_1" or "after j_1 +2 more" (jobwatch get names them all).
func waitingFor(after []string) string {
	switch len(after) {
	case 0:
		return ""
	case 1:
		return "after " + after[0]
	}
	return fmt.Sprintf("after %s +%d more", after[0], len(after)-1)
}
