package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwatch/jobwatch/store"
)

// health is store.WriteHealth over this store's writes. Only writes are
// tracked: a full disk or a read-only file fails them alone, so reads
// that still work must not end an episode, and an unreadable file fails
// writes too (the engine's sweep writes every second). A transaction
// that changed nothing, such as a retention sweep with nothing to delete,
// commits even on a full disk, so it proves nothing: only a commit that
// changed rows ends an episode.
//
// While an episode is on the store is not Reachable, so gRPC health says
// NOT_SERVING and a load balancer that follows it sends no more writes:
// the episode must end without them. So from its first refused write
// until it ends, probe makes one harmless write every probeEvery (a
// probe's failures are not counted as refused writes, and log nothing).
type health struct {
	log      *slog.Logger
	episodes store.WriteHealth
	// probe makes one harmless write through the writer (probeWrite);
	// closing ends the probing at Close. Until both are set (Open sets
	// them once the store can write), nothing probes.
	probe   func(context.Context) error
	closing context.Context
	stop    context.CancelFunc // ends closing

	mu      sync.Mutex // orders startProbing with close
	probing bool
	probes  sync.WaitGroup
	// probed counts the probes made, for tests.
	probed atomic.Int64
}

// probeEvery is how often a store whose writes are refused tries one.
const probeEvery = time.Second

// observe records the outcome of one write; wrote says whether it
// committed changed rows.
func (h *health) observe(err error, wrote bool) {
	if err == nil && !wrote {
		return
	}
	h.episodes.Observe(h.log, err)
	if err != nil && h.episodes.Failing() {
		h.startProbing()
	}
}

// isFailing reports whether an episode is on: only then does a commit
// need to tell whether it changed rows.
func (h *health) isFailing() bool { return h.episodes.Failing() }

// startProbing starts probeWrites unless it runs or the store is closing.
func (h *health) startProbing() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probing || h.probe == nil || h.closing.Err() != nil {
		return
	}
	h.probing = true
	h.probes.Add(1)
	go h.probeWrites()
}

// probeWrites probes every probeEvery until the episode ends (the
// probe's own commit, or any other write's, ends it: writeTx observes
// every write) or the store closes.
func (h *health) probeWrites() {
	defer h.probes.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-h.closing.Done():
		case <-t.C:
		}
		h.mu.Lock()
		if h.closing.Err() != nil || !h.episodes.Failing() {
			h.probing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		_ = h.probe(h.closing) // its outcome reaches observe through the writer
		h.probed.Add(1)
	}
}

// close ends the probing, and returns once no probe runs.
func (h *health) close() {
	if h.stop == nil {
		return
	}
	h.mu.Lock()
	h.stop()
	h.mu.Unlock()
	h.probes.Wait()
}

// Reachable reports whether the database file takes this store's writes,
// as far as the store has seen: false from the first write refused
// unavailable (a full disk, a read-only file or file system, another
// process holding the write lock past Config.LockTimeout) until a write
// commits changed rows again. While it is false the store makes a
// harmless write every probeEvery, so it turns true again though no
// caller writes. The server's gRPC health follows it (jobs.Engine's
// StoreReachable).
func (s *Store) Reachable() bool { return !s.writes.isFailing() }

// probeKey is the key of the row a probe writes and deletes: longer than
// a page, so that writing it needs new pages, as a submitted job does,
// and a full disk refuses it as it refuses a submit. (A write that only
// rewrites a page already in the file may commit on a full disk.)
var probeKey = "jobwatch write probe " + strings.Repeat("-", 5000)

// writeProbe writes a row and deletes it in tx: a real write, to
// job_releases, which is empty between batches (drainReleases empties it
// in each), and which the probe leaves as it found it.
func writeProbe(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, "INSERT INTO job_releases (job_id) VALUES (?)", probeKey); err != nil {
		return fmt.Errorf("write a row: %w", classify(err))
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM job_releases WHERE job_id = ?", probeKey); err != nil {
		return fmt.Errorf("delete the row written: %w", classify(err))
	}
	return nil
}

// probeWrite commits writeProbe through the writer, as a write of its
// own: its commit changed rows, so it ends an episode of refused writes.
func (s *Store) probeWrite(ctx context.Context) error {
	return s.submit(&writeRequest{ctx: ctx, what: "probe writes", fn: writeProbe, probe: true, done: make(chan struct{})})
}

// probeOpen commits writeProbe on the writer connection before the
// writer starts, so that Open refuses a file it could not write.
func (s *Store) probeOpen(ctx context.Context) error {
	conn, tx, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("probe writes: %w", err)
	}
	defer conn.Close()
	if err := writeProbe(ctx, tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("probe writes: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("probe writes: commit: %w", classify(err))
	}
	return nil
}
