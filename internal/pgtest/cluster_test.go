package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestAClusterStopsStartsAgainWithItsDataAndCutsConnections(t *testing.T) {
	cl := NewCluster(t)
	u := cl.URL(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}

	if n := cl.TerminateBackends(t); n < 1 {
		t.Errorf("TerminateBackends ended %d connections, want the test's own at least", n)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("a terminated connection still answers")
	}
	conn.Close(context.Background())

	cl.Stop(t)
	if err := ping(u); err == nil {
		t.Fatal("the cluster answers after Stop")
	}
	cl.Start(t)
	conn, err = pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("the cluster does not answer after Start: %v\n%s", err, cl.Log())
	}
	defer conn.Close(context.Background())
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Errorf("after an immediate stop and a start the committed row reads %d, %v; want 42", v, err)
	}
}
