package main

import (
	"context"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/pgtest"
)

// A replica started before its PostgreSQL database answers waits for it
// (--db-wait), saying so, and serves once it answers, with no restart;
// one that is refused by the database (no such database) fails at once.
// The database "starts" when the test opens a relay to the real one on
// the address the replica was given.
func TestServeWaitsForADatabaseItCannotReachYet(t *testing.T) {
	if os.Getenv("JOBWATCH_TEST_BACKEND") != "postgres" {
		t.Skip("runs in the PostgreSQL pass (JOBWATCH_TEST_BACKEND=postgres)")
	}
	dbURL := pgtest.URL(t)
	real, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	later := freeAddr(t) // nothing listens there yet: connections are refused
	waiting := *real
	waiting.Host = later
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	addr := freeAddr(t)
	r := &replica{name: "early", url: "http://" + addr, logs: &lockedBuffer{}, exited: make(chan struct{}), dead: make(chan struct{})}
	r.cmd = jobwatchCmd(ctx, "serve", "--addr", addr, "--db", waiting.String(), "--db-wait", "1m")
	r.supervise(t)
	waitFor(t, "the replica to say it waits for the database", func() bool {
		if r.hasExited() {
			t.Fatalf("the replica exited while its database could not be reached: %s", r.logs)
		}
		return strings.Count(r.logs.String(), "the database cannot be reached yet: trying again") >= 2
	})

	// The database comes up: a relay to the real one on that address.
	ln, err := net.Listen("tcp", later)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go relay(ln, real.Host)
	waitFor(t, "the replica to serve once its database answers", func() bool {
		if r.hasExited() {
			t.Fatalf("the replica exited: %s", r.logs)
		}
		return r.answers()
	})
	r.connect(t)
	if _, err := r.client.Submit(ctx, &jobwatchv1.SubmitJobRequest{Kind: "after-the-wait"}); err != nil {
		t.Fatalf("submit to the replica that waited for its database: %v", err)
	}

	// A database that refuses the replica is not waited for.
	missing := *real
	missing.Path = "/no_such_database_here"
	start := time.Now()
	code, _, errOut := runInProcess(t, "serve", "--addr", freeAddr(t), "--db", missing.String(), "--db-wait", "1m")
	if code == 0 || !strings.Contains(errOut, "no_such_database_here") || time.Since(start) > 30*time.Second {
		t.Fatalf("serve on a database that does not exist: exit %d after %v, %q; want a failure at once naming it", code, time.Since(start), errOut)
	}
}

// relay copies every connection ln accepts to and from to, until ln is
// closed.
func relay(ln net.Listener, to string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.Dial("tcp", to)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(c, up)
		}()
	}
}

// serve waits for an unreachable database as long as --db-wait says,
// trying once more at its end, before it gives up (it gave up as soon as
// its next backoff would pass the end: after 1.8 s of 3 s).
func TestServeWaitsTheWholeDBWait(t *testing.T) {
	nobody := "postgres://postgres@" + freeAddr(t) + "/test?sslmode=disable" // refused: nothing listens
	const wait = 3 * time.Second
	start := time.Now()
	code, _, errOut := runInProcess(t, "serve", "--addr", freeAddr(t), "--db", nobody, "--db-wait", wait.String())
	took := time.Since(start)
	if code == 0 || took < wait || took > wait+time.Minute {
		t.Fatalf("serve on a database nobody answers with --db-wait %v: exit %d after %v, %q; want a failure after %v", wait, code, took, errOut, wait)
	}
	if n := strings.Count(errOut, "the database cannot be reached yet: trying again"); n < 3 {
		t.Errorf("serve said %d times that it tries again, want one for each try before the last: %q", n, errOut)
	}
}
