package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Callers' writes (submits, batches, cancels, retries, deletes, and the
// bulk actions, which are those one job at a time) take turns by writer,
// as their reads do by reader (fairreads.go): the caller's tenant for a
// client token, its token otherwise (WithReader). A store commits writes in the order they come
// (SQLite's one writer; PostgreSQL's pool), so one tenant's burst of
// SubmitJobs queued ahead of every other tenant's write: an outside
// probe's 64 concurrent SubmitJobs of 1,000 kept another tenant's single
// submit waiting 2.8 s at the median, and 160 of them had it refused
// once the store's lock wait passed. Now at most writePlaces jobs'
// writes of callers run at once (a SubmitJobs holds one place per job);
// past that a write waits, and freed places go to the waiting writer
// holding the fewest (turns). So another writer's write waits for at
// most the writes running (about two batches of 1,000), not for the
// burst. A writer's write that waits longer than Config.WriteTurnWait for its
// place is refused unavailable, having written nothing, whatever the
// caller's deadline: the burst's own writes wait there, not in the
// store, which stays as fast as its running writes. The engine's own
// writes (claims, completions, the sweep) take no turn, nor do writes
// without a writer (a server without tokens, whose callers may name
// any tenant, and the engine's callers in process).

// writePlaces is how many jobs callers' writes write at once: two
// SubmitJobs of jobtype.MaxBatchJobs, one committing and one ready to
// go next, or as many small writes (more than a SQLite group commit
// takes at once).
const writePlaces = 2 * jobtype.MaxBatchJobs

// DefaultWriteTurnWait is Config.WriteTurnWait's default: the SQLite
// store's lock timeout, which bounded a write's wait in its queue
// before writes took turns.
const DefaultWriteTurnWait = 5 * time.Second

// writeTurn waits for cost places for ctx's writer (its reader) and
// returns their release. A write without one (the engine's own, a
// server's without tokens) takes no turn.
func (e *Engine) writeTurn(ctx context.Context, cost int) (release func(), err error) {
	writer, ok := ctx.Value(readerKey{}).(string)
	if !ok {
		return noTurn, nil
	}
	waitCtx, cancel := context.WithTimeoutCause(ctx, e.cfg.WriteTurnWait, errTurnWaited)
	defer cancel()
	release, err = e.writeTurns.takeAs(waitCtx, writer, cost)
	if errors.Is(err, errTurnWaited) && ctx.Err() == nil {
		return nil, &WriteTurnError{Writer: writer, Waited: e.cfg.WriteTurnWait}
	}
	return release, err
}

// errTurnWaited is the cause of writeTurn's bound.
var errTurnWaited = errors.New("the write waited its longest for its turn")

// WriteTurnError is a caller's write refused because it waited
// Config.WriteTurnWait for its turn behind its writer's other writes (see
// writeTurn). It wraps jobtype.ErrUnavailable: nothing was written,
// and the same write later may pass.
type WriteTurnError struct {
	Writer string // "tenant/acme", "token/ops"
	Waited time.Duration
}

func (e *WriteTurnError) Error() string {
	return fmt.Sprintf("%s: %s", e.UnavailableCause(), jobtype.ErrUnavailable)
}

func (e *WriteTurnError) Unwrap() error { return jobtype.ErrUnavailable }

// UnavailableCause says why, in a caller's words (the server's answer).
func (e *WriteTurnError) UnavailableCause() string {
	who, name, _ := strings.Cut(e.Writer, "/")
	return fmt.Sprintf("the write waited %v for its turn behind the other writes of %s %s, which this server takes in turn with other tenants' "+
		"(too many at once: send fewer at a time)", e.Waited, who, name)
}

// WritesWaiting is how many callers' writes wait for their turn now.
func (e *Engine) WritesWaiting() int64 { return e.writeTurns.waiting.Load() }
