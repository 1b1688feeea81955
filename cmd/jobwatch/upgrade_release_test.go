package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwatch/jobwatch/internal/ci"
)

// schemaFile is the file whose history marks PostgreSQL schema changes:
// each commit that touched it may have added a migration.
const schemaFile = "store/postgres/schema.go"

// upgradeFromEnv names a commit (anything git rev-parse takes) to build as
// the previous release instead of the one the history gives, to try an
// upgrade from an older release by hand.
const upgradeFromEnv = "JOBWATCH_UPGRADE_FROM"

// release is a jobwatch commit to run beside the checkout under test.
type release struct {
	repo    string // the checkout's top directory
	commit  string // full hash
	subject string // its first line, for the log
}

func (r release) String() string {
	return fmt.Sprintf("%.7s (%s)", r.commit, r.subject)
}

// previousSchemaRelease is the release an operator runs before upgrading
// to this checkout: the newest commit that touched schemaFile before the
// one that made the checkout's schema. That is the newest commit touching
// it when the checkout's schemaFile has changes not yet committed (they
// are the new schema), else the one before that commit (HEAD itself, or
// an older commit when later ones left the schema alone).
//
// It needs git and the history: a shallow clone has neither that commit
// nor any way to get it here (CI reaches no network beyond package
// registries), so the test fails under CI and says why, and skips
// elsewhere.
func previousSchemaRelease(t *testing.T) release {
	t.Helper()
	_, err := exec.LookPath("git")
	ci.Require(t, err, "the rolling upgrade test builds the previous release from git history, and git is missing")
	top, err := gitOutput("", "rev-parse", "--show-toplevel")
	ci.Require(t, err, "the rolling upgrade test builds the previous release from git history, and git cannot read this checkout as one")
	shallow, err := gitOutput(top, "rev-parse", "--is-shallow-repository")
	if err == nil && shallow == "true" {
		err = errors.New("this checkout is a shallow clone: its history ends before the previous release")
	}
	ci.Require(t, err, "the rolling upgrade test builds the previous release that changed "+schemaFile+
		" from git history: fetch all of it (git fetch --unshallow, or a CI checkout with full depth)")

	rel := release{repo: top}
	if from := os.Getenv(upgradeFromEnv); from != "" {
		rel.commit, err = gitOutput(top, "rev-parse", "--verify", from+"^{commit}")
		if err != nil {
			t.Fatalf("%s=%s: %v", upgradeFromEnv, from, err)
		}
	} else {
		log, err := gitOutput(top, "log", "--format=%H", "HEAD", "--", schemaFile)
		if err != nil {
			t.Fatalf("find the commits that changed %s: %v", schemaFile, err)
		}
		commits := strings.Fields(log)
		// git diff --quiet exits 1 when the file differs from HEAD's.
		uncommitted := exec.Command("git", "-C", top, "diff", "--quiet", "HEAD", "--", schemaFile).Run() != nil
		pick := 1
		if uncommitted {
			pick = 0
		}
		if len(commits) <= pick {
			ci.Require(t, fmt.Errorf("%d commits changed %s, none before the one that made this schema", len(commits), schemaFile),
				"the rolling upgrade test needs a previous release")
		}
		rel.commit = commits[pick]
	}
	rel.subject, _ = gitOutput(top, "log", "-1", "--format=%s", rel.commit)
	if len(rel.subject) > 72 {
		rel.subject = rel.subject[:72] + "…"
	}
	return rel
}

// build builds rel's jobwatch binary into a directory of t and returns
// its path. It checks rel out with git worktree in a temporary directory
// outside the checkout, and removes the worktree as soon as the build
// ends, whatever its outcome.
func (rel release) build(t *testing.T, ctx context.Context) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	ci.Require(t, err, "the rolling upgrade test builds the previous release with the Go toolchain, and go is not on PATH")
	tmp, err := os.MkdirTemp("", "jobwatch-release-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if _, err := gitOutput(rel.repo, "worktree", "add", "--detach", src, rel.commit); err != nil {
		t.Fatalf("check out the previous release %s: %v", rel, err)
	}
	defer func() {
		if _, err := gitOutput(rel.repo, "worktree", "remove", "--force", src); err != nil {
			t.Logf("remove the worktree of %s: %v; pruning", rel, err)
			os.RemoveAll(src)
			gitOutput(rel.repo, "worktree", "prune")
		}
	}()

	bin := filepath.Join(t.TempDir(), "jobwatch-"+rel.commit[:12])
	began := time.Now()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./cmd/jobwatch")
	cmd.Dir = src
	// The release's own go.mod, not a go.work around the temporary
	// directory.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release %s: %v (%v after the start)\n%s", rel, err, time.Since(began).Round(time.Second), out)
	}
	t.Logf("built the previous release %s in %v", rel, time.Since(began).Round(time.Second))
	return bin
}

// gitOutput runs git in dir ("" for the current directory) and returns
// its output, trimmed; an error carries what git said.
func gitOutput(dir string, args ...string) (string, error) {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && len(exit.Stderr) > 0 {
			err = fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
