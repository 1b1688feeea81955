// Command riverbench burns down a backlog of no-op jobs with River, in
// the shape of jobwatch's `bench --scenarios burndown` (in process), so
// that the two can be measured side by side on one machine:
//
//	cd tools/riverbench
//	go run . --postgres 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --depths 2000,20000
//
// For each depth of --depths, on a fresh database (a schema of its own on
// PostgreSQL, dropped afterwards; a new file on SQLite), --submitters
// goroutines insert that many jobs (one Insert each on PostgreSQL, or
// InsertMany of --fill-batch; InsertMany of 1,000 on SQLite, whose one
// connection would take minutes one at a time), then a River client with --workers MaxWorkers on one
// queue, River's own benchmark settings (FetchCooldown 2 ms,
// FetchPollInterval 20 ms) and its default completer works them off.
// The figure is the depth over the time from Start until the last
// EventKindJobCompleted, the same as jobwatch's from the workers' start
// to the last acknowledged completion. SQLite runs through
// modernc.org/sqlite with synchronous=FULL, as jobwatch's store does.
//
// It is a module of its own so that jobwatch never depends on River.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type options struct {
	postgres   string
	sqlite     bool
	depths     []int
	workers    int
	submitters int
	limit      time.Duration
	priorities int // 1 to 4: jobs at 1 + i mod priorities
	fillBatch  int // jobs an insert takes on PostgreSQL
}

// priority is the River priority of a submitter's i-th job.
func (o options) priority(i int) int { return 1 + i%o.priorities }

func main() {
	var o options
	var depths string
	flag.StringVar(&o.postgres, "postgres", "", "PostgreSQL `URL` to run on (a schema of its own per run)")
	flag.BoolVar(&o.sqlite, "sqlite", true, "also run on SQLite (a file in a temporary directory)")
	flag.StringVar(&depths, "depths", "2000,20000,200000", "comma-separated `counts` of queued jobs to burn down")
	flag.IntVar(&o.workers, "workers", 100, "River MaxWorkers of the one queue")
	flag.IntVar(&o.submitters, "submitters", 8, "goroutines inserting jobs")
	flag.DurationVar(&o.limit, "cap", 5*time.Minute, "longest a burn-down may take; the rate of the part done is reported")
	flag.IntVar(&o.fillBatch, "fill-batch", 1, "jobs each insert takes on PostgreSQL: 1 is one Insert a job, River's own shape; more, one InsertMany of that many (a million one at a time take minutes; the inserts are not measured)")
	flag.IntVar(&o.priorities, "priorities", 1, "River priorities the jobs take, interleaved job by job: 1 puts every job at priority 1, 4 puts a submitter's i-th job at 1 + i mod 4 (River has 1 to 4)")
	flag.Parse()
	for _, d := range strings.Split(depths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "riverbench: bad depth %q\n", d)
			os.Exit(2)
		}
		o.depths = append(o.depths, n)
	}
	if o.priorities < 1 || o.priorities > 4 {
		fmt.Fprintf(os.Stderr, "riverbench: --priorities must be 1 to 4, got %d\n", o.priorities)
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	fmt.Println("store\tqueued\tinserts/s\tjobs/s")
	for _, depth := range o.depths {
		if o.sqlite {
			ins, rate, err := onSQLite(ctx, o, depth)
			if err != nil {
				return fmt.Errorf("sqlite, %d: %w", depth, err)
			}
			fmt.Printf("River SQLite\t%d\t%.0f\t%.0f\n", depth, ins, rate)
		}
		if o.postgres != "" {
			ins, rate, err := onPostgres(ctx, o, depth)
			if err != nil {
				return fmt.Errorf("postgres, %d: %w", depth, err)
			}
			fmt.Printf("River PostgreSQL\t%d\t%.0f\t%.0f\n", depth, ins, rate)
		}
	}
	return nil
}

func onPostgres(ctx context.Context, o options, depth int) (inserts, rate float64, err error) {
	schema := fmt.Sprintf("riverbench_%d_%d", os.Getpid(), depth)
	admin, err := pgx.Connect(ctx, o.postgres)
	if err != nil {
		return 0, 0, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return 0, 0, err
	}
	defer func() {
		_, dropErr := admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
		err = errors.Join(err, dropErr)
	}()
	cfg, err := pgxpool.ParseConfig(o.postgres)
	if err != nil {
		return 0, 0, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: quiet()})
	if err != nil {
		return 0, 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, 0, err
	}
	client, err := newClient(driver, o, schema)
	if err != nil {
		return 0, 0, err
	}
	inserts, err = fill(ctx, o.submitters, depth, func(ctx context.Context, n int) error {
		if o.fillBatch > 1 {
			return insertMany(ctx, client, o, n, o.fillBatch)
		}
		for i := range n {
			if _, err := client.Insert(ctx, noopArgs{}, &river.InsertOpts{Priority: o.priority(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	rate, err = burn(ctx, client, depth, o.limit)
	return inserts, rate, err
}

func onSQLite(ctx context.Context, o options, depth int) (inserts, rate float64, err error) {
	dir, err := os.MkdirTemp("", "riverbench")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "river.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // River's SQLite driver wants one connection
	driver := riversqlite.New(db)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quiet()})
	if err != nil {
		return 0, 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, 0, err
	}
	client, err := newClient(driver, o, "")
	if err != nil {
		return 0, 0, err
	}
	inserts, err = fill(ctx, o.submitters, depth, func(ctx context.Context, n int) error {
		return insertMany(ctx, client, o, n, 1000)
	})
	if err != nil {
		return 0, 0, err
	}
	rate, err = burn(ctx, client, depth, o.limit)
	return inserts, rate, err
}

func newClient[TTx any](driver riverdriver.Driver[TTx], o options, schema string) (*river.Client[TTx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	return river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Workers:           workers,
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Schema:            schema,
		Logger:            quiet(),
	})
}

// fill runs insert from submitters goroutines, depth jobs in all, and
// returns the rate.
func fill(ctx context.Context, submitters, depth int, insert func(context.Context, int) error) (float64, error) {
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, submitters)
	for i := range submitters {
		n := depth / submitters
		if i < depth%submitters {
			n++
		}
		wg.Go(func() { errs[i] = insert(ctx, n) })
	}
	wg.Wait()
	return float64(depth) / time.Since(t0).Seconds(), errors.Join(errs...)
}

// burn starts client and waits for depth completions, or for limit.
func burn[TTx any](ctx context.Context, client *river.Client[TTx], depth int, limit time.Duration) (float64, error) {
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: depth + 1000,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	var done atomic.Int64
	t0 := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer stop()
		_ = client.Stop(stopCtx)
	}()
	timeout := time.NewTimer(limit)
	defer timeout.Stop()
	end := t0
	for done.Load() < int64(depth) {
		select {
		case <-events:
			done.Add(1)
			end = time.Now()
		case <-timeout.C:
			fmt.Fprintf(os.Stderr, "riverbench: --cap passed with %d of %d done\n", done.Load(), depth)
			return float64(done.Load()) / time.Since(t0).Seconds(), nil
		}
	}
	return float64(depth) / end.Sub(t0).Seconds(), nil
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// insertMany inserts a submitter's n jobs, size to an InsertMany.
func insertMany[TTx any](ctx context.Context, client *river.Client[TTx], o options, n, size int) error {
	for n > 0 {
		batch := make([]river.InsertManyParams, min(n, size))
		for i := range batch {
			batch[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Priority: o.priority(n - i)}}
		}
		if _, err := client.InsertMany(ctx, batch); err != nil {
			return err
		}
		n -= len(batch)
	}
	return nil
}
