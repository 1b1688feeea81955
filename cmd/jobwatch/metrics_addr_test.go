package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/testdb"
)

func getStatus(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestServeMetricsAddrMovesMetricsOffTheAPIPort: with --metrics-addr,
// /metrics answers there without a token and the API's port answers it
// 404; with --tokens and no --metrics-addr it takes a metrics token.
func TestServeMetricsAddrMovesMetricsOffTheAPIPort(t *testing.T) {
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens.yaml")
	const scraper, client = "jw_scraper", "jw_client"
	writeFile(t, tokensFile, "tokens:\n"+tokensEntry(scraper, "role: metrics")+tokensEntry(client, "role: client, tenant: acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	base, _, logs := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile, "--metrics-addr", "127.0.0.1:0")
	m := regexp.MustCompile(`metrics_addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("serve does not log where /metrics listens:\n%s", logs.String())
	}
	if status, body := getStatus(t, "http://"+m[1]+"/metrics", ""); status != http.StatusOK || !strings.Contains(body, "jobwatch_jobs{") {
		t.Errorf("--metrics-addr /metrics without a token: %d %.200s", status, body)
	}
	if status, _ := getStatus(t, base+"/metrics", scraper); status != http.StatusNotFound {
		t.Errorf("the API's port /metrics with --metrics-addr: %d, want 404", status)
	}

	base2, _, _ := startServe(t, ctx, "--db", testdb.New(t), "--tokens", tokensFile)
	for _, tt := range []struct {
		token  string
		status int
	}{{"", http.StatusUnauthorized}, {client, http.StatusForbidden}, {scraper, http.StatusOK}} {
		if status, body := getStatus(t, base2+"/metrics", tt.token); status != tt.status {
			t.Errorf("/metrics on the API's port with token %q: %d %.200s, want %d", tt.token, status, body, tt.status)
		}
	}
}

func TestServeRefusesABadMetricsAddr(t *testing.T) {
	if _, err := parseServeFlags([]string{"--metrics-addr", "9090"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("--metrics-addr 9090: %v, want refused", err)
	}
	// Beyond loopback it takes --tokens or --insecure, as --addr does.
	if _, err := parseServeFlags([]string{"--metrics-addr", "0.0.0.0:9090"}, io.Discard); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("--metrics-addr 0.0.0.0:9090 without tokens: %v, want refused", err)
	}
	tokensFile := filepath.Join(t.TempDir(), "tokens.yaml")
	writeFile(t, tokensFile, "tokens: []\n")
	for _, args := range [][]string{{"--insecure"}, {"--tokens", tokensFile}} {
		if _, err := parseServeFlags(append([]string{"--metrics-addr", "0.0.0.0:9090"}, args...), io.Discard); err != nil {
			t.Errorf("--metrics-addr 0.0.0.0:9090 %v: %v", args, err)
		}
	}
}

// TestTokenNewMakesAMetricsToken: "token new --role metrics" prints an
// entry the tokens file takes as a metrics token, and refuses a tenant.
func TestTokenNewMakesAMetricsToken(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := run(context.Background(), []string{"token", "new", "--role", "metrics"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "    role: metrics\n") {
		t.Errorf("the entry is not a metrics one:\n%s", stdout.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"token", "new", "--role", "metrics", "--tenant", "acme"}, io.Discard, &stderr); code == 0 || !strings.Contains(stderr.String(), "a metrics token reads /metrics") {
		t.Errorf("a metrics token with --tenant: exit %d, %s", code, stderr.String())
	}
}
