package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// The stream and connection bounds reach serve's flags, and a parked-call
// limit per connection that would leave no stream for short calls is
// refused with a message that says why.
func TestServeTakesTheStreamAndConnectionBounds(t *testing.T) {
	f, err := parseServeFlags([]string{
		"--max-streams-per-conn", "100", "--max-parked-calls-per-conn", "90", "--max-pending-bodies", "10",
		"--max-new-connections", "7", "--first-request-timeout", "2s",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := connFlags{maxStreamsPerConn: 100, maxParkedConn: 90, maxPendingBodies: 10, maxNewConnections: 7, firstRequestTimeout: 2 * time.Second}
	if f.conns != want {
		t.Errorf("flags %+v, want %+v", f.conns, want)
	}
	for _, args := range [][]string{
		{"--max-streams-per-conn", "100", "--max-parked-calls-per-conn", "100"},
		{"--first-request-timeout", "0s"},
		{"--max-new-connections", "-1"},
	} {
		_, err := parseServeFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), args[len(args)-2]) {
			t.Errorf("serve %v: %v, want a usage error naming %s", args, err, args[len(args)-2])
		}
	}
}
