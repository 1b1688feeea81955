package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/jobwatch/jobwatch/auth"
	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

func tokensEntry(token, rest string) string {
	return "  - {sha256: " + auth.Digest(token) + ", " + rest + "}\n"
}

// TestServeWithTokensRotatesThemOnSIGHUP is the rotation of
// docs/SECURITY.md end to end: serve --tokens, a removed token stops working
// after a SIGHUP without a restart and its open WatchJob stream ends, a
// broken file is refused with the tokens in effect kept, and a new token
// works.
func TestServeWithTokensRotatesThemOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens.yaml")
	const oldToken, newToken, adminToken = "jw_old-acme-token", "jw_new-acme-token", "jw_admin-token"
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(oldToken, "role: client, tenant: acme")+tokensEntry(adminToken, "role: admin"))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile, "--log-level", "debug")
	if !strings.Contains(logs.String(), "needs a bearer token") || !strings.Contains(logs.String(), "tokens_known=2") {
		t.Errorf("the start log does not say tokens are needed:\n%s", logs.String())
	}

	with := func(token string) jobwatchv1connect.JobServiceClient {
		c := client.New(base, client.WithToken(token))
		t.Cleanup(c.Close)
		return c.JobService()
	}
	old := with(oldToken)
	resp, err := old.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "report"})
	if err != nil || resp.GetJob().GetTenant() != "acme" {
		t.Fatalf("submit with the old token: %v, %v", resp.GetJob(), err)
	}
	job := resp.GetJob()
	if _, err := with("").GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: job.GetId()}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("a call without a token: %v, want unauthenticated", err)
	}
	// The CLI sends --token, or JOBWATCH_TOKEN, too; -h does not print
	// the environment's.
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"get", "--server", base, "--token", oldToken, job.GetId()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), job.GetId()) {
		t.Fatalf("jobwatch get --token: exit %d, %s%s", code, out.String(), errOut.String())
	}
	t.Setenv("JOBWATCH_TOKEN", oldToken)
	out.Reset()
	if code := run(ctx, []string{"get", "--server", base, job.GetId()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), job.GetId()) {
		t.Fatalf("jobwatch get with JOBWATCH_TOKEN: exit %d, %s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	t.Setenv("JOBWATCH_SERVER", "http://ops:S3cretPw@127.0.0.1:1")
	if run(ctx, []string{"help", "get"}, &out, &errOut); strings.Contains(out.String(), oldToken) || strings.Contains(out.String(), "S3cretPw") {
		t.Errorf("jobwatch help get printed the environment's token or server password:\n%s", out.String())
	}

	stream, err := old.WatchJob(ctx, &jobwatchv1.WatchJobRequest{JobId: job.GetId()})
	if err != nil || !stream.Receive() {
		t.Fatalf("watch with the old token: %v", err)
	}

	// A broken file is refused; the tokens in effect stay.
	writeFile(t, tokensFile, "tokens:\n  - {sha256: "+newToken+", role: client, tenant: acme}\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve to refuse the broken file", func() bool { return strings.Contains(logs.String(), "tokens reload refused") })
	if !strings.Contains(logs.String(), "tokens.yaml:2:14: tokens[0].sha256: must be 64 hex digits") {
		t.Errorf("the refusal does not name the line and key:\n%s", logs.String())
	}
	if _, err := old.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: job.GetId()}); err != nil {
		t.Fatalf("after a refused reload the old token fails: %v", err)
	}

	// Rotation: add the new token, remove the old one, SIGHUP.
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(newToken, "role: client, tenant: acme")+tokensEntry(adminToken, "role: admin"))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for stream.Receive() {
			if stream.Msg().GetJob() != nil {
				ended <- nil // a change the watch should not see
				return
			}
		}
		ended <- stream.Err()
	}()
	select {
	case err := <-ended:
		if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "the token is no longer known") {
			t.Fatalf("the old token's stream ended with %v, want unauthenticated", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the old token's WatchJob stream did not end after the reload")
	}
	waitFor(t, "serve to log the reload", func() bool { return strings.Contains(logs.String(), "tokens reloaded") })
	if _, err := old.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: job.GetId()}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("the removed token's call: %v, want unauthenticated", err)
	}
	got, err := with(newToken).GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: job.GetId()})
	if err != nil || got.GetJob().GetId() != job.GetId() {
		t.Fatalf("the new token's call: %v", err)
	}

	// GetServerInfo needs no token and says one is needed.
	info, err := with("").GetServerInfo(ctx, &jobwatchv1.GetServerInfoRequest{})
	if err != nil || !info.GetAuthRequired() {
		t.Fatalf("GetServerInfo = %v, %v; want auth_required", info, err)
	}
	// /metrics takes a metrics or admin token on the API's port, and
	// carries no token.
	if mresp, err := http.Get(base + "/metrics"); err != nil || mresp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without a token: %v, %v; want 401", mresp.Status, err)
	}
	mreq, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer "+adminToken)
	mresp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(body), `jobwatch_token_requests_total{code="ok",role="client",tenant="acme"`) {
		t.Errorf("/metrics has no per-tenant count")
	}
	for _, tok := range []string{oldToken, newToken, adminToken} {
		if strings.Contains(string(body), tok) || strings.Contains(logs.String(), tok) {
			t.Errorf("a token reached /metrics or the log")
		}
	}
}

func TestServeWithTokensMayListenBeyondLoopback(t *testing.T) {
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens.yaml")
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry("t", "role: admin"))
	f, err := parseServeFlags([]string{"--addr", "0.0.0.0:8080", "--tokens", tokensFile}, io.Discard)
	if err != nil || f.tokens != tokensFile {
		t.Fatalf("--tokens with a non-loopback --addr: %v", err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	writeFile(t, broken, "tokens:\n  - {sha256: abc, role: admin}\n")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--db", testdb.New(t), "--tokens", broken}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "broken.yaml:2:14: tokens[0].sha256: must be 64 hex digits") {
		t.Fatalf("a broken tokens file: exit %d, %s", code, stderr.String())
	}
}
