package postgres

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwatch/jobwatch/internal/pgtest"
	"github.com/jobwatch/jobwatch/jobtype"
	"github.com/jobwatch/jobwatch/store"
)

// A database that refuses the pool one more connection (too many
// connections: the replicas' pools outgrew max_connections, or here the
// role's connection limit) still takes the writes of a replica that
// holds some: they wait for one of its connections to come free, and
// the store stays reachable, where each such write failed unavailable
// and health said NOT_SERVING as though the database were down.
func TestWritesWaitForThePoolsConnectionsWhenTheDatabaseRefusesMore(t *testing.T) {
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("search_path")
	role := "jw_crowded_" + schema[len("jw_"):]
	admin, err := pgx.Connect(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// Four connections for the role: the listener's, the notifier's, and
	// two for a pool that would open eight.
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN CONNECTION LIMIT 4",
		"GRANT ALL ON SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(t.Context(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(ctx)
		for _, stmt := range []string{"DROP OWNED BY " + role + " CASCADE", "DROP ROLE " + role} {
			if _, err := c.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	u.User = url.User(role)
	q := u.Query()
	q.Set("pool_max_conns", "8")
	u.RawQuery = q.Encode()
	s := openURL(t, u.String())

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const writes = 40
	errs := make(chan error, writes)
	var wg sync.WaitGroup
	for i := range writes {
		wg.Go(func() {
			j := job(fmt.Sprintf("crowded-%d", i), "default", i)
			_, err := s.CreateJob(ctx, j)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Errorf("a write while the database refused more connections: %v", err)
		}
	}
	if failed == 0 && !s.Reachable() {
		t.Error("the store says the database cannot be reached, where every write went through")
	}
	var n int
	if err := admin.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".jobs").Scan(&n); err != nil || n != writes {
		t.Fatalf("%d jobs in the table (%v), want %d", n, err, writes)
	}

	// Reads, and writes that read the job first (an update), wait the
	// same way.
	errs = make(chan error, 3*writes)
	for i := range writes {
		id := fmt.Sprintf("crowded-%d", i)
		wg.Go(func() {
			_, err := s.GetJob(ctx, id)
			errs <- err
		})
		wg.Go(func() {
			_, _, err := s.ListJobs(ctx, store.ListFilter{Tenant: "acme", Limit: 5})
			errs <- err
		})
		wg.Go(func() {
			_, err := s.UpdateJob(ctx, id, func(j *jobtype.Job) error {
				j.Step = "looked at"
				j.Version++
				return nil
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a read or an update while the database refused more connections: %v", err)
		}
	}
}

// The pool is DefaultMaxConns connections, whatever the machine's CPUs,
// and closes a connection idle for DefaultMaxConnIdleTime, unless the URL
// says otherwise.
func TestThePoolsSizeAndIdleTimeAreTheDocumentedOnes(t *testing.T) {
	base := pgtest.URL(t)
	s := openURL(t, base)
	if c := s.pool.Config(); c.MaxConns != DefaultMaxConns || c.MaxConnIdleTime != DefaultMaxConnIdleTime || c.HealthCheckPeriod != idleCheckEvery {
		t.Errorf("without settings in the URL the pool is %d connections idle at most %v, looked at every %v; want %d, %v and %v",
			c.MaxConns, c.MaxConnIdleTime, c.HealthCheckPeriod, DefaultMaxConns, DefaultMaxConnIdleTime, idleCheckEvery)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "3")
	q.Set("pool_max_conn_idle_time", "10m")
	u.RawQuery = q.Encode()
	s = openURL(t, u.String())
	if c := s.pool.Config(); c.MaxConns != 3 || c.MaxConnIdleTime != 10*time.Minute {
		t.Errorf("with pool_max_conns=3 and pool_max_conn_idle_time=10m the pool is %d connections idle at most %v", c.MaxConns, c.MaxConnIdleTime)
	}
}
