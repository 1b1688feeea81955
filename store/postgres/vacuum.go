package postgres

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// vacuumEvery is how many jobs claimed through a Store make its vacuumer
// vacuum the jobs table, where autovacuum is off.
const vacuumEvery = 50_000

// vacuumer vacuums the jobs table where PostgreSQL's autovacuum does not.
//
// A claim moves a job's row out of the queued jobs' partial indexes, but
// PostgreSQL keeps the old row's entries in them until VACUUM removes
// them. They sit at the head of the indexes a claim seeks, in the order
// the jobs were claimed, so every claim steps over the entries of every
// job claimed since the last vacuum. Autovacuum keeps that short; on a
// server where it is off (autovacuum = off, or the jobs table's
// autovacuum_enabled = false), a burn-down of a million jobs made each
// claim of about 50 read some 4,600 pages of such entries by the time
// most were done (docs/BENCHMARKS.md, "Depth").
//
// So where it is off, once vacuumEvery jobs were claimed through this
// Store, its vacuumer runs VACUUM on the jobs table, in the background,
// on a connection of the pool, as one replica at a time (a session
// advisory lock: a replica that finds another's vacuum running skips
// its own), and not while anything else holds a lock VACUUM would wait
// for (SKIP_LOCKED). Claims go on meanwhile: VACUUM takes no lock they
// wait for. In that burn-down, with a VACUUM after about every 50,000
// jobs (one second each), the million went at 1.9 times the rate.
type vacuumer struct {
	off     bool          // autovacuum does not vacuum the jobs table
	every   int64         // vacuumEvery, but in tests
	claimed atomic.Int64  // jobs claimed since the last signal
	now     chan struct{} // a vacuum is due
	done    atomic.Int64  // vacuums run, for tests
}

// claimedJobs counts n jobs claimed through the Store and signals a
// vacuum when vacuumEvery were.
func (v *vacuumer) claimedJobs(n int) {
	if !v.off || v.claimed.Add(int64(n)) < v.every {
		return
	}
	v.claimed.Store(0)
	select {
	case v.now <- struct{}{}:
	default: // one is due already
	}
}

// autovacuumOffSQL says whether autovacuum leaves the jobs table alone.
const autovacuumOffSQL = `SELECT NOT current_setting('autovacuum')::bool OR coalesce((
		SELECT NOT option_value::bool FROM pg_options_to_table(
			(SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass))
		WHERE option_name = 'autovacuum_enabled'), false)`

// startVacuumer reads whether autovacuum vacuums the jobs table and, if
// not, says so once and starts the vacuumer, which stops when the Store
// closes.
func (s *Store) startVacuumer(ctx context.Context) error {
	s.vacuum.now, s.vacuum.every = make(chan struct{}, 1), vacuumEvery
	if err := s.pool.QueryRow(ctx, autovacuumOffSQL).Scan(&s.vacuum.off); err != nil {
		return classify(err)
	}
	if !s.vacuum.off {
		return nil
	}
	s.log.Info("postgres: autovacuum is off for the jobs table; jobwatch vacuums it itself after every so many claimed jobs",
		"schema", s.schema, "claimed_jobs", vacuumEvery)
	s.listeners.Go(func() {
		for {
			select {
			case <-s.closing.Done():
				return
			case <-s.vacuum.now:
				s.vacuumJobs(s.closing)
			}
		}
	})
	return nil
}

// vacuumJobs vacuums the jobs table unless another replica's vacuumer is
// doing it.
func (s *Store) vacuumJobs(ctx context.Context) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return // closing, or the database is away: the next signal tries again
	}
	defer conn.Release()
	key := lockKey(s.schema, "vacuum", "jobs")
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil || !got {
		return
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) // the lock goes with the session
		}
	}()
	t0 := time.Now()
	_, err = conn.Exec(ctx, "VACUUM (SKIP_LOCKED) "+pgx.Identifier{s.schema, "jobs"}.Sanitize(), pgx.QueryExecModeSimpleProtocol)
	level := slog.LevelDebug
	if err != nil && ctx.Err() == nil {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "postgres: vacuumed the jobs table", "took", time.Since(t0).Round(time.Millisecond), "err", err)
	s.vacuum.done.Add(1)
}
