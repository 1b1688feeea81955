package web_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPageLogic runs the page's TypeScript unit tests (web/test/*.test.ts:
// the live feed against a scripted server, merging by version) in Node.
// They cover what the browser test cannot provoke on demand: a server
// that refuses streams, a connection that goes silent.
func TestPageLogic(t *testing.T) {
	requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join("test", "*.test.ts"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.ts: %v", err)
	}
	out := t.TempDir()
	args := append(files, "--bundle", "--platform=node", "--format=esm", "--target=node20",
		"--log-level=warning", "--outdir="+out, "--out-extension:.js=.mjs")
	if b, err := exec.CommandContext(ctx, filepath.Join("node_modules", ".bin", "esbuild"), args...).CombinedOutput(); err != nil {
		t.Fatalf("esbuild: %v\n%s", err, b)
	}
	bundles, _ := filepath.Glob(filepath.Join(out, "*.mjs"))
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-force-exit", "--test-reporter=spec"}, bundles...)...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, b)
	}
	t.Logf("%s", b)
}
