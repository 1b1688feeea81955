package server_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/store/sqlite"
)

// TestHealthFollowsRefusedWritesOnSQLite: while the SQLite file refuses
// writes (here another process holds its write lock past the lock
// timeout; a full disk and a read-only file are store/sqlite's tests),
// gRPC health says NOT_SERVING from the first refused write, and SERVING
// again once the file takes writes, though no caller writes meanwhile:
// a load balancer that follows health sends none. /metrics'
// jobwatch_store_reachable follows it.
func TestHealthFollowsRefusedWritesOnSQLite(t *testing.T) {
	ts := startServer(t, serverOptions{storeConfig: sqlite.Config{LockTimeout: 200 * time.Millisecond}})
	c := ts.h2c()
	health := grpchealth.NewClient(ts.h2cClient(), ts.url, connect.WithGRPC())
	// waitForHealth waits until health of every service is want, and
	// then checks that GET /healthz says so in its status and body.
	waitForHealth := func(want grpchealth.Status) {
		t.Helper()
		deadline := time.Now().Add(callBound)
		for {
			resp, err := health.Check(ctxTimeout(t, 5*time.Second), &grpchealth.CheckRequest{})
			if err == nil && resp.Status == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("health = %v, %v after %v; want %v", resp, err, callBound, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		code, text := http.StatusOK, "SERVING"
		if want != grpchealth.StatusServing {
			code, text = http.StatusServiceUnavailable, "NOT_SERVING"
		}
		resp, err := http.Get(ts.url + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code || strings.TrimSpace(string(body)) != text {
			t.Fatalf("GET /healthz while health is %v: %d %q, want %d %s", want, resp.StatusCode, body, code, text)
		}
		// /metrics says it too, for an alert.
		gauge := "jobwatch_store_reachable 1\n"
		if want != grpchealth.StatusServing {
			gauge = "jobwatch_store_reachable 0\n"
		}
		if status, metrics := scrape(t, http.DefaultClient, ts.url); status != http.StatusOK || !strings.Contains(metrics, gauge) {
			t.Fatalf("GET /metrics while health is %v: %d, without %q", want, status, strings.TrimSpace(gauge))
		}
	}
	waitForHealth(grpchealth.StatusServing)

	other, err := sql.Open("sqlite3", ts.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	_, err = c.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "refused"})
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("submit while the file is locked: %v, want unavailable", err)
	}
	waitForHealth(grpchealth.StatusNotServing)

	if _, err := lock.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	waitForHealth(grpchealth.StatusServing)
	if _, err := c.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "accepted"}); err != nil {
		t.Fatalf("submit once health is SERVING again: %v", err)
	}
}
