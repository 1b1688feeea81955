package web_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/ci"
	"github.com/jobwatch/jobwatch/jobs"
	"github.com/jobwatch/jobwatch/jobtype"
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

	addr := freeAddr(t)
	srv := startServer(t, addr, filepath.Join(t.TempDir(), "jobwatch.db"))
	defer srv.shutdown(t)

	// Without an argument it submits a kind the demo's workers run. A job
	// whose first run fails is retried, and its second run succeeds.
	for _, tt := range []struct {
		args      []string
		kind      string
		failFirst bool
	}{
		{[]string{"images.thumbnail"}, "images.thumbnail", false},
		{nil, "enrich", false},
		{[]string{"images.flaky"}, "images.flaky", true},
	} {
		// The worker: it takes the example's job once submitted and
		// finishes it after a little progress, while the example is
		// parked in WaitJob.
		worked := make(chan error, 1)
		go func() {
			claim := jobs.ClaimRequest{WorkerID: "node-example-worker", Kinds: []string{tt.kind}}
			j, err := srv.engine.Claim(ctx, claim, time.Now().Add(time.Minute))
			if err == nil && tt.failFirst {
				_, err = srv.engine.Fail(ctx, j.ID, j.LeaseID, jobtype.JobError{Type: "FlakyError", Message: "first run fails"}, false)
				if err == nil {
					j, err = srv.engine.Claim(ctx, claim, time.Now().Add(time.Minute)) // the example's retry
				}
			}
			if err == nil {
				_, err = srv.engine.Heartbeat(ctx, j.ID, j.LeaseID, 50, "half way")
			}
			if err == nil {
				_, err = srv.engine.Complete(ctx, j.ID, j.LeaseID, []byte(`{"thumbnails":3}`))
			}
			worked <- err
		}()

		// A minute bounds a run that waits for a job no one claims: then
		// npm and the node it started are killed, and the test fails.
		runCtx, cancelRun := context.WithTimeout(ctx, time.Minute)
		defer cancelRun()
		cmd := exec.CommandContext(runCtx, npm, append([]string{"run", "--silent", "example", "--"}, tt.args...)...)
		cmd.Env = append(os.Environ(), "JOBWATCH_SERVER=http://"+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("example %v: %v\nstdout:\n%s\nstderr:\n%s", tt.args, err, &stdout, &stderr)
		}
		if err := <-worked; err != nil {
			t.Fatalf("worker: %v", err)
		}
		out := stdout.String()
		wants := []string{"submitted j", "(" + tt.kind + ")", " succeeded\n", `result {"thumbnails":3}`}
		if tt.failFirst {
			wants = append(wants, " failed: FlakyError; retrying\n")
		} else if strings.Contains(out, "retrying") {
			t.Errorf("example %v retried a job that succeeded:\n%s", tt.args, out)
		}
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("example %v output lacks %q:\n%s", tt.args, want, out)
			}
		}
	}
}
