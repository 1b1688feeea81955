package jobs

// WatchedJobs reports how many jobs have a cell in the hub, so tests can
// show that a finished wait frees its cell.
func (e *Engine) WatchedJobs() int { return e.hub.Len() }
