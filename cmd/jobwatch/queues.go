package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

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

// queueAbout says what pause and resume do, for their -h.
var queueAbout = map[string]string{
	"pause": "Stops the queue handing out jobs, on every replica, until it is resumed:\n" +
		"jobs are still accepted and running ones finish. The pause outlives\n" +
		"restarts and shows in \"jobwatch queues\" with when and by whom. Admin only.",
	"resume": "Lets a paused queue hand out jobs again, on every replica; workers\n" +
		"waiting for its jobs are woken at once. Admin only.",
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
		fmt.Fprintf(stderr, "Usage: jobwatch %s QUEUE [flags]\n\n%s\n\nFlags:\n", name, queueAbout[name])
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

// queues runs "jobwatch queues": every queue with its counts, its bounds
// on running jobs (maxCell), how long its oldest ready job has waited,
// whether it is paused and its rate
// limit (how many claims are in its window, or until when it is held
// back by it), and under
// each its busiest tenants (--tenants of them, 0: the server's default),
// as a table or, with --json, one JSON object per line.
func queues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		cf        clientFlags
		tenants   int
		maxQueues int
	)
	fs := newFlagSet("queues", stderr)
	cf.register(fs)
	fs.IntVar(&tenants, "tenants", 0, "list at most this many `tenants` under each queue, busiest first; 0: the server's default (10); more than 100 lists 100")
	fs.IntVar(&maxQueues, "max-queues", 0, "list at most this many `queues`, the most pressing (paused, alerting or rate-held, then configured, then the busiest); 0: the server's default (500); more than 10000 lists 10000")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: jobwatch queues [flags]

Lists every queue: its QUEUED and RUNNING jobs, its bounds on running
jobs (MAX), whether it is paused and by whom, how long its oldest ready
job has waited, its rate limit (claims in the window, or until when it
is held back), and since when it has been ALERTING (its work waited
longer than its alert_after without draining). Under each queue, its
busiest tenants (an admin token's view). Why a job stays QUEUED:
docs/OPERATING.md, "A job that stays QUEUED".

Clients name queues, so there may be many: past 500 (--max-queues) the
list keeps the most pressing (paused, alerting or held back by their
rate, then configured, then the busiest) and says how many it left out.

Flags:
`)
		fs.PrintDefaults()
	}
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if tenants < 0 {
		return usageError{fmt.Sprintf("--tenants must not be negative, got %d", tenants)}
	}
	if maxQueues < 0 {
		return usageError{fmt.Sprintf("--max-queues must not be negative, got %d", maxQueues)}
	}
	c, err := cf.client(stderr, true)
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.QueueService().ListQueues(ctx, &jobwatchv1.ListQueuesRequest{
		TenantsPerQueue: int32(min(tenants, math.MaxInt32)),
		MaxQueues:       int32(min(maxQueues, math.MaxInt32)),
	})
	if err != nil {
		return callError("queues", err)
	}
	qs := resp.GetQueues()
	leftOut := ""
	if n := resp.GetQueuesLeftOut(); n > 0 {
		more := fmt.Sprintf("%d more queues", n)
		if n == 1 {
			more = "1 more queue"
		}
		leftOut = fmt.Sprintf("(%s: these are the %d most pressing; --max-queues lists more)", more, len(qs))
	}
	if cf.json {
		for _, q := range qs {
			if err := printJSON(stdout, q); err != nil {
				return err
			}
		}
		if leftOut != "" {
			fmt.Fprintln(stderr, "jobwatch:", leftOut)
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tQUEUED\tRUNNING\tMAX\tPAUSED\tPAUSED BY\tOLDEST WAIT\tRATE\tALERTING")
	for _, q := range qs {
		paused, by := "no", ""
		if q.GetPaused() {
			paused = "since " + q.GetPausedAt().AsTime().UTC().Format(time.RFC3339)
			by = q.GetPausedBy()
		}
		alerting := ""
		if q.GetAlerting() {
			alerting = "since " + q.GetAlertingSince().AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", q.GetName(), q.GetQueued(), q.GetRunning(), maxCell(q), paused, by, waited(q.GetOldestQueuedAge()), rateCell(q.GetRate()), alerting)
		// A queue's tenants, indented under it: the name column says
		// "tenant", so no tenant can pass for a queue. Every line has
		// every cell, as tabwriter aligns a column only over lines that
		// have it.
		for _, d := range q.GetTenants() {
			fmt.Fprintf(tw, "  tenant %s\t%d\t%d\t\t\t\t%s\t\t\n", d.GetTenant(), d.GetQueued(), d.GetRunning(), waited(d.GetOldestQueuedAge()))
		}
		switch n := q.GetTenantsLeftOut(); {
		case n == 1:
			fmt.Fprintln(tw, "  (1 more tenant)\t\t\t\t\t\t\t\t")
		case n > 1:
			fmt.Fprintf(tw, "  (%d more tenants)\t\t\t\t\t\t\t\t\n", n)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if leftOut != "" {
		_, err = fmt.Fprintln(stdout, leftOut)
	}
	return err
}

// maxCell is a queue's bounds on its RUNNING jobs as the table shows
// them: "4" (max_running), "1/tenant" (max_running_per_tenant), "4,
// 1/tenant" (both); "" for a queue without either.
func maxCell(q *jobwatchv1.Queue) string {
	var bounds []string
	if n := q.GetMaxRunning(); n > 0 {
		bounds = append(bounds, fmt.Sprint(n))
	}
	if n := q.GetMaxRunningPerTenant(); n > 0 {
		bounds = append(bounds, fmt.Sprintf("%d/tenant", n))
	}
	return strings.Join(bounds, ", ")
}

// rateCell is a queue's rate as the table shows it: "3/1s, 2 in window",
// or "3/1s, held until 14:03:07Z" while the window is full ("3/1s per
// tenant, ..." for windows kept per tenant: the busiest tenant's count,
// the first held tenant's room); "" for a queue without one.
func rateCell(r *jobwatchv1.QueueRate) string {
	if r == nil {
		return ""
	}
	rate := fmt.Sprintf("%d/%s", r.GetLimit(), r.GetPer().AsDuration())
	if r.GetPerTenant() {
		rate += " per tenant"
	}
	if r.GetHeldUntil() != nil {
		return rate + ", held until " + r.GetHeldUntil().AsTime().UTC().Format("15:04:05Z")
	}
	return fmt.Sprintf("%s, %d in window", rate, r.GetStarted())
}

// waited is an oldest_queued_age as the table shows it, to the second;
// "" when nothing waits.
func waited(age *durationpb.Duration) string {
	if age == nil {
		return ""
	}
	return age.AsDuration().Round(time.Second).String()
}
