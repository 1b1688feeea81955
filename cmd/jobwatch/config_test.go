package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sample reads the sample series (a name with its labels, as /metrics
// writes them) of the server at base.
func sample(t *testing.T, base, series string) float64 {
	t.Helper()
	for line := range strings.Lines(scrapeText(t, base)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

// scrapeText is the body of base's /metrics.
func scrapeText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func TestServeAppliesTheConfigAndReloadsItOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobwatch.yaml")
	writeFile(t, cfg, "strict: true\nqueues:\n  - name: index\n")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg)
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	workers := jobwatchv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	submit := func(queue string) (*jobwatchv1.Job, error) {
		resp, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k-" + queue, Queue: queue})
		return resp.GetJob(), err
	}

	// At start: strict, only index declared.
	if _, err := submit("index"); err != nil {
		t.Fatalf("submit to the declared queue: %v", err)
	}
	_, err := submit("mail")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), `"mail"`) || !strings.Contains(err.Error(), "config jobwatch.yaml") || strings.Contains(err.Error(), dir) {
		t.Fatalf("submit to an undeclared queue under strict: %v; want invalid_argument naming the queue and the file, not its directory", err)
	}

	// A WaitJob parked across both reloads must not be dropped by them.
	parked, err := submit("index")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *jobwatchv1.Job, 1)
	go func() {
		resp, err := jobsClient.WaitJob(ctx, &jobwatchv1.WaitJobRequest{JobId: parked.GetId()})
		if err != nil {
			t.Errorf("the parked wait: %v", err)
		}
		waited <- resp.GetJob()
	}()
	waitFor(t, "the wait to park", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "\njobwatch_parked_waits 1\n")
	})

	// /metrics says the file took, and when.
	const took, tookAt = `jobwatch_reload_successful{file="config"}`, `jobwatch_reload_success_timestamp_seconds{file="config"}`
	startedAt := sample(t, base, tookAt)
	if ok := sample(t, base, took); ok != 1 || startedAt <= 0 {
		t.Errorf("at start %s = %v, %s = %v; want 1 and the start's time", took, ok, tookAt, startedAt)
	}
	// And the fingerprint of the rules in effect, as the log says it: one
	// series.
	fingerprint := func() string {
		t.Helper()
		series := regexp.MustCompile(`\njobwatch_config_info\{fingerprint="([0-9a-f]{12})"\} 1\n`).FindAllStringSubmatch(scrapeText(t, base), -1)
		if len(series) != 1 {
			t.Fatalf("/metrics has %d jobwatch_config_info series, want the one in effect", len(series))
		}
		return series[0][1]
	}
	first := fingerprint()
	if !strings.Contains(logs.String(), "config_fingerprint="+first) {
		t.Errorf("the start's log line does not name the fingerprint %s:\n%s", first, logs.String())
	}

	// A changed file takes effect on SIGHUP.
	writeFile(t, cfg, "strict: true\nqueues:\n  - name: index\n  - name: mail\n    retry: {max_attempts: 5}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the reload", func() bool { return strings.Contains(logs.String(), "config reloaded") })
	reloadedAt := sample(t, base, tookAt)
	if ok := sample(t, base, took); ok != 1 || reloadedAt <= startedAt {
		t.Errorf("after the reload %s = %v, %s = %v; want 1 and a time after the start's %v", took, ok, tookAt, reloadedAt, startedAt)
	}
	mail, err := submit("mail")
	if err != nil || mail.GetMaxAttempts() != 5 {
		t.Fatalf("after the reload, submit to mail: %v, %v; want accepted with the queue's max_attempts 5", mail, err)
	}
	second := fingerprint()
	if second == first || !strings.Contains(logs.String(), "config_fingerprint="+second) {
		t.Fatalf("other rules: fingerprint %s, and %s before; want another, in the reload's log line too", second, first)
	}

	// A broken file is refused, with its line and key, and the old config stays.
	writeFile(t, cfg, "strict: true\nqueues:\n  - name: index\n    mode: seriel\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the refused reload", func() bool { return strings.Contains(logs.String(), "config reload refused") })
	if want := "jobwatch.yaml:4:11: queues[0].mode: must be parallel or serial"; !strings.Contains(logs.String(), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, logs.String())
	}
	if mail, err := submit("mail"); err != nil || mail.GetMaxAttempts() != 5 {
		t.Errorf("after the refused reload, submit to mail: %v, %v; want the config before it still in effect", mail, err)
	}
	if ok, at := sample(t, base, took), sample(t, base, tookAt); ok != 0 || at != reloadedAt {
		t.Errorf("after the refused reload %s = %v, %s = %v; want 0 and the reload that took's %v", took, ok, tookAt, at, reloadedAt)
	}
	if fp := fingerprint(); fp != second {
		t.Errorf("after the refused reload the fingerprint is %s, want the rules in effect's %s", fp, second)
	}

	// So is a tenant's weight of zero, which the engine would have read
	// as the default.
	writeFile(t, cfg, "strict: true\nqueues:\n  - name: index\ntenants:\n  acme: {weight: 0}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	const zeroWeight = "jobwatch.yaml:5:18: tenants.acme.weight: must be from 1 to 1000, got 0"
	waitFor(t, "serve to log the refused weight", func() bool { return strings.Contains(logs.String(), zeroWeight) })
	if mail, err := submit("mail"); err != nil || mail.GetMaxAttempts() != 5 {
		t.Errorf("after the refused weight, submit to mail: %v, %v; want the config before it still in effect", mail, err)
	}

	// So is an empty file, which a deploy's half-written copy can be: it
	// would drop every rule.
	writeFile(t, cfg, "# written by the deploy\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the refused empty file", func() bool { return strings.Contains(logs.String(), "write {} to declare none on purpose") })
	if mail, err := submit("mail"); err != nil || mail.GetMaxAttempts() != 5 {
		t.Errorf("after the refused empty file, submit to mail: %v, %v; want the config before it still in effect", mail, err)
	}

	select {
	case j := <-waited:
		t.Fatalf("the parked wait returned during the reloads: %v", j)
	default:
	}
	claim, err := workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"k-index"}})
	if err != nil || claim.GetJob().GetId() == "" {
		t.Fatalf("claim: %v, %v", claim, err)
	}
	// The first index job was submitted first; run both so the parked one ends.
	for claim.GetJob().GetId() != "" {
		if _, err := workers.CompleteJob(ctx, &jobwatchv1.CompleteJobRequest{JobId: claim.GetJob().GetId(), LeaseId: claim.GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
		if claim.GetJob().GetId() == parked.GetId() {
			break
		}
		if claim, err = workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", Kinds: []string{"k-index"}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case j := <-waited:
		if j.GetState() != jobwatchv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("the parked wait returned %v, want the job succeeded", j)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the parked wait did not return when its job ended")
	}
}

// TestServeBoundsRunningJobsAsTheConfigSays: a tenant's max_running and
// a queue's max_running_per_tenant, read from the file, bound what one
// worker's claim of 10 takes through the server; jobwatch queues shows
// the queue's bounds; a reload that would make the per-tenant bound
// bound nothing is refused with its line and key, and the bounds before
// it stay.
func TestServeBoundsRunningJobsAsTheConfigSays(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobwatch.yaml")
	const config = "queues:\n  - name: reports\n    max_running: 4\n    max_running_per_tenant: 1\ntenants:\n  acme: {max_running: 2}\n"
	writeFile(t, cfg, config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg)
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	workers := jobwatchv1connect.NewWorkerServiceClient(http.DefaultClient, base)
	for _, j := range []struct{ tenant, queue string }{
		{"acme", "exports"}, {"acme", "exports"}, {"acme", "exports"},
		{"globex", "reports"}, {"globex", "reports"}, {"initech", "reports"},
	} {
		if _, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Tenant: j.tenant, Queue: j.queue, Kind: "render"}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := workers.ClaimJob(ctx, &jobwatchv1.ClaimJobRequest{WorkerId: "w", MaxJobs: 10})
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]int{}
	for _, c := range resp.GetClaims() {
		claimed[c.GetJob().GetTenant()+" in "+c.GetJob().GetQueue()]++
	}
	if want := map[string]int{"acme in exports": 2, "globex in reports": 1, "initech in reports": 1}; !maps.Equal(claimed, want) {
		t.Fatalf("a claim of 10 took %v, want %v: acme's max_running 2, and one of each tenant's in reports", claimed, want)
	}

	reportsRow := func() string {
		t.Helper()
		code, out, errOut := runInProcess(t, "queues", "--server", base)
		if code != 0 {
			t.Fatalf("queues = exit %d: %s", code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "reports ") {
				return line
			}
		}
		t.Fatalf("queues printed no row for reports:\n%s", out)
		return ""
	}
	if row := reportsRow(); !strings.Contains(row, " 4, 1/tenant ") {
		t.Errorf("queues printed %q for reports, want its MAX column to say 4, 1/tenant", row)
	}
	code, out, errOut := runInProcess(t, "queues", "--server", base, "--json")
	if code != 0 || !strings.Contains(out, `"name":"reports"`) || !strings.Contains(out, `"maxRunningPerTenant":1`) {
		t.Errorf("queues --json = exit %d:\n%s%s\nwant reports with maxRunningPerTenant 1", code, out, errOut)
	}

	writeFile(t, cfg, strings.Replace(config, "max_running_per_tenant: 1", "max_running_per_tenant: 5", 1))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	const refused = "jobwatch.yaml:4:5: queues[0].max_running_per_tenant: 5 is above the queue's max_running 4, so it would bound nothing: at most 4"
	waitFor(t, "serve to log the refused bound", func() bool { return strings.Contains(logs.String(), refused) })
	if row := reportsRow(); !strings.Contains(row, " 4, 1/tenant ") {
		t.Errorf("after the refused reload queues printed %q for reports, want the bounds before it, 4, 1/tenant", row)
	}
}
