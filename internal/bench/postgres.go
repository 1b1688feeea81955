package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchReplicas is how many serve processes share one PostgreSQL schema
// in the many-replica throughput run.
const benchReplicas = 3

// postgresFigures are jobwatch's figures on PostgreSQL (--postgres),
// measured in the same run as its SQLite ones.
type postgresFigures struct {
	// End-to-end jobs/s of throughput-rpc with one serve process, and
	// with benchReplicas of them, submits and workers spread round-robin.
	ThroughputRPC1PerS *float64 `json:"throughput_rpc_1_replica_per_s,omitempty"`
	ThroughputRPCNPerS *float64 `json:"throughput_rpc_3_replicas_per_s,omitempty"`
	// The wakeup scenario with the observers on the worker's replica,
	// and on another replica than the worker's.
	Wakeup      *wakeupFigures `json:"wakeup_1_replica,omitempty"`
	WakeupCross *wakeupFigures `json:"wakeup_cross_replica,omitempty"`
}

// checkPostgresURL refuses what --postgres cannot be: it must be a URL,
// since the bench adds its own schema to it as search_path.
func (c CLI) checkPostgresURL(s string) error {
	if s == "" {
		return nil
	}
	// The prefixes by which serve's --db tells a URL from a SQLite file.
	if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
		return c.usageError("--postgres must be a postgres:// or postgresql:// URL")
	}
	if _, err := url.Parse(s); err != nil {
		return c.usageError("--postgres: not a URL") // the URL may hold a password: not repeated
	}
	return nil
}

// benchSchemaPrefix begins the name of every schema the bench creates;
// a test that shares its database with other runs narrows it to its own.
var benchSchemaPrefix = "jobwatch_bench_"

// postgresSchema creates a schema of its own (benchSchemaPrefix and
// random hex) in the database at base and returns base with that schema as its
// search_path, and drop, which drops the schema with everything in it.
// The bench touches nothing else in the database.
func postgresSchema(ctx context.Context, base string) (schemaURL string, drop func() error, err error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, errors.New("--postgres: not a URL")
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := benchSchemaPrefix + hex.EncodeToString(b)
	// Parsed as the pool of serve parses it, so that pool settings in
	// the URL (pool_max_conns) are not sent to the server as parameters.
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return "", nil, errors.New("--postgres: not a connection URL pgx takes")
	}
	exec := func(ctx context.Context, sql string) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
		if err != nil {
			return fmt.Errorf("connect to --postgres: %w", err)
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", schema, err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends it as a run-time setting of every connection
	u.RawQuery = q.Encode()
	drop = func() error {
		if err := exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

// startReplicas starts n processes of srv sharing a fresh schema of the
// --postgres database, one after another so that the first migrates it.
// stop ends them and drops the schema.
func (b *benchRun) startReplicas(ctx context.Context, srv benchServer, scenario string, n int) (procs []*serverProc, stop func() error, err error) {
	dbURL, drop, err := postgresSchema(ctx, b.o.postgres)
	if err != nil {
		return nil, nil, err
	}
	stop = func() error {
		for _, p := range procs {
			p.stop()
		}
		return drop()
	}
	opts := b.serverOptions(scenario)
	opts.dbURL = dbURL
	for range n {
		p, err := startServer(ctx, srv, b.dir, opts)
		if err != nil {
			return nil, nil, errors.Join(err, stop())
		}
		procs = append(procs, p)
	}
	return procs, stop, nil
}

// throughputPostgres runs throughput-rpc against replicas processes of
// srv on one fresh PostgreSQL schema.
func (b *benchRun) throughputPostgres(ctx context.Context, srv benchServer, replicas int) (rate float64, err error) {
	procs, stop, err := b.startReplicas(ctx, srv, "throughput", replicas)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	return b.throughputOver(ctx, procs)
}

// wakeupPostgres runs the wakeup scenario on a fresh PostgreSQL schema:
// with cross, the observers call one replica while the worker submits,
// claims and completes on another, so every wake-up crosses replicas
// through the database's notifications.
func (b *benchRun) wakeupPostgres(ctx context.Context, srv benchServer, cross bool) (w *wakeupFigures, err error) {
	n := 1
	if cross {
		n = 2
	}
	procs, stop, err := b.startReplicas(ctx, srv, "wakeup", n)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()
	return b.wakeupOver(ctx, procs[0], procs[n-1])
}

// postgresRows runs scenario's PostgreSQL variants for srv into f.
func (b *benchRun) postgresRows(ctx context.Context, scenario string, srv benchServer, f *postgresFigures) error {
	switch scenario {
	case "throughput-rpc":
		b.progress("throughput-rpc: %s on PostgreSQL, 1 replica", srv.name)
		one, err := b.throughputPostgres(ctx, srv, 1)
		if err != nil {
			return fmt.Errorf("PostgreSQL, 1 replica: %w", err)
		}
		f.ThroughputRPC1PerS = &one
		b.progress("throughput-rpc: %s on PostgreSQL, %d replicas", srv.name, benchReplicas)
		many, err := b.throughputPostgres(ctx, srv, benchReplicas)
		if err != nil {
			return fmt.Errorf("PostgreSQL, %d replicas: %w", benchReplicas, err)
		}
		f.ThroughputRPCNPerS = &many
	case "wakeup":
		b.progress("wakeup: %s on PostgreSQL, 1 replica", srv.name)
		w, err := b.wakeupPostgres(ctx, srv, false)
		if err != nil {
			return fmt.Errorf("PostgreSQL, 1 replica: %w", err)
		}
		f.Wakeup = w
		b.progress("wakeup: %s on PostgreSQL, observers on another replica than the worker's", srv.name)
		if f.WakeupCross, err = b.wakeupPostgres(ctx, srv, true); err != nil {
			return fmt.Errorf("PostgreSQL, across replicas: %w", err)
		}
	}
	return nil
}
