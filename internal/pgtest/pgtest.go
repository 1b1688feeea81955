// Package pgtest gives tests a PostgreSQL to use: URL returns the URL of
// a fresh, empty schema of its own for each test, dropped when the test
// ends.
//
// The server is found once per test process, in this order: the URL in
// JOBWATCH_TEST_POSTGRES; a server on 127.0.0.1:5432 (user postgres,
// database test) if one answers; else a throwaway cluster made with
// initdb and started with pg_ctl (Debian's postgresql package) in a temp
// directory, on a free port, run as the postgres user when the test runs
// as root (initdb refuses root). A package whose tests may start that
// cluster stops it at exit by calling Main from its TestMain; without
// it the cluster's postmaster outlives the test binary.
//
// Without a server the test is skipped, unless it runs under CI (as
// internal/ci decides, the one rule every test uses), where it fails.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/ci"
)

// Env names the variable that gives a server's URL.
const Env = "JOBWATCH_TEST_POSTGRES"

var (
	once    sync.Once
	baseURL string // "" when no server could be had
	why     error  // why not
	cluster *throwaway
)

// Main runs the tests of m and then stops the cluster that URL started,
// if it started one. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if cluster != nil {
		cluster.stop()
	}
	return code
}

// URL returns the URL of a new, empty schema on the test server (it is
// the first of the search_path of every connection made with the URL),
// and drops the schema with everything in it when t ends. The URL is for
// pgx, which sets search_path from the parameter of that name.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { baseURL, why = find() })
	if baseURL == "" {
		ci.Require(t, why, "no PostgreSQL for tests (set "+Env+", or install Debian's postgresql package)")
	}
	u, schema := newSchema(t, baseURL)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, baseURL)
		if err != nil {
			t.Errorf("pgtest: connect to drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return u
}

// newSchema makes a new, empty schema on the server of base and returns
// base with that schema as its search_path, and the schema's name.
func newSchema(t testing.TB, base string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 8)
	rand.Read(b)
	schema := "jw_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends parameters it does not know as run-time settings
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// find returns the URL of a server that answers, or why there is none.
func find() (string, error) {
	if env := os.Getenv(Env); env != "" {
		if err := ping(env); err != nil {
			shown := "(a URL that does not parse)"
			if u, perr := url.Parse(env); perr == nil {
				shown = u.Redacted()
			}
			return "", fmt.Errorf("%s=%s: %w", Env, shown, err)
		}
		return env, nil
	}
	local := "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	errLocal := ping(local)
	if errLocal == nil {
		return local, nil
	}
	c, err := startCluster()
	if err != nil {
		return "", fmt.Errorf("none on 127.0.0.1:5432 (%v), and no throwaway cluster: %w", errLocal, err)
	}
	cluster = c
	return c.url, nil
}

func ping(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// throwaway is a cluster of this test process.
type throwaway struct {
	dir, url string
	run      func(args ...string) *exec.Cmd
}

func startCluster() (*throwaway, error) {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return nil, err
	}
	pgctl, err := exec.LookPath("pg_ctl")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "jobwatch-pgtest-")
	if err != nil {
		return nil, err
	}
	// initdb refuses to run as root: run the cluster as postgres then.
	run := func(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		run = func(args ...string) *exec.Cmd {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	c := &throwaway{dir: dir, run: run,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	if out, err := run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLine(out))
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", port, dir)
	if out, err := run(pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %w: %s", err, lastLine(out))
	}
	if err := ping(c.url); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *throwaway) stop() {
	pgctl, err := exec.LookPath("pg_ctl")
	if err == nil {
		c.run(pgctl, "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	}
	os.RemoveAll(c.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
