package server

import "time"

// SharedEncodes reports how many times the codecs have encoded a response
// shared by the calls one publish woke, per format ("json", "proto").
func SharedEncodes(s *Server) map[string]int64 {
	out := map[string]int64{}
	for f := range wireFormats {
		out[f.String()] = s.shared.encodes[f].Load()
	}
	return out
}

// SetPendingBodyGrace sets how long a body may have been awaited and
// still be taken for one on its way, until t ends. Tests that change it
// must not run in parallel.
func SetPendingBodyGrace(t interface{ Cleanup(func()) }, d time.Duration) {
	old := pendingBodyGrace
	pendingBodyGrace = d
	t.Cleanup(func() { pendingBodyGrace = old })
}
