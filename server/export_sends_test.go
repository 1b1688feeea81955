package server

// SendBudget reports the send budget's limit, what it holds now, the most
// it has held, and the calls that waited for room and were refused.
func SendBudget(s *Server) (limit, held, peak, waits, refused int64) {
	b := s.shared.sends
	b.mu.Lock()
	held = b.held
	b.mu.Unlock()
	return b.limit, held, b.peak.Load(), b.waits.Load(), b.refused.Load()
}

// SharedCompressions reports how many times shared encodings were
// compressed.
func SharedCompressions(s *Server) int64 { return s.shared.compressions.Load() }

// InflatedRequestBytes reports the bytes inflated from gzip requests.
func InflatedRequestBytes(s *Server) int64 { return s.shared.inflated.Load() }

// SendBudgetLimit reports the send budget's limit.
func SendBudgetLimit(s *Server) int64 { return int64(s.cfg.MaxPendingSendBytes) }
