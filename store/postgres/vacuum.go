package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// vacuumCheckEvery is how many jobs claimed through a Store make its
	// vacuumer look at the jobs table's dead rows.
	vacuumCheckEvery = 10_000
	// vacuumDeadRows is how many dead rows of the jobs table make the
	// vacuumer vacuum it: a claimed and completed job leaves two, so
	// about every 50,000 jobs, as the burn-down measured.
	vacuumDeadRows = 100_000
	// analyzeChangedRows is how many rows inserted, updated or deleted
	// since the last ANALYZE make the vacuumer analyze the jobs table,
	// and only once they are a fifth of its rows or more.
	analyzeChangedRows = 100_000
)

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
// Nor are its statistics brought up to date: the planner goes on
// planning for the table it last analyzed, and a list of the queued jobs
// behind a million inserted since took one to two seconds (it sorted them
// all) where, analyzed, it takes half a millisecond.
//
// So where it is off, after every vacuumCheckEvery jobs claimed,
// created or deleted by retention through this Store, its vacuumer reads the table's dead and
// changed rows from PostgreSQL's statistics (which count every replica's
// writes) and, past vacuumDeadRows dead rows, runs VACUUM on the table,
// in the background, on a connection of the pool; past
// analyzeChangedRows changed rows, and a fifth of the table, ANALYZE (with
// the VACUUM if both are due). It skips its turn while anything else holds a
// lock VACUUM would wait for (SKIP_LOCKED), such as another replica's
// vacuum; so however many replicas claim, the table is vacuumed about
// once per vacuumDeadRows dead rows. Claims go on meanwhile: VACUUM takes
// no lock they wait for. In that burn-down, with a VACUUM after about
// every 50,000 jobs (one second each), the million went at 1.9 times the
// rate.
type vacuumer struct {
	off      bool          // autovacuum does not vacuum the jobs table
	every    int64         // vacuumCheckEvery, but in tests
	dead     int64         // vacuumDeadRows, but in tests
	changed  int64         // analyzeChangedRows, but in tests
	written  atomic.Int64  // jobs claimed or created since the last signal
	now      chan struct{} // a look is due
	checks   atomic.Int64  // looks at the dead rows, for tests
	done     atomic.Int64  // vacuums run, for tests
	analyzed atomic.Int64  // ANALYZEs run (alone or with a VACUUM), for tests
}

// wrote counts n jobs claimed, created or deleted by retention through
// the Store and signals a look when vacuumCheckEvery were.
func (v *vacuumer) wrote(n int) {
	if !v.off || v.written.Add(int64(n)) < v.every {
		return
	}
	v.written.Store(0)
	select {
	case v.now <- struct{}{}:
	default: // one is due already
	}
}

// deadRowsSQL is how many dead rows the jobs table has, as PostgreSQL's
// statistics count them (a second or so behind the writes).
const deadRowsSQL = `SELECT coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass), 0)`

// tableRowsSQL is deadRowsSQL, and the rows changed since the last
// ANALYZE and the live rows, as the statistics count them.
const tableRowsSQL = `SELECT coalesce(n_dead_tup, 0), coalesce(n_mod_since_analyze, 0), coalesce(n_live_tup, 0)
	FROM (SELECT 1) AS one LEFT JOIN pg_stat_user_tables ON relid = 'jobs'::regclass`

// autovacuumOffSQL says whether autovacuum leaves the jobs table alone.
const autovacuumOffSQL = `SELECT NOT current_setting('autovacuum')::bool OR coalesce((
		SELECT NOT option_value::bool FROM pg_options_to_table(
			(SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass))
		WHERE option_name = 'autovacuum_enabled'), false)`

// startVacuumer reads whether autovacuum vacuums the jobs table and, if
// not, says so once and starts the vacuumer, which stops when the Store
// closes.
func (s *Store) startVacuumer(ctx context.Context) error {
	s.vacuum.now, s.vacuum.every, s.vacuum.dead, s.vacuum.changed = make(chan struct{}, 1), vacuumCheckEvery, vacuumDeadRows, analyzeChangedRows
	if err := s.pool.QueryRow(ctx, autovacuumOffSQL).Scan(&s.vacuum.off); err != nil {
		return classify(err)
	}
	if !s.vacuum.off {
		return nil
	}
	s.log.Info("postgres: autovacuum is off for the jobs table; jobwatch vacuums and analyzes it itself as its rows change",
		"schema", s.schema, "vacuum_after_dead_rows", vacuumDeadRows, "analyze_after_changed_rows", analyzeChangedRows)
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

// vacuumJobs vacuums the jobs table if it has vacuum.dead dead rows or
// more, and analyzes it if vacuum.changed rows or more, and a fifth of
// it, changed since it was last analyzed; unless something else is
// vacuuming or analyzing it.
func (s *Store) vacuumJobs(ctx context.Context) {
	var dead, changed, live int64
	err := s.pool.QueryRow(ctx, tableRowsSQL).Scan(&dead, &changed, &live)
	s.vacuum.checks.Add(1)
	if err != nil {
		return // closing, or the database is away: the next signal looks again
	}
	vacuum, analyze := dead >= s.vacuum.dead, changed >= s.vacuum.changed && changed*5 >= live
	var command string
	switch {
	case vacuum && analyze:
		command = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, ANALYZE) "
	case vacuum:
		// INDEX_CLEANUP ON: the dead index entries are what the claims
		// step over, and VACUUM might leave them where few of the
		// table's pages hold dead rows, as in a deep queue burned down
		// from its head.
		command = "VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) "
	case analyze:
		command = "ANALYZE (SKIP_LOCKED) "
	default:
		return // nothing to do: the next signal looks again
	}
	t0 := time.Now()
	_, err = s.pool.Exec(ctx, command+pgx.Identifier{s.schema, "jobs"}.Sanitize(), pgx.QueryExecModeSimpleProtocol)
	level := slog.LevelDebug
	if err != nil && ctx.Err() == nil {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "postgres: "+strings.TrimSpace(command)+" the jobs table", "dead_rows", dead, "changed_rows", changed,
		"took", time.Since(t0).Round(time.Millisecond), "err", err)
	if vacuum {
		s.vacuum.done.Add(1)
	}
	if analyze {
		s.vacuum.analyzed.Add(1)
	}
}
