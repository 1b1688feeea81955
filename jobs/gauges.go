package jobs

// What /metrics reads of the engine without reading every job: a scrape
// must cost the same whatever the number of jobs (a count over 70,000
// jobs per scrape took 1.5 cores with four scrapers).

// Changes is a number that moves whenever a job changes in a way this
// engine publishes: its own changes and those it hears from other
// replicas (listen.go). It is the sequence publish already stamps on
// tenant signals (signalSeq), read, never advanced, here. A cache of
// something derived from the jobs (the server's job counts) may keep its
// value while Changes stays put; what it does not cover (retention's
// deletes, a replica's change this engine did not hear) needs a
// periodic refresh too.
func (e *Engine) Changes() int64 { return e.signalSeq.Load() }

// AlertingQueues returns, for every queue whose rules give an
// alert_after, whether it was alerting at the engine's last sweep (once
// per Config.SweepInterval): what the sweep logged and announced, from
// memory, so reading it costs nothing in the store. A queue whose change
// could not be recorded at that sweep (the store refused the write)
// shows its previous state until a later sweep records it. Before the
// first sweep every watched queue shows false.
func (e *Engine) AlertingQueues() map[string]bool {
	out := map[string]bool{}
	for name, q := range e.rules.Load().Queues {
		if q.AlertAfter > 0 {
			out[name] = false
		}
	}
	e.alerts.mu.Lock()
	defer e.alerts.mu.Unlock()
	for name := range e.alerts.on {
		if _, watched := out[name]; watched {
			out[name] = true
		}
	}
	return out
}
