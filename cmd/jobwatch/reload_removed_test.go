package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// A config reload that removes what the file in effect declared (a
// deploy's copy cut off after a line parses as a shorter file) is
// applied, but serve logs it at warn naming what went, and jobwatch
// reload says the same on stderr; a reload that adds or changes values
// stays at info and says nothing more.
func TestReloadOfAConfigThatRemovesEntriesWarnsNamingThem(t *testing.T) {
	dir := t.TempDir()
	cfg, pidFile := filepath.Join(dir, "jobwatch.yaml"), filepath.Join(dir, "jobwatch.pid")
	const (
		queues  = "strict: true\nqueues:\n  - name: index\n"
		bulk    = "  - name: bulk\n    max_running: 4\n"
		reports = "  - name: reports\n    uses: [gpu]\n"
		mail    = "  - name: mail\n    uses: [gpu]\n"
		pools   = "pools:\n  gpu: 2\n"
		digest  = "  - name: digest\n    kind: digest\n    queue: index\n    every: 1h\n"
		rest    = "  - name: nightly\n    kind: report\n    queue: index\n    cron: \"0 2 * * *\"\n" +
			"alerts:\n  webhook: http://127.0.0.1:9/hooks/s3cret-path\ntenants:\n  acme:\n    max_queued: 100\n  globex:\n    weight: 3\n"
	)
	writeFile(t, cfg, queues+bulk+reports+pools+"schedules:\n"+digest+rest)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base, cmd, logs := startServe(t, ctx, "--db", testdb.New(t), "--config", cfg, "--pid-file", pidFile)
	took := "jobwatch serve (pid " + strconv.Itoa(cmd.Process.Pid) + ") reloaded config " + cfg + "\n"
	jobsClient := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)

	// Each step reloads the file the step before left in effect.
	steps := []struct {
		name    string
		file    string
		logged  string // the reload's line in serve's log
		warning string // what jobwatch reload says on stderr
	}{
		{
			"a reload that adds a queue and changes values logs at info",
			queues + strings.Replace(bulk, "max_running: 4", "max_running: 8", 1) + reports + mail + pools +
				"schedules:\n" + strings.Replace(digest, "1h", "2h", 1) + strings.Replace(rest, "weight: 3", "weight: 5", 1),
			`level=INFO msg="config reloaded"`, "",
		},
		{
			"a reload that drops two queues and a schedule warns naming them",
			queues + mail + pools + "schedules:\n" + rest,
			`level=WARN msg="config reloaded without queues bulk, reports; schedules digest"`,
			"jobwatch: reload: config " + cfg + " no longer declares queues bulk, reports; schedules digest, which serve has dropped: if the file was cut short (a half-written copy), put it back whole and reload again\n",
		},
		{
			"a copy cut off after its first queue warns of all that went, without the webhook's URL",
			queues,
			`level=WARN msg="config reloaded without queues mail; pools gpu; schedules nightly; tenants acme, globex; alerts.webhook"`,
			"jobwatch: reload: config " + cfg + " no longer declares queues mail; pools gpu; schedules nightly; tenants acme, globex; alerts.webhook, which serve has dropped: if the file was cut short (a half-written copy), put it back whole and reload again\n",
		},
	}
	for _, step := range steps {
		writeFile(t, cfg, step.file)
		before := len(logs.String())
		code, stdout, stderr := runJobwatch(t, "reload", "--pid-file", pidFile)
		if code != 0 || stdout != took || stderr != step.warning {
			t.Fatalf("%s: jobwatch reload exit %d, stdout %q, stderr %q\nwant 0, %q, %q", step.name, code, stdout, stderr, took, step.warning)
		}
		waitFor(t, "serve to log the reload", func() bool { return strings.Contains(logs.String()[before:], "config reloaded") })
		logged := logs.String()[before:]
		if !strings.Contains(logged, step.logged) {
			t.Errorf("%s: serve's log does not say %s:\n%s", step.name, step.logged, logged)
		}
		if n := strings.Count(logged, "config reloaded"); n != 1 || strings.Contains(logged, "s3cret") {
			t.Errorf("%s: serve logged the reload %d times, or the webhook's URL; want one line without it:\n%s", step.name, n, logged)
		}
	}

	// The reloads applied all the same: strict refuses the queues that went.
	_, err := jobsClient.SubmitJob(ctx, &jobwatchv1.SubmitJobRequest{Kind: "k", Queue: "bulk"})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("submit to the dropped queue bulk: %v, want invalid_argument (undeclared under strict)", err)
	}
}
