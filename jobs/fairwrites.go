package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Callers' writes (submits, batches, cancels, retries, deletes, and
// bulk actions) take turns by writer, as their reads do by reader
// (fairreads.go): the caller's tenant for a client token, its token
// otherwise (WithReader). A store commits writes in the order they come
// (SQLite's one writer; PostgreSQL's pool), so one tenant's burst of
// SubmitJobs queued ahead of every other tenant's write: an outside
// probe's 64 concurrent SubmitJobs of 1,000 kept another tenant's single
// submit waiting 2.8 s at the median, and 160 of them had it refused
// once the store's lock wait passed. Now callers' writes hold places
// while they write, writePlaces at most at once: writeCallPlaces for the
// call and one more for each job it writes (a bulk action's page holds
// them for its jobs once, and its jobs' actions hold none of their
// own). Past that a write waits, and freed places go to the waiting
// writer holding the fewest (turns). So another writer's write waits for
// the writes running (two batches of 1,000, or 183 writes of one job), not
// for the burst. A writer's write that waits longer than
// Config.WriteTurnWait for its places is refused unavailable, having
// written nothing, whatever the caller's deadline: the burst's own
// writes wait there, not in the store. The engine's own writes (claims,
// completions, the sweep) take no turn, nor do writes without a writer
// (a server without tokens, whose callers may name any tenant, and the
// engine's callers in process).

// writeCallPlaces is what a write holds for itself, beside a place per
// job: what a store spends on one write of one job (a statement, a
// savepoint, a round trip) is about what it spends on ten more jobs of
// a batch.
const writeCallPlaces = 10

// writePlaces is every place callers' writes hold at once: two
// SubmitJobs of jobtype.MaxBatchJobs, one committing and one ready to go
// next, or 183 writes of one job.
const writePlaces = 2 * (writeCallPlaces + jobtype.MaxBatchJobs)

// DefaultWriteTurnWait is Config.WriteTurnWait's default: the SQLite
// store's lock timeout, which bounded a write's wait in its queue
// before writes took turns.
const DefaultWriteTurnWait = 5 * time.Second

// writeTurn waits for the places of a write of jobs jobs for ctx's
// writer (its reader) and returns their release. A write without one
// (the engine's own, a server's without tokens), and a bulk action's
// write of one job (whose page holds its places), takes no turn.
func (e *Engine) writeTurn(ctx context.Context, jobs int) (release func(), err error) {
	writer, ok := ctx.Value(readerKey{}).(string)
	if !ok || ctx.Value(inBulkKey{}) != nil {
		return noTurn, nil
	}
	cost := writeCallPlaces + jobs
	if release, ok := e.writeTurns.tryTake(writer, cost); ok {
		return release, nil // no wait, so no bound on it to set
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
