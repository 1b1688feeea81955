package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/ci"
)

// Cluster is a PostgreSQL cluster of one test's own, made with initdb in
// a temp directory (Debian's postgresql package), which the test may stop
// and start again, or cut every connection of, to see what jobwatch does
// while its database is away. It never touches the shared server URL
// uses. Make one with NewCluster.
type Cluster struct {
	c *throwaway
}

// NewCluster makes and starts a cluster, and stops it and removes its
// files when t ends. Without initdb and pg_ctl (on PATH, or in the newest
// /usr/lib/postgresql/*/bin, where Debian keeps them) the test is
// skipped, unless it runs under CI, where it fails.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	if err := findTools(); err != nil {
		ci.Require(t, err, "no initdb and pg_ctl for a PostgreSQL cluster of the test's own (install Debian's postgresql package)")
	}
	c, err := startCluster()
	if err != nil {
		t.Fatalf("pgtest: start a cluster of the test's own: %v", err)
	}
	t.Cleanup(c.stop)
	return &Cluster{c: c}
}

// findTools puts Debian's PostgreSQL binaries on PATH for exec.LookPath
// when initdb is not on it already, and says what is missing.
func findTools() error {
	if _, err := exec.LookPath("initdb"); err == nil {
		return nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := exec.LookPath(filepath.Join(d, "initdb")); err == nil {
			prependPath(d)
			return nil
		}
	}
	_, err := exec.LookPath("initdb")
	return err
}

func versionOf(dir string) int {
	var v int
	fmt.Sscan(filepath.Base(filepath.Dir(dir)), &v)
	return v
}

// URL returns the URL of a new, empty schema of the cluster, as the
// package's URL does on the shared server (the schema goes with the
// cluster).
func (cl *Cluster) URL(t testing.TB) string {
	t.Helper()
	u, _ := newSchema(t, cl.c.url)
	return u
}

// Stop stops the cluster with pg_ctl stop -m immediate: every backend
// is killed at once, nothing is checkpointed, and the next start
// recovers from the WAL, as after a crash of the machine's PostgreSQL
// (but not of the machine: what was committed is in the OS's cache).
func (cl *Cluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := cl.pgctl("-m", "immediate", "-w", "stop"); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v: %s", err, out)
	}
}

// Start starts the stopped cluster again, on its port, with the
// settings it was made with, and returns once it takes connections
// (after its crash recovery).
func (cl *Cluster) Start(t testing.TB) {
	t.Helper()
	opts, err := cl.options()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if out, err := cl.pgctl("-o", opts, "-l", filepath.Join(cl.c.dir, "log"), "-w", "start"); err != nil {
		t.Fatalf("pgtest: pg_ctl start: %v: %s", err, out)
	}
}

// TerminateBackends ends every other client connection to the cluster
// with pg_terminate_backend, as an operator or a failover proxy does, and
// returns how many it ended. The server stays up.
func (cl *Cluster) TerminateBackends(t testing.TB) int {
	t.Helper()
	return cl.QueryInt(t, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
}

// QueryInt runs query, which answers one integer, on the cluster.
func (cl *Cluster) QueryInt(t testing.TB, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cl.c.url)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("pgtest: %s: %v", query, err)
	}
	return n
}

// Log returns the cluster's server log so far, for a failing test.
func (cl *Cluster) Log() string {
	out, _ := exec.Command("tail", "-n", "50", filepath.Join(cl.c.dir, "log")).Output()
	return strings.TrimSpace(string(out))
}

// options are the server options of the cluster's first start, as
// postmaster.opts recorded them (what pg_ctl restart reads): the
// quoted arguments after the executable's path.
func (cl *Cluster) options() (string, error) {
	b, err := os.ReadFile(filepath.Join(cl.c.dir, "data", "postmaster.opts"))
	if err != nil {
		return "", fmt.Errorf("the cluster's options: %w", err)
	}
	_, opts, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok {
		return "", fmt.Errorf("the cluster's options: postmaster.opts reads %q", b)
	}
	return opts, nil
}

func prependPath(dir string) {
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func (cl *Cluster) pgctl(args ...string) (string, error) {
	pgctl, err := exec.LookPath("pg_ctl")
	if err != nil {
		return "", err
	}
	out, err := cl.c.run(append([]string{pgctl, "-D", filepath.Join(cl.c.dir, "data")}, args...)...).CombinedOutput()
	return lastLine(out), err
}
