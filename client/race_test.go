//go:build race

package client_test

// raceEnabled: the race detector slows HTTP/2 framing about tenfold, so
// the heaviest tests park fewer calls under it.
const raceEnabled = true
