//go:build race

package server_test

// raceEnabled: the race detector's instrumentation makes frames larger,
// so measurements of stack depth do not hold under it.
const raceEnabled = true
