package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// What docs/OPERATING.md ("Quotas") shows curl and the command line
// answer for tenant acme's third submission under max_queued: 2.
const (
	quotaCurlAnswer = `{"code":"resource_exhausted","message":"tenant \"acme\" has 2 jobs not yet running, its max_queued is 2: wait for some to start or end","details":[{"type":"jobwatch.v1.QuotaExceeded","value":"CgRhY21lEAIYAiAB","debug":{"tenant":"acme","maxQueued":"2","queued":"2","adding":"1"}}]}`
	quotaCLIAnswer  = `jobwatch: submit: resource_exhausted: tenant "acme" has 2 jobs not yet running, its max_queued is 2: wait for some to start or end`
)

// serve applies tenants.<name>.max_queued from --config: curl and the
// command line hear the refusal docs/OPERATING.md shows; a SIGHUP with a
// quota the file refuses keeps the bound in effect, and one with a good
// file applies the new bound to the next submission.
func TestServeAppliesMaxQueuedAndAReloadRefusedKeepsIt(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "jobwatch.yaml")
	writeFile(t, cfg, "tenants:\n  acme:\n    max_queued: 2\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg)
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	submit := func() error {
		_, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Tenant: "acme", Kind: "thumbnail"})
		return err
	}
	for range 2 {
		if err := submit(); err != nil {
			t.Fatalf("a submission under the bound: %v", err)
		}
	}

	ops, err := os.ReadFile("../../docs/OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/jobwatch.v1.JobService/SubmitJob",
		strings.NewReader(`{"tenant":"acme","kind":"thumbnail"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || string(body) != quotaCurlAnswer {
		t.Errorf("curl's third submission: %d %s\nwant 429 %s", resp.StatusCode, body, quotaCurlAnswer)
	}
	code, _, stderr := runJobwatch(t, "submit", "thumbnail", "--tenant", "acme", "--server", base)
	if code != 1 || strings.TrimSpace(stderr) != quotaCLIAnswer {
		t.Errorf("jobwatch submit: exit %d, %q\nwant exit 1, %q", code, stderr, quotaCLIAnswer)
	}
	for _, answer := range []string{"# " + quotaCurlAnswer + "\n", "# " + quotaCLIAnswer + "\n"} {
		if !strings.Contains(string(ops), answer) {
			t.Errorf("docs/OPERATING.md does not show the answer %q", answer)
		}
	}

	// A quota below zero is refused with its line and key; the bound of 2
	// stays.
	writeFile(t, cfg, "tenants:\n  acme:\n    max_queued: -1\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the refused reload", func() bool { return strings.Contains(logs.String(), "config reload refused") })
	if want := "jobwatch.yaml:3:17: tenants.acme.max_queued: must be from 0 to 2147483647, got -1"; !strings.Contains(logs.String(), want) {
		t.Errorf("the refusal does not say %q:\n%s", want, logs.String())
	}
	if err := submit(); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("after the refused reload: %v, want resource_exhausted under the bound still in effect", err)
	}

	// A good file raises the bound for the next submission.
	writeFile(t, cfg, "tenants:\n  acme:\n    max_queued: 3\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to log the reload", func() bool { return strings.Contains(logs.String(), "config reloaded") })
	if err := submit(); err != nil {
		t.Fatalf("after the reload to max_queued 3: %v", err)
	}
	err = submit()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "its max_queued is 3") {
		t.Fatalf("the fourth submission: %v, want resource_exhausted naming max_queued 3", err)
	}
}
