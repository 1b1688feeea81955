package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

// schedules runs "jobwatch schedules": the configuration's schedules in
// its order, each with when it runs (every or cron, in its time zone),
// its next run in UTC and in the schedule's zone, and its latest run, as
// a table or, with --json, one JSON object per line.
func schedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newFlagSet("schedules", stderr)
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: jobwatch schedules [flags]

Lists the schedules of the server's configuration (--config; an admin
token's view), in the file's order: what each runs (KIND, QUEUE,
TENANT), WHEN (every DURATION, or cron EXPRESSION in ZONE), its NEXT RUN
in UTC and in the schedule's own time zone, and its LAST RUN (the job's
id and state, and when it ended). NEXT RUN reads "after the last run
ends" while a run is unfinished, and "due" when the next sweep will
queue one. Schedules are declared in the configuration file and changed
by a reload: docs/OPERATING.md, "Schedules" and "Cron schedules".

Flags:
`)
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
	resp, err := c.QueueService().ListSchedules(ctx, &jobwatchv1.ListSchedulesRequest{})
	if err != nil {
		return callError("schedules", err)
	}
	ss := resp.GetSchedules()
	if cf.json {
		for _, s := range ss {
			if err := printJSON(stdout, s); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ss) == 0 {
		_, err := fmt.Fprintln(stdout, "No schedules: the server's configuration declares none (schedules: in the --config file).")
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tKIND\tQUEUE\tTENANT\tWHEN\tNEXT RUN (UTC)\tNEXT RUN (ITS ZONE)\tLAST RUN")
	for _, s := range ss {
		nextUTC, nextLocal := nextRunCells(s, now)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.GetName(), s.GetKind(), s.GetQueue(), s.GetTenant(),
			whenCell(s), nextUTC, nextLocal, lastRunCell(s))
	}
	return tw.Flush()
}

// whenCell is when a schedule runs as the table shows it: "every 1h",
// "every 1h30m", "every 10m" (as a config writes them, not Go's
// "1h0m0s"), or "cron 0 2 * * * (Europe/Berlin)".
func whenCell(s *jobwatchv1.Schedule) string {
	if s.GetCron() == "" {
		return "every " + durationText(s.GetEvery().AsDuration())
	}
	return fmt.Sprintf("cron %s (%s)", s.GetCron(), s.GetTimezone())
}

// durationText is d as a person writes it: Go's String without the zero
// units it ends with ("1h", not "1h0m0s"; "1m30s" as it is).
func durationText(d time.Duration) string {
	text := d.String()
	if strings.HasSuffix(text, "m0s") {
		text = strings.TrimSuffix(text, "0s")
	}
	if strings.HasSuffix(text, "h0m") {
		text = strings.TrimSuffix(text, "0m")
	}
	return text
}

// nextRunCells are a schedule's next run as the table shows it, in UTC
// with how far off it is ("2026-12-06T01:00:00Z, in 13h34m", "…, due")
// and in the schedule's zone (cron schedules only: an every schedule has
// none); or "after the last run ends" while a run is unfinished.
func nextRunCells(s *jobwatchv1.Schedule, now time.Time) (utc, local string) {
	if s.GetNextRunAt() == nil {
		return "after the last run ends", ""
	}
	at := s.GetNextRunAt().AsTime()
	utc = at.UTC().Format(time.RFC3339)
	if d := at.Sub(now); d > 0 {
		utc += ", in " + d.Round(time.Second).String()
	} else {
		utc += ", due"
	}
	return utc, s.GetNextRunLocal()
}

// lastRunCell is a schedule's latest run: "never", or its job's id and
// state, and when it ended.
func lastRunCell(s *jobwatchv1.Schedule) string {
	if s.GetLastJobId() == "" {
		return "never"
	}
	cell := s.GetLastJobId() + " " + stateName(s.GetLastJobState())
	if s.GetLastEndedAt() != nil {
		cell += ", ended " + s.GetLastEndedAt().AsTime().UTC().Format(time.RFC3339)
	}
	return cell
}
