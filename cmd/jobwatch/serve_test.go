package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

func TestServeRefusesWhatItCannotDoSafely(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "jobwatch.db")
	typo := filepath.Join(dir, "typo.yaml")
	writeFile(t, typo, "retention: 24h\nqueues:\n  - name: index\n    retry: {max_attempt: 3}\n")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"a non-loopback address without auth is refused", []string{"--addr", "0.0.0.0:0"}, 2, "not a loopback address"},
		{"an address on every interface is refused", []string{"--addr", ":0"}, 2, "not a loopback address"},
		{"a host name other than localhost is refused", []string{"--addr", "example.org:8080"}, 2, "--insecure"},
		{"a PostgreSQL database that does not answer is unavailable, and its password is not shown", []string{"--db", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2", "--addr", "127.0.0.1:0"}, 1, "open database postgres://u:xxxxx@127.0.0.1:1/db?connect_timeout=2: open postgres: store unavailable"},
		{"a missing config file is an error", []string{"--config", filepath.Join(dir, "nope.yaml")}, 1, "nope.yaml"},
		{"a config file with a mistake is refused with its line and key", []string{"--config", typo}, 1, "typo.yaml:4:13: queues[0].retry.max_attempt: unknown key"},
		{"a zero wait cap is refused", []string{"--wait-cap", "0s"}, 2, "--wait-cap must be positive"},
		{"a zero lock timeout is refused", []string{"--lock-timeout", "0s"}, 2, "--lock-timeout must be positive"},
		{"a zero body timeout is refused", []string{"--body-timeout", "0s"}, 2, "--body-timeout must be positive"},
		{"a zero connection limit is refused", []string{"--max-connections", "0"}, 2, "--max-connections must be positive"},
		{"a zero send budget is refused", []string{"--max-pending-send-bytes", "0"}, 2, "--max-pending-send-bytes must be positive"},
		{"a duration without a unit is refused", []string{"--claim-cap", "30"}, 2, "claim-cap"},
		{"an unknown log level is refused", []string{"--log-level", "loud"}, 2, "log-level"},
		{"a CORS origin with a path is refused", []string{"--cors-origins", "https://app.example.org/"}, 2, "scheme://host[:port] and nothing more"},
		{"a negative per-tenant parked-call limit is refused", []string{"--max-parked-calls-per-tenant", "-1"}, 2, "--max-parked-calls-per-tenant must not be negative"},
		{"an allowed host with a scheme is refused", []string{"--allowed-hosts", "localhost,https://jobs.example.org"}, 2, "--allowed-hosts: \"https://jobs.example.org\" is not a host"},
		{"an allowed host with a wildcard is refused", []string{"--allowed-hosts", "*.example.org"}, 2, "--allowed-hosts"},
		{"a CORS origin without a scheme is refused", []string{"--cors-origins", "https://ok.example.org,app.example.org"}, 2, "http:// or https://"},
		{"any CORS origin without tokens is refused", []string{"--cors-origins", "https://app.example.org,*"}, 2, "every web page you open"},
		{"metrics on the API's own address is refused", []string{"--addr", "127.0.0.1:8089", "--metrics-addr", "127.0.0.1:8089"}, 2, "--metrics-addr 127.0.0.1:8089 is --addr too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"serve", "--db", db}, tt.args...)
			code := run(context.Background(), args, io.Discard, &stderr)
			if code != tt.wantCode || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Fatalf("exit %d with %q, want exit %d mentioning %q", code, stderr.String(), tt.wantCode, tt.wantErr)
			}
		})
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused serve created the database file")
	}
}

// A --db in a directory that does not exist, or naming a file that is not
// a SQLite database, is refused by the store in one sentence that says
// what to do, by serve and demo alike: not "store unavailable" after the
// path a third time, and not a warning about the text file's mode first.
func TestADatabasePathThatCannotBeOneSaysWhyPlainly(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir")
	notes := filepath.Join(dir, "notes.db")
	writeFile(t, notes, "my notes, not a database\n")
	for _, cmd := range []string{"serve", "demo"} {
		for _, tc := range []struct{ db, want string }{
			{filepath.Join(missing, "x.db"), "jobwatch: open database " + filepath.Join(missing, "x.db") + ": open sqlite " + filepath.Join(missing, "x.db") + ": its directory " + missing +
				" does not exist: create it first (mkdir -p " + missing + ")\n"},
			{notes, "jobwatch: open database " + notes + ": open sqlite " + notes + ": the file is not a SQLite database (it does not begin as one does): " +
				"give the path of a jobwatch database, or of a file that does not exist yet to make a new one\n"},
		} {
			var stderr bytes.Buffer
			code := run(t.Context(), []string{cmd, "--db", tc.db, "--addr", "127.0.0.1:0"}, io.Discard, &stderr)
			if code != 1 || stderr.String() != tc.want {
				t.Errorf("jobwatch %s --db %s = exit %d, stderr %q; want 1 and %q", cmd, tc.db, code, stderr.String(), tc.want)
			}
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a refused --db made its directory")
	}
}

// An address another program holds stops serve and demo at once, saying
// which flag moves it, before they make their database file.
func TestServeSaysWhatToDoWhenItsAddressIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, args := range [][]string{
		{"serve", "--db", filepath.Join(t.TempDir(), "a.db"), "--addr", addr},
		{"serve", "--db", filepath.Join(t.TempDir(), "b.db"), "--addr", "127.0.0.1:0", "--metrics-addr", addr},
		{"demo", "--db", filepath.Join(t.TempDir(), "c.db"), "--addr", addr},
	} {
		flag := args[len(args)-2]
		var stderr bytes.Buffer
		code := run(context.Background(), args, io.Discard, &stderr)
		if want := flag + " " + addr + ": the address is in use, by another jobwatch or another program: stop that one, or pick another address with " + flag; code != 1 || !strings.Contains(stderr.String(), want) {
			t.Fatalf("%v with its address taken = exit %d, %q; want 1 and %q", args, code, stderr.String(), want)
		}
		if _, err := os.Stat(args[2]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%v with its address taken left its database file behind (stat: %v)", args, err)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": true, "::1": true, "localhost": true,
		"": false, "0.0.0.0": false, "::": false, "192.168.1.4": false, "example.org": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// lockedBuffer is stderr written by the server's goroutines and read by
// the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServeAnswersOnLoopbackSaysSoAndStopsCleanlyOnSignal(t *testing.T) {
	var stderr lockedBuffer
	ctx, signal := context.WithCancel(context.Background())
	defer signal()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "j.db")}, io.Discard, &stderr)
	}()

	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve never said where it listens:\n%s", stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "loopback only, without authentication") {
		t.Errorf("serve did not say it listens on loopback without auth:\n%s", stderr.String())
	}

	c := jobwatchv1connect.NewJobServiceClient(http.DefaultClient, "http://"+addr)
	resp, err := c.SubmitJob(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "smoke"})
	if err != nil || resp.GetJob().GetState() != jobwatchv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("submit to the served API: %v, %v", resp, err)
	}

	page, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET / = %s %s, want the page", page.Status, page.Header.Get("Content-Type"))
	}

	// On loopback without tokens a page whose name was rebound to this
	// address is refused (DNS rebinding).
	rebound, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	rebound.Host = "evil.example"
	page, err = http.DefaultClient.Do(rebound)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusForbidden {
		t.Errorf("GET / with Host evil.example = %s, want 403 Forbidden", page.Status)
	}

	signal() // what SIGTERM does through signal.NotifyContext
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited %d after a signal, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after a signal")
	}
}

// With --insecure beyond loopback, serve warns as it starts (and the
// server every hour after, see server.Config.Insecure), and answers any
// Host: anyone on the network reaches it anyway.
func TestServeInsecureWarnsThatItIsExposed(t *testing.T) {
	var stderr lockedBuffer
	ctx, signal := context.WithCancel(context.Background())
	defer signal()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--insecure", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "j.db")}, io.Discard, &stderr)
	}()
	addrRE := regexp.MustCompile(`level=WARN msg="serving beyond loopback WITHOUT authentication.*--tokens FILE.* addr=\S+:(\d+)`)
	var port string
	for deadline := time.Now().Add(10 * time.Second); port == ""; time.Sleep(10 * time.Millisecond) {
		if m := addrRE.FindStringSubmatch(stderr.String()); m != nil {
			port = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("serve --insecure did not warn:\n%s", stderr.String())
		}
	}
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "jobs.example.org"
	page, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK {
		t.Errorf("GET / with Host jobs.example.org = %s, want the page", page.Status)
	}
	signal()
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("serve exited %d, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after a signal")
	}
}

// startServe runs the jobwatch binary as "serve --addr 127.0.0.1:0" with
// args, as a user would, until the test ends (SIGTERM), and returns once
// it has said where it listens: its base URL, the process (for signals)
// and what it logs.
func startServe(t *testing.T, ctx context.Context, args ...string) (base string, cmd *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	cmd = jobwatchCmd(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	logs = &lockedBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	waitFor(t, "serve to say where it listens", func() bool { return addrRE.MatchString(logs.String()) })
	return "http://" + addrRE.FindStringSubmatch(logs.String())[1], cmd, logs
}

// A --db meant as another database is refused, not opened as a SQLite
// file of that name (each replica on a database of its own, the
// password in the log and in the file's name), and the refusal does not
// repeat it.
func TestServeRefusesADBThatIsNotAFileOrAPostgresURL(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, db := range []string{
		"host=127.0.0.1 port=5432 user=postgres password=S3cretPw dbname=jobs",
		"dbname=jobs password=S3cretPw",
		"mysql://user:S3cretPw@127.0.0.1/jobs",
		"postgres:user:S3cretPw@127.0.0.1/jobs",
		"postgres:/user:S3cretPw@127.0.0.1/jobs",
		"postgres//user:S3cretPw@127.0.0.1/jobs",
	} {
		code, _, errOut := runInProcess(t, "serve", "--db", db, "--addr", "127.0.0.1:0")
		if code != 2 || !strings.Contains(errOut, "--db") || strings.Contains(errOut, "S3cretPw") {
			t.Errorf("serve --db %q = exit %d: %s; want a usage error that does not repeat the password", db, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("serve left %v in its directory; want no file made of a refused --db", entries)
	}
	// The scheme is case-insensitive, as URLs' are.
	if got, err := checkDB("Postgres://u@h/db"); err != nil || got != "postgres://u@h/db" {
		t.Errorf("checkDB(Postgres://u@h/db) = %q, %v; want postgres://u@h/db", got, err)
	}
	for _, file := range []string{"jobs=1.db", "postgres/jobs.db", "data/user=ops.db"} {
		if got, err := checkDB(file); err != nil || got != file {
			t.Errorf("checkDB(%s) = %q, %v; want the file name as it is", file, got, err)
		}
	}
}
