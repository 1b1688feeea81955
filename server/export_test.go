package server

// SharedEncodes reports how many times the codecs have encoded a response
// shared by the calls one publish woke, per format ("json", "proto").
func SharedEncodes(s *Server) map[string]int64 {
	out := map[string]int64{}
	for f := range wireFormats {
		out[f.String()] = s.shared.encodes[f].Load()
	}
	return out
}
