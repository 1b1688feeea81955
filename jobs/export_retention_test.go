package jobs

import "time"

// SetRetentionPace replaces how much of a backlog of jobs past retention
// one sweep deletes: batches of batch jobs until budget has passed, at
// least one (sweep.go). Set it before the engine sweeps.
func (e *Engine) SetRetentionPace(batch int, budget time.Duration) {
	e.retention = retentionPace{batch: batch, budget: budget}
}
