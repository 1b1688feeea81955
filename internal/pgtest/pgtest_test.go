package pgtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestURLIsAFreshSchemaFirstInTheSearchPath(t *testing.T) {
	u := URL(t)
	conn, err := pgx.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var schema string
	var tables int
	if err := conn.QueryRow(t.Context(), "SELECT current_schema(), (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())").Scan(&schema, &tables); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(schema, "jw_") || tables != 0 {
		t.Errorf("current schema %q with %d tables, want a new empty jw_ schema", schema, tables)
	}
	if u2 := URL(t); u2 == u {
		t.Errorf("two calls gave the same URL %s", u)
	}
}

func TestThrowawayClusterStartsAndStops(t *testing.T) {
	if _, err := exec.LookPath("initdb"); err != nil {
		t.Skip("no initdb")
	}
	c, err := startCluster()
	if err != nil {
		t.Fatalf("start a throwaway cluster: %v", err)
	}
	if err := ping(c.url); err != nil {
		c.stop()
		t.Fatalf("the cluster does not answer: %v", err)
	}
	c.stop()
	if err := ping(c.url); err == nil {
		t.Error("the cluster still answers after stop")
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("its directory %s is still there (%v)", c.dir, err)
	}
}
