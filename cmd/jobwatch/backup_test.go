package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
	"google.golang.org/protobuf/types/known/structpb"
)

// backupBlock is the SQLite backup that docs/OPERATING.md ("Backing
// up") tells operators to run while serve runs: the block that says
// VACUUM INTO, with the paths it names.
func backupBlock(t *testing.T) string {
	t.Helper()
	var found []string
	for _, b := range allDocBlocks(t) {
		if b.file == "docs/OPERATING.md" && strings.Contains(b.body, "VACUUM INTO") {
			found = append(found, b.body)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/OPERATING.md has %d blocks that say VACUUM INTO; want the one backup", len(found))
	}
	return found[0]
}

// TestTheDocumentedSQLiteBackupFinishesUnderWritesAndRestores runs the
// backup of docs/OPERATING.md, as written but for its paths, against a
// live serve taking submissions as fast as four clients send them (the
// load under which sqlite3's .backup, which starts over at every commit
// beside it, never finished), over a stale partial copy and an older
// backup. The copy must be whole, readable by its owner only, hold
// every job acknowledged before the backup began, and serve, started on
// it as "To restore" says, must answer for them.
func TestTheDocumentedSQLiteBackupFinishesUnderWritesAndRestores(t *testing.T) {
	needTools(t, "sqlite3", "sync")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	live := filepath.Join(dir, "live", "jobwatch.db")
	backups := filepath.Join(dir, "backups")
	for _, d := range []string{filepath.Dir(live), backups} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	base, _, _ := startServe(t, ctx, "--db", live)
	client := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)

	// Some megabytes of payloads, so that the copy takes many of the
	// online backup's steps, then the jobs the copy must hold.
	big, err := structpb.NewValue(map[string]any{"blob": strings.Repeat("0123456789abcdef", 8<<10)})
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	for i := range 256 {
		req := &jobwatchv1.SubmitJobRequest{Kind: "tick"}
		if i%2 == 0 {
			req.Payload = big
		}
		resp, err := client.SubmitJob(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, resp.GetJob().GetId())
	}

	// A partial copy a cut-short run left, and the last backup.
	if err := os.WriteFile(filepath.Join(backups, "jobwatch.db.new"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backups, "jobwatch.db"), []byte("last week's"), 0o600); err != nil {
		t.Fatal(err)
	}

	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	submitted := 0
	for range 4 {
		wg.Go(func() {
			for writing.Err() == nil {
				if _, err := client.SubmitJob(writing, &jobwatchv1.SubmitJobRequest{Kind: "tick"}); err == nil {
					mu.Lock()
					submitted++
					mu.Unlock()
				}
			}
		})
	}
	waitFor(t, "submissions to flow", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return submitted >= 50
	})

	script := strings.NewReplacer(
		"/var/lib/private/jobwatch/jobwatch.db", live,
		"/var/backups/", backups+"/",
	).Replace(backupBlock(t))
	// The deadline fails only a backup that does not finish: the one
	// this replaced did not within minutes under such a load.
	run, stopRun := context.WithTimeout(ctx, 90*time.Second)
	out, err := exec.CommandContext(run, "sh", "-e", "-c", script).CombinedOutput()
	stopRun()
	mu.Lock()
	during := submitted
	mu.Unlock()
	stopWriting()
	wg.Wait()
	if err != nil {
		t.Fatalf("the documented backup, while %d jobs were submitted: %v\n%s\n%s", during, err, script, out)
	}
	if during < 100 {
		t.Logf("only %d submissions ran beside the backup", during)
	}

	copyPath := filepath.Join(backups, "jobwatch.db")
	if _, err := os.Stat(copyPath + ".new"); !os.IsNotExist(err) {
		t.Errorf("%s.new is still there (%v); want it moved over the last backup", copyPath, err)
	}
	info, err := os.Stat(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("the backup's mode is %v; want -rw------- (it holds every payload and result)", mode)
	}
	check, err := exec.CommandContext(ctx, "sqlite3", copyPath, "PRAGMA integrity_check").CombinedOutput()
	if err != nil || strings.TrimSpace(string(check)) != "ok" {
		t.Fatalf("integrity_check of the backup = %q, %v; want ok", check, err)
	}

	// To restore: the copy where --db points, the service's own.
	restored := filepath.Join(dir, "restored", "jobwatch.db")
	if err := os.Mkdir(filepath.Dir(restored), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(copyPath, restored); err != nil {
		t.Fatal(err)
	}
	base, _, logs := startServe(t, ctx, "--db", restored)
	client = jobwatchv1connect.NewJobServiceClient(http.DefaultClient, base)
	for _, id := range before {
		resp, err := client.GetJob(ctx, &jobwatchv1.GetJobRequest{JobId: id})
		if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("job %s, submitted before the backup, in serve on the restored copy: %v, %v; want QUEUED", id, resp.GetJob().GetState(), err)
		}
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("serve on the restored copy warned:\n%s", logs)
	}
}
