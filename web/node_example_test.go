package web_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/ci"
	"github.com/jobwatch/jobwatch/jobs"
)

// requireNode skips where Node or web/node_modules is missing, except in
// CI, which installs both (`npm ci` in web/) and must run the example.
func requireNode(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err == nil {
		_, err = os.Stat(filepath.Join("node_modules", ".bin", "esbuild"))
	}
	ci.Require(t, err, "the Node example needs node, npm and web/node_modules (npm ci in web/)")
	return npm
}

func TestNodeExampleSubmitsAJobAndWaitsForItsResult(t *testing.T) {
	npm := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	srv := startServer(t, addr, filepath.Join(t.TempDir(), "jobwatch.db"))
	defer srv.shutdown(t)

	// The worker: it takes the example's job once submitted and finishes it
	// after a little progress, while the example is parked in WaitJob.
	worked := make(chan error, 1)
	go func() {
		j, err := srv.engine.Claim(ctx, claimThumbnails, time.Now().Add(time.Minute))
		if err == nil {
			_, err = srv.engine.Heartbeat(ctx, j.ID, j.LeaseID, 50, "half way")
		}
		if err == nil {
			_, err = srv.engine.Complete(ctx, j.ID, j.LeaseID, []byte(`{"thumbnails":3}`))
		}
		worked <- err
	}()

	cmd := exec.CommandContext(ctx, npm, "run", "--silent", "example", "--", "images.thumbnail")
	cmd.Env = append(os.Environ(), "JOBWATCH_URL=http://"+addr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("example: %v\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if err := <-worked; err != nil {
		t.Fatalf("worker: %v", err)
	}
	out := stdout.String()
	for _, want := range []string{"submitted j", "(images.thumbnail)", " succeeded\n", `result {"thumbnails":3}`} {
		if !strings.Contains(out, want) {
			t.Errorf("example output lacks %q:\n%s", want, out)
		}
	}
}

var claimThumbnails = jobs.ClaimRequest{WorkerID: "node-example-worker", Kinds: []string{"images.thumbnail"}}
