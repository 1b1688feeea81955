package jobs

import (
	"time"

	"github.com/jobwatch/jobwatch/jobtype"
)

// Publish hands j to the local hub as if this engine had committed it,
// as the engine's listener does for the changes other replicas make
// (listen.go): tests play another replica with it. Snapshots that are not
// newer than what the hub holds are ignored. Outside tests nothing may
// publish a snapshot the store has not committed, so it is not exported.
func (e *Engine) Publish(j jobtype.Job) { e.publish(j) }

// WatchedJobs reports how many jobs have a cell in the hub, so tests can
// show that a finished wait frees its cell.
func (e *Engine) WatchedJobs() int { return e.hub.Len() }

// ClaimWakes reports how many wakes have been given to claimers: each
// makes one claimer look again.
func (e *Engine) ClaimWakes() int64 {
	e.claimers.mu.Lock()
	defer e.claimers.mu.Unlock()
	return e.claimers.wakes
}

// ParkedClaimers reports how many claimers are parked and not woken.
func (e *Engine) ParkedClaimers() int {
	e.claimers.mu.Lock()
	defer e.claimers.mu.Unlock()
	n := 0
	for el := e.claimers.fifo.Front(); el != nil; el = el.Next() {
		if el.Value.(*claimer).parked {
			n++
		}
	}
	return n
}

// SetMaxScheduled replaces maxScheduled, the jobs due later that the
// engine keeps under its timer.
func (e *Engine) SetMaxScheduled(n int) {
	e.claimers.mu.Lock()
	defer e.claimers.mu.Unlock()
	e.claimers.max = n
}

// QueuedLeaseWrites reports how many lease writes wait for a batch,
// the one being written excluded.
func (e *Engine) QueuedLeaseWrites() int {
	lw := &e.leaseWriter
	lw.mu.Lock()
	defer lw.mu.Unlock()
	n := 0
	for _, c := range lw.queue {
		if !c.lead {
			n++
		}
	}
	return n
}

// SetClaimWakeDelay replaces claimWakeDelay: how long a job another
// replica queued is held before it wakes a claimer here. Set it before
// the engine hears anything.
func (e *Engine) SetClaimWakeDelay(d time.Duration) {
	e.heldWakes.mu.Lock()
	defer e.heldWakes.mu.Unlock()
	e.heldWakes.delay = d
}
