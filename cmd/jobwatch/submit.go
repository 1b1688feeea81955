package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
)

const submitUsage = `Usage: jobwatch submit KIND [flags]

Submits a job and prints its id (or, with --json, the job). With --wait it
waits for the job to end, prints it, and exits with its outcome.

`

// submit runs "jobwatch submit".
func submit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	var tenant, queue, payload, uniqueKey string
	var hold, wait bool
	var maxAttempts int
	fs := newFlagSet("submit", stderr)
	cf.register(fs)
	fs.StringVar(&tenant, "tenant", "", "`tenant` of the job (default: the server's \"default\")")
	fs.StringVar(&queue, "queue", "", "`queue` to run it in (default: \"default\")")
	fs.StringVar(&payload, "payload", "", "payload as `JSON`, or @file to read it from a file (@- for stdin)")
	fs.StringVar(&uniqueKey, "unique-key", "", "refuse the job while another active job of the tenant has this `key`")
	fs.BoolVar(&hold, "hold", false, "create the job PENDING: it runs only after \"jobwatch start\"")
	fs.BoolVar(&wait, "wait", false, "wait for the job to end and exit with its outcome (see \"jobwatch wait -h\")")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "attempts allowed, counting the first (0: the queue's default)")
	var priority *int32
	fs.Func("priority", "`N` from 0 (most urgent) to 9: claims take the most urgent ready job first, then the oldest;\nserial queues ignore it (default: the queue's priority rule, else 0)", func(s string) error {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return errors.New("must be a whole number from 0 to 9")
		}
		p := int32(n)
		priority = &p // the server checks the range, as for any client
		return nil
	})
	fs.Usage = func() { fmt.Fprint(stderr, submitUsage); fs.PrintDefaults() }
	pos, err := parseArgs(fs, args, 1, "KIND")
	if err != nil {
		return err
	}
	value, err := readPayload(payload)
	if err != nil {
		return err
	}
	if hold && wait {
		return usageError{"--hold and --wait together would wait for ever: a held job needs \"jobwatch start\""}
	}
	c, err := cf.client(stderr, false)
	if err != nil {
		return err
	}
	defer c.Close()

	job, err := c.Submit(ctx, &jobwatchv1.SubmitJobRequest{
		Tenant: tenant, Kind: pos[0], Queue: queue, Payload: value,
		UniqueKey: uniqueKey, Hold: hold, MaxAttempts: int32(maxAttempts), Priority: priority,
	})
	if err != nil {
		return callError("submit", err)
	}
	if !wait {
		if cf.json {
			return printJSON(stdout, job)
		}
		_, err := fmt.Fprintln(stdout, job.GetId())
		return err
	}
	job, err = c.WaitForJob(ctx, job.GetId())
	if j := withoutValues(err, "wait", true, stderr); j != nil {
		job, err = j, nil
	}
	if err != nil {
		return callError("wait", err)
	}
	if err := printOutcome(stdout, job, cf.json); err != nil {
		return err
	}
	return outcome(job)
}

// readPayload parses --payload: inline JSON, @file or @- for stdin.
func readPayload(s string) (*structpb.Value, error) {
	if s == "" {
		return nil, nil
	}
	text := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if name == "-" {
			text, err = io.ReadAll(os.Stdin)
		} else {
			text, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, usageError{fmt.Sprintf("--payload: %v", err)}
		}
	}
	v := &structpb.Value{}
	if err := protojson.Unmarshal(text, v); err != nil {
		return nil, usageError{fmt.Sprintf("--payload is not JSON: %v", err)}
	}
	return v, nil
}

// printOutcome prints a finished job: its summary line, or JSON.
func printOutcome(w io.Writer, j *jobwatchv1.Job, asJSON bool) error {
	if asJSON {
		return printJSON(w, j)
	}
	_, err := fmt.Fprintln(w, summary(j))
	return err
}
