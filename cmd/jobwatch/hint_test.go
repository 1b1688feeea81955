package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

// A command whose server answered it and then went away (a restart, a
// crash) does not say that nothing may run there: its retries say what
// they meet, and the hint is for a server that never answered.
func TestNoHintOfAMissingServerOnceItHasAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, serve, logs := startServe(t, ctx, "--db", filepath.Join(t.TempDir(), "jobwatch.db"))
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	sub, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		code   int
		errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, _, errOut := runInProcess(t, "watch", sub.GetJob().GetId(), "--timeout", "10s", "--server", base)
		done <- result{code, errOut}
	}()
	// Kill serve once the watch is parked there: it has had its first
	// snapshot by then.
	waitFor(t, "the watch to park", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "jobwatch_parked_calls 1")
	})
	_ = serve.Process.Kill()
	r := <-done
	code, errOut := r.code, r.errOut
	if code != exitError || !strings.Contains(errOut, "connection refused") ||
		!strings.Contains(errOut, "--timeout passed before the job ended (the last try: ") {
		t.Fatalf("watch of a server killed under it = exit %d, stderr %q; want 1, the refused connections and that the job had not ended (serve's log:\n%s)",
			code, errOut, logs)
	}
	if strings.Contains(errOut, "nothing answers at that address") {
		t.Errorf("watch of a server that answered and then went away says nothing may run there:\n%s", errOut)
	}
}
