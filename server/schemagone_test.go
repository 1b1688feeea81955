package server_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/jackc/pgx/v5"

	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/internal/testdb"
)

// PostgreSQL: jobwatch's schema dropped under a running server
// (DROP SCHEMA … CASCADE) makes every call unavailable, which callers
// retry, not internal, which they take for a bug, and logs no "internal
// error" per call; health says NOT_SERVING.
func TestASchemaDroppedUnderTheServerIsUnavailableNotInternal(t *testing.T) {
	if testdb.Backend() != "postgres" {
		t.Skip("PostgreSQL only: JOBWATCH_TEST_BACKEND=postgres")
	}
	db := testdb.New(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	if schema == "" {
		t.Fatalf("the test database %s names no schema", db)
	}
	ts := startServer(t, serverOptions{dbPath: db})
	c := ts.h2c()
	job := submit(t, c, &jobwatchv1.SubmitJobRequest{Kind: "k"})

	exec := func(sql string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec("DROP SCHEMA " + pgx.Identifier{schema}.Sanitize() + " CASCADE")
	// The test database's own cleanup drops the schema again.
	t.Cleanup(func() { exec("CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize()) })

	_, err = c.jobs.GetJob(ctxTimeout(t, callBound), &jobwatchv1.GetJobRequest{JobId: job.GetId()})
	wantCode(t, err, connect.CodeUnavailable)
	_, err = c.jobs.SubmitJob(ctxTimeout(t, callBound), &jobwatchv1.SubmitJobRequest{Kind: "k"})
	wantCode(t, err, connect.CodeUnavailable)
	_, err = c.jobs.ListJobs(ctxTimeout(t, callBound), &jobwatchv1.ListJobsRequest{})
	wantCode(t, err, connect.CodeUnavailable)
	if logs := ts.logs.String(); strings.Contains(logs, "internal error") {
		t.Errorf("a call on a dropped schema logged an internal error:\n%s", logs)
	}

	health := grpchealth.NewClient(ts.h2cClient(), ts.url)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := health.Check(ctxTimeout(t, 5*time.Second), &grpchealth.CheckRequest{})
		if err == nil && resp.Status == grpchealth.StatusNotServing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health = %v, %v 10 s after the schema was dropped; want NOT_SERVING", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
